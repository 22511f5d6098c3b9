// KernelBench's precompiled torch header built ahead (issue 30): an engine configured for it starts
// the header's build when it is created, before any candidate; a candidate whose build needs the
// header while it is being built waits for that one build and uses it; a header build that fails is
// a note and the candidate is built without it; kernelbench_pch: false builds nothing. Real g++,
// python3 and torch (Debian's CPU build) in the real sandbox; skipped with the reason where torch
// is missing. The header's compile is held (or refused) by a c++ of the test's own, placed first on
// the builds' PATH beside the python, that runs the real one otherwise.
#include "sandbox/engine.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <unistd.h>
#include <utility>

namespace leap::sandbox::kbahead_test {
namespace {

namespace fs = std::filesystem;
using testing::fenced;

bool lies_under_hidden(const fs::path& p) {
  const std::string text = fs::weakly_canonical(p).string();
  for (const std::string dir : {"/tmp", "/var/tmp", "/run", "/dev"}) {
    if (text == dir || text.starts_with(dir + "/")) {
      return true;
    }
  }
  return false;
}

// A fresh folder the sandbox can show its builds (the header's folder, the test's tools): beside
// the test binary, else under HOME; empty when both lie where the sandbox shows its own folders.
fs::path folder_outside_tmp(const std::string& what) {
  const std::string name = "kbahead-" + what + "-" + std::to_string(::getpid());
  const fs::path beside = fs::read_symlink("/proc/self/exe").parent_path();
  if (!lies_under_hidden(beside)) {
    return beside / name;
  }
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home == '/' && !lies_under_hidden(home)) {
    return fs::path(home) / ".cache" / name;
  }
  return {};
}

// Removes its file when it goes out of scope: a held header build must be let go before the engine
// (which waits for it) and a candidate waiting for it are.
struct removed_at_exit {
  fs::path dir;
  explicit removed_at_exit(fs::path p) : dir(std::move(p)) {}
  removed_at_exit(const removed_at_exit&) = delete;
  removed_at_exit& operator=(const removed_at_exit&) = delete;
  ~removed_at_exit() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// tools/bin holds `python3`, a link to the real one (so the sandbox shows the real one's folder),
// and `c++`: the real compiler, except for a precompiled header's compile (`-x c++-header`), which
// it refuses while tools/refuse exists and holds while tools/hold exists. The engine puts python's
// folder first on the builds' PATH, where torch finds its c++.
std::string make_tools(const fs::path& tools, const std::string& python) {
  fs::create_directories(tools / "bin");
  fs::path real = python;
  if (python.find('/') == std::string::npos) {
    for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
      if (fs::exists(fs::path(dir) / python)) {
        real = fs::path(dir) / python;
        break;
      }
    }
  }
  real = fs::canonical(real);
  fs::create_symlink(real, tools / "bin" / "python3");
  std::ofstream cxx(tools / "bin" / "c++");
  cxx << "#!/bin/sh\n"
         "for a in \"$@\"; do\n"
         "  if [ \"$a\" = c++-header ]; then\n"
         "    if [ -e "
      << (tools / "refuse").string()
      << " ]; then echo 'leap test: this c++ refuses precompiled headers' >&2; exit 1; fi\n"
         "    while [ -e "
      << (tools / "hold").string()
      << " ]; do sleep 0.2; done\n"
         "  fi\n"
         "done\n"
         "exec /usr/bin/c++ \"$@\"\n";
  cxx.close();
  fs::permissions(tools / "bin" / "c++", fs::perms::owner_all | fs::perms::group_read |
                                             fs::perms::group_exec | fs::perms::others_read |
                                             fs::perms::others_exec);
  return (tools / "bin" / "python3").string();
}

task problem_task() {
  task t;
  t.id = "kernelbench/level1/1_ScaleAdd";
  t.kind = task_kind::kernelbench;
  t.reference = testing::k_scale_add_problem;
  t.own_kernel = own_kernel_policy::off;
  return t;
}

// A load_inline candidate with the default flags (`flags` is "" or KernelBench's own
// `extra_cflags=['']`), its C++ different by `tag` (its own extension and cache key).
std::string candidate(const std::string& tag, const std::string& flags) {
  return "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
         "ext = load_inline(name='leap_ahead_" +
         tag +
         "', cpp_sources=\"\"\"torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s)"
         " { return a * s + b; } // " +
         tag + " " + std::to_string(::getpid()) + "\"\"\", functions=['scale_add']" +
         (flags.empty() ? "" : ", " + flags) +
         ")\n"
         "class ModelNew(torch.nn.Module):\n    def __init__(self, s):\n"
         "        super().__init__()\n        self.s = s\n"
         "    def forward(self, a, b):\n        return ext.scale_add(a, b, self.s)\n";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A header build in progress leaves its aside folder `<key>.tmp...` in the store.
bool header_build_started(const fs::path& cache) {
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(cache / "folders", ec)) {
    if (f.path().filename().string().find(".tmp") != std::string::npos) {
      return true;
    }
  }
  return false;
}

struct setup {
  engine_config config;
  std::string skip;
};

// The engine's configuration for these tests: the cache outside /tmp (the sandbox shows builds the
// header's folder only from there), the tools' python, the header built ahead, a CPU slot.
setup ahead_config(const fs::path& cache, const fs::path& tools) {
  setup s;
  s.config = testing::test_engine_config();
  std::string why;
  if (!testing::python_has_module(s.config.python, "torch", &why)) {
    s.skip = why;
    return s;
  }
  if (cache.empty() || tools.empty()) {
    s.skip =
        "neither the test binary's folder nor HOME lies outside /tmp, where the sandbox could show "
        "a precompiled header";
    return s;
  }
  s.config.cache_dir = cache;
  s.config.cache_max_bytes = 64ULL << 20;  // the header's folder is not counted against this
  s.config.python = make_tools(tools, s.config.python);
  if (!fs::canonical(s.config.python).string().starts_with("/usr/")) {
    s.skip = "the test's python link needs a python installed under /usr (not a venv)";
  }
  s.config.kernelbench_device = "cpu";
  s.config.trials = 1;
  s.config.kernelbench_pch_ahead = true;
  return s;
}

// Each test's fresh cache and tools, removed after it.
// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class KernelBenchAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::error_code ec;
    fs::remove_all(cache_, ec);
    fs::remove_all(tools_, ec);
    setup_ = ahead_config(cache_, tools_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(cache_, ec);
    fs::remove_all(tools_, ec);
  }
  const fs::path cache_ = folder_outside_tmp("cache");
  const fs::path tools_ = folder_outside_tmp("tools");
  setup setup_;
};

