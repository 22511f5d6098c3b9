// The tasks of a run, from the project's own suite: kinds filtered, a seeded validation split or a
// separate validation suite, and errors that name the config key.
#include "actors/tasks.hpp"

#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>

namespace leap::actors {
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
  testing::temp_dir dir;
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
  for (const auto& t : tasks->train) EXPECT_EQ(t->kind, task_kind::python);
  EXPECT_TRUE(tasks->validation.empty());

  copy_tasks(dir.path() / "held_out", {"python/flatten"});
  data.validation = (dir.path() / "held_out").string();
  tasks = load_run_tasks(data, 1);
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->validation.size(), 1u);
  EXPECT_EQ(tasks->validation[0]->id, "python/flatten");
}

TEST(LoadRunTasksTest, ErrorsNameTheKey) {
  testing::temp_dir dir;
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

}  // namespace
}  // namespace leap::actors
