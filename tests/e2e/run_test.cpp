// `leap run` end to end on the CPU: the real binary with the embedded scripted policy server, the
// real sandbox compiling and running cpp and python candidates, the real RocksDB store. A few steps
// run, `leap replay` recomputes the same numbers from the store, and a run killed with SIGKILL in
// the middle of a step resumes without losing or redoing a completed group. Every wait is bounded.
#include "e2e_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::clock_type;
using leap::e2e::leap_process;
using leap::e2e::read_csv;
using leap::e2e::run_leap;

// A private folder with a small suite copied from the project's (two cpp and two python tasks, so
// that the test is bounded), removed at the end.
class e2e_dir : public leap::e2e::scratch_dir {
 public:
  e2e_dir()
      : scratch_dir("run",
                    {"cpp/axpby", "cpp/prefix_sum_int", "python/flatten", "python/two_sum"}) {}

  // A config for this folder; `steps` and `batch` vary per test, `stream` asks for SSE responses.
  // `log_level` empty keeps the default.
  std::string write_config(int steps, int batch, bool stream = false,
                           const std::string& log_level = "") const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: e2e\n  seed: 5\n  run_dir: " << (root_ / "run").string()
         << "\n  steps: " << steps << "\n"
         << (log_level.empty() ? "" : "  log_level: " + log_level + "\n")
         << "data:\n  train: " << (root_ / "suite").string()
         << "\n  validation_fraction: 0.25\n  batch_size: " << batch << "\n"
         << "rollout:\n  group_size: 4\n  max_turns: 2\n  validation:\n    every: 2\n    n: 2\n"
         << "gate:\n  policy: dcp\n  unit: fraction\n  tau_min: 0.25\n  tau_max: 1.0\n"
         << "learner:\n  kind: record\n"
         << "policy:\n  flavour: embedded\n  max_in_flight: 8\n  stream: "
         << (stream ? "true" : "false") << "\n"
         << "verifier:\n  compile_workers: 2\n  gpu_slots: 0\n";
    const fs::path path = root_ / "config.yaml";
    std::ofstream(path) << yaml.str();
    return path.string();
  }
};

// The progress lines of a run: step (1-based) -> pass@m values and activated count.
struct live_step {
  std::vector<double> accuracy;
  int groups = 0;
  int activated = 0;
};
std::map<int, live_step> parse_progress(const std::string& output) {
  std::map<int, live_step> steps;
  const std::regex line(
      R"(step (\d+)/\d+ \| groups (\d+)[^|]*\| activated (\d+)[^|]*\| ([^|]*)\|)");
  const std::regex acc(R"(@\d+ ([0-9.]+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    live_step s;
    s.groups = std::stoi((*it)[2]);
    s.activated = std::stoi((*it)[3]);
    const std::string pass = (*it)[4];
    for (std::sregex_iterator a(pass.begin(), pass.end(), acc); a != end; ++a) {
      s.accuracy.push_back(std::stod((*a)[1]));
    }
    steps[std::stoi((*it)[1])] = s;
  }
  return steps;
}

