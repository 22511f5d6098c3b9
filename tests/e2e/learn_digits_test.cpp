// The learning quickstart's pipeline, shortened: `leap run` on the digits toy family writes its own
// tiny model (learner.init_preset), samples it through the embedded LibTorch server, judges the
// answers in the sandbox with feedback for the debug turns, trains with the LibTorch learner and
// syncs the weights every step; `leap replay` then shows the learner's per-step metrics. That the
// model really learns is shown by the full quickstart (README, "A loop that learns"), which takes
// minutes: too long for a test. Every wait is bounded.
#include "e2e_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using leap::e2e::read_csv;
using leap::e2e::run_leap;

class digits_dir : public leap::e2e::scratch_dir {
 public:
  digits_dir() : scratch_dir("digits", {}) {}
  [[nodiscard]] std::string path(const std::string& name) const { return (root_ / name).string(); }

  // configs/learn_digits.yaml with its run folder here and three small steps.
  std::string write_config() const {
    std::ifstream in(fs::path(LEAP_SOURCE_DIR) / "configs" / "learn_digits.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    const auto replace = [&yaml](const std::string& from, const std::string& to) {
      const auto at = yaml.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      yaml.replace(at, from.size(), to);
    };
    replace("run_dir: runs/learn_digits", "run_dir: " + path("run"));
    replace("model_path: runs/learn_digits/model", "model_path: " + path("run/model"));
    replace("model: runs/learn_digits/model", "model: " + path("run/model"));
    replace("train: sandbox/toy/digit_sum.jsonl",
            "train: " + (fs::path(LEAP_SOURCE_DIR) / "sandbox/toy/digit_sum.jsonl").string());
    const auto steps = yaml.find("  steps: ");
    EXPECT_NE(steps, std::string::npos);
    yaml.replace(steps, yaml.find('\n', steps) - steps, "  steps: 3");
    replace("group_size: 32", "group_size: 4");
    std::ofstream(root_ / "config.yaml") << yaml;
    return (root_ / "config.yaml").string();
  }
};

TEST(LearnDigitsE2E, TheQuickstartsPipelineTrainsItsOwnModelAndReplayShowsTheLearner) {
  digits_dir dir;
  const auto config = dir.write_config();
  const auto run = run_leap({"run", config}, std::chrono::seconds(300));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("wrote a random tiny byte-level model"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("step 3/3"), std::string::npos) << run.output;
  EXPECT_TRUE(fs::exists(dir.root() / "run" / "model" / "config.json"));
  EXPECT_TRUE(fs::exists(dir.root() / "run" / "checkpoints" / "step-00000003" / "config.json"));

  const auto replay = run_leap({"replay", dir.path("run")}, std::chrono::seconds(60));
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  EXPECT_NE(replay.output.find("learner, per step"), std::string::npos) << replay.output;
  const auto learner = read_csv(dir.root() / "run" / "replay" / "learner.csv");
  ASSERT_EQ(learner.size(), 3u);
  for (const auto& row : learner) {
    SCOPED_TRACE("step " + row.at("step"));
    EXPECT_GT(std::stod(row.at("learner.trained_tokens")), 0);
    EXPECT_GT(std::stod(row.at("learner.entropy")), 0);
  }

  // Every answer was judged by the digits rule, and wrong ones got the sums as feedback.
  const auto exported =
      run_leap({"export", dir.path("run"), "--format", "jsonl", "--out", dir.path("groups.jsonl")},
               std::chrono::seconds(60));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  std::ifstream groups(dir.root() / "groups.jsonl");
  int turns = 0;
  int wrong_with_sums = 0;
  for (std::string line; std::getline(groups, line);) {
    const auto group = nlohmann::json::parse(line);
    for (const auto& rollout : group.at("rollouts")) {
      for (const auto& t : rollout.at("turns")) {
        ++turns;
        const auto verdict = t.at("verdict").get<std::string>();
        EXPECT_TRUE(verdict == "pass" || verdict == "wrong_answer" || verdict == "format")
            << verdict;
        const auto feedback = t.at("feedback").get<std::string>();
        if (verdict == "wrong_answer") {
          EXPECT_EQ(feedback.rfind("Your digits sum to ", 0), 0U) << feedback;
          ++wrong_with_sums;
        }
      }
    }
  }
  EXPECT_GE(turns, 3 * 9 * 4);  // 3 steps x 9 tasks x 4 first turns, and debug turns
  EXPECT_GT(wrong_with_sums, 0);
  // A second run of the same config resumes: the model is not written again.
  const auto again = run_leap({"run", config}, std::chrono::seconds(120));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("wrote a random"), std::string::npos) << again.output;
}

}  // namespace
