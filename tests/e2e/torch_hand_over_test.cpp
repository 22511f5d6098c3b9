// `leap` links no LibTorch and hands the commands that need it to `leap-torch` beside it
// (tools/leap/torch/torch.hpp): the torch-free commands must not load LibTorch (a start that loads
// it costs about 0.9 CPU-s before main), and a torch command without leap-torch must say which
// file is missing. That the torch commands still work through the hand-over is the business of
// the torch tests (train_loop_test.cpp, learn_digits_test.cpp, serve_policy_test.cpp), which run
// `leap`, not `leap-torch`.
#include "e2e_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using leap::e2e::leap_process;
using leap::e2e::quoted;
using leap::e2e::shell;

const fs::path hand_over_torch_binary = fs::path(LEAP_BINARY).parent_path() / "leap-torch";

// LibTorch's libraries as the dynamic linker names them (libtorch.so, libtorch_cpu.so, libc10.so).
bool names_libtorch(const std::string& text) {
  return text.find("libtorch") != std::string::npos || text.find("libc10") != std::string::npos;
}

// A folder with two small cpp tasks and configs for them: a torch-free run (the embedded scripted
// server, the record learner) and one that asks for the torch learner and the embedded LibTorch
// server on a model that is not there.
class hand_over_dir : public leap::e2e::scratch_dir {
 public:
  hand_over_dir() : scratch_dir("hand-over", {"cpp/axpby", "cpp/prefix_sum_int"}) {}

  [[nodiscard]] std::string write_config(const std::string& name, const std::string& learner,
                                         const std::string& policy) const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: hand-over\n  run_dir: " << (root_ / ("run-" + name)).string()
         << "\n  steps: 1\n"
         << "data:\n  train: " << (root_ / "suite").string() << "\n  batch_size: 2\n"
         << "rollout:\n  group_size: 2\n  max_turns: 2\n"
         << "learner:\n"
         << learner << "policy:\n  flavour: embedded\n"
         << policy << "verifier:\n  compile_workers: 1\n  gpu_slots: 0\n";
    const fs::path path = root_ / (name + ".yaml");
    std::ofstream(path) << yaml.str();
    return path.string();
  }
  [[nodiscard]] std::string torch_free_config() const {
    return write_config("record", "  kind: record\n", "");
  }
  [[nodiscard]] std::string torch_config() const {
    const std::string model = (root_ / "no-model").string();
    return write_config("torch", "  kind: torch\n  model_path: " + model + "\n",
                        "  model: " + model + "\n");
  }
};

TEST(LeapTorchHandOver, LeapLinksNoLibTorchAndLeapTorchDoes) {
  const auto leap = shell("ldd " + quoted(LEAP_BINARY), 60);
  ASSERT_EQ(leap.exit_code, 0) << leap.text;
  EXPECT_NE(leap.text.find("libcaf_core"), std::string::npos) << leap.text;
  EXPECT_FALSE(names_libtorch(leap.text)) << leap.text;
  const auto torch = shell("ldd " + quoted(hand_over_torch_binary.string()), 60);
  ASSERT_EQ(torch.exit_code, 0) << torch.text;
  EXPECT_TRUE(names_libtorch(torch.text)) << torch.text;
}

// The dynamic linker's own account (LD_DEBUG=libs, inherited across a hand-over's exec) of what
// each command loads, dlopen included.
TEST(LeapTorchHandOver, TorchFreeCommandsLoadNoLibTorch) {
  hand_over_dir dir;
  const std::string config = dir.torch_free_config();
  for (const std::string& args : {std::string("--help"), std::string("config keys"),
                                  "config check " + quoted(config), std::string("run --help")}) {
    SCOPED_TRACE(args);
    const auto out = shell("env LD_DEBUG=libs " + quoted(LEAP_BINARY) + " " + args, 60);
    EXPECT_EQ(out.exit_code, 0) << out.text;
    EXPECT_NE(out.text.find("calling init"), std::string::npos) << out.text;
    EXPECT_FALSE(names_libtorch(out.text)) << out.text;
  }
  // A torch command loads it (in leap-torch): the check above can see LibTorch when it is there.
  const auto torch =
      shell("env LD_DEBUG=libs " + quoted(LEAP_BINARY) + " run " + quoted(dir.torch_config()), 120);
  EXPECT_EQ(torch.exit_code, 1) << torch.text;
  EXPECT_TRUE(names_libtorch(torch.text)) << torch.text;
}

// A run of a torch-free config, held while it runs: its process is `leap` itself (no hand-over)
// and maps no LibTorch library.
TEST(LeapTorchHandOver, ATorchFreeRunMapsNoLibTorch) {
  hand_over_dir dir;
  leap_process run({"run", dir.torch_free_config()});
  ASSERT_TRUE(run.wait_for(std::regex("run 'hand-over': "), std::chrono::seconds(120)))
      << run.output();
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(run.pid()) + "/exe", ec),
            fs::canonical(LEAP_BINARY));
  const std::string maps = leap::e2e::read_file("/proc/" + std::to_string(run.pid()) + "/maps");
  EXPECT_NE(maps.find("libcaf_core"), std::string::npos) << maps;
  EXPECT_FALSE(names_libtorch(maps)) << maps;
}

// A handed-over command's messages are leap-torch's alone: nothing of leap's comes before them.
TEST(LeapTorchHandOver, AHandedOverCommandSaysWhatItSaidBefore) {
  hand_over_dir dir;
  const std::string model = (dir.root() / "m").string();
  const auto first = shell(quoted(LEAP_BINARY) + " init-model --out " + quoted(model), 60);
  ASSERT_EQ(first.exit_code, 0) << first.text;
  const auto again = shell(quoted(LEAP_BINARY) + " init-model --out " + quoted(model), 60);
  EXPECT_EQ(again.exit_code, 1) << again.text;
  EXPECT_EQ(again.text, "leap init-model: error: " + model +
                            " already holds a model (config.json); pass --force to overwrite it\n");
}

// `leap` alone (no leap-torch beside it) still runs the torch-free commands, and each torch command
// fails with its own error prefix, naming the missing file; exit 1.
TEST(LeapTorchHandOver, WithoutLeapTorchATorchCommandNamesTheMissingFile) {
  hand_over_dir dir;
  const fs::path alone = dir.root() / "bin" / "leap";
  fs::create_directories(alone.parent_path());
  std::error_code ec;
  fs::create_hard_link(LEAP_BINARY, alone, ec);
  if (ec) {
    fs::copy_file(LEAP_BINARY, alone);
  }
  const std::string missing = (alone.parent_path() / "leap-torch").string();
  const auto help = shell(quoted(alone.string()) + " --help", 60);
  EXPECT_EQ(help.exit_code, 0) << help.text;

  struct hand_over_case {
    std::string args;
    std::string prefix;
  };
  for (const auto& c : {
           hand_over_case{"init-model --out " + quoted((dir.root() / "m").string()),
                          "leap init-model: error: "},
           hand_over_case{"serve-policy --model " + quoted((dir.root() / "m").string()),
                          "leap serve-policy: error: --model: "},
           hand_over_case{"run " + quoted(dir.torch_config()), "leap run: error: "},
       }) {
    SCOPED_TRACE(c.args);
    const auto out = shell(quoted(alone.string()) + " " + c.args, 60);
    EXPECT_EQ(out.exit_code, 1) << out.text;
    EXPECT_NE(out.text.find(c.prefix + missing + ": No such file or directory"), std::string::npos)
        << out.text;
  }
  EXPECT_FALSE(fs::exists(dir.root() / "m"));
}

}  // namespace
