#include "sandbox/engine.hpp"

#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

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

TEST(EngineTest, CppVerdicts) {
  const task t = doubling_task();
  const std::vector<engine_case> cases{
      {"correct",
       fenced("cpp", "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = x[i] * 2;\n}\n"),
       verdict_category::pass, "Correct"},
      {"off_by_one",
       fenced("cpp", "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n - 1; ++i) y[i] = x[i] * 2;\n}\n"),
       verdict_category::wrong_answer, "Worst at index 1023"},
      {"compile_error",
       fenced("cpp", "#include <vector>\n\nvoid solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = x[i] * k;\n}\n"),
       verdict_category::compile, "solution.cpp:4:"},
      {"wrong_signature",
       fenced("cpp", "void solve(float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = x[i] * 2;\n}\n"),
       verdict_category::compile, "void solve(const float* x, float* y, int n)"},
      {"no_code", "I cannot do this.", verdict_category::format, "No fenced code block"},
      {"segfault",
       fenced("cpp", "void solve(const float* x, float* y, int n) {\n  volatile int* p = nullptr;\n  *p = 1;\n}\n"),
       verdict_category::runtime, "SIGSEGV"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = shared_engine().verify(t, c.answer);
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_EQ(to_string(v->category), std::string(to_string(c.expected))) << v->feedback << "\n" << v->diagnostics;
    EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
    EXPECT_EQ(v->feedback.find("/tmp"), std::string::npos) << v->feedback;
  }
}

TEST(EngineTest, SecondIdenticalCandidateIsACacheHit) {
  const task t = doubling_task();
  const std::string answer = fenced("cpp", "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = x[i] + x[i];\n}\n");
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
      "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = 2 * x[i];\n}\n");
  auto first = shared_engine().compile(t, answer, false);
  ASSERT_TRUE(first.ok()) << first.err().message;
  ASSERT_TRUE(first->final_verdict.has_value());
  EXPECT_EQ(first->final_verdict->category, verdict_category::forbidden) << first->final_verdict->feedback;
  EXPECT_NE(first->final_verdict->feedback.find("solution.cpp defines gettimeofday"), std::string::npos)
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
       fenced("cpp", "#include <algorithm>\n#include <vector>\n"
                     "void solve(const float* x, float* y, int n) {\n  std::vector<float> v(x, x + n);\n"
                     "  sort(v.begin(), v.end());\n  for (int i = 0; i < n; ++i) y[i] = 2 * x[i];\n}\n"),
       verdict_category::forbidden, "std::sort"},
      {"c_function_through_a_macro",
       fenced("cpp", "#include <cstdlib>\n#define Q(a) a##sort\nstatic int cmp(const void*, const void*) { return 0; }\n"
                     "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = 2 * x[i];\n"
                     "  Q(q)(y, 0, sizeof(float), cmp);\n}\n"),
       verdict_category::forbidden, "qsort"},
      {"own_function_named_like_it_is_fine",
       fenced("cpp", "namespace mine { void sort(float*, float*) {} }\n"
                     "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = 2 * x[i];\n"
                     "  mine::sort(y, y);\n}\n"),
       verdict_category::pass, "Correct"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = shared_engine().verify(t, c.answer);
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_EQ(to_string(v->category), std::string(to_string(c.expected))) << v->feedback << "\n" << v->diagnostics;
    EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
  }
}

TEST(EngineTest, PythonVerdicts) {
  const task t = python_add_task();
  const std::vector<engine_case> cases{
      {"correct", fenced("python", "def add(a, b):\n    return a + b\n"), verdict_category::pass, "All 2 tests passed"},
      {"wrong", fenced("python", "def add(a, b):\n    return a - b\n"), verdict_category::wrong_answer,
       "tests.py line 4, in test_small: assert add(1, 2) == 3"},
      {"syntax", fenced("python", "def add(a, b)\n    return a + b\n"), verdict_category::compile, "line 1"},
      {"raises", fenced("python", "def add(a, b):\n    return a / 0\n"), verdict_category::runtime, "ZeroDivisionError"},
      {"missing_name", fenced("python", "def plus(a, b):\n    return a + b\n"), verdict_category::runtime,
       "cannot import name 'add'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = shared_engine().verify(t, c.answer);
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_EQ(to_string(v->category), std::string(to_string(c.expected))) << v->feedback << "\n" << v->diagnostics;
    EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
  }
}

}  // namespace
}  // namespace leap::sandbox
