// The verifier section of a parsed config as the sandbox's engine gets it (sandbox_settings, which
// both `leap run` and `leap verifier-node` use): the profiling keys reach a real engine, every
// verifier.profile and verifier.profile_tool value as that mode or tool.
#include "tools/launch/launch.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  return fs::temp_directory_path() / ("leap-verifier-settings-" + std::to_string(::getpid()));
}

task_set_kinds cuda_tasks() {
  task_set_kinds kinds;
  kinds.add(task_kind::cuda);
  return kinds;
}

// The engine sandbox_settings configures for `yaml` (a config text), created for real.
std::unique_ptr<sandbox::engine> engine_for(const std::string& yaml) {
  auto c = parse_config(yaml, "case.yaml");
  EXPECT_TRUE(c.ok()) << c.err().message;
  if (!c.ok()) {
    return nullptr;
  }
  const auto settings = sandbox_settings(c->verifier, cuda_tasks(), (scratch() / "cache").string());
  auto e = sandbox::engine::create(settings.engine);
  EXPECT_TRUE(e.ok()) << e.err().message;
  return e.ok() ? std::move(e.value()) : nullptr;
}

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class VerifierSettings : public ::testing::Test {
 protected:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch(), ec);
  }
};

// gpu_slots GPUs with runs_per_gpu run slots each: slot i on GPU i mod gpu_slots. A config that
// names no cuda task gets the CPU default (no GPUs).
TEST_F(VerifierSettings, RunsPerGpuPutsThatManySlotsOnEachGpu) {
  auto c = parse_config("verifier:\n  gpu_slots: 2\n  runs_per_gpu: 3\n", "case.yaml");
  ASSERT_TRUE(c.ok()) << c.err().message;
  const auto gpu = sandbox_settings(c->verifier, cuda_tasks(), (scratch() / "cache").string());
  EXPECT_EQ(gpu.run_slots, 6);
  EXPECT_EQ(gpu.gpus, (std::vector<int>{0, 1}));
  const auto cpu = sandbox_settings(c->verifier, task_set_kinds{}, (scratch() / "cache").string());
  EXPECT_EQ(cpu.run_slots, 0);
  EXPECT_TRUE(cpu.gpus.empty());
  auto one = parse_config("verifier:\n  gpu_slots: 2\n", "case.yaml");
  ASSERT_TRUE(one.ok()) << one.err().message;
  // The default: two runs per GPU (untimed ones share it; on an H100 two slots verified a
  // KernelBench batch at 8.1 a minute against 4.3 with one).
  EXPECT_EQ(sandbox_settings(one->verifier, cuda_tasks(), (scratch() / "cache").string()).run_slots,
            4);
  auto none = parse_config("verifier:\n  runs_per_gpu: 0\n", "case.yaml");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.err().message.find("verifier.runs_per_gpu"), std::string::npos)
      << none.err().message;
}

// `leap run` builds torch's precompiled header ahead exactly when its task set (training or
// validation) holds KernelBench tasks, as `leap verifier-node` does for its suites; its run slots
// then keep judges started ahead, verifier.kernelbench_standby_depth runs ahead.
TEST_F(VerifierSettings, AKernelBenchTaskSetBuildsTorchsHeaderAhead) {
  const fs::path suite = scratch() / "suite";
  fs::create_directories(suite / "cpp");
  fs::copy(fs::path(LEAP_SOURCE_DIR) / "sandbox/suite/cpp/axpby", suite / "cpp/axpby",
           fs::copy_options::recursive);
  const std::string text = "data:\n  train: suite\n  batch_size: 1\n  validation_fraction: 0\n";
  auto cpp_only = preflight_run_text(text, "case.yaml", scratch());
  ASSERT_TRUE(cpp_only.ok()) << cpp_only.err().message;
  EXPECT_FALSE(cpp_only->kinds.kernelbench);
  EXPECT_FALSE(sandbox_settings(cpp_only->config.verifier, cpp_only->kinds, "")
                   .engine.kernelbench_pch_ahead);

  // A KernelBench task among the validation tasks counts as much as one among the training tasks.
  std::ofstream(scratch() / "kb.jsonl")
      << R"({"id": "kernelbench/relu", "kind": "kernelbench", "reference": )"
      << R"("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        )"
      << R"(return torch.relu(x)\n"})" << '\n';
  auto with_kernelbench =
      preflight_run_text(text + "  validation: kb.jsonl\n", "case.yaml", scratch());
  ASSERT_TRUE(with_kernelbench.ok()) << with_kernelbench.err().message;
  EXPECT_TRUE(with_kernelbench->kinds.kernelbench);
  EXPECT_FALSE(with_kernelbench->kinds.cuda);
  const auto kernelbench_settings =
      sandbox_settings(with_kernelbench->config.verifier, with_kernelbench->kinds, "");
  EXPECT_TRUE(kernelbench_settings.engine.kernelbench_pch_ahead);
  EXPECT_EQ(kernelbench_settings.engine.kernelbench_standby_depth, 1);
  auto two_ahead = preflight_run_text(
      text + "  validation: kb.jsonl\nverifier:\n  kernelbench_standby_depth: 2\n", "case.yaml",
      scratch());
  ASSERT_TRUE(two_ahead.ok()) << two_ahead.err().message;
  const auto settings = sandbox_settings(two_ahead->config.verifier, two_ahead->kinds, "");
  EXPECT_TRUE(settings.engine.kernelbench_standby);
  EXPECT_EQ(settings.engine.kernelbench_standby_depth, 2);
}

