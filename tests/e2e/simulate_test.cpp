// `leap simulate` with speed (issue 31): the gate's optimisation turns and the speed rewards, as a
// researcher runs them before spending GPU time. Real `leap` processes, real config and CSV files.
#include "e2e_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::leap_shell;
using leap::e2e::quoted;

// A CSV as columns by header name; an empty cell reads as NaN.
using sim_columns = std::map<std::string, std::vector<double>>;

sim_columns sim_read_csv(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> names;
  sim_columns columns;
  if (std::getline(in, line)) {
    std::stringstream header(line);
    for (std::string name; std::getline(header, name, ',');) {
      names.push_back(name);
    }
  }
  while (std::getline(in, line)) {
    std::stringstream row(line + ",");
    std::size_t i = 0;
    for (std::string cell; std::getline(row, cell, ',') && i < names.size(); ++i) {
      columns[names[i]].push_back(cell.empty() ? std::nan("") : std::stod(cell));
    }
  }
  return columns;
}

double sim_sum(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) {
    s += x;
  }
  return s;
}

class sim_folder {
 public:
  sim_folder()
      : dir_(fs::temp_directory_path() / ("leap_simulate_e2e_" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~sim_folder() { fs::remove_all(dir_); }
  [[nodiscard]] const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

// Passes at 1.0x on average, spread so that some groups beat 1.2x; optimisation turns that
// improve 40% of the time by 1.5x and break 30% of the time.
std::string sim_config(const std::string& optimise) {
  return "experiment:\n  steps: 12\n  seed: 11\n"
         "data:\n  batch_size: 16\n"
         "rollout:\n  group_size: 8\n  max_turns: 3\n"
         "verifier:\n  timing_reps: 20\n"
         "reward:\n  kind: rank_speed\n"
         "simulation:\n  tasks: 64\n  skill_gain: 2.0\n  speedup_median: 1.0\n"
         "  speedup_task_spread: 0.1\n  speedup_spread: 0.2\n  speedup_noise: 0.03\n"
         "  optimise_improve_probability: 0.4\n  optimise_break_probability: 0.3\n"
         "  optimise_gain: 1.5\n"
         "gate:\n  optimise:\n" +
         optimise;
}

struct sim_result {
  leap::e2e::run_output out;
  sim_columns csv;
};

sim_result sim_run(const sim_folder& folder, const std::string& name, const std::string& yaml) {
  const fs::path config = folder.dir() / (name + ".yaml");
  const fs::path csv = folder.dir() / (name + ".csv");
  std::ofstream(config) << yaml;
  sim_result r;
  r.out = leap_shell("simulate " + quoted(config.string()) + " --csv " + quoted(csv.string()));
  r.csv = sim_read_csv(csv);
  return r;
}

TEST(LeapSimulateSpeed, OptimisationTurnsOnOffAndTrained) {
  const sim_folder folder;
  const auto off = sim_run(folder, "off", sim_config("    speedup: 0\n"));
  const auto on = sim_run(folder, "on", sim_config("    speedup: 1.2\n    max_turns: 2\n"));
  const auto trained = sim_run(folder, "trained",
                               sim_config("    speedup: 1.2\n    max_turns: 2\n    train: true\n"));
  for (const auto* r : {&off, &on, &trained}) {
    ASSERT_EQ(r->out.exit_code, 0) << r->out.text;
    ASSERT_EQ(r->csv.at("step").size(), 12u) << r->out.text;
    // Timed: every step has its fast_p and geomean under `leap replay`'s names.
    for (const char* column : {"fast_1.0", "fast_1.2", "fast_1.5", "fast_2.0", "geomean_speedup"}) {
      for (double v : r->csv.at(column)) {
        EXPECT_FALSE(std::isnan(v)) << column;
      }
    }
    EXPECT_NE(r->out.text.find("fast_1.2"), std::string::npos) << r->out.text;
  }

  // Off: no optimisation turn, and what a user keeps is what the first turns wrote.
  EXPECT_EQ(sim_sum(off.csv.at("optimised")), 0.0);
  EXPECT_EQ(sim_sum(off.csv.at("optimise_turns")), 0.0);
  EXPECT_EQ(off.out.text.find("optimisation turns (gate.optimise"), std::string::npos);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(off.csv.at("kept_geomean_speedup")[i], off.csv.at("geomean_speedup")[i], 1e-9);
  }

  // On: slow groups open, turns are kept and broken, they cost verifications, and the kept
  // kernels are faster than the first turns'.
  EXPECT_GT(sim_sum(on.csv.at("optimised")), 0.0);
  EXPECT_GT(sim_sum(on.csv.at("optimise_turns")), sim_sum(on.csv.at("optimised")));
  EXPECT_GT(sim_sum(on.csv.at("optimise_kept")), 0.0);
  EXPECT_GT(sim_sum(on.csv.at("optimise_broken")), 0.0);
  EXPECT_GT(sim_sum(on.csv.at("verifications")), sim_sum(off.csv.at("verifications")));
  EXPECT_GT(sim_sum(on.csv.at("kept_geomean_speedup")), sim_sum(on.csv.at("geomean_speedup")));
  EXPECT_NE(on.out.text.find("optimisation turns (gate.optimise above 1.2x)"), std::string::npos)
      << on.out.text;

  // Measured only, the optimisation skill never moves; trained on, it learns to improve more and
  // to break less.
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(on.csv.at("optimise_improve_probability")[i], 0.4, 1e-9);
    EXPECT_NEAR(on.csv.at("optimise_break_probability")[i], 0.3, 1e-9);
  }
  EXPECT_GT(trained.csv.at("optimise_improve_probability").back(), 0.4 + 0.02);
  EXPECT_LT(trained.csv.at("optimise_break_probability").back(), 0.3 - 0.02);
  EXPECT_NE(trained.out.text.find("trained on"), std::string::npos) << trained.out.text;
}

TEST(LeapSimulateSpeed, RejectsOptimisationProbabilitiesAboveOne) {
  const sim_folder folder;
  const fs::path config = folder.dir() / "bad.yaml";
  std::ofstream(config) << "simulation:\n  optimise_improve_probability: 0.7\n"
                           "  optimise_break_probability: 0.5\n";
  const auto out = leap_shell("simulate " + quoted(config.string()));
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("simulation.optimise_improve_probability"), std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("simulation.optimise_break_probability must be <= 1"), std::string::npos)
      << out.text;
}

