// The structural reward terms (reward.structural): closed-form checks of the score, its bounds,
// the rank-preserving cap, and score_group's use of the paid turn's profile.
#include "orchestrator/group_flow.hpp"
#include "orchestrator/reward.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap {
namespace {

kernel_profile struct_kernel(double duration_ns, std::vector<std::string> findings) {
  return {"k", duration_ns, "memory-bound", std::move(findings)};
}

// Weights: coalescing 0.04, occupancy 0.02, the others 0; bound 0.1.
structural_config struct_config() {
  structural_config c;
  c.weights = {0.04, 0.0, 0.02, 0.0, 0.0};
  c.bound = 0.1;
  return c;
}

TEST(StructuralScore, PaysEachFamilyForTheShareOfKernelTimeCleanOfIt) {
  // 300 ns uncoalesced, 100 ns clean: coalescing clean on 1/4 of the time; occupancy on all.
  const std::vector<kernel_profile> kernels = {struct_kernel(300, {"uncoalesced_global"}),
                                               struct_kernel(100, {})};
  EXPECT_NEAR(structural_score(struct_config(), kernels), 0.04 * 0.25 + 0.02 * 1.0, 1e-12);
  // register_pressure belongs to occupancy: the slow kernel loses that family too.
  const std::vector<kernel_profile> both = {
      struct_kernel(300, {"uncoalesced_global", "register_pressure"}), struct_kernel(100, {})};
  EXPECT_NEAR(structural_score(struct_config(), both), 0.04 * 0.25 + 0.02 * 0.25, 1e-12);
  // A finding of a family with weight 0 costs nothing.
  const std::vector<kernel_profile> other = {struct_kernel(100, {"bank_conflicts", "warp_stalls"})};
  EXPECT_NEAR(structural_score(struct_config(), other), 0.06, 1e-12);
}

TEST(StructuralScore, EqualSharesWhenNoDurationIsKnown) {
  const std::vector<kernel_profile> kernels = {struct_kernel(0, {"low_occupancy"}),
                                               struct_kernel(0, {})};
  EXPECT_NEAR(structural_score(struct_config(), kernels), 0.04 + 0.02 * 0.5, 1e-12);
}

TEST(StructuralScore, NeverExceedsTheBound) {
  structural_config c = struct_config();
  c.weights = {1.0, 1.0, 1.0, 1.0, 1.0};
  c.bound = 0.1;
  const std::vector<kernel_profile> clean = {struct_kernel(100, {})};
  EXPECT_NEAR(structural_score(c, clean), 0.1, 1e-12);
}

TEST(StructuralScore, OffOrWithoutKernelsIsZero) {
  const std::vector<kernel_profile> clean = {struct_kernel(100, {})};
  EXPECT_EQ(structural_score(structural_config{}, clean), 0.0);  // all weights 0: off
  EXPECT_EQ(structural_score(struct_config(), {}), 0.0);         // a failed profile
}

// The fall-back profile (kernel events from inside the candidate's process, no counters) would
// look clean to every family; it pays nothing, as no profile does.
TEST(StructuralScore, AnEventsProfilePaysNothing) {
  turn_profile_record p;
  p.kernels = {struct_kernel(100, {})};
  EXPECT_NEAR(paid_structural_score(struct_config(), p), 0.06, 1e-12);
  p.source = "events";
  EXPECT_EQ(paid_structural_score(struct_config(), p), 0.0);
  p.source = "";  // any source but ncu
  EXPECT_EQ(paid_structural_score(struct_config(), p), 0.0);
}

TEST(StructuralTerms, FailuresAndMissingScoresGainNothing) {
  const std::vector<rollout_outcome> outcomes = {{1, 1}, {0, 2}, {1, 1}};
  const std::vector<double> rewards = {1.0, 0.0, 1.0};
  const auto terms = structural_terms(outcomes, rewards, std::vector<double>{0.05, 0.05});
  EXPECT_NEAR(terms[0], 0.05, 1e-12);
  EXPECT_EQ(terms[1], 0.0);  // a failure, whatever its score
  EXPECT_EQ(terms[2], 0.0);  // no score: no profile
}

// Rank, G = 4, M = 2: a pass at turn 2 earns 1/3, one at turn 1 earns 1. A large structural score
// lifts the turn-2 pass at most half-way to the turn-1 pass: 1/3 + (1 - 1/3) / 2 = 2/3.
TEST(StructuralTerms, NeverLiftARolloutToTheNextReward) {
  const std::vector<rollout_outcome> outcomes = {{1, 1}, {2, 2}, {0, 2}, {0, 2}};
  const reward_config rank{};
  const auto rewards = compute_rewards(rank, outcomes, 2);
  const std::vector<double> scores = {0.0, 5.0, 0.0, 0.0};
  const auto terms = structural_terms(outcomes, rewards, scores);
  EXPECT_NEAR(terms[1], (1.0 - 1.0 / 3.0) / 2.0, 1e-12);
  EXPECT_LT(rewards[1] + terms[1], rewards[0] + terms[0]);
  // The top rollout has no next reward: only its score (bounded upstream) limits it.
  const auto top = structural_terms(outcomes, rewards, std::vector<double>{0.3});
  EXPECT_NEAR(top[0], 0.3, 1e-12);
}

TEST(StructuralTerms, SplitTiesButKeepEveryOrder) {
  // Binary with a speed bonus: the passes' rewards differ by speed; every pair keeps its order.
  const std::vector<rollout_outcome> outcomes = {{1, 1}, {1, 1}, {1, 1}, {0, 1}};
  const std::vector<double> rewards = {1.0, 1.0, 1.02, 0.0};
  const std::vector<double> scores = {0.1, 0.0, 0.1, 0.0};
  const auto terms = structural_terms(outcomes, rewards, scores);
  EXPECT_GT(rewards[0] + terms[0], rewards[1] + terms[1]);  // a tie split
  EXPECT_LT(rewards[0] + terms[0], rewards[2] + terms[2]);  // the faster pass stays ahead
  EXPECT_NEAR(terms[0], 0.01, 1e-12);                       // half the 0.02 gap
  EXPECT_NEAR(terms[2], 0.1, 1e-12);
}

turn_record struct_turn(bool passed) {
  turn_record t;
  t.passed = passed;
  t.verdict = passed ? verdict_category::pass : verdict_category::wrong_answer;
  return t;
}

turn_profile_record struct_profile(std::uint32_t rollout, std::uint32_t turn,
                                   std::vector<kernel_profile> kernels) {
  turn_profile_record p;
  p.turn.rollout = rollout;
  p.turn.turn = turn;
  p.kernels = std::move(kernels);
  return p;
}

// Binary, G = 3: two first-turn passes and a failure. Only the pass whose kernel is clean gains;
// the profile of the failure's turn and a profile of a turn that is not paid count for nothing.
TEST(ScoreGroupStructural, AddsThePaidTurnsTermToThePass) {
  group_record g;
  g.max_turns = 2;
  g.gate = gate_decision::open;
  g.rollouts.resize(3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    g.rollouts[i].index = i;
  }
  g.rollouts[0].turns = {struct_turn(true)};
  g.rollouts[1].turns = {struct_turn(true)};
  g.rollouts[2].turns = {struct_turn(false), struct_turn(false)};
  reward_config reward;
  reward.kind = reward_kind::binary;
  reward.structural = struct_config();
  advantage_config raw;
  raw.kind = advantage_kind::none;
  const std::vector<turn_profile_record> profiles = {
      struct_profile(0, 0, {struct_kernel(100, {})}),
      struct_profile(1, 0, {struct_kernel(100, {"uncoalesced_global", "low_occupancy"})}),
      struct_profile(2, 1, {struct_kernel(100, {})}),
  };
  score_group(g, reward, raw, false, profiles);
  EXPECT_NEAR(g.rollouts[0].reward, 1.06, 1e-12);
  EXPECT_NEAR(g.rollouts[1].reward, 1.0, 1e-12);
  EXPECT_NEAR(g.rollouts[2].reward, 0.0, 1e-12);
  // Without profiles (none arrived in time) the rewards are the kind's own.
  score_group(g, reward, raw, false, {});
  EXPECT_NEAR(g.rollouts[0].reward, 1.0, 1e-12);
  // The same clean kernel measured by the events fall-back: no term.
  auto events = profiles;
  events[0].source = "events";
  score_group(g, reward, raw, false, events);
  EXPECT_NEAR(g.rollouts[0].reward, 1.0, 1e-12);
  // Off, profiles change nothing.
  reward.structural = {};
  score_group(g, reward, raw, false, profiles);
  EXPECT_NEAR(g.rollouts[0].reward, 1.0, 1e-12);
}

// A debug-turn pass is paid from its passing turn's profile (turn index 1), not its first turn's.
TEST(ScoreGroupStructural, ReadsTheProfileOfThePassingTurn) {
  group_record g;
  g.max_turns = 2;
  g.gate = gate_decision::open;
  g.rollouts.resize(2);
  g.rollouts[0].index = 0;
  g.rollouts[1].index = 1;
  g.rollouts[0].turns = {struct_turn(false), struct_turn(true)};
  g.rollouts[1].turns = {struct_turn(false), struct_turn(false)};
  reward_config reward;
  reward.kind = reward_kind::binary;
  reward.structural = struct_config();
  advantage_config raw;
  raw.kind = advantage_kind::none;
  score_group(g, reward, raw, false, std::vector{struct_profile(0, 1, {struct_kernel(100, {})})});
  EXPECT_NEAR(g.rollouts[0].reward, 1.06, 1e-12);
  score_group(g, reward, raw, false, std::vector{struct_profile(0, 0, {struct_kernel(100, {})})});
  EXPECT_NEAR(g.rollouts[0].reward, 1.0, 1e-12);
}

}  // namespace
}  // namespace leap