TEST(LeapRunE2E, StepsAreStoredAndReplayAgreesWithTheLiveNumbers) {
  e2e_dir dir;
  const auto config = dir.write_config(3, 2);
  const auto run = run_leap({"run", config}, std::chrono::seconds(400));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto live = parse_progress(run.output);
  ASSERT_EQ(live.size(), 3u) << run.output;
  EXPECT_NE(run.output.find("validation after step 2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("run 'e2e' finished"), std::string::npos) << run.output;
  // The record learner wrote one batch per step.
  for (int s = 0; s < 3; ++s) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d.jsonl", s);
    EXPECT_TRUE(fs::exists(dir.root() / "run" / "batches" / name)) << name;
  }

  const auto replay = run_leap({"replay", (dir.root() / "run").string(), "--gate", "full"},
                               std::chrono::seconds(60));
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  const auto rows = read_csv(dir.root() / "run" / "replay" / "steps.csv");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    const int step = std::stoi(row.at("step")) + 1;
    SCOPED_TRACE("step " + std::to_string(step));
    ASSERT_TRUE(live.count(step));
    const auto& l = live.at(step);
    EXPECT_EQ(row.at("completed"), "1");
    EXPECT_EQ(std::stoi(row.at("groups")), l.groups);
    EXPECT_EQ(std::stoi(row.at("groups")), 2);
    EXPECT_EQ(std::stoi(row.at("activated")), l.activated);
    ASSERT_EQ(l.accuracy.size(), 2u);
    for (int m = 1; m <= 2; ++m) {
      EXPECT_NEAR(std::stod(row.at("acc_at_" + std::to_string(m))), l.accuracy[m - 1], 5e-4);
    }
  }
  // Validation ran after step 2 and after the last, on the held-out task with 2 samples.
  const auto validation = read_csv(dir.root() / "run" / "replay" / "validation.csv");
  ASSERT_EQ(validation.size(), 2u);
  EXPECT_EQ(validation[0].at("step"), "1");
  EXPECT_EQ(validation[0].at("rollouts"), "2");
  // The what-if under the full gate opens at least every group the run opened.
  const auto whatif = read_csv(dir.root() / "run" / "replay" / "whatif.csv");
  ASSERT_FALSE(whatif.empty());
  EXPECT_GE(std::stod(whatif.back().at("activated_after")),
            std::stod(whatif.back().at("activated_before")));
}

TEST(LeapRunE2E, ResumesAfterKill9InTheMiddleOfAStep) {
  e2e_dir dir;
  const auto config = dir.write_config(4, 3);
  const std::string run_dir = (dir.root() / "run").string();
  int stored_before = 0;     // groups of the unfinished step(s) stored at the kill
  int completed_before = 0;  // steps completed at the kill
  {
    leap_process first({"run", config});
    ASSERT_TRUE(first.read_until(
        [](const std::string& out) { return out.find("step 1/4 |") != std::string::npos; },
        std::chrono::seconds(300)))
        << first.output();
    // Kill once the store holds part of a step: replay (read-only) shows an incomplete row. The
    // run is stopped (SIGSTOP) while replay looks, so what replay sees is the state the kill
    // meets, and the run moves on only a few milliseconds between looks, so that no step can
    // pass unseen however fast this machine runs it.
    const auto deadline = clock_type::now() + std::chrono::seconds(180);
    bool partial = false;
    while (!partial && clock_type::now() < deadline) {
      first.signal(SIGSTOP);
      const auto look = run_leap({"replay", run_dir, "--out", (dir.root() / "peek").string()},
                                 std::chrono::seconds(60));
      if (look.exit_code == 0) {
        for (const auto& row : read_csv(dir.root() / "peek" / "steps.csv")) {
          partial = partial || (row.at("completed") == "0" && std::stoi(row.at("groups")) > 0);
        }
      }
      if (!partial) {
        first.signal(SIGCONT);
        // Not a wait for a condition: the time the run may move on before the next look (the
        // step of this scan), so that no partial step passes between two looks.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    first.kill9();
    EXPECT_TRUE(partial) << "no partial step was seen before the kill:\n" << first.output();
  }
  const auto at_kill = run_leap({"replay", run_dir, "--out", (dir.root() / "at_kill").string()},
                                std::chrono::seconds(60));
  ASSERT_EQ(at_kill.exit_code, 0) << at_kill.output;
  for (const auto& row : read_csv(dir.root() / "at_kill" / "steps.csv")) {
    if (row.at("completed") == "1") {
      ++completed_before;
    } else {
      stored_before += std::stoi(row.at("groups"));
    }
  }
  ASSERT_GE(completed_before, 1);
  ASSERT_LT(completed_before, 4);

  const auto second = run_leap({"run", config}, std::chrono::seconds(400));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resuming run 'e2e' at step " +
                               std::to_string(completed_before + 1) + "/4"),
            std::string::npos)
      << second.output;
  // Stored groups are read back, never redone; everything else of the run is done once.
  const std::regex totals(
      R"((\d+) steps completed by this process, (\d+) groups run, (\d+) read back)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(second.output, m, totals)) << second.output;
  EXPECT_EQ(std::stoi(m[1]), 4 - completed_before);
  EXPECT_EQ(std::stoi(m[3]), stored_before);
  EXPECT_EQ(std::stoi(m[2]) + std::stoi(m[3]), (4 - completed_before) * 3);

  const auto after = run_leap({"replay", run_dir}, std::chrono::seconds(60));
  ASSERT_EQ(after.exit_code, 0) << after.output;
  const auto rows = read_csv(fs::path(run_dir) / "replay" / "steps.csv");
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("completed"), "1") << "step " << row.at("step");
    EXPECT_EQ(row.at("groups"), "3") << "step " << row.at("step");
  }
  // A third run finds nothing to do and says so.
  const auto third = run_leap({"run", config}, std::chrono::seconds(120));
  EXPECT_EQ(third.exit_code, 0) << third.output;
  EXPECT_NE(third.output.find("0 groups run"), std::string::npos) << third.output;
}