// ---- structural terms (issue 34) --------------------------------------------------------------

std::string sim_struct_read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The mean over the paid families (coalescing to parallelism) of a per-family column's last value
// less its first.
double sim_struct_rise(const sim_columns& csv, const std::string& prefix) {
  double rise = 0.0;
  for (const char* family : {"coalescing", "bank_conflicts", "occupancy", "parallelism"}) {
    const auto& column = csv.at(prefix + family);
    rise += column.back() - column.front();
  }
  return rise / 4.0;
}

// `text` with every occurrence of `from` replaced by `to`.
std::string sim_struct_replace(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

TEST(LeapSimulateStructure, TheConfigPaysTermsThatTeachCleanKernelsWhenPassesTie) {
  const sim_folder folder;
  const std::string yaml =
      sim_struct_read(fs::path(LEAP_SOURCE_DIR) / "configs" / "simulate_structural.yaml");
  ASSERT_NE(yaml.find("coalescing: 0.02\n"), std::string::npos);
  ASSERT_NE(yaml.find("kind: rank_speed\n"), std::string::npos);
  ASSERT_NE(yaml.find("timing_reps: 20\n"), std::string::npos);
  // The config as it is, and each of it and its untimed rank variant with every weight 0.
  const std::string rank =
      sim_struct_replace(sim_struct_replace(yaml, "kind: rank_speed\n", "kind: rank\n"),
                         "timing_reps: 20\n", "timing_reps: 0\n");
  const auto on = sim_run(folder, "structural", yaml);
  const auto off = sim_run(folder, "unpaid", sim_struct_replace(yaml, ": 0.02\n", ": 0\n"));
  const auto rank_on = sim_run(folder, "rank", rank);
  const auto rank_off =
      sim_run(folder, "rank_unpaid", sim_struct_replace(rank, ": 0.02\n", ": 0\n"));
  for (const auto* r : {&on, &off, &rank_on, &rank_off}) {
    ASSERT_EQ(r->out.exit_code, 0) << r->out.text;
    ASSERT_EQ(r->csv.at("step").size(), 40u) << r->out.text;
    EXPECT_NE(r->out.text.find("structural (all steps)"), std::string::npos) << r->out.text;
    EXPECT_NE(r->out.text.find("expected clean share"), std::string::npos) << r->out.text;
    for (const char* column : {"clean_coalescing", "clean_dram_traffic", "expected_clean_occupancy",
                               "structural_term", "profiled_turns", "missing_profiles"}) {
      for (double v : r->csv.at(column)) {
        EXPECT_FALSE(std::isnan(v)) << column;
      }
    }
    // About 10% of the profiles are missing (simulation.structural_missing).
    const double missing = sim_sum(r->csv.at("missing_profiles"));
    const double profiled = sim_sum(r->csv.at("profiled_turns"));
    EXPECT_GT(missing / (missing + profiled), 0.05);
    EXPECT_LT(missing / (missing + profiled), 0.15);
  }
  // Paid: every step pays a term within the bound, and the printed table names the paid families.
  // The bound (4 x 0.02 > 0.05) bites; half the gap never does: with 8 rollouts two rank rewards
  // differ by at least 1/7, whose half exceeds the bound.
  EXPECT_NE(on.out.text.find("parallelism"), std::string::npos) << on.out.text;
  for (const auto* r : {&on, &rank_on}) {
    for (double term : r->csv.at("structural_term")) {
      EXPECT_GT(term, 0.0);
      EXPECT_LE(term, 0.05 + 1e-12);
    }
    EXPECT_GT(sim_sum(r->csv.at("capped_by_bound")), 0.0);
    EXPECT_EQ(sim_sum(r->csv.at("capped_by_gap")), 0.0);
  }
  // Unpaid: nothing is paid, and the first step's passes are the paid run's (the profiles have
  // their own random stream).
  for (const auto* r : {&off, &rank_off}) {
    EXPECT_EQ(sim_sum(r->csv.at("structural_term")), 0.0);
    EXPECT_EQ(sim_sum(r->csv.at("scored_passes")), 0.0);
  }
  EXPECT_EQ(on.csv.at("acc_at_1").front(), off.csv.at("acc_at_1").front());
  EXPECT_EQ(on.csv.at("verifications").front(), off.csv.at("verifications").front());
  EXPECT_EQ(rank_on.csv.at("acc_at_1").front(), rank_off.csv.at("acc_at_1").front());
  // Under rank, where all-pass groups tie, the terms alone rank them and the policy learns clean
  // kernels; unpaid, nothing pushes the clean shares.
  EXPECT_GT(sim_struct_rise(rank_on.csv, "expected_clean_"), 0.04);
  EXPECT_LT(std::abs(sim_struct_rise(rank_off.csv, "expected_clean_")), 0.02);
  EXPECT_LT(std::abs(sim_struct_rise(off.csv, "expected_clean_")), 0.02);
  EXPECT_GT(sim_sum(rank_on.csv.at("signal_groups")), sim_sum(rank_off.csv.at("signal_groups")));
}

TEST(LeapSimulateStructure, WithoutProfilesNothingIsDrawnAndTheTermsAreRefused) {
  const sim_folder folder;
  // Timed, unprofiled: the structural cells stay empty.
  const auto plain = sim_run(folder, "plain", sim_config("    speedup: 0\n"));
  ASSERT_EQ(plain.out.exit_code, 0) << plain.out.text;
  for (const char* column : {"structural_term", "clean_coalescing", "profiled_turns"}) {
    for (double v : plain.csv.at(column)) {
      EXPECT_TRUE(std::isnan(v)) << column;
    }
  }
  EXPECT_EQ(plain.out.text.find("structural (all steps)"), std::string::npos) << plain.out.text;
  // As `leap run`: weights without verifier.profile are refused.
  std::string yaml =
      sim_struct_read(fs::path(LEAP_SOURCE_DIR) / "configs" / "simulate_structural.yaml");
  const auto at = yaml.find("profile: passing");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, 16, "profile: \"off\"");
  const fs::path config = folder.dir() / "unprofiled.yaml";
  std::ofstream(config) << yaml;
  const auto out = leap_shell("simulate " + quoted(config.string()));
  EXPECT_EQ(out.exit_code, 1) << out.text;
  EXPECT_NE(out.text.find("verifier.profile is off"), std::string::npos) << out.text;
}

