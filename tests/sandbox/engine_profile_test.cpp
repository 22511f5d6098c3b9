// The engine's profiling hook (sandbox/engine_profile.cpp): on any machine with nvcc, a real cuda
// candidate's program profiled in the real sandbox by a stand-in ncu (a shell script that writes a
// capture from the H200, or ncu's permission error, or hangs): what reaches the verdict, and that
// nothing else of it changes; on a GPU with ncu, a strided copy verified with verifier.profile
// passing is named memory-bound with its coalescing finding.
#include "sandbox/engine.hpp"
#include "sandbox/profile_events.hpp"
#include "tests/sandbox/profile_stand_in.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;
using testing::fenced;
using testing::stand_in_ncu;

bool contains(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

bool nvcc_available(std::string* why) {
  const std::string nvcc = testing::shared_engine().config().nvcc;
  if (std::system((nvcc + " --version >/dev/null 2>&1").c_str()) != 0) {
    *why = "nvcc not found at '" + nvcc + "'";
    return false;
  }
  return true;
}

// Under ctest these tests (a process each) share one cache folder and run in turn
// (tests/CMakeLists.txt): the vector-add candidate, its harness, reference and judges are built by
// the first of them, not once per test (8 times). None asserts a first build: a cache hit gives
// the same program and verdict.
engine_config shared_profile_config() {
  engine_config c = testing::test_engine_config();
  if (auto shared = testing::ctest_shared_cache("engine-profile"); !shared.empty()) {
    c.cache_dir = std::move(shared);
  }
  return c;
}

std::unique_ptr<engine> profiling_engine(const std::string& ncu, profile_mode mode,
                                         std::chrono::seconds wall = std::chrono::seconds(20)) {
  engine_config c = shared_profile_config();
  c.profile = mode;
  c.ncu = ncu;
  c.profile_limits.wall = wall;
  auto e = engine::create(c);
  EXPECT_TRUE(e.ok()) << e.err().message;
  return e.ok() ? std::move(e.value()) : nullptr;
}

// What a passing run of the vector-add candidate looks like (this machine may have no GPU to run
// it): the hook is given the verdict and the prepared candidate, as run() gives them.
verdict passing_verdict() {
  verdict v;
  v.passed = true;
  v.category = verdict_category::pass;
  v.feedback = "Correct on all 3 trials.";
  v.run_ms = 12.5;
  return v;
}

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class EngineProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!nvcc_available(&why)) {
      GTEST_SKIP() << why;
    }
  }
  // The vector-add candidate compiled by `e` (its own kernel: `add`).
  static prepared_candidate prepared(engine& e) {
    auto p = e.compile(testing::cuda_vector_add_task(), fenced("cuda", testing::k_cuda_vector_add));
    EXPECT_TRUE(p.ok()) << p.err().message;
    EXPECT_FALSE(p->final_verdict.has_value());
    return p.ok() ? std::move(p.value()) : prepared_candidate{};
  }
  // The hook run once on passing_verdict() of the vector-add candidate by an engine whose ncu is
  // a stand-in running `script` (profiling time limit `wall`), checked for what every profile
  // leaves as it was and for having a profile. nullopt where the test was skipped (no stand-in)
  // or has failed already; the test then ends.
  static std::optional<verdict> profile_once(const std::string& script,
                                             std::chrono::seconds wall = std::chrono::seconds(20)) {
    std::optional<verdict> profiled;
    // GTEST_SKIP and ASSERT_* return from a function returning void only.
    [&] {
      stand_in_ncu ncu(script);
      if (!ncu.why_not().empty()) {
        GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
      }
      profiled = profile_with(ncu.path(), wall);
    }();
    return profiled;
  }
  // The hook run once on passing_verdict() of the vector-add candidate by an engine whose ncu is
  // `ncu`, checked as profile_once says; nullopt where the test has failed already.
  static std::optional<verdict> profile_with(const std::string& ncu,
                                             std::chrono::seconds wall = std::chrono::seconds(20)) {
    std::optional<verdict> profiled;
    [&] {
      auto e = profiling_engine(ncu, profile_mode::passing, wall);
      ASSERT_NE(e, nullptr);
      const auto p = prepared(*e);
      const verdict before = passing_verdict();
      verdict v = before;
      e->profile_candidate(testing::cuda_vector_add_task(), p, v, -1);
      expect_unchanged_but_profile(v, before);
      ASSERT_TRUE(v.profile.has_value());
      profiled = std::move(v);
    }();
    return profiled;
  }
  // Everything of a verdict the hook must leave as it was.
  static void expect_unchanged_but_profile(const verdict& got, const verdict& before) {
    EXPECT_EQ(got.passed, before.passed);
    EXPECT_EQ(got.category, before.category);
    EXPECT_EQ(got.run_ms, before.run_ms);
    EXPECT_EQ(got.speedup, before.speedup);
    EXPECT_EQ(got.timing_note, before.timing_note);
  }
};

