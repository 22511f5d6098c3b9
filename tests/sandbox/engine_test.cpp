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