// ---- the printed table and the CSV (issue 32) ------------------------------------------------

// Every column group on (timed, optimisation turns, buffered retry, profiles with two of the five
// families paid), so that the table shows each group and the CSV's columns all carry values.
const char* const sim_pin_yaml =
    "experiment:\n  steps: 3\n  seed: 5\n"
    "data:\n  batch_size: 8\n"
    "rollout:\n  group_size: 4\n  max_turns: 2\n"
    "verifier:\n  timing_reps: 20\n  profile: passing\n"
    "gate:\n  policy: dcp\n  optimise:\n    speedup: 1.2\n    max_turns: 2\n"
    "  retry:\n    buffer: 8\n    delay: 1\n    attempts: 2\n"
    "reward:\n  kind: rank_speed\n"
    "  structural:\n    coalescing: 0.02\n    occupancy: 0.03\n    bound: 0.04\n"
    "simulation:\n  tasks: 16\n  difficulty_beta: 3.0\n  speedup_median: 0.9\n"
    "  structural_missing: 0.1\n";

std::vector<std::string> sim_pin_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

// Cells of a row split at `sep` (runs of spaces when ' '), each a number or text.
std::vector<std::string> sim_pin_cells(const std::string& row, char sep) {
  std::vector<std::string> cells;
  std::stringstream in(row);
  for (std::string cell; std::getline(in, cell, sep);) {
    if (sep != ' ' || !cell.empty()) {
      cells.push_back(cell);
    }
  }
  return cells;
}

