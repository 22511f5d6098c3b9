// The tasks of a run, from the project's own suite: kinds filtered, a seeded validation split or a
// separate validation suite, and errors that name the config key. The scripted policy's suite, read
// with the same reader: every kind, and errors that name the file and key.
#include "tools/launch/tasks.hpp"

#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;

// Copies a few tasks of the project's suite into `root`.
void copy_tasks(const fs::path& root, const std::vector<std::string>& tasks) {
  const fs::path suite = fs::path(LEAP_SOURCE_DIR) / "sandbox" / "suite";
  for (const auto& t : tasks) {
    fs::create_directories(root / t);
    fs::copy(suite / t, root / t, fs::copy_options::recursive);
  }
}

TEST(LoadRunTasksTest, FiltersKindsAndHoldsOutASeededSplit) {
  actors::testing::temp_dir dir;
  copy_tasks(dir.path() / "suite",
             {"cpp/axpby", "cpp/prefix_sum_int", "python/flatten", "python/two_sum"});
  data_section data;
  data.train = (dir.path() / "suite").string();
  data.validation_fraction = 0.25;
  auto tasks = load_run_tasks(data, 1);
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  EXPECT_EQ(tasks->train.size(), 3u);
  EXPECT_EQ(tasks->validation.size(), 1u);

  data.task_kinds = {"python"};
  data.validation_fraction = 0.0;
  tasks = load_run_tasks(data, 1);
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->train.size(), 2u);
  for (const auto& t : tasks->train) {
    EXPECT_EQ(t->kind, task_kind::python);
  }
  EXPECT_TRUE(tasks->validation.empty());

  copy_tasks(dir.path() / "held_out", {"python/flatten"});
  data.validation = (dir.path() / "held_out").string();
  tasks = load_run_tasks(data, 1);
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->validation.size(), 1u);
  EXPECT_EQ(tasks->validation[0]->id, "python/flatten");
}

TEST(LoadRunTasksTest, ErrorsNameTheKey) {
  actors::testing::temp_dir dir;
  copy_tasks(dir.path() / "suite", {"python/flatten"});
  struct row {
    const char* name;
    data_section data;
    std::string expected;
  };
  auto with = [&](std::string train, std::vector<std::string> kinds = {}) {
    data_section d;
    d.train = std::move(train);
    d.task_kinds = std::move(kinds);
    return d;
  };
  const std::string suite = (dir.path() / "suite").string();
  const std::vector<row> rows = {
      {"no train suite", with(""), "data.train: no task suite given"},
      {"missing path", with((dir.path() / "nope").string()), "no such file or folder"},
      {"no task of the kinds", with(suite, {"cpp"}), "holds no task of the kinds"},
      {"unknown kind", with(suite, {"fortran"}), "data.task_kinds"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    auto tasks = load_run_tasks(r.data, 0);
    ASSERT_FALSE(tasks.ok());
    EXPECT_NE(tasks.err().message.find(r.expected), std::string::npos) << tasks.err().message;
  }
}

// A suite task of the kinds the project's suite has no folder of: its task.json and solution.
void write_task(const fs::path& root, const std::string& id, const std::string& task_json,
                const std::string& solution_file, const std::string& solution) {
  fs::create_directories(root / id);
  std::ofstream(root / id / "task.json") << task_json;
  std::ofstream(root / id / solution_file) << solution;
}

// Every kind, as the sandbox reads it: the scripted policy once refused kernelbench and digits.
TEST(ScriptedSuiteTest, ServesEveryKindWithItsFence) {
  actors::testing::temp_dir dir;
  copy_tasks(dir.path(), {"cpp/axpby", "cuda/vector_add", "python/flatten"});
  write_task(dir.path(), "digits/seven", R"({"id": "digits/seven", "kind": "digits", "target": 7})",
             "solution.txt", "7\n");
  write_task(dir.path(), "kernelbench/relu",
             R"({"id": "kernelbench/relu", "kind": "kernelbench", "difficulty": 4,
                 "prompt": "Write ModelNew for torch.relu."})",
             "solution.py", "class ModelNew: pass\n");
  const auto tasks = load_scripted_suite(dir.path().string());
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->size(), 5u);
  struct expected {
    std::string id, language;
    int difficulty;
  };
  const std::vector<expected> rows = {{"cpp/axpby", "cpp", 1},
                                      {"cuda/vector_add", "cuda", 1},
                                      {"digits/seven", "digits", 1},
                                      {"kernelbench/relu", "python", 3},  // level 4 clamped
                                      {"python/flatten", "python", 1}};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(rows[i].id);
    const auto& t = (*tasks)[i];
    EXPECT_EQ(t.id, rows[i].id);
    EXPECT_EQ(t.language, rows[i].language);
    EXPECT_FALSE(t.solution.empty());
  }
  EXPECT_EQ((*tasks)[2].prompt, "Write digits whose sum is 7.");  // the digits default
  EXPECT_EQ((*tasks)[3].difficulty, 3);
  // The suite's own task: its solution and its wrong candidates in name order.
  std::ifstream solution(fs::path(LEAP_SOURCE_DIR) / "sandbox/suite/cuda/vector_add/solution.cu");
  const std::string code((std::istreambuf_iterator<char>(solution)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ((*tasks)[1].solution, code);
  ASSERT_FALSE((*tasks)[1].wrong.empty());
  for (std::size_t i = 1; i < (*tasks)[1].wrong.size(); ++i) {
    EXPECT_LT((*tasks)[1].wrong[i - 1].label, (*tasks)[1].wrong[i].label);
  }
}

TEST(ScriptedSuiteTest, ErrorsNameTheFileAndKey) {
  struct row {
    std::string name;
    std::function<void(const fs::path&)> damage;
    std::string error;
  };
  const std::vector<row> rows = {
      {"no prompt",
       [](const auto& root) {
         std::ofstream(root / "cpp/axpby/task.json") << R"({"id": "cpp/axpby", "kind": "cpp"})";
       },
       "cpp/axpby/task.json: 'prompt' is required"},
      {"bad kind",
       [](const auto& root) {
         std::ofstream(root / "cpp/axpby/task.json")
             << R"({"id": "cpp/axpby", "kind": "rust", "prompt": "p"})";
       },
       "cpp/axpby/task.json: 'kind': unknown task kind 'rust' (valid: cuda, cpp, python, "
       "kernelbench, digits)"},
      {"not json", [](const auto& root) { std::ofstream(root / "cpp/axpby/task.json") << "{oops"; },
       "cpp/axpby/task.json: invalid JSON"},
      {"no solution", [](const auto& root) { fs::remove(root / "cuda/vector_add/solution.cu"); },
       "cuda/vector_add: no solution.cu"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    actors::testing::temp_dir dir;
    copy_tasks(dir.path(), {"cpp/axpby", "cuda/vector_add"});
    r.damage(dir.path());
    const auto tasks = load_scripted_suite(dir.path().string());
    ASSERT_FALSE(tasks.ok());
    EXPECT_NE(tasks.err().message.find(r.error), std::string::npos) << tasks.err().message;
  }
  actors::testing::temp_dir empty;
  EXPECT_NE(load_scripted_suite(empty.path().string()).err().message.find("no task.json"),
            std::string::npos);
  EXPECT_NE(load_scripted_suite((empty.path() / "missing").string())
                .err()
                .message.find("not a directory"),
            std::string::npos);
}

}  // namespace
}  // namespace leap::launch
