// Speed end to end (issue 31): `leap run` with verifier.timing_reps and reward.kind rank_speed on
// real cpp tasks, the real sandbox timing each passing candidate against its reference; the
// speedups reach the store, `leap export` (JSONL and CSV) and `leap replay`'s speed table and
// steps.csv. Every call is bounded by a timeout.
#include "e2e_support.hpp"
#include "tests/storage/csv_reader.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::leap_shell;
using leap::e2e::read_file;
using leap::test::parse_csv;

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, sep);) {
    cells.push_back(cell);
  }
  if (!line.empty() && line.back() == sep) {
    cells.emplace_back();
  }
  return cells;
}

fs::path scratch(const std::string& name) {
  fs::path root =
      fs::temp_directory_path() / ("leap-e2e-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(root);
  return root;
}

// One step of `leap run` on two cpp tasks, 4 rollouts each, every pass timed 3 times and ranked
// by rank_speed; `gate_extra` adds keys under gate: (policy none).
leap::e2e::run_output timed_run(const fs::path& root, int max_turns,
                                const std::string& gate_extra) {
  leap::e2e::copy_suite_tasks(root, {"cpp/axpby", "cpp/prefix_sum_int"});
  std::ofstream(root / "config.yaml")
      << "experiment:\n  name: speed\n  seed: 5\n  run_dir: " << (root / "run").string()
      << "\n  steps: 1\ndata:\n  train: " << (root / "suite").string()
      << "\n  batch_size: 2\nrollout:\n  group_size: 4\n  max_turns: " << max_turns
      << "\n  validation:\n    every: 0\ngate:\n  policy: none\n"
      << gate_extra << "reward:\n  kind: rank_speed\n"
      << "policy:\n  flavour: embedded\nverifier:\n  gpu_slots: 0\n  timing_reps: 3\n";
  return leap_shell("run '" + (root / "config.yaml").string() + "'", 300);
}

TEST(SpeedE2E, TimedRunCarriesSpeedupsToExportAndReplay) {
  const fs::path root = scratch("speed");
  const auto run = timed_run(root, 1, "");
  ASSERT_EQ(run.exit_code, 0) << run.text;

  // The store as JSONL: every passed turn has a positive, finite speedup; every failed one null.
  const auto jsonl = (root / "groups.jsonl").string();
  const auto exported =
      leap_shell("export '" + (root / "run").string() + "' --format jsonl --out '" + jsonl + "'");
  ASSERT_EQ(exported.exit_code, 0) << exported.text;
  int passed = 0;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const auto g = nlohmann::json::parse(line);
    for (const auto& r : g.at("rollouts")) {
      for (const auto& t : r.at("turns")) {
        if (t.at("passed").get<bool>()) {
          ++passed;
          ASSERT_TRUE(t.at("speedup").is_number()) << t.dump();
          const double s = t.at("speedup").get<double>();
          EXPECT_TRUE(std::isfinite(s) && s > 0) << s;
        } else {
          EXPECT_TRUE(t.at("speedup").is_null()) << t.dump();
        }
      }
    }
  }
  ASSERT_GT(passed, 0) << "the scripted policy passed nothing: no speedup to check";

  // CSV: the speedup column is filled on the same turns.
  const auto csv_path = (root / "turns.csv").string();
  ASSERT_EQ(
      leap_shell("export '" + (root / "run").string() + "' --format csv --out '" + csv_path + "'")
          .exit_code,
      0);
  const auto rows = parse_csv(read_file(csv_path));
  ASSERT_FALSE(rows.empty());
  const auto& columns = rows[0];
  const auto column = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(columns.begin(), columns.end(), name) -
                                    columns.begin());
  };
  ASSERT_LT(column("speedup"), columns.size());
  int csv_speedups = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), columns.size()) << "row " << i;
    if (rows[i][column("passed")] == "true") {
      EXPECT_GT(std::stod(rows[i][column("speedup")]), 0.0) << "row " << i;
      ++csv_speedups;
    } else {
      EXPECT_EQ(rows[i][column("speedup")], "") << "row " << i;
    }
  }
  EXPECT_EQ(csv_speedups, passed);

  // Replay: the speed table, and steps.csv's fast_p cells filled for the one step.
  const auto replay = leap_shell("replay '" + (root / "run").string() + "'");
  ASSERT_EQ(replay.exit_code, 0) << replay.text;
  for (const char* text : {"speed (fast_p", "fast_1.0", "fast_2.0", "geomean"}) {
    EXPECT_NE(replay.text.find(text), std::string::npos) << text << "\n" << replay.text;
  }
  std::stringstream steps(read_file(root / "run" / "replay" / "steps.csv"));
  std::string steps_header;
  std::string step0;
  std::getline(steps, steps_header);
  std::getline(steps, step0);
  const auto names = split(steps_header, ',');
  const auto cells = split(step0, ',');
  ASSERT_EQ(names.size(), cells.size()) << steps_header << "\n" << step0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "timed_passes") {
      EXPECT_EQ(std::stoi(cells[i]), passed);
    }
    if (names[i] == "fast_0" || names[i] == "geomean_speedup") {
      EXPECT_FALSE(cells[i].empty()) << names[i];
    }
  }

  // Report: the two speed charts are drawn (not left as notes).
  const auto page = (root / "report.html").string();
  const auto report = leap_shell("report '" + (root / "run").string() + "' --out '" + page + "'");
  ASSERT_EQ(report.exit_code, 0) << report.text;
  const auto html = read_file(page);
  for (const char* text : {"Fast_p vs step", "Geometric-mean speedup vs step"}) {
    EXPECT_NE(html.find(text), std::string::npos) << text;
  }
  EXPECT_EQ(html.find("Fast_p vs step: not drawn"), std::string::npos);
  std::error_code ec;
  fs::remove_all(root, ec);
}

