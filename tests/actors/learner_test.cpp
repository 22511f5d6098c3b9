// What the learner trains on: a scored group as token sequences (the record learner's file and the
// LibTorch learner's batch), probes cut to their first turn, validation never trained on.
#include "actors/learner.hpp"

#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace leap::actors {
namespace {

turn_record turn(std::vector<token_id> in, std::vector<token_id> out, std::uint64_t version) {
  turn_record t;
  t.input_tokens = std::move(in);
  t.output_tokens = std::move(out);
  t.output_logprobs.assign(t.output_tokens.size(), -0.5f);
  t.weight_version = version;
  return t;
}

group_record two_turn_group(bool probe) {
  group_record g;
  g.run_id = "run";
  g.step = 4;
  g.group_index = 2;
  g.task_id = "task";
  g.max_turns = 2;
  g.probe = probe;
  rollout_record r;
  r.index = 0;
  r.turns = {turn({1, 2}, {3, 4}, 6), turn({5}, {6}, 7)};
  r.advantage = 1.0;
  g.rollouts = {r};
  return g;
}

TEST(TrainingSequencesTest, FlattensWithPerTurnDiscountedAdvantages) {
  auto seqs = training_sequences(two_turn_group(false), 0.5);
  ASSERT_TRUE(seqs.ok()) << seqs.err().message;
  ASSERT_EQ(seqs->size(), 1u);
  const auto& s = seqs->front();
  EXPECT_EQ(s.tokens, (std::vector<token_id>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(s.mask, (std::vector<std::uint8_t>{0, 0, 1, 1, 0, 1}));
  EXPECT_EQ(s.behaviour_logprobs, (std::vector<float>{0, 0, -0.5f, -0.5f, 0, -0.5f}));
  // T = 2, A = 1 >= 0: turn 0 gets gamma^1 * A, turn 1 gets A.
  EXPECT_EQ(s.advantages, (std::vector<float>{0, 0, 0.5f, 0.5f, 0, 1.0f}));
  EXPECT_EQ(s.oldest_weight_version, 6u);
  // Each sampled token carries its own turn's weights (learner.offpolicy.max_staleness); the
  // input tokens before a turn, those it started with.
  EXPECT_EQ(s.token_weight_versions, (std::vector<std::uint64_t>{6, 6, 6, 6, 7, 7}));
  EXPECT_EQ(s.step, 4u);
  EXPECT_EQ(s.group, 2u);
}

// A weight update in flight (policy.inflight_updates): the turn's first three tokens were sampled
// with version 6, the rest with 7, and each token says so; a turn without segments is one version.
TEST(TrainingSequencesTest, TokensSampledAcrossAnUpdateInFlightCarryTheirOwnVersion) {
  auto g = two_turn_group(false);
  auto& first = g.rollouts[0].turns[0];
  first = turn({1, 2}, {3, 4, 5, 6, 7}, 6);
  first.weight_segments = {{0, 6}, {3, 7}};
  g.rollouts[0].turns[1] = turn({8}, {9, 10}, 7);
  g.rollouts[0].turns[1].weight_segments = {{0, 7}, {1, 8}};
  auto seqs = training_sequences(g, 0.5);
  ASSERT_TRUE(seqs.ok()) << seqs.err().message;
  ASSERT_EQ(seqs->size(), 1u);
  const auto& s = seqs->front();
  EXPECT_EQ(s.tokens, (std::vector<token_id>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(s.token_weight_versions, (std::vector<std::uint64_t>{6, 6, 6, 6, 6, 7, 7, 7, 7, 8}));
  EXPECT_EQ(s.oldest_weight_version, 6u);
}

// Turns after a first-turn pass are optimisation turns (issue 31): measured, not trained on.
TEST(TrainingSequencesTest, OptimisationTurnsAfterAFirstTurnPassAreNotTrainedOn) {
  auto g = two_turn_group(false);
  g.rollouts[0].turns[0].passed = true;
  g.rollouts[0].turns[0].verdict = verdict_category::pass;
  auto seqs = training_sequences(g, 0.5);
  ASSERT_TRUE(seqs.ok()) << seqs.err().message;
  EXPECT_EQ(seqs->front().tokens, (std::vector<token_id>{1, 2, 3, 4}));
  EXPECT_EQ(seqs->front().advantages, (std::vector<float>{0, 0, 1.0f, 1.0f}));
}

// ---- gate.optimise.train (issue 31) ----------------------------------------------------------

turn_record opt_train_verdict(turn_record t, bool passed) {
  t.passed = passed;
  t.verdict = passed ? verdict_category::pass : verdict_category::wrong_answer;
  return t;
}

// Rollout 0 passed, sped up in optimisation turn 1 (the kept turn), then broke the kernel in turn
// 2; rollout 1 failed its first turn (advantage -2, the group's failure advantage).
group_record opt_train_group(bool probe) {
  group_record g = two_turn_group(probe);
  g.max_turns = 3;
  rollout_record& r = g.rollouts[0];
  r.turns = {opt_train_verdict(turn({1, 2}, {3, 4}, 6), true),
             opt_train_verdict(turn({5}, {6}, 7), true),
             opt_train_verdict(turn({7}, {8, 9}, 8), false)};
  r.outcome.passed_at_turn = 1;
  r.advantage = 1.0;
  rollout_record failed;
  failed.index = 1;
  failed.turns = {opt_train_verdict(turn({1, 2}, {10}, 6), false)};
  failed.outcome.passed_at_turn = 0;
  failed.advantage = -2.0;
  g.rollouts.push_back(failed);
  return g;
}

// Trained on: the rollout's sequence holds its turns up to the kept one, discounted per turn (the
// kept turn gets A, the first gamma * A); the broken turn follows as a sequence of its own, its
// context untrained and its tokens at the failure's advantage.
TEST(TrainingSequencesTest, TrainedOptimisationTurnsKeepTheLastPassAndSplitOffTheBrokenTurn) {
  auto seqs = training_sequences(opt_train_group(false), 0.5, true);
  ASSERT_TRUE(seqs.ok()) << seqs.err().message;
  ASSERT_EQ(seqs->size(), 3u);
  const auto& kept = (*seqs)[0];
  EXPECT_EQ(kept.rollout, 0u);
  EXPECT_EQ(kept.tokens, (std::vector<token_id>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(kept.mask, (std::vector<std::uint8_t>{0, 0, 1, 1, 0, 1}));
  EXPECT_EQ(kept.advantages, (std::vector<float>{0, 0, 0.5f, 0.5f, 0, 1.0f}));
  EXPECT_EQ(kept.token_weight_versions, (std::vector<std::uint64_t>{6, 6, 6, 6, 7, 7}));

  const auto& broken = (*seqs)[1];
  EXPECT_EQ(broken.rollout, 0u);
  EXPECT_EQ(broken.step, 4u);
  EXPECT_EQ(broken.group, 2u);
  EXPECT_EQ(broken.task_id, "task");
  EXPECT_EQ(broken.tokens, (std::vector<token_id>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(broken.mask, (std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(broken.behaviour_logprobs, (std::vector<float>{0, 0, 0, 0, 0, 0, 0, -0.5f, -0.5f}));
  EXPECT_EQ(broken.advantages, (std::vector<float>{0, 0, 0, 0, 0, 0, 0, -2.0f, -2.0f}));
  EXPECT_EQ(broken.token_weight_versions, (std::vector<std::uint64_t>{0, 0, 0, 0, 0, 0, 0, 8, 8}));
  EXPECT_EQ(broken.oldest_weight_version, 8u);

  EXPECT_EQ((*seqs)[2].rollout, 1u);
  EXPECT_EQ((*seqs)[2].advantages, (std::vector<float>{0, 0, -2.0f}));

  // Off (the default), the optimisation turns are cut off and nothing is split off.
  auto off = training_sequences(opt_train_group(false), 0.5);
  ASSERT_TRUE(off.ok());
  ASSERT_EQ(off->size(), 2u);
  EXPECT_EQ(off->front().tokens, (std::vector<token_id>{1, 2, 3, 4}));
}

// A negative advantage reaches every kept turn undiscounted (beta = 1, as for debug turns); a group
// without a failure and whose lowest advantage is 0 gives a broken turn nothing, so it trains no
// sequence; a probe stays first-turn only.
TEST(TrainingSequencesTest, TrainedOptimisationTurnsNegativeNoSignalAndProbes) {
  auto slow = opt_train_group(false);
  slow.rollouts[0].advantage = -1.0;
  slow.rollouts[1].advantage = -3.0;
  auto seqs = training_sequences(slow, 0.5, true);
  ASSERT_TRUE(seqs.ok()) << seqs.err().message;
  ASSERT_EQ(seqs->size(), 3u);
  EXPECT_EQ(seqs->front().advantages, (std::vector<float>{0, 0, -1.0f, -1.0f, 0, -1.0f}));
  EXPECT_EQ((*seqs)[1].advantages.back(), -3.0f);

  auto tied = opt_train_group(false);
  tied.rollouts.pop_back();
  tied.rollouts[0].advantage = 0.0;
  auto no_signal = training_sequences(tied, 0.5, true);
  ASSERT_TRUE(no_signal.ok());
  ASSERT_EQ(no_signal->size(), 1u);
  EXPECT_EQ(no_signal->front().tokens.size(), 6u);

  auto probe = training_sequences(opt_train_group(true), 0.5, true);
  ASSERT_TRUE(probe.ok());
  ASSERT_EQ(probe->size(), 2u);
  EXPECT_EQ(probe->front().tokens, (std::vector<token_id>{1, 2, 3, 4}));
}

TEST(TrainingSequencesTest, ProbesTrainOnTheFirstTurnAndValidationNotAtAll) {
  auto probe = training_sequences(two_turn_group(true), 0.5);
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->front().tokens, (std::vector<token_id>{1, 2, 3, 4}));
  EXPECT_EQ(probe->front().advantages, (std::vector<float>{0, 0, 1.0f, 1.0f}));

  auto validation = two_turn_group(false);
  validation.split = split_kind::validation;
  auto none = training_sequences(validation, 0.5);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  auto broken = two_turn_group(false);
  broken.rollouts[0].turns[1].output_logprobs.clear();
  auto failed = training_sequences(broken, 0.5);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.err().message.find("group 2 of step 4"), std::string::npos)
      << failed.err().message;
}

TEST(RecordLearnerTest, WritesOneFilePerStepAndCountsVersions) {
  testing::temp_dir dir;
  auto learner = make_record_learner(dir.path() / "batches", 3);
  auto seqs = training_sequences(two_turn_group(false), 0.9);
  ASSERT_TRUE(seqs.ok());
  auto step = learner->train(4, *seqs);
  ASSERT_TRUE(step.ok()) << step.err().message;
  EXPECT_EQ(step->weight_version, 4u);
  EXPECT_TRUE(step->weights_path.empty());
  const auto path = record_batch_path(dir.path() / "batches", 4);
  EXPECT_EQ(path.filename().string(), "step_00000004.jsonl");
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto json = nlohmann::json::parse(line);
  EXPECT_EQ(json["tokens"].get<std::vector<int>>(), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(json["mask"].get<std::vector<int>>(), (std::vector<int>{0, 0, 1, 1, 0, 1}));
  EXPECT_EQ(json["advantages"].size(), 6u);
  EXPECT_EQ(json["logprobs"].size(), 6u);
  EXPECT_EQ(json["task_id"], "task");
  EXPECT_FALSE(std::getline(in, line));
  // Written whole, then renamed into place: no temporary is left beside it.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "batches")) {
    files.push_back(e.path().filename().string());
  }
  EXPECT_EQ(files, (std::vector<std::string>{"step_00000004.jsonl"}));

  auto empty = learner->train(5, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->weight_version, 5u);
  EXPECT_TRUE(std::filesystem::exists(record_batch_path(dir.path() / "batches", 5)));
}

TEST(RecordLearnerTest, AnUnwritableFolderIsAnError) {
  testing::temp_dir dir;
  const auto blocker = dir.path() / "file";
  std::ofstream(blocker) << "x";
  auto learner = make_record_learner(blocker / "batches");
  auto step = learner->train(0, {});
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.err().message.find("batches"), std::string::npos) << step.err().message;
}

}  // namespace
}  // namespace leap::actors