TEST(LeapRunE2E, SigtermStopsCleanlyAndTheRunContinuesLater) {
  e2e_dir dir;
  // Streamed responses (policy.stream): SIGTERM cuts streams in flight, and nothing is lost.
  const auto config = dir.write_config(3, 2, /*stream=*/true);
  {
    leap_process first({"run", config});
    ASSERT_TRUE(first.read_until(
        [](const std::string& out) { return out.find("step 1/3 |") != std::string::npos; },
        std::chrono::seconds(300)))
        << first.output();
    first.signal(SIGTERM);
    const auto code = first.wait(std::chrono::seconds(120));
    ASSERT_TRUE(code.has_value()) << first.output();
    EXPECT_EQ(*code, 130) << first.output();
    EXPECT_NE(first.output().find("SIGTERM: stopping"), std::string::npos) << first.output();
    EXPECT_NE(first.output().find("run 'e2e' interrupted"), std::string::npos) << first.output();
  }
  const auto second = run_leap({"run", config}, std::chrono::seconds(400));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resuming run 'e2e'"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("run 'e2e' finished"), std::string::npos) << second.output;
}

TEST(LeapRunE2E, ResumeRefusesAChangedConfig) {
  e2e_dir dir;
  const auto config = dir.write_config(1, 1);
  ASSERT_EQ(run_leap({"run", config}, std::chrono::seconds(300)).exit_code, 0);
  std::string text;
  {
    std::ifstream in(config);
    std::ostringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  text.replace(text.find("group_size: 4"), 13, "group_size: 6");
  std::ofstream(config) << text;
  const auto again = run_leap({"run", config}, std::chrono::seconds(60));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.output.find("leap run: error:"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("rollout.group_size"), std::string::npos) << again.output;
}

// experiment.log_level decides which lines reach stderr, and each event line names its run.
TEST(LeapRunE2E, LogLevelChoosesTheLinesAndEachNamesItsRun) {
  {
    e2e_dir dir;
    const auto run = run_leap({"run", dir.write_config(1, 1)}, std::chrono::seconds(300));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find(" leap run | info | run e2e | step 1 | started: "), std::string::npos)
        << run.output;
  }
  {
    e2e_dir dir;
    const auto run =
        run_leap({"run", dir.write_config(1, 1, false, "warn")}, std::chrono::seconds(300));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(run.output.find("started: "), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find(" | info | "), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("run 'e2e' finished"), std::string::npos) << run.output;
  }
}

TEST(LeapRunE2E, ErrorsNameTheProblem) {
  e2e_dir dir;
  struct row {
    std::string yaml;
    std::string expected;
  };
  const std::vector<row> rows = {
      {"experiment:\n  run_dir: " + (dir.root() / "r1").string() + "\n", "data.train"},
      {"experiment:\n  run_dir: " + (dir.root() / "r2").string() +
           "\ndata:\n  train: " + (dir.root() / "missing").string() + "\n",
       "no such file"},
      {"data:\n  train: " + (dir.root() / "suite").string() + "\n  task_kinds: [fortran]\n",
       "data.task_kinds"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.expected);
    const fs::path path = dir.root() / "bad.yaml";
    std::ofstream(path) << r.yaml;
    const auto out = run_leap({"run", path.string()}, std::chrono::seconds(60));
    EXPECT_EQ(out.exit_code, 1) << out.output;
    EXPECT_NE(out.output.find("leap run: error:"), std::string::npos) << out.output;
    EXPECT_NE(out.output.find(r.expected), std::string::npos) << out.output;
  }
}

}  // namespace
