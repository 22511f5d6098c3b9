// `leap simulate` with speed (issue 31): the gate's optimisation turns and the speed rewards, as a
// researcher runs them before spending GPU time. Real `leap` processes, real config and CSV files.
#include "e2e_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
