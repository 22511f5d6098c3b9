#include "sandbox/task.hpp"

#include "sandbox/compare.hpp"
#include "sandbox/harness.hpp"
#include "sandbox/process.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;

const char* k_task_json =
    R"J({"id": "cpp/axpy", "kind": "cpp", "difficulty": 2, "category": "elementwise",
  "prompt": "p", "seed": 7,
  "args": [{"name": "x", "type": "float", "role": "input", "count": "n", "range": [-2, 2]},
           {"name": "y", "type": "float", "role": "inout", "count": "n*m", "range": [0, 1]},
           {"name": "idx", "type": "int", "role": "output", "count": 3},
           {"name": "alpha", "type": "float", "role": "scalar", "value": 2.5},
           {"name": "n", "type": "int", "role": "scalar", "value": 16},
           {"name": "m", "type": "int", "role": "scalar", "value": 2}],
  "tolerance": {"atol": 0.001, "rtol": 0.01}})J";

TEST(TaskTest, ParsesTheSuiteFormat) {
  auto t = parse_task_json(k_task_json, "task.json");
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->id, "cpp/axpy");
  EXPECT_EQ(t->kind, task_kind::cpp);
  EXPECT_EQ(t->seed, 7U);
  ASSERT_EQ(t->args.size(), 6U);
  EXPECT_EQ(t->args[1].role, arg_role::inout);
  EXPECT_EQ(*element_count(*t, t->args[1]), 32);
  EXPECT_EQ(*element_count(*t, t->args[2]), 3);
  EXPECT_DOUBLE_EQ(t->tol->atol, 0.001);
  EXPECT_EQ(entry_signature(*t, "solve"),
            "void solve(const float* x, float* y, int* idx, float alpha, int n, int m)");
}

struct bad_json_case {
  std::string name;
  std::string json;
  std::string error;
};

TEST(TaskTest, RejectsMalformedTasksWithTheKey) {
  const std::vector<bad_json_case> cases{
      {"not_json", "{", "invalid JSON"},
      {"no_id", R"({"kind": "cpp"})", "'id' (string) is required"},
      {"bad_kind", R"({"id": "a", "kind": "fortran"})", "unknown task kind 'fortran'"},
      {"bad_role",
       R"({"id": "a", "kind": "cpp", "args": [{"name": "x", "role": "sideways", "count": 1}]})",
       "'args[0]': 'role' must be input"},
      {"bad_type",
       R"({"id": "a", "kind": "cpp", "args": [{"name": "x", "type": "half", "role": "input", "count": 1}]})",
       "'type' must be float, double or int"},
      {"scalar_without_value",
       R"({"id": "a", "kind": "cpp", "args": [{"name": "n", "type": "int", "role": "scalar"}]})",
       "a scalar needs a numeric 'value'"},
      {"bad_range",
       R"({"id": "a", "kind": "cpp", "args": [{"name": "x", "role": "input", "count": 1, "range": [2, 1]}]})",
       "'range' low is above high"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto t = parse_task_json(c.json, "ctx");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.err().message.find(c.error), std::string::npos) << t.err().message;
    EXPECT_EQ(t.err().message.rfind("ctx: ", 0), 0U) << t.err().message;
  }
  auto t = parse_task_json(
      R"({"id": "a", "kind": "cpp", "args": [{"name": "x", "role": "input", "count": "q"}]})",
      "ctx");
  ASSERT_TRUE(t.ok());
  t->reference = "void reference(const float*) {}";
  auto v = validate_task(*t);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.err().message.find("count term 'q'"), std::string::npos) << v.err().message;
}

