// `leap run` with its run folder on a small real filesystem (a 6 MiB tmpfs) that another file fills
// mid-run: the run ends with exit 1 and an error line naming the path, never an abort (RocksDB's
// info log used to trip an assertion: exit 134); once space is freed, `leap run` continues the
// run from the store. The tmpfs is mounted in a private mount namespace (tests/storage/
// small_disk.hpp); without root the test skips, saying why.
#include "e2e_support.hpp"
#include "tests/storage/small_disk.hpp"

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
using leap::e2e::run_leap;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string write_config(const fs::path& root, const fs::path& run_dir, int steps) {
  std::ostringstream yaml;
  yaml << "experiment:\n  name: e2e\n  seed: 5\n  run_dir: " << run_dir.string()
       << "\n  steps: " << steps << "\n"
       << "data:\n  train: " << (root / "suite").string() << "\n  batch_size: 2\n"
       << "rollout:\n  group_size: 4\n  max_turns: 2\n  validation:\n    every: 0\n"
       << "learner:\n  kind: record\n"
       << "policy:\n  flavour: embedded\n  max_in_flight: 4\n"
       << "verifier:\n  compile_workers: 1\n  gpu_slots: 0\n";
  const fs::path path = root / "config.yaml";
  std::ofstream(path) << yaml.str();
  return path.string();
}

TEST(LeapRunFullDiskE2E, AFullDiskEndsTheRunWithExit1AndTheRunContinuesOnceSpaceIsFreed) {
  leap::e2e::scratch_dir scratch("full-disk", {"python/two_sum", "python/flatten"});
  leap::test::small_disk disk(scratch.root(), 6U << 20U);
  if (!disk.skip_reason().empty()) {
    GTEST_SKIP() << disk.skip_reason();
  }
  const fs::path run_dir = disk / "run";
  auto config = write_config(scratch.root(), run_dir, 200);

  int completed = 0;
  {
    leap_process run({"run", config, "--quiet"});
    ASSERT_TRUE(run.wait_for(std::regex("step 2/200"), std::chrono::seconds(300))) << run.output();
    disk.fill();  // another process takes the rest of the disk mid-run
    const auto code = run.wait(std::chrono::seconds(300));
    ASSERT_TRUE(code.has_value()) << "leap run did not end on a full disk\n" << run.output();
    const auto& output = run.output();
    EXPECT_EQ(*code, 1) << output;  // the old code: 134, RocksDB's assertion
    EXPECT_FALSE(contains(output, "Assertion")) << output;
    std::smatch line;
    ASSERT_TRUE(std::regex_search(output, line, std::regex("leap run: error: [^\n]*"))) << output;
    const std::string error = line.str();
    EXPECT_TRUE(contains(error, run_dir.string())) << error;
    if (contains(error, "trajectories")) {
      // The store's writes, the most frequent: the error, the free space, what it kept.
      EXPECT_TRUE(contains(error, "No space left on device")) << error;
      EXPECT_TRUE(contains(error, "free of 6 MiB")) << error;
      EXPECT_TRUE(contains(error, "every write acknowledged before is kept")) << error;
    }
    const std::regex step_line("\nstep [0-9]+/200");
    completed = static_cast<int>(std::distance(
        std::sregex_iterator(output.begin(), output.end(), step_line), std::sregex_iterator()));
    ASSERT_GE(completed, 2);
  }

  disk.free_space();
  config = write_config(scratch.root(), run_dir, completed + 2);
  const auto again = run_leap({"run", config, "--quiet"}, std::chrono::seconds(300));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  // It goes on after the last step stored (the step that hit the disk, or the one after it when
  // that step was stored before its line was printed).
  std::smatch resumed;
  ASSERT_TRUE(
      std::regex_search(again.output, resumed, std::regex("resuming run 'e2e' at step ([0-9]+)/")))
      << again.output;
  EXPECT_GE(std::stoi(resumed[1].str()), completed + 1) << again.output;
  EXPECT_TRUE(contains(again.output, "run 'e2e' finished")) << again.output;
}

// `leap export` to a full disk: exit 1 naming the file, the reason and the free space, and no
// partial or temporary file left behind on it.
TEST(LeapExportFullDiskE2E, AnExportToAFullDiskFailsNamingTheFileAndLeavesNothing) {
  leap::e2e::scratch_dir scratch("full-disk-export", {"python/two_sum", "python/flatten"});
  const fs::path run_dir = scratch.root() / "run";
  const auto config = write_config(scratch.root(), run_dir, 2);
  const auto run = run_leap({"run", config, "--quiet"}, std::chrono::seconds(300));
  ASSERT_EQ(run.exit_code, 0) << run.output;

  leap::test::small_disk disk(scratch.root(), 1U << 20U);
  if (!disk.skip_reason().empty()) {
    GTEST_SKIP() << disk.skip_reason();
  }
  disk.fill();
  const fs::path out = disk / "turns.jsonl";
  const auto exported =
      run_leap({"export", run_dir.string(), "--format", "jsonl", "--out", out.string()},
               std::chrono::seconds(300));
  EXPECT_EQ(exported.exit_code, 1) << exported.output;
  EXPECT_TRUE(contains(exported.output, out.string())) << exported.output;
  EXPECT_TRUE(contains(exported.output, "No space left on device")) << exported.output;
  // As the store's error does, the export's names the free space (issue 29).
  EXPECT_TRUE(contains(exported.output, "free of 1 MiB on its filesystem")) << exported.output;
  EXPECT_FALSE(contains(exported.output, "Assertion")) << exported.output;
  for (const auto& entry : fs::directory_iterator(disk / "")) {
    EXPECT_TRUE(entry.path().filename() != "turns.jsonl" &&
                entry.path().filename().string().find("turns.jsonl") == std::string::npos)
        << "left on the full disk: " << entry.path();
  }
}

}  // namespace