TEST_F(EngineProfileTest, TheCapturesKernelsReachTheVerdictAndItsFeedback) {
  // The stand-in checks what the engine asked of ncu: only the candidate's own kernel, and the
  // judge with one untimed trial.
  const auto v = profile_once(
      "case \"$*\" in\n"
      "  *'--kernel-name regex:^(add)$'*'-- ./judge '*' 1 0 ./cand'*) ;;\n"
      "  *) echo \"==ERROR== unexpected arguments: $*\" >&2; exit 1 ;;\n"
      "esac\n"
      "cat \"$here/capture.csv\" > \"$log\"\n");
  if (!v) {
    return;
  }
  EXPECT_EQ(v->profile->note, "") << v->profile->note;
  EXPECT_GT(v->profile->seconds, 0);
  std::map<std::string, kernel_summary> by_name;
  for (const auto& k : v->profile->kernels) {
    by_name[k.name] = k;
  }
  ASSERT_EQ(by_name.count("copy_strided"), 1U);
  EXPECT_EQ(by_name["copy_strided"].bottleneck, "memory-bound");
  EXPECT_NE(std::find(by_name["copy_strided"].findings.begin(),
                      by_name["copy_strided"].findings.end(), "uncoalesced_global"),
            by_name["copy_strided"].findings.end());
  // The verdict's own text first, then the diagnosis of the longest kernels, within the budget.
  EXPECT_EQ(v->feedback.rfind(passing_verdict().feedback + "\n\nProfile of `", 0), 0U)
      << v->feedback;
  EXPECT_TRUE(contains(v->feedback, "Profile of `copy_strided`")) << v->feedback;
  EXPECT_LE(v->feedback.size(), testing::test_engine_config().feedback.char_budget);
}

TEST_F(EngineProfileTest, ATargetsWarningOnStderrLeavesTheCaptureReadable) {
  // As the KernelBench judge's Python did on an H100: a warning with a comma on stderr.
  const auto v = profile_once(
      "echo '/tmp/judge.py:55: DeprecationWarning: This process (pid=26) is multi-threaded, use "
      "of fork() may lead to deadlocks in the child.' >&2\n"
      "cat \"$here/capture.csv\" > \"$log\"\n");
  if (!v) {
    return;
  }
  EXPECT_EQ(v->profile->note, "") << v->profile->note;
  EXPECT_FALSE(v->profile->kernels.empty());
}

TEST_F(EngineProfileTest, CountersNotPermittedIsANoteSayingWhatIsNeeded) {
  const auto v = profile_once(
      "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
      "Performance Counters on the target device 0.' > \"$log\"\n"
      "exit 1\n");
  if (!v) {
    return;
  }
  EXPECT_EQ(v->feedback, passing_verdict().feedback);
  EXPECT_TRUE(v->profile->kernels.empty());
  EXPECT_TRUE(contains(v->profile->note, "counters_not_permitted")) << v->profile->note;
  EXPECT_TRUE(contains(v->profile->note, "NVreg_RestrictProfilingToAdminUsers=0"))
      << v->profile->note;
}