// gate.optimise.train end to end: every first-turn pass is timed and none beats 1000x, so each
// group opens for an optimisation turn; the scripted policy repeats a correct answer, so the turn
// passes and is the kept one: the stored outcome of such a rollout counts both turns (trained on),
// where a run that only measures them counts one.
TEST(SpeedE2E, TrainedOptimisationTurnsCountUpToTheKeptPass) {
  const fs::path root = scratch("opt-train");
  const auto run = timed_run(root, 2, "  optimise:\n    speedup: 1000\n    train: true\n");
  ASSERT_EQ(run.exit_code, 0) << run.text;
  const auto jsonl = (root / "groups.jsonl").string();
  const auto exported =
      leap_shell("export '" + (root / "run").string() + "' --format jsonl --out '" + jsonl + "'");
  ASSERT_EQ(exported.exit_code, 0) << exported.text;
  int kept_second = 0;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const auto g = nlohmann::json::parse(line);
    if (!g.at("optimise").is_string() || g.at("optimise").get<std::string>() != "open") {
      continue;  // e.g. a pass whose timing was uncertain leaves the group closed
    }
    for (const auto& r : g.at("rollouts")) {
      const auto& turns = r.at("turns");
      if (turns.empty() || !turns[0].at("passed").get<bool>()) {
        continue;
      }
      ASSERT_EQ(turns.size(), 2U) << r.dump();
      EXPECT_EQ(r.at("passed_at_turn").get<int>(), 1) << r.dump();
      const int expected = turns[1].at("passed").get<bool>() ? 2 : 1;
      EXPECT_EQ(r.at("generated_turns").get<int>(), expected) << r.dump();
      kept_second += expected == 2 ? 1 : 0;
    }
  }
  EXPECT_GT(kept_second, 0) << "no opened group kept a second turn: nothing was checked";
  // The what-if re-scores the stored run the same way.
  const auto replay = leap_shell("replay '" + (root / "run").string() +
                                 "' --optimise-speedup 1000 --optimise-train");
  ASSERT_EQ(replay.exit_code, 0) << replay.text;
  EXPECT_NE(replay.text.find("trained on"), std::string::npos) << replay.text;
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace
