// `leap replay` as a user runs it on a real run folder: tables, CSV files, what-if overrides and a
// what-if config, and errors that name the problem. Every call is bounded by `timeout`.
#include "e2e_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using leap::e2e::leap_shell;
using leap::e2e::read_file;
using leap::e2e::run_output;

// One finished run (one python task, two steps), shared by the tests of this file.
// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class ReplayE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_root =
        new fs::path(fs::temp_directory_path() / ("leap-e2e-replay-" + std::to_string(::getpid())));
    fs::remove_all(*suite_root);
    leap::e2e::copy_suite_tasks(*suite_root, {"python/flatten", "python/two_sum"});
    std::ofstream(*suite_root / "config.yaml")
        << "experiment:\n  name: replayed\n  seed: 2\n  run_dir: " << (*suite_root / "run").string()
        << "\n  steps: 2\ndata:\n  train: " << (*suite_root / "suite").string()
        << "\n  batch_size: 2\nrollout:\n  group_size: 4\n  max_turns: 3\n  validation:\n"
        << "    every: 0\ngate:\n  policy: dcp\n  tau_min: 0.5\n  tau_max: 1.0\n"
        << "policy:\n  flavour: embedded\nverifier:\n  gpu_slots: 0\n";
    std::ofstream(*suite_root / "binary.yaml")
        << "reward:\n  kind: binary\ngate:\n  policy: none\n";
    suite_run =
        new run_output(leap_shell("run '" + (*suite_root / "config.yaml").string() + "'", 300));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*suite_root, ec);
    delete suite_root;
    delete suite_run;
  }
  void SetUp() override { ASSERT_EQ(suite_run->exit_code, 0) << suite_run->text; }

  static std::string run_dir() { return (*suite_root / "run").string(); }
  static fs::path* suite_root;
  static run_output* suite_run;
};

fs::path* ReplayE2E::suite_root = nullptr;
run_output* ReplayE2E::suite_run = nullptr;

TEST_F(ReplayE2E, PrintsTheTablesAndWritesCsv) {
  const auto out = leap_shell("replay '" + run_dir() + "'");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  for (const char* text : {"run 'replayed' (finished)", "pass@1", "pass@3", "recov/rol", "probes",
                           "turns/pass", "wall_s", "rollouts with a non-zero advantage"}) {
    EXPECT_NE(out.text.find(text), std::string::npos) << text << "\n" << out.text;
  }
  const auto steps = read_file(fs::path(run_dir()) / "replay" / "steps.csv");
  EXPECT_EQ(steps.rfind("step,groups,activated,activated_fraction,acc_at_1,acc_at_2,acc_at_3,", 0),
            0u)
      << steps;
  EXPECT_EQ(std::count(steps.begin(), steps.end(), '\n'), 3);  // header + 2 steps
  EXPECT_FALSE(read_file(fs::path(run_dir()) / "replay" / "composition.csv").empty());
  EXPECT_FALSE(fs::exists(fs::path(run_dir()) / "replay" / "whatif.csv"));
}

TEST_F(ReplayE2E, WhatIfOverridesAndConfigRescoreTheStoredVerdicts) {
  const fs::path out_dir = *suite_root / "whatif";
  auto out = leap_shell("replay '" + run_dir() + "' --out '" + out_dir.string() +
                        "' --gate none --reward binary");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("what-if"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("gate none"), std::string::npos) << out.text;
  const auto csv = read_file(out_dir / "whatif.csv");
  // Gate none opens nothing: the last (total) row's activated_after is 0.
  const auto last = csv.substr(csv.rfind("\nall,") + 1);
  std::stringstream cells(last);
  std::vector<std::string> row;
  for (std::string c; std::getline(cells, c, ',');) {
    row.push_back(c);
  }
  ASSERT_GE(row.size(), 4u) << csv;
  EXPECT_EQ(row[3], "0") << csv;

  out = leap_shell("replay '" + run_dir() + "' --out '" + out_dir.string() + "' --what-if '" +
                   (*suite_root / "binary.yaml").string() + "'");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("binary.yaml: gate none"), std::string::npos) << out.text;
}

TEST_F(ReplayE2E, ErrorsNameTheProblem) {
  struct row {
    std::string args;
    std::string expected;
  };
  const fs::path empty = *suite_root / "empty";
  fs::create_directories(empty);
  const std::vector<row> rows = {
      {"replay '" + run_dir() + "' --gate sometimes", "--gate: unknown policy 'sometimes'"},
      {"replay '" + run_dir() + "' --reward best", "--reward: unknown kind 'best'"},
      {"replay '" + run_dir() + "' --static-rewards 1,x", "--static-rewards: 'x' is not a number"},
      {"replay '" + run_dir() + "' --run-id other", "no run 'other'"},
      {"replay '" + run_dir() + "' --optimise-train",
       "--optimise-train: gate.optimise.speedup is 0 and opens no optimisation turn"},
      {"replay '" + run_dir() + "' --optimise-train --optimise-speedup 1.2 --reward rank",
       "--optimise-train: reward.kind rank pays nothing for speed; add --reward rank_speed"},
      {"replay '" + empty.string() + "'", "leap replay: error:"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.args);
    const auto out = leap_shell(r.args);
    EXPECT_EQ(out.exit_code, 1) << out.text;
    EXPECT_NE(out.text.find(r.expected), std::string::npos) << out.text;
  }
}

}  // namespace