// verifier.kernelbench_scratch_bytes sizes a KernelBench run's scratch, and its memory grows with
// it (the scratch is a tmpfs); the default is the engine's own.
TEST_F(VerifierSettings, KernelBenchScratchFollowsTheKey) {
  auto settings_for = [](const std::string& yaml) {
    auto c = parse_config(yaml, "case.yaml");
    EXPECT_TRUE(c.ok()) << c.err().message;
    return c.ok() ? sandbox_settings(c->verifier, cuda_tasks(), "").engine
                  : sandbox::engine_config{};
  };
  const sandbox::engine_config engines_own;
  EXPECT_EQ(settings_for("").kernelbench_limits.scratch_bytes,
            engines_own.kernelbench_limits.scratch_bytes);
  const auto large = settings_for("verifier:\n  kernelbench_scratch_bytes: 21474836480\n");
  EXPECT_EQ(large.kernelbench_limits.scratch_bytes, 20ULL << 30);
  EXPECT_GE(large.kernelbench_limits.file_size_bytes, 20ULL << 30);
  EXPECT_GT(large.kernelbench_limits.memory_bytes, 20ULL << 30);
}

TEST_F(VerifierSettings, ProfilingIsOffByDefault) {
  const auto e = engine_for("");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config().profile, profile_mode::off);
  EXPECT_EQ(e->config().profile_max_kernels, 2U);
  EXPECT_EQ(e->config().profile_limits.wall, std::chrono::seconds(120));
  EXPECT_EQ(e->config().ncu, "");
}

TEST_F(VerifierSettings, TheProfilingKeysReachTheEngine) {
  const auto e = engine_for(
      "verifier:\n  profile: passing\n  profile_max_kernels: 3\n  profile_timeout_s: 200\n"
      "  ncu: /opt/nsight-compute/ncu\n");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config().profile, profile_mode::passing);
  EXPECT_EQ(e->config().profile_max_kernels, 3U);
  EXPECT_EQ(e->config().profile_limits.wall, std::chrono::seconds(200));
  // A longer limit brings the CPU allowance of the default (300 s per 120 s of wall) with it.
  EXPECT_GE(e->config().profile_limits.cpu_seconds, 500);
  EXPECT_EQ(e->config().ncu, "/opt/nsight-compute/ncu");
}

// Every mode the config names (common/enums/profile_mode.hpp, the type the sandbox reads too)
// reaches the engine as that mode.
TEST_F(VerifierSettings, EveryAcceptedProfileValueIsASandboxMode) {
  for (const auto mode : {profile_mode::off, profile_mode::passing, profile_mode::all_compiled}) {
    const std::string name = to_string(mode);
    SCOPED_TRACE(name);
    const auto e = engine_for("verifier:\n  profile: " + name + "\n");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->config().profile, mode);
  }
  EXPECT_FALSE(parse_config("verifier:\n  profile: always\n", "case.yaml").ok());
}

// The same for verifier.profile_tool; auto by default.
TEST_F(VerifierSettings, EveryAcceptedProfileToolIsASandboxTool) {
  for (const auto tool : {profile_tool::automatic, profile_tool::ncu, profile_tool::events}) {
    const std::string name = to_string(tool);
    SCOPED_TRACE(name);
    const auto e = engine_for("verifier:\n  profile_tool: " + name + "\n");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->config().profiler, tool);
  }
  const auto e = engine_for("");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config().profiler, profile_tool::automatic);
  EXPECT_FALSE(parse_config("verifier:\n  profile_tool: cupti\n", "case.yaml").ok());
}

}  // namespace
}  // namespace leap::launch