// One test (the header costs a minute to build): the build starts with the engine, before any
// candidate; a candidate arriving while it is held waits for it (the cache counts it waiting) and
// uses it once it is done; a later candidate finds it ready; one header was built in all.
TEST_F(KernelBenchAheadTest, HeaderBuiltAtStartAndACandidateDuringItWaitsForThatOneBuild) {
  if (!setup_.skip.empty()) {
    GTEST_SKIP() << setup_.skip;
  }
  const fs::path& cache = cache_;
  const fs::path& tools = tools_;
  std::ofstream(tools / "hold") << "held";
  auto e = engine::create(setup_.config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  const removed_at_exit let_go{tools / "hold"};

  // Started by the engine alone: no candidate has been given to it.
  ASSERT_TRUE(
      testing::wait_until([&] { return header_build_started(cache); }, std::chrono::minutes(5)))
      << "no header build started with the engine";
  EXPECT_EQ((*e)->cache().folder_builds(), 1U);

  auto first = std::async(std::launch::async, [&] {
    return (*e)->verify(problem_task(), fenced("python", candidate("a", "extra_cflags=['']")));
  });
  const removed_at_exit let_go_first{tools / "hold"};
  // The candidate's build asks for the header (KernelBench's extra_cflags=[''] are the default
  // flags) and waits for the one build in progress.
  EXPECT_TRUE(testing::wait_until(
      [&] {
        return (*e)->cache().waiting() >= 1 ||
               first.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      },
      std::chrono::minutes(5)));
  EXPECT_EQ((*e)->cache().waiting(), 1U) << "the candidate is not waiting for the header";
  fs::remove(tools / "hold");

  auto v = first.get();
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  EXPECT_TRUE(has(v->build_note, "precompiled torch headers used (ready after waiting"))
      << v->build_note;
  EXPECT_TRUE(has(v->build_note, "for their build in progress")) << v->build_note;

  auto prepared = (*e)->kernelbench_prepared();
  ASSERT_TRUE(prepared.ok()) << prepared.err().message;
  ASSERT_TRUE(prepared->ok) << prepared->log;
  EXPECT_GT(fs::file_size(prepared->path / "leap_torch.h.gch"), 1U << 20);

  // A later candidate finds it ready: used, not waited for, not built again.
  auto later = (*e)->verify(problem_task(), fenced("python", candidate("b", "")));
  ASSERT_TRUE(later.ok()) << later.err().message;
  EXPECT_TRUE(later->passed) << later->feedback << "\n" << later->diagnostics;
  EXPECT_TRUE(has(later->build_note, "precompiled torch headers used")) << later->build_note;
  EXPECT_FALSE(has(later->build_note, "ready after")) << later->build_note;
  EXPECT_EQ((*e)->cache().folder_builds(), 1U);
}

// A header build that fails (here its compiler refuses precompiled headers) is a note: the
// candidate is built without the header, is judged as usual, and the header is not built again.
TEST_F(KernelBenchAheadTest, AFailedHeaderBuildIsANoteAndTheCandidateBuildsWithoutIt) {
  if (!setup_.skip.empty()) {
    GTEST_SKIP() << setup_.skip;
  }
  std::ofstream(tools_ / "refuse") << "refuse";
  auto e = engine::create(setup_.config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto prepared = (*e)->kernelbench_prepared();
  ASSERT_TRUE(prepared.ok()) << prepared.err().message;
  EXPECT_FALSE(prepared->ok);
  EXPECT_TRUE(has(prepared->log, "refuses precompiled headers")) << prepared->log;
  EXPECT_EQ((*e)->cache().folder_builds(), 1U);

  auto v = (*e)->verify(problem_task(), fenced("python", candidate("c", "")));
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  EXPECT_TRUE(has(v->build_note, "1 extension(s) built in the compile pool")) << v->build_note;
  EXPECT_TRUE(has(v->build_note, "precompiled torch headers absent: precompiling torch's headers"))
      << v->build_note;
  EXPECT_EQ((*e)->cache().folder_builds(), 1U) << "the failed header was built again";
}

// kernelbench_pch: false is the opt-out: nothing is built ahead, and the preparation says why.
TEST_F(KernelBenchAheadTest, NoHeaderBuiltAheadWithKernelbenchPchOff) {
  engine_config config = testing::test_engine_config();
  config.kernelbench_pch_ahead = true;
  config.kernelbench_pch = false;
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto prepared = (*e)->kernelbench_prepared();
  ASSERT_TRUE(prepared.ok()) << prepared.err().message;
  EXPECT_FALSE(prepared->ok);
  EXPECT_TRUE(has(prepared->log, "off")) << prepared->log;
  EXPECT_EQ((*e)->cache().folder_builds(), 0U);
}

}  // namespace
}  // namespace leap::sandbox::kbahead_test