class task_dir {
 public:
  task_dir()
      : path_(default_scratch_root().parent_path() /
              ("leap-task-test-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~task_dir() { fs::remove_all(path_); }
  [[nodiscard]] const fs::path& path() const { return path_; }
  void write(const fs::path& rel, const std::string& content) const {
    fs::create_directories((path_ / rel).parent_path());
    std::ofstream(path_ / rel) << content;
  }

 private:
  fs::path path_;
};

TEST(TaskTest, LoadsASuiteDirectory) {
  task_dir dir;
  dir.write("cpp/axpy/task.json", k_task_json);
  dir.write("cpp/axpy/reference.cpp", "void reference() {}\n");
  dir.write("cpp/axpy/solution.cpp", "void solve() {}\n");
  dir.write("cpp/axpy/wrong/off_by_one.cpp", "bad\n");
  dir.write("cpp/axpy/wrong/compile_error.cpp", "worse\n");
  dir.write("python/add/task.json", R"({"id": "python/add", "kind": "python"})");
  dir.write("python/add/tests.py", "def test_a(): pass\n");
  dir.write("python/add/hidden_tests.py", "def test_h(): pass\n");
  auto tasks = load_suite(dir.path());
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->size(), 2U);
  EXPECT_EQ((*tasks)[0].id, "cpp/axpy");
  EXPECT_EQ((*tasks)[0].solution, "void solve() {}\n");
  ASSERT_EQ((*tasks)[0].wrong.size(), 2U);
  EXPECT_EQ((*tasks)[0].wrong[0].label, "compile_error");
  EXPECT_EQ((*tasks)[1].tests, "def test_a(): pass\n");
  EXPECT_EQ((*tasks)[1].hidden_tests, "def test_h(): pass\n");
  EXPECT_EQ((*tasks)[0].hidden_tests, "");
  auto resolved = resolve_task("python/add", dir.path());
  ASSERT_TRUE(resolved.ok()) << resolved.err().message;
  EXPECT_EQ(resolved->kind, task_kind::python);
  EXPECT_FALSE(resolve_task("python/none", dir.path()).ok());
}

TEST(TaskTest, LoadsAJsonlDataset) {
  task_dir dir;
  dir.write(
      "data.jsonl",
      R"J({"id": "python/a", "kind": "python", "tests": "def test_x(): pass\n", "hidden_tests": "def test_y(): pass\n", "solution": "x = 1\n", "wrong": [{"label": "bad", "code": "x = 2\n"}]})J"
      "\n\n"
      R"J({"id": "cpp/b", "kind": "cpp", "reference": "void reference(int n) {}", "args": [{"name": "n", "type": "int", "role": "scalar", "value": 1}]})J"
      "\n");
  auto tasks = load_jsonl(dir.path() / "data.jsonl");
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->size(), 2U);
  EXPECT_EQ((*tasks)[0].wrong.at(0).label, "bad");
  EXPECT_EQ((*tasks)[0].hidden_tests, "def test_y(): pass\n");
  EXPECT_EQ((*tasks)[1].reference, "void reference(int n) {}");
  auto one = resolve_task((dir.path() / "data.jsonl").string() + "#cpp/b", "");
  ASSERT_TRUE(one.ok()) << one.err().message;
  EXPECT_EQ(one->id, "cpp/b");

  dir.write("bad.jsonl", R"J({"id": "python/a", "kind": "python", "tests": "def test_x(): pass"})J"
                         "\n"
                         R"J({"id": 3})J"
                         "\n");
  auto bad = load_jsonl(dir.path() / "bad.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("bad.jsonl:2: 'id' (string) is required"), std::string::npos)
      << bad.err().message;

  // Hidden tests belong to tasks judged by tests: elsewhere they would be ignored silently.
  dir.write(
      "hidden_cpp.jsonl",
      R"J({"id": "cpp/b", "kind": "cpp", "reference": "void reference(int n) {}", "hidden_tests": "def test_y(): pass\n", "args": [{"name": "n", "type": "int", "role": "scalar", "value": 1}]})J"
      "\n");
  auto hidden_cpp = load_jsonl(dir.path() / "hidden_cpp.jsonl");
  ASSERT_FALSE(hidden_cpp.ok());
  EXPECT_NE(hidden_cpp.err().message.find("hidden_tests"), std::string::npos)
      << hidden_cpp.err().message;
}

TEST(TaskTest, LoadsAKernelBenchDirectory) {
  task_dir dir;
  const std::string problem =
      "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a):\n        return a * "
      "2\n"
      "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n";
  dir.write("KernelBench/level1/1_Double.py", problem);
  dir.write("KernelBench/level2/7_Other.py", problem);
  dir.write("KernelBench/level2/README.md", "not a problem");
  auto tasks = load_kernelbench_dir(dir.path() / "KernelBench");
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->size(), 2U);
  EXPECT_EQ((*tasks)[0].id, "kernelbench/level1/1_Double");
  EXPECT_EQ((*tasks)[1].difficulty, 2);
  EXPECT_EQ((*tasks)[0].reference, problem);
  EXPECT_NE((*tasks)[0].prompt.find("ModelNew"), std::string::npos);
  auto one_level = load_kernelbench_dir(dir.path() / "KernelBench" / "level1");
  ASSERT_TRUE(one_level.ok()) << one_level.err().message;
  EXPECT_EQ(one_level->size(), 1U);
  dir.write("broken/level1/2_Bad.py", "class Model: pass\n");
  auto broken = load_kernelbench_dir(dir.path() / "broken");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.err().message.find("no 'def get_inputs'"), std::string::npos)
      << broken.err().message;
}

TEST(CompareTest, ToleranceNanAndRelativeL2) {
  task t;
  t.id = "t";
  t.args = {{"y", value_type::f32, arg_role::output, "4", 0, 0, 0}};
  harness_dump expected, got;
  expected.trials = {{{{1.0, 2.0, NAN, 0.0}}, {}}};
  got.trials = {{{{1.0, 2.0 + 1e-6, NAN, 1e-6}}, {}}};
  EXPECT_FALSE(compare_dumps(t, expected, got).has_value());
  got.trials[0].outputs[0][2] = 0;
  auto m = compare_dumps(t, expected, got);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->worst_index, 2U);
  EXPECT_EQ(m->bad_elements, 1U);
  // Zeros against a near-zero reference pass element-wise but not as a whole.
  expected.trials = {{{{1e-7, -2e-7, 3e-7, 0.0}}, {}}};
  got.trials = {{{{0.0, 0.0, 0.0, 0.0}}, {}}};
  m = compare_dumps(t, expected, got);
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->relative_l2_failed);
  EXPECT_EQ(m->bad_elements, 0U);
}

}  // namespace
}  // namespace leap::sandbox
