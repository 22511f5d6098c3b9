#include "orchestrator/group_flow.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace leap {
namespace {

std::function<gate_decision(int, int)> static_gate(gate_config config) {
  return [config](int n_fail, int g) { return decide(config, n_fail, g); };
}

gate_config counts(gate_policy policy, int lo, int hi) {
  gate_config c;
  c.policy = policy;
  c.unit = threshold_unit::count;
  c.tau_min = lo;
  c.tau_max = hi;
  return c;
}

turn_result pass() { return {.passed = true}; }
turn_result fail() { return {.passed = false}; }
turn_result cut_off() { return {.passed = false, .ended_rollout = true}; }

TEST(GroupFlow, StartRequestsEveryFirstTurnOnce) {
  group_flow flow(4, 3, static_gate(counts(gate_policy::full, 1, 4)));
  EXPECT_EQ(flow.start().request_turn, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(flow.start().request_turn.empty());
}

TEST(GroupFlow, GateDecidesAtTheLastFirstTurnAndOpensDebugForFailuresOnly) {
  group_flow flow(4, 3, static_gate(counts(gate_policy::dcp, 1, 3)));
  (void)flow.start();
  EXPECT_FALSE(flow.on_result(2, fail()).gate);
  EXPECT_FALSE(flow.on_result(0, pass()).gate);
  EXPECT_FALSE(flow.on_result(3, fail()).gate);
  const auto actions = flow.on_result(1, pass());
  ASSERT_TRUE(actions.gate);
  EXPECT_EQ(*actions.gate, gate_decision::open);
  EXPECT_EQ(actions.request_turn, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(flow.rollout_turns(2), 2);
  EXPECT_EQ(flow.rollout_turns(0), 1);
  EXPECT_FALSE(actions.finished);
  EXPECT_EQ(flow.n_fail(), 2);
}

TEST(GroupFlow, DebugTurnsStopAtPassOrAtMaxTurns) {
  group_flow flow(2, 3, static_gate(counts(gate_policy::full, 1, 2)));
  (void)flow.start();
  (void)flow.on_result(0, fail());
  const auto gated = flow.on_result(1, fail());
  EXPECT_EQ(gated.request_turn, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(flow.on_result(0, pass()).request_turn.size(), 0u);  // rollout 0 fixed at turn 2
  EXPECT_EQ(flow.on_result(1, fail()).request_turn, (std::vector<std::uint32_t>{1}));  // turn 3
  EXPECT_EQ(flow.rollout_turns(1), 3);
  const auto last = flow.on_result(1, fail());  // turn 3 of 3 failed: rollout over
  EXPECT_TRUE(last.request_turn.empty());
  EXPECT_TRUE(last.finished);
  EXPECT_TRUE(flow.finished());
}

struct closed_case {
  const char* name;
  gate_config gate;
  std::vector<bool> first_turn_passed;
  gate_decision expected;
};

TEST(GroupFlow, ClosedGroupsFinishAtTheGate) {
  const std::vector<closed_case> cases = {
      {"single-turn grpo",
       counts(gate_policy::none, 0, 4),
       {false, false, true, true},
       gate_decision::closed_no_debug},
      {"all passed",
       counts(gate_policy::full, 1, 4),
       {true, true, true, true},
       gate_decision::closed_no_debug},
      {"too easy",
       counts(gate_policy::dcp, 2, 3),
       {false, true, true, true},
       gate_decision::closed_easy},
      {"hopeless",
       counts(gate_policy::dcp, 1, 3),
       {false, false, false, false},
       gate_decision::closed_hopeless},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    group_flow flow(4, 3, static_gate(c.gate));
    (void)flow.start();
    flow_actions last;
    for (std::uint32_t i = 0; i < 4; ++i) {
      last = flow.on_result(i, c.first_turn_passed[i] ? pass() : fail());
    }
    ASSERT_TRUE(last.gate);
    EXPECT_EQ(*last.gate, c.expected);
    EXPECT_TRUE(last.request_turn.empty());
    EXPECT_TRUE(last.finished);
  }
}

TEST(GroupFlow, ProbeRunsDebugTurnsOfAClosedGroup) {
  group_flow flow(2, 2, static_gate(counts(gate_policy::dcp, 2, 2)), /*probe_if_closed=*/true);
  (void)flow.start();
  (void)flow.on_result(0, pass());
  const auto gated = flow.on_result(1, fail());
  EXPECT_EQ(*gated.gate, gate_decision::closed_easy);
  EXPECT_TRUE(flow.probe());
  EXPECT_EQ(gated.request_turn, (std::vector<std::uint32_t>{1}));
  EXPECT_TRUE(flow.on_result(1, pass()).finished);
}

TEST(GroupFlow, TruncatedAnswersAreNotDebugged) {
  group_flow flow(2, 3, static_gate(counts(gate_policy::full, 1, 2)));
  (void)flow.start();
  (void)flow.on_result(0, cut_off());
  const auto gated = flow.on_result(1, fail());
  EXPECT_EQ(gated.request_turn, (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(flow.n_fail(), 2);
}

TEST(GroupFlow, DuplicateAndUnknownResultsAreIgnored) {
  group_flow flow(2, 2, static_gate(counts(gate_policy::full, 1, 2)));
  (void)flow.start();
  (void)flow.on_result(0, fail());
  const auto dup = flow.on_result(0, fail());
  EXPECT_TRUE(dup.request_turn.empty());
  EXPECT_FALSE(dup.gate);
  EXPECT_TRUE(flow.on_result(7, pass()).request_turn.empty());
  EXPECT_EQ(flow.n_fail(), 1);
  EXPECT_TRUE(flow.on_result(1, pass()).gate.has_value());
}

TEST(GroupFlow, SingleTurnConfigFinishesWithoutDebugEvenWhenOpen) {
  group_flow flow(2, 1, static_gate(counts(gate_policy::full, 1, 2)));
  (void)flow.start();
  (void)flow.on_result(0, fail());
  const auto last = flow.on_result(1, fail());
  EXPECT_TRUE(last.request_turn.empty());
  EXPECT_TRUE(last.finished);
}

turn_record turn(bool passed, finish_reason finish = finish_reason::stop) {
  turn_record t;
  t.passed = passed;
  t.verdict = passed ? verdict_category::pass : verdict_category::wrong_answer;
  t.finish = finish;
  return t;
}

TEST(ScoreGroup, RankRewardsFromTurnsMatchThePaperForMTwo) {
  // N1 = 1 (pass at turn 1), N2 = 1 (pass at turn 2), N3 = 2 (failures); G = 4.
  group_record g;
  g.max_turns = 2;
  g.gate = gate_decision::open;
  g.rollouts.resize(4);
  g.rollouts[0].turns = {turn(true)};
  g.rollouts[1].turns = {turn(false), turn(true)};
  g.rollouts[2].turns = {turn(false), turn(false)};
  g.rollouts[3].turns = {turn(false), turn(false, finish_reason::length)};
  advantage_config none;
  none.kind = advantage_kind::none;
  score_group(g, reward_config{}, none);
  EXPECT_DOUBLE_EQ(g.rollouts[0].reward, (1.0 + 2.0) / 3.0);   // (N2 + N3) / (G - 1)
  EXPECT_DOUBLE_EQ(g.rollouts[1].reward, (2.0 - 1.0) / 3.0);   // (N3 - N1) / (G - 1)
  EXPECT_DOUBLE_EQ(g.rollouts[2].reward, -(1.0 + 1.0) / 3.0);  // -(N1 + N2) / (G - 1)
  EXPECT_EQ(g.rollouts[0].rank, 2);
  EXPECT_EQ(g.rollouts[1].rank, 1);
  EXPECT_EQ(g.rollouts[1].outcome.passed_at_turn, 2);
  EXPECT_EQ(g.rollouts[1].outcome.generated_turns, 2);
  EXPECT_TRUE(g.rollouts[3].truncated);
  EXPECT_FALSE(g.rollouts[2].truncated);
  EXPECT_DOUBLE_EQ(g.rollouts[0].advantage, g.rollouts[0].reward);
}

TEST(ScoreGroup, ProbeGroupsTrainOnTheFirstTurnOnly) {
  group_record g;
  g.max_turns = 2;
  g.probe = true;
  g.gate = gate_decision::closed_easy;
  g.rollouts.resize(2);
  g.rollouts[0].turns = {turn(true)};
  g.rollouts[1].turns = {turn(false), turn(true)};
  score_group(g, reward_config{}, advantage_config{});
  EXPECT_EQ(g.rollouts[1].outcome.passed_at_turn, 0);
  EXPECT_EQ(g.rollouts[1].outcome.generated_turns, 1);
  EXPECT_DOUBLE_EQ(g.rollouts[0].reward, 1.0);
  EXPECT_DOUBLE_EQ(g.rollouts[1].reward, -1.0);
  EXPECT_GT(g.rollouts[0].advantage, 0.0);
  EXPECT_LT(g.rollouts[1].advantage, 0.0);
}

// The turns' speedups reach the rewards: rank_speed orders the turn-1 passes by the speedup of the
// turn that passed (not of an earlier failed one), and an untimed pass ties with the slowest.
TEST(ScoreGroup, RankSpeedReadsTheSpeedupOfThePassingTurn) {
  const auto timed = [](double speedup) {
    turn_record t = turn(true);
    t.speedup = speedup;
    return t;
  };
  group_record g;
  g.max_turns = 2;
  g.gate = gate_decision::open;
  g.rollouts.resize(5);
  g.rollouts[0].turns = {timed(3.0)};
  g.rollouts[1].turns = {timed(1.0)};
  g.rollouts[2].turns = {turn(true)};  // untimed: as the slowest, 1.0
  turn_record failed_but_fast = turn(false);
  failed_but_fast.speedup = 50.0;  // a failure's figure is never read
  g.rollouts[3].turns = {failed_but_fast, timed(0.5)};
  g.rollouts[4].turns = {turn(false), turn(false)};
  advantage_config none;
  none.kind = advantage_kind::none;
  reward_config rank_speed;
  rank_speed.kind = reward_kind::rank_speed;
  score_group(g, rank_speed, none);
  EXPECT_DOUBLE_EQ(g.rollouts[0].reward, 4.0 / 4);        // beats all
  EXPECT_DOUBLE_EQ(g.rollouts[1].reward, (2.0 - 1) / 4);  // ties the untimed one
  EXPECT_DOUBLE_EQ(g.rollouts[2].reward, (2.0 - 1) / 4);  // the same
  EXPECT_DOUBLE_EQ(g.rollouts[3].reward, (1.0 - 3) / 4);  // only the lone turn-2 pass
  EXPECT_DOUBLE_EQ(g.rollouts[4].reward, -4.0 / 4);
  // rank alone would tie the three turn-1 passes.
  score_group(g, reward_config{}, none);
  EXPECT_DOUBLE_EQ(g.rollouts[0].reward, g.rollouts[1].reward);
}

// The noise the verdicts stated (stored with each turn) is rank_speed's margin: 1.30x and 1.00x
// are told apart under the default speed_tie (5%), and tie when each figure is +/-20% noisy.
TEST(ScoreGroup, RankSpeedTiesSpeedupsWithinTheirStoredNoise) {
  const auto timed = [](double speedup, double noise) {
    turn_record t = turn(true);
    t.speedup = speedup;
    t.speedup_noise = noise;
    return t;
  };
  advantage_config none;
  none.kind = advantage_kind::none;
  reward_config rank_speed;
  rank_speed.kind = reward_kind::rank_speed;
  for (const double noise : {-1.0, 0.2}) {
    SCOPED_TRACE("noise " + std::to_string(noise));
    group_record g;
    g.max_turns = 1;
    g.gate = gate_decision::closed_no_debug;
    g.rollouts.resize(3);
    g.rollouts[0].turns = {timed(1.3, noise)};
    g.rollouts[1].turns = {timed(1.0, noise)};
    g.rollouts[2].turns = {turn(false)};
    score_group(g, rank_speed, none);
    if (noise < 0) {
      EXPECT_GT(g.rollouts[0].reward, g.rollouts[1].reward);
    } else {
      EXPECT_DOUBLE_EQ(g.rollouts[0].reward, g.rollouts[1].reward);
    }
    EXPECT_LT(g.rollouts[2].reward, g.rollouts[1].reward);
  }
}

// ---- Optimisation turns (issue 31) ---------------------------------------------------------

// Optimisation turns are measurement: a first-turn pass keeps its first turn's outcome and speed,
// whatever its optimisation turn reached (faster or failed).
TEST(ScoreGroup, OptimisationTurnsLeaveTheFirstTurnsOutcomeAndSpeed) {
  const auto timed = [](bool passed, double speedup) {
    turn_record t = turn(passed);
    t.speedup = speedup;
    return t;
  };
  group_record g;
  g.max_turns = 3;
  g.gate = gate_decision::closed_no_debug;
  g.rollouts.resize(3);
  g.rollouts[0].turns = {timed(true, 0.8), timed(true, 5.0)};
  g.rollouts[1].turns = {timed(true, 1.0), timed(false, 0.0)};
  g.rollouts[2].turns = {turn(false)};
  advantage_config none;
  none.kind = advantage_kind::none;
  reward_config rank_speed;
  rank_speed.kind = reward_kind::rank_speed;
  score_group(g, rank_speed, none);
  EXPECT_EQ(g.rollouts[0].outcome.passed_at_turn, 1);
  EXPECT_EQ(g.rollouts[0].outcome.generated_turns, 1);
  EXPECT_EQ(g.rollouts[1].outcome.generated_turns, 1);
  // Ranked on the first turns' 0.8x and 1.0x: rollout 1 is faster, despite rollout 0's 5.0x.
  EXPECT_GT(g.rollouts[1].reward, g.rollouts[0].reward);
}

// ---- Training on optimisation turns (gate.optimise.train, issue 31) --------------------------

turn_record opt_train_turn(bool passed, double speedup) {
  turn_record t = turn(passed);
  t.speedup = speedup;
  return t;
}

advantage_config opt_train_raw() {
  advantage_config a;
  a.kind = advantage_kind::none;
  return a;
}

// Trained on, a first-turn pass is paid for its kept turn's speed (its last pass), its rank stays
// a pass at turn 1, and its outcome counts the turns up to the kept one. Closed form (rank_speed,
// G = 3, raw rewards): the 0.8x -> 5.0x rollout beats both others, (2 - 0) / 2 = 1; the 1.0x
// rollout whose optimisation turn broke keeps its 1.0x and beats the failure, (1 - 1) / 2 = 0.
TEST(ScoreGroupOptimiseTrain, PaysTheKeptTurnsSpeedAndKeepsTheFirstPassRank) {
  group_record g;
  g.max_turns = 3;
  g.gate = gate_decision::closed_no_debug;
  g.rollouts.resize(3);
  g.rollouts[0].turns = {opt_train_turn(true, 0.8), opt_train_turn(true, 5.0)};
  g.rollouts[1].turns = {opt_train_turn(true, 1.0), opt_train_turn(false, 50.0)};
  g.rollouts[2].turns = {turn(false)};
  reward_config rank_speed;
  rank_speed.kind = reward_kind::rank_speed;
  score_group(g, rank_speed, opt_train_raw(), true);
  EXPECT_DOUBLE_EQ(g.rollouts[0].reward, 1.0);
  EXPECT_DOUBLE_EQ(g.rollouts[1].reward, 0.0);
  EXPECT_DOUBLE_EQ(g.rollouts[2].reward, -1.0);
  EXPECT_EQ(g.rollouts[0].outcome.passed_at_turn, 1);
  EXPECT_EQ(g.rollouts[0].outcome.generated_turns, 2);
  EXPECT_EQ(g.rollouts[1].outcome.generated_turns, 1);  // the broken turn is not its own
  EXPECT_EQ(g.rollouts[0].rank, 3);
  EXPECT_EQ(g.rollouts[1].rank, 3);
  // Off, the same group is paid for the first turns (existing behaviour): 1.0x beats 0.8x.
  score_group(g, rank_speed, opt_train_raw());
  EXPECT_GT(g.rollouts[1].reward, g.rollouts[0].reward);
  EXPECT_EQ(g.rollouts[0].outcome.generated_turns, 1);
}

// A failing optimisation turn never raises the reward above what the first pass earned: with a
// scalar reward and a speed bonus, a 2.0x pass whose next turn broke (claiming 50x) earns exactly
// what the 2.0x pass alone would, 1 + 0.1 ln 2; a 1.0x pass improved to 2.0x earns the same.
TEST(ScoreGroupOptimiseTrain, ABrokenTurnNeverRaisesTheRewardOfThePass) {
  reward_config binary;
  binary.kind = reward_kind::binary;
  binary.speed_bonus.weight = 0.1;
  group_record g;
  g.max_turns = 3;
  g.rollouts.resize(3);
  g.rollouts[0].turns = {opt_train_turn(true, 2.0), opt_train_turn(false, 50.0)};
  g.rollouts[1].turns = {opt_train_turn(true, 1.0), opt_train_turn(true, 2.0)};
  g.rollouts[2].turns = {opt_train_turn(true, 2.0)};
  score_group(g, binary, opt_train_raw(), true);
  const double paid = 1.0 + 0.1 * std::log(2.0);
  EXPECT_NEAR(g.rollouts[0].reward, paid, 1e-12);
  EXPECT_NEAR(g.rollouts[1].reward, paid, 1e-12);
  EXPECT_NEAR(g.rollouts[2].reward, paid, 1e-12);
}

// Probes stay first-turn only, trained on or not.
TEST(ScoreGroupOptimiseTrain, ProbesStayFirstTurnOnly) {
  group_record g;
  g.max_turns = 3;
  g.probe = true;
  g.gate = gate_decision::closed_easy;
  g.rollouts.resize(2);
  g.rollouts[0].turns = {opt_train_turn(true, 0.8), opt_train_turn(true, 5.0)};
  g.rollouts[1].turns = {opt_train_turn(true, 1.0)};
  reward_config rank_speed;
  rank_speed.kind = reward_kind::rank_speed;
  score_group(g, rank_speed, opt_train_raw(), true);
  EXPECT_EQ(g.rollouts[0].outcome.generated_turns, 1);
  EXPECT_LT(g.rollouts[0].reward, g.rollouts[1].reward);  // 0.8x, not 5.0x
}

struct opt_train_turn_case {
  std::string name;
  std::vector<bool> passed;  // per turn
  std::optional<std::size_t> kept;
  std::vector<std::size_t> broken;
};

TEST(OptimiseTraining, KeptTurnIsTheLastPassOfAFirstTurnPass) {
  const std::vector<opt_train_turn_case> cases = {
      {"no turns", {}, std::nullopt, {}},
      {"first failed", {false, true}, std::nullopt, {}},
      {"single pass", {true}, 0, {}},
      {"faster pass", {true, true}, 1, {}},
      {"broken", {true, false}, 0, {1}},
      {"pass then broken", {true, true, false}, 1, {2}},
      {"failed then passed", {true, false, true}, 2, {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    rollout_record r;
    for (std::size_t i = 0; i < c.passed.size(); ++i) {
      r.turns.push_back(opt_train_turn(c.passed[i], 1.0 + static_cast<double>(i)));
    }
    EXPECT_EQ(kept_turn(r), c.kept);
    EXPECT_EQ(broken_optimisation_turns(r), c.broken);
    const pass_speed speed = kept_speed_of(r);
    if (c.kept) {
      ASSERT_TRUE(speed.speedup.has_value());
      EXPECT_DOUBLE_EQ(*speed.speedup, 1.0 + static_cast<double>(*c.kept));
    } else {
      EXPECT_FALSE(speed.speedup.has_value());
    }
  }
}

// A broken optimisation turn trains with a failure's advantage: the lowest advantage of the
// group's failed rollouts, else the group's lowest, never above 0.
TEST(OptimiseTraining, BrokenTurnAdvantageIsAFailuresCappedAtZero) {
  const auto group_of = [](const std::vector<std::pair<bool, double>>& rollouts) {
    group_record g;
    for (const auto& [passed, advantage] : rollouts) {
      rollout_record r;
      r.outcome.passed_at_turn = passed ? 1 : 0;
      r.advantage = advantage;
      g.rollouts.push_back(r);
    }
    return g;
  };
  EXPECT_DOUBLE_EQ(broken_turn_advantage(group_of({{true, 0.6}, {false, -1.2}, {false, -0.9}})),
                   -1.2);
  // The failure's, even where a slow pass got less (prime_echo or rank_speed can order so).
  EXPECT_DOUBLE_EQ(broken_turn_advantage(group_of({{true, -0.6}, {false, -0.3}, {true, 0.9}})),
                   -0.3);
  EXPECT_DOUBLE_EQ(broken_turn_advantage(group_of({{true, 0.8}, {true, -0.5}, {true, -0.3}})),
                   -0.5);
  EXPECT_DOUBLE_EQ(broken_turn_advantage(group_of({{true, 1.0}, {false, 0.5}})), 0.0);
  EXPECT_DOUBLE_EQ(broken_turn_advantage(group_of({{true, 0.0}, {true, 0.0}})), 0.0);
  EXPECT_DOUBLE_EQ(broken_turn_advantage(group_record{}), 0.0);
}

turn_result timed_pass(double speedup) { return {.passed = true, .speedup = speedup}; }

optimise_config optimise_at(double speedup, int max_turns = 1) {
  optimise_config c;
  c.speedup = speedup;
  c.max_turns = max_turns;
  return c;
}

TEST(GroupFlowOptimise, OffLeavesTimedPassesDoneAtOnce) {
  group_flow flow(3, 3, static_gate(counts(gate_policy::full, 1, 3)));
  (void)flow.start();
  EXPECT_TRUE(flow.on_result(0, timed_pass(0.5)).request_turn.empty());
  (void)flow.on_result(1, fail());
  const auto gated = flow.on_result(2, timed_pass(0.7));
  ASSERT_TRUE(gated.optimise);
  EXPECT_EQ(*gated.optimise, optimise_decision::off);
  EXPECT_EQ(gated.request_turn, (std::vector<std::uint32_t>{1}));  // the debug turn only
  EXPECT_FALSE(flow.optimising(0));
  EXPECT_EQ(flow.rollout_turns(0), 1);
}

TEST(GroupFlowOptimise, SlowPassesGetAnOptimisationTurnBesideTheDcpDebugTurns) {
  group_flow flow(4, 3, static_gate(counts(gate_policy::dcp, 1, 3)), false, optimise_at(1.2));
  (void)flow.start();
  // With optimisation on, a pass waits for the gate instead of being done at once.
  EXPECT_TRUE(flow.on_result(0, timed_pass(0.9)).request_turn.empty());
  (void)flow.on_result(1, fail());
  (void)flow.on_result(2, timed_pass(1.1));
  const auto gated = flow.on_result(3, fail());
  ASSERT_TRUE(gated.gate);
  EXPECT_EQ(*gated.gate, gate_decision::open);  // DCP's own decision, unchanged
  ASSERT_TRUE(gated.optimise);
  EXPECT_EQ(*gated.optimise, optimise_decision::open);
  EXPECT_EQ(gated.request_turn, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(flow.optimising(0));
  EXPECT_TRUE(flow.optimising(2));
  EXPECT_FALSE(flow.optimising(1));
  EXPECT_EQ(flow.rollout_turns(0), 2);
  // gate.optimise.max_turns 1: one optimisation turn, whatever it measured.
  EXPECT_TRUE(flow.on_result(0, timed_pass(1.0)).request_turn.empty());
  EXPECT_TRUE(flow.on_result(2, fail()).request_turn.empty());
  (void)flow.on_result(1, pass());
  EXPECT_TRUE(flow.on_result(3, pass()).finished);
}

TEST(GroupFlowOptimise, OptimisationOpensEvenWhenDcpClosesTheGroup) {
  // Nothing failed: DCP has nothing to debug, yet every pass is slow.
  group_flow flow(2, 2, static_gate(gate_config{}), false, optimise_at(1.2));
  (void)flow.start();
  (void)flow.on_result(0, timed_pass(0.8));
  const auto gated = flow.on_result(1, timed_pass(1.0));
  EXPECT_EQ(*gated.gate, gate_decision::closed_no_debug);
  EXPECT_EQ(*gated.optimise, optimise_decision::open);
  EXPECT_EQ(gated.request_turn, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_FALSE(gated.finished);
}

struct not_opened_case {
  const char* name;
  int max_turns;
  std::vector<turn_result> first_turns;
  optimise_decision expected;
};

TEST(GroupFlowOptimise, GroupsWithAFastPassNoTimingOrNoBudgetFinishAtTheGate) {
  const std::vector<not_opened_case> cases = {
      {"one pass beats the factor",
       3,
       {timed_pass(0.9), timed_pass(1.5), fail()},
       optimise_decision::closed_fast},
      {"a pass without timing",
       3,
       {timed_pass(0.9), pass(), fail()},
       optimise_decision::closed_untimed},
      {"single-turn budget",
       1,
       {timed_pass(0.9), timed_pass(0.8), fail()},
       optimise_decision::closed_budget},
      {"nothing passed", 3, {fail(), cut_off(), fail()}, optimise_decision::closed_no_pass},
  };
  for (const auto& c : cases) {
    // Gate none: no debug turns either, so the group finishes at the gate.
    group_flow flow(3, c.max_turns, static_gate(counts(gate_policy::none, 1, 3)), false,
                    optimise_at(1.2, 2));
    (void)flow.start();
    flow_actions last;
    for (std::uint32_t i = 0; i < c.first_turns.size(); ++i) {
      last = flow.on_result(i, c.first_turns[i]);
    }
    ASSERT_TRUE(last.optimise) << c.name;
    EXPECT_EQ(*last.optimise, c.expected) << c.name;
    EXPECT_TRUE(last.request_turn.empty()) << c.name;
    EXPECT_TRUE(last.finished) << c.name;
    EXPECT_EQ(flow.optimise(), c.expected) << c.name;
  }
}

TEST(GroupFlowOptimise, FurtherOptimisationTurnsWhileSlowAndWithinBothBudgets) {
  group_flow flow(2, 4, static_gate(counts(gate_policy::none, 1, 2)), false, optimise_at(1.2, 2));
  (void)flow.start();
  (void)flow.on_result(0, timed_pass(0.5));
  EXPECT_EQ(flow.on_result(1, timed_pass(0.6)).request_turn, (std::vector<std::uint32_t>{0, 1}));
  // Rollout 0: still slow after its first optimisation turn, so a second (the last allowed).
  EXPECT_EQ(flow.on_result(0, timed_pass(1.1)).request_turn, (std::vector<std::uint32_t>{0}));
  EXPECT_TRUE(flow.on_result(0, timed_pass(1.15)).request_turn.empty());
  EXPECT_EQ(flow.rollout_turns(0), 3);
  // Rollout 1: beat the factor: done.
  const auto last = flow.on_result(1, timed_pass(1.4));
  EXPECT_TRUE(last.request_turn.empty());
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(flow.rollout_turns(1), 2);
}

TEST(GroupFlowOptimise, RolloutMaxTurnsBoundsOptimisationTurns) {
  group_flow flow(2, 2, static_gate(counts(gate_policy::none, 1, 2)), false, optimise_at(1.2, 5));
  (void)flow.start();
  (void)flow.on_result(0, timed_pass(0.5));
  (void)flow.on_result(1, timed_pass(0.6));
  (void)flow.on_result(0, timed_pass(0.7));  // turn 2 of M = 2
  const auto last = flow.on_result(1, timed_pass(0.7));
  EXPECT_TRUE(last.request_turn.empty());
  EXPECT_TRUE(last.finished);
}

TEST(GroupFlowOptimise, CutOffOptimisationTurnEndsTheRollout) {
  group_flow flow(1 + 1, 4, static_gate(counts(gate_policy::none, 1, 2)), false,
                  optimise_at(1.2, 3));
  (void)flow.start();
  (void)flow.on_result(0, timed_pass(0.5));
  (void)flow.on_result(1, timed_pass(0.5));
  EXPECT_TRUE(flow.on_result(0, {.passed = true, .ended_rollout = true, .speedup = 0.6})
                  .request_turn.empty());
}

}  // namespace
}  // namespace leap