// The row has the pinned row's cells in their places: text equal, numbers within 0.2% (or 1e-6),
// so that another processor's last bits of a logarithm do not fail it, while a column moved to
// another column's place does.
void expect_pinned_row(const std::string& row, const std::string& pinned, char sep) {
  const auto got = sim_pin_cells(row, sep);
  const auto want = sim_pin_cells(pinned, sep);
  ASSERT_EQ(got.size(), want.size()) << row;
  for (std::size_t i = 0; i < want.size(); ++i) {
    char* end = nullptr;
    const double w = std::strtod(want[i].c_str(), &end);
    if (want[i].empty() || *end != '\0') {
      EXPECT_EQ(got[i], want[i]) << "cell " << i << " of " << row;
      continue;
    }
    EXPECT_NEAR(std::strtod(got[i].c_str(), nullptr), w, std::max(1e-6, 2e-3 * std::abs(w)))
        << "cell " << i << " of " << row;
  }
}

// The table's header and the CSV's header name each column where its value is printed: a seeded
// run's second step (the one with a retried group) as `leap simulate` printed it before the
// columns came from one list. A column whose name, width or value moves shows here.
TEST(LeapSimulateColumns, TheTableAndTheCsvOfASeededRunKeepTheirLayout) {
  const sim_folder folder;
  const auto r = sim_run(folder, "pinned", sim_pin_yaml);
  ASSERT_EQ(r.out.exit_code, 0) << r.out.text;
  const auto out = sim_pin_lines(r.out.text);
  std::size_t header = 0;
  while (header < out.size() && out[header].rfind(" step", 0) != 0) {
    ++header;
  }
  ASSERT_LT(header + 2, out.size()) << r.out.text;
  EXPECT_EQ(out[header],
            " step  acc@1  acc@2  activated  recov/rollout  recov/group  turns/pass  "
            "verifications  E[acc@1]  fix_p  fast_1.0  fast_1.2  fast_1.5  fast_2.0  geomean   "
            "E[spd]  optimised  opt_turn    kept  broken  kept_geo  improve    break    term      "
            "coalescing       occupancy  bound    gap");
  EXPECT_EQ(out[header + 2].size(), out[header].size()) << out[header + 2];
  expect_pinned_row(
      out[header + 2],
      "    2  0.406  0.656      0.750          0.471        1.000       2.333             52  "
      "   0.358  0.357     0.406     0.312     0.062     0.031    1.068    0.901          2 "
      "        3       3       0     1.084    0.300    0.200  0.0144           0.341        "
      "   0.418   0.07   0.00",
      ' ');
  const auto csv = sim_pin_lines(leap::e2e::read_file(folder.dir() / "pinned.csv"));
  ASSERT_EQ(csv.size(), 4u);
  EXPECT_EQ(csv[0],
            "step,acc_at_1,acc_at_2,activated_fraction,recovery_per_rollout,recovery_per_group,"
            "turns_per_pass,verifications,expected_first_turn_accuracy,debug_fix_probability,"
            "signal_groups,retried,recovered,retry_verifications,buffered,evicted,fast_0,fast_1.0,"
            "fast_1.2,fast_1.5,fast_2.0,geomean_speedup,kept_geomean_speedup,optimised,"
            "optimise_turns,optimise_kept,optimise_broken,expected_speedup,"
            "optimise_improve_probability,optimise_break_probability,profiled_turns,"
            "missing_profiles,structural_term,clean_coalescing,clean_bank_conflicts,"
            "clean_occupancy,clean_parallelism,clean_dram_traffic,expected_clean_coalescing,"
            "expected_clean_bank_conflicts,expected_clean_occupancy,expected_clean_parallelism,"
            "expected_clean_dram_traffic,scored_passes,capped_by_bound,capped_by_gap");
  expect_pinned_row(
      csv[2],
      "2,0.40625,0.65625,0.75,0.470588,1,2.33333,52,0.357639,0.356796,8,1,1,8,0,0,0.65625,"
      "0.40625,0.3125,0.0625,0.03125,1.06827,1.08416,2,3,3,0,0.900845,0.3,0.2,21,3,"
      "0.0143712,0.340627,0.397761,0.417599,0.553199,0.320117,0.47481,0.409656,0.470158,"
      "0.51564,0.629629,14,1,0",
      ',');
}

}  // namespace
