#include "sandbox/engine.hpp"

#include "sandbox/engine_parts.hpp"
#include "sandbox/harness.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <vector>

namespace leap::sandbox {
namespace {

using testing::doubling_task;
using testing::fenced;
using testing::python_add_task;
using testing::shared_engine;

struct engine_case {
  std::string name;
  std::string answer;
  verdict_category expected;
  std::string feedback_contains;
};

// Verifies one case and checks its category and feedback; returns the verdict for further checks.
std::optional<verdict> expect_case(engine& e, const task& t, const engine_case& c) {
  auto v = e.verify(t, c.answer);
  EXPECT_TRUE(v.ok()) << c.name << ": " << (v.ok() ? "" : v.err().message);
  if (!v.ok()) {
    return std::nullopt;
  }
  EXPECT_EQ(to_string(v->category), std::string(to_string(c.expected))) << v->feedback << "\n"
                                                                        << v->diagnostics;
  EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
  return *v;
}

TEST(EngineTest, CppVerdicts) {
  const task t = doubling_task();
  const std::vector<engine_case> cases{
      {"correct",
       fenced("cpp",
              "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = "
              "x[i] * 2;\n}\n"),
       verdict_category::pass, "Correct"},
      {"off_by_one",
       fenced("cpp",
              "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n - 1; ++i) "
              "y[i] = x[i] * 2;\n}\n"),
       verdict_category::wrong_answer, "Worst at index 1023"},
      {"compile_error",
       fenced("cpp",
              "#include <vector>\n\nvoid solve(const float* x, float* y, int n) {\n  for (int i = "
              "0; i < n; ++i) y[i] = x[i] * k;\n}\n"),
       verdict_category::compile, "solution.cpp:4:"},
      {"wrong_signature",
       fenced("cpp",
              "void solve(float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = x[i] "
              "* 2;\n}\n"),
       verdict_category::compile, "void solve(const float* x, float* y, int n)"},
      {"no_code", "I cannot do this.", verdict_category::format, "No fenced code block"},
      {"segfault",
       fenced("cpp",
              "void solve(const float* x, float* y, int n) {\n  volatile int* p = nullptr;\n  *p = "
              "1;\n}\n"),
       verdict_category::runtime, "SIGSEGV"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    if (auto v = expect_case(shared_engine(), t, c)) {
      EXPECT_EQ(v->feedback.find("/tmp"), std::string::npos) << v->feedback;
    }
  }
}

TEST(EngineTest, SecondIdenticalCandidateIsACacheHit) {
  const task t = doubling_task();
  const std::string answer = fenced("cpp",
                                    "void solve(const float* x, float* y, int n) {\n  for (int i = "
                                    "0; i < n; ++i) y[i] = x[i] + x[i];\n}\n");
  auto first = shared_engine().verify(t, answer);
  ASSERT_TRUE(first.ok()) << first.err().message;
  auto second = shared_engine().verify(t, answer);
  ASSERT_TRUE(second.ok()) << second.err().message;
  EXPECT_TRUE(second->passed);
  EXPECT_TRUE(second->cache_hit);
}

TEST(EngineTest, RefusalsOnTheCompilersViewAreCachedWithTheBuild) {
  // A candidate whose code is fine for a text search but whose object defines a library function.
  const task t = doubling_task();
  const std::string answer = fenced(
      "cpp",
      "#include <sys/time.h>\n"
      "int fake_time(struct timeval* tv, void*) asm(\"gettimeofday\");\n"
      "int fake_time(struct timeval* tv, void*) { tv->tv_sec = 0; tv->tv_usec = 0; return 0; }\n"
      "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = 2 * "
      "x[i];\n}\n");
  auto first = shared_engine().compile(t, answer, false);
  ASSERT_TRUE(first.ok()) << first.err().message;
  ASSERT_TRUE(first->final_verdict.has_value());
  EXPECT_EQ(first->final_verdict->category, verdict_category::forbidden)
      << first->final_verdict->feedback;
  EXPECT_NE(first->final_verdict->feedback.find("solution.cpp defines gettimeofday"),
            std::string::npos)
      << first->final_verdict->feedback;
  EXPECT_FALSE(first->cache_hit);
  auto second = shared_engine().compile(t, answer, false);
  ASSERT_TRUE(second.ok()) << second.err().message;
  ASSERT_TRUE(second->final_verdict.has_value());
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(second->final_verdict->feedback, first->final_verdict->feedback);
}

TEST(EngineTest, ForbiddenNamesAreJudgedOnWhatTheCompilerResolved) {
  task t = doubling_task();
  t.forbidden = {"std::sort", "qsort"};
  const std::vector<engine_case> cases{
      {"argument_dependent_lookup",
       fenced("cpp",
              "#include <algorithm>\n#include <vector>\n"
              "void solve(const float* x, float* y, int n) {\n  std::vector<float> v(x, x + n);\n"
              "  sort(v.begin(), v.end());\n  for (int i = 0; i < n; ++i) y[i] = 2 * x[i];\n}\n"),
       verdict_category::forbidden, "std::sort"},
      {"c_function_through_a_macro",
       fenced("cpp",
              "#include <cstdlib>\n#define Q(a) a##sort\nstatic int cmp(const void*, const void*) "
              "{ return 0; }\n"
              "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = "
              "2 * x[i];\n"
              "  Q(q)(y, 0, sizeof(float), cmp);\n}\n"),
       verdict_category::forbidden, "qsort"},
      {"own_function_named_like_it_is_fine",
       fenced("cpp",
              "namespace mine { void sort(float*, float*) {} }\n"
              "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = "
              "2 * x[i];\n"
              "  mine::sort(y, y);\n}\n"),
       verdict_category::pass, "Correct"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_case(shared_engine(), t, c);
  }
}

TEST(EngineTest, PythonVerdicts) {
  const task t = python_add_task();
  const std::vector<engine_case> cases{
      {"correct", fenced("python", "def add(a, b):\n    return a + b\n"), verdict_category::pass,
       "All 2 tests passed"},
      {"wrong", fenced("python", "def add(a, b):\n    return a - b\n"),
       verdict_category::wrong_answer, "tests.py line 4, in test_small: assert add(1, 2) == 3"},
      {"syntax", fenced("python", "def add(a, b)\n    return a + b\n"), verdict_category::compile,
       "line 1"},
      {"raises", fenced("python", "def add(a, b):\n    return a / 0\n"), verdict_category::runtime,
       "ZeroDivisionError"},
      {"missing_name", fenced("python", "def plus(a, b):\n    return a + b\n"),
       verdict_category::runtime, "cannot import name 'add'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_case(shared_engine(), t, c);
  }
}

// The results travel from the judge's process through a private pipe in framed records: nothing
// the candidate prints or writes to any descriptor, and nothing it leaves to run after solve(),
// changes them (writing into the judge's channel is a runtime error of its own).
TEST(EngineTest, ResultStreamIsOutOfTheCandidatesReach) {
  const task t = doubling_task();
  const std::string correct = "  for (int i = 0; i < n; ++i) y[i] = x[i] * 2;\n";
  auto solve = [&](const std::string& includes, const std::string& body) {
    return fenced("cpp",
                  includes + "void solve(const float* x, float* y, int n) {\n" + body + "}\n");
  };
  const std::string fake_line =
      "  std::fprintf(stderr, \"\\nLEAP_HARNESS_ERROR cuda_init cudaErrorNoDevice initialising "
      "CUDA: no CUDA-capable "
      "device is detected\\n\"); std::fflush(stderr);\n";
  const std::vector<engine_case> cases{
      {"fake_infrastructure_line",
       solve("#include <cstdio>\n#include <unistd.h>\n", fake_line + "  _exit(3);\n"),
       verdict_category::runtime, "exit"},
      {"fake_line_then_correct", solve("#include <cstdio>\n", fake_line + correct),
       verdict_category::pass, "Correct"},
      {"prints_on_stdout",
       solve("#include <cstdio>\n",
             "  std::printf(\"LEAPDUMP LEAPEND!\\n\"); std::fflush(stdout);\n" + correct),
       verdict_category::pass, "Correct"},
      {"extra_bytes_on_every_fd",
       solve(
           "#include <unistd.h>\n",
           "  for (int fd = 0; fd < 64; ++fd) (void)!write(fd, \"C\\0\\0\\0\\0\", 5);\n" + correct),
       verdict_category::runtime, "harness's channel"},
      {"static_destructor_never_runs",
       fenced("cpp",
              "#include <cstdlib>\nstruct bomb { ~bomb() { std::abort(); } } the_bomb;\n"
              "void solve(const float* x, float* y, int n) {\n" +
                  correct + "}\n"),
       verdict_category::pass, "Correct"},
      {"lazy_thread",
       solve("#include <chrono>\n#include <thread>\n",
             "  std::thread([=] { std::this_thread::sleep_for(std::chrono::seconds(2));\n" +
                 correct + "  }).detach();\n"),
       verdict_category::runtime, "still running"},
      {"joined_thread",
       solve("#include <thread>\n", "  std::thread w([=] {\n" + correct + "  });\n  w.join();\n"),
       verdict_category::pass, "Correct"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_case(shared_engine(), t, c);
  }
}

// The judge is the candidate's parent and shares its uid, but is not dumpable: the candidate can
// neither read nor write its memory, nor open its descriptors (the result stream), through /proc,
// and ptrace is refused; it may signal only itself (the judge's filter), so it can neither stop
// nor kill the judge, nor make the kernel signal it, nor touch its limits. Each candidate computes
// the right answer and spoils it (zeros) only when its way into the judge opened, so a pass means
// the way was closed.
TEST(EngineTest, TheJudgesProcessIsOutOfTheCandidatesReach) {
  const task t = doubling_task();
  auto attempt = [](const std::string& opened) {
    return fenced("cpp",
                  "#include <csignal>\n#include <cstdio>\n#include <fcntl.h>\n"
                  "#include <sched.h>\n#include <sys/ptrace.h>\n#include <sys/resource.h>\n"
                  "#include <sys/syscall.h>\n#include <unistd.h>\n"
                  "void solve(const float* x, float* y, int n) {\n"
                  "  char path[64];\n  (void)path;\n  const bool opened = " +
                      opened +
                      ";\n"
                      "  for (int i = 0; i < n; ++i) y[i] = opened ? 0.0f : x[i] * 2;\n}\n");
  };
  const std::string proc = "(std::snprintf(path, sizeof path, \"/proc/%d/";
  const std::vector<engine_case> cases{
      {"memory", attempt(proc + "mem\", (int)getppid()), open(path, O_RDWR) >= 0)"),
       verdict_category::pass, "Correct"},
      {"result_stream", attempt(proc + "fd/1\", (int)getppid()), open(path, O_WRONLY) >= 0)"),
       verdict_category::pass, "Correct"},
      {"descriptors", attempt(proc + "fd\", (int)getppid()), open(path, O_RDONLY) >= 0)"),
       verdict_category::pass, "Correct"},
      {"ptrace", attempt("ptrace(PTRACE_ATTACH, getppid(), nullptr, nullptr) == 0"),
       verdict_category::pass, "Correct"},
      // Signal 0 asks only whether a signal could be sent: allowed, the judge would be stopped
      // or killed by the same call with another number.
      {"signal", attempt("kill(getppid(), 0) == 0"), verdict_category::pass, "Correct"},
      {"signal_the_group", attempt("kill(0, 0) == 0 || kill(-1, 0) == 0"), verdict_category::pass,
       "Correct"},
      {"signal_a_thread",
       attempt("syscall(SYS_tgkill, getppid(), getppid(), 0) == 0 || "
               "syscall(SYS_tkill, getppid(), 0) == 0"),
       verdict_category::pass, "Correct"},
      {"signal_by_descriptor",
       attempt("syscall(SYS_pidfd_send_signal, syscall(SYS_pidfd_open, getppid(), 0), 0, "
               "nullptr, 0) == 0"),
       verdict_category::pass, "Correct"},
      {"sigio_owner",
       attempt("fcntl(1, F_SETOWN, getppid()) == 0 || fcntl(1, F_SETSIG, SIGKILL) == 0"),
       verdict_category::pass, "Correct"},
      {"limits", attempt("prlimit(getppid(), RLIMIT_CPU, nullptr, nullptr) == 0"),
       verdict_category::pass, "Correct"},
      // The judge's scheduling, each asked with the value it has, so that a way left open
      // changes nothing but the answer.
      {"priority",
       attempt("setpriority(PRIO_PROCESS, getppid(), getpriority(PRIO_PROCESS, getppid())) == 0"),
       verdict_category::pass, "Correct"},
      {"priority_of_the_uid",
       attempt("setpriority(PRIO_USER, getuid(), getpriority(PRIO_PROCESS, 0)) == 0 || "
               "setpriority(PRIO_PGRP, 0, getpriority(PRIO_PROCESS, 0)) == 0"),
       verdict_category::pass, "Correct"},
      {"affinity",
       attempt("[] { cpu_set_t set; return sched_getaffinity(getppid(), sizeof set, &set) == 0 "
               "&& sched_setaffinity(getppid(), sizeof set, &set) == 0; }()"),
       verdict_category::pass, "Correct"},
      {"scheduler",
       attempt("[] { sched_param p{}; return sched_setscheduler(getppid(), SCHED_OTHER, &p) == "
               "0; }()"),
       verdict_category::pass, "Correct"},
      // Its own scheduling stays the candidate's: refused, the answer would be spoilt.
      {"own_scheduling",
       attempt("[] { cpu_set_t set; return sched_getaffinity(0, sizeof set, &set) != 0 || "
               "sched_setaffinity(0, sizeof set, &set) != 0 || setpriority(PRIO_PROCESS, 0, "
               "getpriority(PRIO_PROCESS, 0)) != 0 || setpriority(PRIO_PROCESS, getpid(), "
               "getpriority(PRIO_PROCESS, 0)) != 0; }()"),
       verdict_category::pass, "Correct"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_case(shared_engine(), t, c);
  }
}

// With timing on, the warm-up and every timed call get fresh inputs in the same buffers and are
// checked: outputs cached by address, or left from an earlier call, fail.
TEST(EngineTest, TimedCallsGetFreshInputsAndAreChecked) {
  engine_config config = testing::test_engine_config();
  config.cache_dir = testing::test_cache_dir() / "timed";
  config.timing_reps = 3;
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  const task t = doubling_task();
  const std::string compute = "  for (int i = 0; i < n; ++i) y[i] = x[i] * 2;\n";
  const std::vector<engine_case> cases{
      {"correct",
       fenced("cpp", "void solve(const float* x, float* y, int n) {\n" + compute + "}\n"),
       verdict_category::pass, "Correct"},
      {"cache_keyed_on_address",
       fenced(
           "cpp",
           "static const float* seen = nullptr; static float cache[1024]; static int calls = 0;\n"
           "void solve(const float* x, float* y, int n) {\n"
           "  if (++calls > 3 && x == seen) { for (int i = 0; i < n; ++i) y[i] = cache[i]; return; "
           "}\n" +
               compute + "  for (int i = 0; i < n; ++i) cache[i] = y[i];\n  seen = x;\n}\n"),
       verdict_category::wrong_answer, "timed runs"},
      {"stale_outputs",
       fenced("cpp",
              "static int calls = 0;\nvoid solve(const float* x, float* y, int n) {\n  if (++calls "
              "> 3) return;\n" +
                  compute + "}\n"),
       verdict_category::wrong_answer, "timed runs"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = expect_case(**e, t, c);
    if (v && v->passed) {
      ASSERT_TRUE(v->candidate_time.has_value());
      EXPECT_EQ(v->candidate_time->reps, 3);
    }
  }
}

bool nvcc_runs(std::string* why) {
  if (std::system((shared_engine().config().nvcc + " --version >/dev/null 2>&1").c_str()) != 0) {
    *why = "nvcc not found at '" + shared_engine().config().nvcc + "'";
    return false;
  }
  return true;
}

// Where no GPU works, the engine's own probe (the real one) fails too, and the run ends in an
// infrastructure error tagged with its slot. GPU machines skip this: their probe passes.
TEST(EngineTest, CudaRunWithoutAUsableGpuIsAnInfrastructureErrorOfTheSlot) {
  std::string why;
  if (!nvcc_runs(&why)) {
    GTEST_SKIP() << why;
  }
  if (testing::gpu_present(&why)) {
    GTEST_SKIP() << "a GPU is present: the probe passes here";
  }
  auto v = shared_engine().verify(testing::cuda_vector_add_task(),
                                  fenced("cuda", testing::k_cuda_vector_add), 3);
  ASSERT_FALSE(v.ok()) << to_string(v->category) << ": " << v->feedback;
  EXPECT_EQ(infrastructure_slot(v.err()), std::optional<int>(3)) << v.err().message;
  EXPECT_NE(v.err().message.find("probe failed"), std::string::npos) << v.err().message;
  EXPECT_NE(v.err().message.find("GPU keeper could not start"), std::string::npos)
      << v.err().message;
  EXPECT_NE(v.err().message.find("GPU 3"), std::string::npos) << v.err().message;
  EXPECT_FALSE(shared_engine().probe_slot(task_kind::cuda, 3).ok());
}

// A candidate that breaks CUDA for itself (it hides the GPU before the harness initialises CUDA)
// makes the harness report cuda_init; the probe passes, so the verdict is the candidate's. GPU
// machines only: without one the slot's GPU keeper cannot start, and the run never begins.
TEST(EngineTest, CudaInitFailureWithAPassingProbeIsTheCandidatesOwn) {
  std::string why;
  if (!nvcc_runs(&why)) {
    GTEST_SKIP() << why;
  }
  if (!testing::gpu_present(&why)) {
    GTEST_SKIP() << why;
  }
  engine_config config = testing::test_engine_config();
  config.cache_dir = testing::test_cache_dir() / "probe";
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  const std::string hide =
      "#include <cstdlib>\nstatic int hidden = setenv(\"CUDA_VISIBLE_DEVICES\", \"99\", 1);\n";
  auto v = (*e)->verify(testing::cuda_vector_add_task(),
                        fenced("cuda", hide + testing::k_cuda_vector_add), 0);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_EQ(v->category, verdict_category::runtime) << v->feedback;
  EXPECT_NE(v->feedback.find("CUDA could not be initialised"), std::string::npos) << v->feedback;
}

TEST(EngineTest, InfrastructureErrorsCarryTheirSlot) {
  EXPECT_EQ(infrastructure_slot(infrastructure_error(7, "x")), std::optional<int>(7));
  EXPECT_EQ(infrastructure_slot(infrastructure_error(-1, "x")), std::optional<int>(-1));
  EXPECT_EQ(infrastructure_slot(error{"no compiler"}), std::nullopt);
  EXPECT_EQ(infrastructure_slot(infrastructure_error(2, "x").wrap("context")), std::nullopt);
}

// The engine's parser of the harness's stream: a stream cut short is incomplete (the program
// died), bytes the harness never writes are an error (tampering).
TEST(EngineTest, StreamParserIsStrict) {
  task t;
  t.id = "t";
  t.args = {{"x", value_type::i32, arg_role::input, "2", 0, 9, 0},
            {"y", value_type::i32, arg_role::output, "2", 0, 0, 0}};
  const std::string nonce = "00112233445566778899aabbccddeeff";
  auto put = [](std::string& s, const auto& v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  std::string stream = "LEAPDUMP";
  put(stream, std::uint32_t{2});
  for (int i = 0; i < 16; ++i) {
    stream.push_back(static_cast<char>(i * 0x11));
  }
  put(stream, std::uint32_t{1});  // trials
  put(stream, std::uint32_t{0});  // reps
  stream += "S";
  stream += "C";
  put(stream, std::uint32_t{0});
  put(stream, 0.5);
  put(stream, std::uint64_t{2});
  put(stream, std::uint64_t{42});  // x's hash
  put(stream, std::uint64_t{2});
  put(stream, std::int32_t{7});
  put(stream, std::int32_t{-3});
  const std::string body = stream;
  stream += "Z";
  for (int i = 0; i < 16; ++i) {
    stream.push_back(static_cast<char>(i * 0x11));
  }
  stream += "LEAPEND!";

  auto whole = parse_dump(stream, t, nonce);
  ASSERT_TRUE(whole.ok()) << whole.err().message;
  EXPECT_TRUE(whole->complete);
  ASSERT_EQ(whole->trials.size(), 1U);
  EXPECT_EQ(whole->trials[0].outputs[0], (std::vector<double>{7, -3}));
  EXPECT_EQ(whole->trials[0].input_hashes, (std::vector<std::uint64_t>{42}));

  auto cut = parse_dump(body.substr(0, body.size() - 3), t, nonce);
  ASSERT_TRUE(cut.ok()) << cut.err().message;
  EXPECT_FALSE(cut->complete);
  EXPECT_TRUE(cut->reached_solve);

  EXPECT_FALSE(parse_dump(stream + "x", t, nonce).ok()) << "a byte after the end record";
  EXPECT_FALSE(parse_dump(stream, t, "ffffffffffffffffffffffffffffffff").ok())
      << "another run's nonce";
  EXPECT_FALSE(parse_dump("junk" + stream, t, nonce).ok()) << "bytes before the header";
  EXPECT_FALSE(parse_dump(body + "Q", t, nonce).ok()) << "an unknown record";
  const std::vector<std::uint64_t> other_counts{3, 3};
  EXPECT_FALSE(parse_dump(stream, t, nonce, &other_counts).ok()) << "counts unlike the reference's";
  std::string twice = body;
  twice += body.substr(body.find('C', 36));
  EXPECT_FALSE(parse_dump(twice, t, nonce).ok()) << "a call record out of order";
}

// An error record's first text names the failure's kind: the harness's own names map to their
// value, anything else (only the candidate's bytes can carry it) to `other`, never an error.
TEST(EngineTest, StreamParserReadsTheFailureKind) {
  task t;
  t.id = "t";
  t.args = {{"x", value_type::i32, arg_role::input, "2", 0, 9, 0}};
  const std::string nonce = "00112233445566778899aabbccddeeff";
  auto stream_failing_with = [&](const std::string& kind) {
    std::string s = "LEAPDUMP";
    auto put = [&s](std::uint32_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(2);
    for (int i = 0; i < 16; ++i) {
      s.push_back(static_cast<char>(i * 0x11));
    }
    put(1);  // trials
    put(0);  // reps
    s += "SE";
    for (const std::string& text : {kind, std::string("left_running"),
                                    std::string("checking threads"), std::string("2 threads")}) {
      put(static_cast<std::uint32_t>(text.size()));
      s += text;
    }
    return s;
  };
  const std::pair<std::string, harness_failure_kind> cases[] = {
      {"cuda_init", harness_failure_kind::cuda_init},
      {"cuda", harness_failure_kind::cuda},
      {"threads", harness_failure_kind::threads},
      {"stream", harness_failure_kind::stream},
      {"channel", harness_failure_kind::channel},
      {"keeper", harness_failure_kind::keeper},
      {"io", harness_failure_kind::other},
      {"", harness_failure_kind::other}};
  for (const auto& [text, kind] : cases) {
    SCOPED_TRACE(text);
    auto dump = parse_dump(stream_failing_with(text), t, nonce);
    ASSERT_TRUE(dump.ok()) << dump.err().message;
    ASSERT_TRUE(dump->failure.has_value());
    EXPECT_EQ(dump->failure->kind, kind);
    EXPECT_EQ(dump->failure->name, "left_running");
    EXPECT_EQ(dump->failure->text, "2 threads");
    EXPECT_FALSE(dump->complete);
  }
}

// Each toolchain's programs, said once: asked `--version` in this order for the kinds' cache keys,
// and the folders of the toolkit and python (never the C++ compiler) bound read-only into the runs,
// as engine::create bound tool_prefixes({nvcc, python}) before the list was derived.
TEST(EngineTest, ToolchainProgramsAreAskedInOrderAndOnlyTheToolkitAndPythonAreBound) {
  engine_config c;
  c.cxx = "/opt/leap-test-gcc/bin/g++";
  c.nvcc = "/opt/leap-test-cuda/bin/nvcc";
  c.python = "/opt/leap-test-python/bin/python3";
  auto programs_of = [&](toolchain t) {
    std::vector<std::string> out;
    for (const auto& p : detail::toolchain_programs(c, t)) {
      out.push_back(p.program);
    }
    return out;
  };
  EXPECT_EQ(programs_of(toolchain::none), std::vector<std::string>{});
  EXPECT_EQ(programs_of(toolchain::cxx), std::vector<std::string>{c.cxx});
  EXPECT_EQ(programs_of(toolchain::nvcc), (std::vector<std::string>{c.nvcc, c.cxx}));
  EXPECT_EQ(programs_of(toolchain::python3), std::vector<std::string>{c.python});

  // The paths do not exist, so each program gives its folder as named only.
  EXPECT_EQ(detail::toolchain_prefixes(c),
            (std::vector<std::filesystem::path>{"/opt/leap-test-cuda", "/opt/leap-test-python"}));
  const engine_config defaults;
  EXPECT_EQ(detail::toolchain_prefixes(defaults),
            detail::tool_prefixes({defaults.nvcc, defaults.python}));
}

}  // namespace
}  // namespace leap::sandbox
