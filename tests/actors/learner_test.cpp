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
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".partial"));

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