// profile_tool auto: ncu's ERR_NVGPUCTRPERM sends the same candidate to kernel events (source
// "events", the counters' note first), and the engine remembers it: the next profile does not
// look for ncu at all (here it is gone, which would otherwise be the note "no ncu at ...").
TEST_F(EngineProfileTest, CountersNotPermittedFallsBackToEventsAndIsRemembered) {
  auto ncu = std::make_unique<stand_in_ncu>(
      "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
      "Performance Counters on the target device 0.' > \"$log\"\n"
      "exit 1\n");
  if (!ncu->why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu->why_not();
  }
  auto e = profiling_engine(ncu->path(), profile_mode::passing);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->config().profiler, profile_tool::automatic);
  const auto p = prepared(*e);
  verdict first = passing_verdict();
  e->profile_candidate(testing::cuda_vector_add_task(), p, first, -1);
  ASSERT_TRUE(first.profile.has_value());
  EXPECT_EQ(first.profile->source, "events");
  EXPECT_TRUE(contains(first.profile->note, "counters_not_permitted")) << first.profile->note;
  EXPECT_TRUE(contains(first.profile->note, "NVreg_RestrictProfilingToAdminUsers=0"))
      << first.profile->note;
  EXPECT_TRUE(contains(first.profile->note, "kernel events")) << first.profile->note;
  const std::string ncu_path = ncu->path();
  ncu.reset();
  ASSERT_FALSE(fs::exists(ncu_path));
  verdict second = passing_verdict();
  e->profile_candidate(testing::cuda_vector_add_task(), p, second, -1);
  ASSERT_TRUE(second.profile.has_value());
  EXPECT_EQ(second.profile->source, "events");
  EXPECT_FALSE(contains(second.profile->note, "no ncu")) << second.profile->note;
  EXPECT_TRUE(contains(second.profile->note, "counters_not_permitted")) << second.profile->note;
}

// profile_tool events: no ncu is looked for; a missing events library is the note.
TEST_F(EngineProfileTest, EventsOnlyWithoutItsLibraryIsANote) {
  engine_config c = shared_profile_config();
  c.profile = profile_mode::passing;
  c.profiler = profile_tool::events;
  c.ncu = "/nonexistent/ncu";
  c.kernel_events_library = "/nonexistent/libleap_kernel_events.so";
  auto e = engine::create(c);
  ASSERT_TRUE(e.ok()) << e.err().message;
  const auto p = prepared(**e);
  const verdict before = passing_verdict();
  verdict v = before;
  (*e)->profile_candidate(testing::cuda_vector_add_task(), p, v, -1);
  expect_unchanged_but_profile(v, before);
  EXPECT_EQ(v.feedback, before.feedback);
  ASSERT_TRUE(v.profile.has_value());
  EXPECT_EQ(v.profile->source, "events");
  EXPECT_TRUE(v.profile->kernels.empty());
  EXPECT_TRUE(contains(v.profile->note, "no events library at '/nonexistent/")) << v.profile->note;
  EXPECT_FALSE(contains(v.profile->note, "ncu")) << v.profile->note;
}

// The real ncu's front end and the target it injected itself into talk over a TCP socket on
// 127.0.0.1; this stand-in does the same (a listener and a connection to it) before it writes the
// capture, and fails as ncu did on the H200 when it cannot.
TEST_F(EngineProfileTest, TheProfilingRunHasALoopbackOfItsOwn) {
  if (!fs::exists("/usr/bin/python3")) {
    GTEST_SKIP() << "no /usr/bin/python3";
  }
  const auto v = profile_once(
      "if /usr/bin/python3 -c 'import socket\n"
      "s = socket.socket()\n"
      "s.bind((\"127.0.0.1\", 0))\n"
      "s.listen(1)\n"
      "socket.create_connection(s.getsockname(), timeout=5)'; then\n"
      "  cat \"$here/capture.csv\" > \"$log\"\n"
      "else\n"
      "  echo '==PROF== Connected to process 7' > \"$log\"\n"
      "  echo '==ERROR== no connection to the target over 127.0.0.1' >> \"$log\"\n"
      "  exit 1\n"
      "fi\n");
  if (!v) {
    return;
  }
  EXPECT_EQ(v->profile->note, "");
  EXPECT_FALSE(v->profile->kernels.empty());
}

// A log ncu wrote but that holds no report: the note carries ncu's exit, the log's lines and its
// stderr, so that a failure on a GPU host says why.
TEST_F(EngineProfileTest, AFailureNoteCarriesNcusRawOutput) {
  const auto v = profile_once(
      "echo '==PROF== Connected to process 7 (/tmp/judge)' > \"$log\"\n"
      "echo '==PROF== Disconnected from process 7' >> \"$log\"\n"
      "echo 'cuInit failed: no CUDA-capable device is detected' >&2\n"
      "exit 9\n");
  if (!v) {
    return;
  }
  EXPECT_EQ(v->feedback, passing_verdict().feedback);
  const std::string& note = v->profile->note;
  EXPECT_EQ(note.rfind("not profiled: unreadable_output: ncu CSV: no header row", 0), 0U) << note;
  EXPECT_TRUE(contains(note, "ncu exited with 9")) << note;
  EXPECT_TRUE(contains(note,
                       "==PROF== Connected to process 7 (/tmp/judge)\n"
                       "==PROF== Disconnected from process 7\n"))
      << note;
  EXPECT_TRUE(contains(note, "cuInit failed: no CUDA-capable device is detected")) << note;
}

// However much ncu wrote, the note keeps its last lines only.
TEST_F(EngineProfileTest, TheRawOutputInANoteIsBounded) {
  const auto v = profile_once(
      "i=0; while [ $i -lt 2000 ]; do echo \"==PROF== line $i\"; i=$((i+1)); done > \"$log\"\n"
      "echo '==PROF== the last line' >> \"$log\"\n");
  if (!v) {
    return;
  }
  const std::string& note = v->profile->note;
  EXPECT_TRUE(contains(note, "==PROF== the last line")) << note;
  EXPECT_TRUE(contains(note, "bytes before ...]")) << note;
  EXPECT_FALSE(contains(note, "==PROF== line 1000\n")) << note;
  EXPECT_LT(note.size(), 6000U) << note;
}

TEST_F(EngineProfileTest, AnNcuThatHangsIsStoppedAtTheProfilingTimeLimit) {
  const auto v = profile_once("while :; do :; done\n", std::chrono::seconds(1));
  if (!v) {
    return;
  }
  EXPECT_EQ(v->feedback, passing_verdict().feedback);
  EXPECT_TRUE(contains(v->profile->note, "profiling time limit (1 s)")) << v->profile->note;
  EXPECT_GE(v->profile->seconds, 1.0);
}

TEST_F(EngineProfileTest, NoNcuIsANoteAndAVerdictOtherwiseIdentical) {
  const auto profiled = profile_with("/nonexistent/leap/ncu");
  if (!profiled) {
    return;
  }
  const verdict& v = *profiled;
  EXPECT_EQ(v.feedback, passing_verdict().feedback);
  EXPECT_EQ(v.profile->note,
            "not profiled: no ncu at '/nonexistent/leap/ncu' (Nsight Compute, part of the CUDA "
            "toolkit; set verifier.ncu to its path)");
}

// run() itself: a compile verdict is never profiled, whatever the mode; and with profiling on, a
// cpp verdict is the same as with it off.
TEST_F(EngineProfileTest, RunProfilesOnlyWhatTheModeSelects) {
  stand_in_ncu ncu("cat \"$here/capture.csv\" > \"$log\"\n");
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  auto e = profiling_engine(ncu.path(), profile_mode::all_compiled);
  ASSERT_NE(e, nullptr);
  auto broken = e->verify(testing::cuda_vector_add_task(), fenced("cuda", "void solve( {\n"), -1);
  ASSERT_TRUE(broken.ok()) << broken.err().message;
  EXPECT_EQ(broken->category, verdict_category::compile);
  EXPECT_FALSE(broken->profile.has_value());
  const std::string cpp =
      "void solve(const float* x, float* y, int n) { for (int i = 0; i < n; "
      "++i) y[i] = 2.0f * x[i]; }\n";
  auto on = e->verify(testing::doubling_task(), fenced("cpp", cpp));
  auto off = testing::shared_engine().verify(testing::doubling_task(), fenced("cpp", cpp));
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_TRUE(on->passed) << on->feedback;
  EXPECT_FALSE(on->profile.has_value());
  EXPECT_EQ(on->feedback, off->feedback);
}

// The GPU tests' candidate: a copy whose reads stride 32 floats apart (uncoalesced), over 8M
// floats in blocks of 256.
task strided_copy_task() {
  const int n = 1 << 23;
  task t;
  t.id = "cuda/strided_copy";
  t.kind = task_kind::cuda;
  t.args = {{"x", value_type::f32, arg_role::input, "n", -1.0, 1.0, 0},
            {"y", value_type::f32, arg_role::output, "n", 0, 0, 0},
            {"n", value_type::i32, arg_role::scalar, "", 0, 0, static_cast<double>(n)}};
  t.reference =
      "void reference(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = "
      "x[(long(i) * 32) % n]; }\n";
  t.forbidden = default_forbidden(task_kind::cuda);
  return t;
}

constexpr const char* k_strided_copy_code =
    "__global__ void copy_strided(const float* x, float* y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[(long(i) * 32) % n];\n"
    "}\n"
    "void solve(const float* x, float* y, int n) {\n"
    "  copy_strided<<<(n + 255) / 256, 256>>>(x, y, n);\n"
    "}\n";

// On a GPU with ncu (the lead's H200): a strided copy verified with verifier.profile passing.
// y[i] = x[(32 i) mod n]: consecutive threads read 128 bytes apart, 4 of each 32-byte sector used.
TEST(EngineProfileGpuTest, AStridedCopyIsMemoryBoundWithTheCoalescingFinding) {
  std::string why;
  if (!testing::gpu_present(&why) || !nvcc_available(&why)) {
    GTEST_SKIP() << why;
  }
  const fs::path toolkit_ncu =
      fs::path(testing::shared_engine().config().nvcc).parent_path() / "ncu";
  if (!fs::exists(toolkit_ncu)) {
    GTEST_SKIP() << "no ncu beside nvcc at " << toolkit_ncu;
  }
  const task t = strided_copy_task();
  const std::string code = k_strided_copy_code;
  engine_config c = testing::test_engine_config();
  c.profile = profile_mode::passing;
  c.run_limits.wall = std::chrono::seconds(60);
  auto e = engine::create(c);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto v = (*e)->verify(t, fenced("cuda", code), 0);
  ASSERT_TRUE(v.ok()) << v.err().message;
  ASSERT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  ASSERT_TRUE(v->profile.has_value());
  if (contains(v->profile->note, "counters_not_permitted")) {
    GTEST_SKIP() << v->profile->note;
  }
  ASSERT_EQ(v->profile->note, "");
  ASSERT_EQ(v->profile->kernels.size(), 1U) << v->feedback;
  const auto& k = v->profile->kernels[0];
  EXPECT_EQ(k.name, "copy_strided");
  EXPECT_EQ(k.bottleneck, "memory-bound") << v->feedback;
  EXPECT_NE(std::find(k.findings.begin(), k.findings.end(), "uncoalesced_global"), k.findings.end())
      << v->feedback;
  EXPECT_TRUE(contains(v->feedback, "Profile of `copy_strided`")) << v->feedback;
  std::printf("profiled in %.1f s:\n%s\n", v->profile->seconds, v->feedback.c_str());
}

// The fall-back without counters (profile_tool events): the events library injected by the
// driver into the judge and the candidate, a real cuda candidate's kernel with its duration, its
// launch configuration and theoretical occupancy in the feedback, from source "events".
TEST(EngineProfileGpuTest, EventsFallbackGivesDurationLaunchAndOccupancy) {
  std::string why;
  if (!testing::gpu_present(&why) || !nvcc_available(&why)) {
    GTEST_SKIP() << why;
  }
  const task t = strided_copy_task();
  const std::string code = k_strided_copy_code;
  engine_config c = testing::test_engine_config();
  c.profile = profile_mode::passing;
  c.profiler = profile_tool::events;
  c.run_limits.wall = std::chrono::seconds(60);
  auto e = engine::create(c);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto v = (*e)->verify(t, fenced("cuda", code), 0);
  ASSERT_TRUE(v.ok()) << v.err().message;
  ASSERT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  ASSERT_TRUE(v->profile.has_value());
  EXPECT_EQ(v->profile->source, "events");
  ASSERT_EQ(v->profile->kernels.size(), 1U) << v->profile->note << "\n" << v->feedback;
  EXPECT_EQ(v->profile->note, k_events_profile_note);
  const auto& k = v->profile->kernels[0];
  EXPECT_EQ(k.name, "copy_strided");
  EXPECT_GT(k.duration_ns, 0);
  // No counters: no class but launch-bound or unknown, and no coalescing finding.
  EXPECT_TRUE(k.bottleneck == "unknown" || k.bottleneck == "launch-bound") << k.bottleneck;
  EXPECT_EQ(std::find(k.findings.begin(), k.findings.end(), "uncoalesced_global"),
            k.findings.end());
  EXPECT_TRUE(contains(v->feedback, "grid (32768, 1, 1) x (256, 1, 1)")) << v->feedback;
  EXPECT_TRUE(contains(v->feedback, "no hardware counters; theoretical occupancy ")) << v->feedback;
  std::printf("profiled from events in %.1f s:\n%s\n", v->profile->seconds, v->feedback.c_str());
}

}  // namespace
}  // namespace leap::sandbox
