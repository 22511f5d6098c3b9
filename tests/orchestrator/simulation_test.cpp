#include "orchestrator/simulation.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace leap {
namespace {

simulation_params small_params() {
  simulation_params p;
  p.steps = 6;
  p.batch_size = 16;
  p.group_size = 8;
  p.max_turns = 3;
  p.model.tasks = 64;
  p.seed = 7;
  return p;
}

std::size_t total_turns(const simulation_step& s) {
  std::size_t turns = 0;
  for (const auto& g : s.groups) {
    for (const auto& o : g.outcomes) {
      turns += static_cast<std::size_t>(o.generated_turns);
    }
  }
  return turns;
}

TEST(Simulation, SameSeedSameRunOtherSeedOtherRun) {
  const auto a = simulate(small_params());
  const auto b = simulate(small_params());
  auto other = small_params();
  other.seed = 8;
  const auto c = simulate(other);
  ASSERT_EQ(a.size(), 6u);
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].cumulative_accuracy, b[i].cumulative_accuracy);
    EXPECT_EQ(a[i].verifications, b[i].verifications);
    EXPECT_DOUBLE_EQ(a[i].expected_first_turn_accuracy, b[i].expected_first_turn_accuracy);
    differs = differs || a[i].cumulative_accuracy != c[i].cumulative_accuracy;
  }
  EXPECT_TRUE(differs);
}

TEST(Simulation, GateNoneNeverDebugs) {
  auto p = small_params();
  p.gate.policy = gate_policy::none;
  for (const auto& s : simulate(p)) {
    EXPECT_EQ(s.activated_fraction, 0.0);
    EXPECT_EQ(s.verifications, static_cast<std::size_t>(p.batch_size * p.group_size));
    EXPECT_EQ(total_turns(s), s.verifications);
    // Without debug turns, accuracy cannot grow after turn 1.
    EXPECT_EQ(s.cumulative_accuracy.front(), s.cumulative_accuracy.back());
  }
}

TEST(Simulation, FullGateWithCertainFixRecoversEveryFailureAtTurnTwo) {
  auto p = small_params();
  p.gate.policy = gate_policy::full;
  p.model.debug_fix_probability = 1.0;
  p.model.skill_gain = 0.0;  // keep q at exactly 1
  for (const auto& s : simulate(p)) {
    ASSERT_EQ(s.cumulative_accuracy.size(), 3u);
    EXPECT_DOUBLE_EQ(s.cumulative_accuracy[1], 1.0);
    EXPECT_EQ(total_turns(s), s.verifications);
    if (s.cumulative_accuracy[0] < 1.0) {
      EXPECT_DOUBLE_EQ(s.recovery.per_rollout, 1.0);
    }
  }
}

TEST(Simulation, DcpDebugsOnlyGroupsInsideTheThresholds) {
  auto p = small_params();
  p.gate.policy = gate_policy::dcp;
  p.gate.unit = threshold_unit::count;
  p.gate.tau_min = 4;
  p.gate.tau_max = 6;
  for (const auto& s : simulate(p)) {
    for (const auto& g : s.groups) {
      const auto fails = std::count_if(g.outcomes.begin(), g.outcomes.end(), [](const auto& o) {
        return o.generated_turns > 1 || !o.passed();
      });
      const bool debugged = std::any_of(g.outcomes.begin(), g.outcomes.end(),
                                        [](const auto& o) { return o.generated_turns > 1; });
      EXPECT_EQ(debugged, is_open(g.gate));
      if (is_open(g.gate)) {
        EXPECT_GE(fails, 4);
        EXPECT_LE(fails, 6);
      }
    }
  }
}

TEST(Simulation, WithoutLearningSkillsStayPut) {
  auto p = small_params();
  p.model.skill_gain = 0.0;
  const auto steps = simulate(p);
  for (const auto& s : steps) {
    EXPECT_DOUBLE_EQ(s.expected_first_turn_accuracy, steps.front().expected_first_turn_accuracy);
    EXPECT_DOUBLE_EQ(s.debug_fix_probability, p.model.debug_fix_probability);
  }
}

TEST(Simulation, RankRewardRaisesFirstTurnSkill) {
  auto p = small_params();
  p.steps = 40;
  p.batch_size = 32;
  p.model.skill_gain = 2.0;
  const auto steps = simulate(p);
  EXPECT_GT(steps.back().expected_first_turn_accuracy,
            steps.front().expected_first_turn_accuracy + 0.05);
}

TEST(Simulation, ReportsEveryStepInOrder) {
  std::vector<int> seen;
  simulate(small_params(), [&](const simulation_step& s) { seen.push_back(s.step); });
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3, 4, 5, 6}));
}

// ---- speed and optimisation turns (issue 31) ---------------------------------------------------

// Timed, with every passing candidate at exactly `speedup` (no spread, no noise) unless a test
// says otherwise.
simulation_params sim_timed_params(double speedup) {
  auto p = small_params();
  p.timed = true;
  p.model.speedup_median = speedup;
  p.model.speedup_task_spread = 0.0;
  p.model.speedup_spread = 0.0;
  p.model.speedup_noise = 0.0;
  return p;
}

std::size_t sim_first_turn_passes(const simulation_step& s) {
  std::size_t n = 0;
  for (const auto& g : s.groups) {
    for (const auto& o : g.outcomes) {
      n += o.passed_at_turn == 1 ? 1 : 0;
    }
  }
  return n;
}

TEST(SimulationSpeed, UntimedMeasuresNoSpeedAndOpensNoOptimisationTurn) {
  auto p = small_params();
  p.gate.optimise.speedup = 1.2;
  for (const auto& s : simulate(p)) {
    EXPECT_EQ(s.speed.timed_passes(), 0u);
    EXPECT_FALSE(s.speed.geomean_speedup().has_value());
    EXPECT_EQ(s.optimised, 0u);  // decide_optimise: closed_untimed
    EXPECT_EQ(s.optimise_turns, 0u);
  }
}

TEST(SimulationSpeed, TimingDrawsFromItsOwnStreamAndLeavesPassesAlone) {
  // Speeds are drawn from a second stream: the same seed passes the same rollouts timed or not.
  const auto untimed = simulate(small_params());
  const auto timed = simulate(sim_timed_params(1.0));
  ASSERT_EQ(untimed.size(), timed.size());
  for (std::size_t i = 0; i < timed.size(); ++i) {
    EXPECT_EQ(untimed[i].cumulative_accuracy, timed[i].cumulative_accuracy);
    EXPECT_EQ(untimed[i].verifications, timed[i].verifications);
  }
}

TEST(SimulationSpeed, EveryPassIsTimedAtTheModelsSpeedup) {
  const auto p = sim_timed_params(1.4);
  for (const auto& s : simulate(p)) {
    std::size_t rollouts = 0;
    std::size_t passes = 0;
    for (const auto& g : s.groups) {
      for (const auto& o : g.outcomes) {
        ++rollouts;
        passes += o.passed() ? 1 : 0;
      }
    }
    EXPECT_EQ(s.speed.timed_passes(), passes);
    ASSERT_TRUE(s.speed.geomean_speedup().has_value());
    EXPECT_NEAR(*s.speed.geomean_speedup(), 1.4, 1e-9);
    // 1.4 beats 1.0 and 1.2, not 1.5 or 2.0: fast_p over every rollout, as KernelBench counts.
    const double pass_rate = static_cast<double>(passes) / static_cast<double>(rollouts);
    EXPECT_NEAR(*s.speed.fast_p(1), pass_rate, 1e-12);
    EXPECT_NEAR(*s.speed.fast_p(2), pass_rate, 1e-12);
    EXPECT_EQ(*s.speed.fast_p(3), 0.0);
    EXPECT_EQ(*s.speed.fast_p(4), 0.0);
  }
}

TEST(SimulationSpeed, NoKernelBeatsTheCeiling) {
  auto p = sim_timed_params(3.0);
  p.model.speedup_ceiling = 2.0;
  for (const auto& s : simulate(p)) {
    EXPECT_NEAR(*s.speed.geomean_speedup(), 2.0, 1e-9);
    EXPECT_EQ(*s.speed.fast_p(4), 0.0);  // 2.0 is not faster than 2.0
  }
}

TEST(SimulationSpeed, CertainImprovementTakesOneTurnPerFirstTurnPass) {
  // Every pass at 1.0 does not beat 1.2, so every group with a pass opens; one improving turn
  // (x1.5) beats the factor and continue_optimising stops there.
  auto p = sim_timed_params(1.0);
  p.gate.policy = gate_policy::none;  // no debug turns: every pass is a first-turn pass
  p.gate.optimise.speedup = 1.2;
  p.gate.optimise.max_turns = 2;
  p.model.optimise_improve_probability = 1.0;
  p.model.optimise_break_probability = 0.0;
  p.model.optimise_gain = 1.5;
  for (const auto& s : simulate(p)) {
    const auto passes = sim_first_turn_passes(s);
    std::size_t groups_with_pass = 0;
    for (const auto& g : s.groups) {
      groups_with_pass += std::any_of(g.outcomes.begin(), g.outcomes.end(),
                                      [](const auto& o) { return o.passed(); })
                              ? 1
                              : 0;
    }
    EXPECT_EQ(s.optimised, groups_with_pass);
    EXPECT_EQ(s.optimise_turns, passes);
    EXPECT_EQ(s.optimise_kept, passes);
    EXPECT_EQ(s.optimise_broken, 0u);
    EXPECT_EQ(s.verifications, static_cast<std::size_t>(p.batch_size * p.group_size) + passes);
    if (passes > 0) {
      EXPECT_NEAR(*s.speed.geomean_speedup(), 1.0, 1e-9);       // the first turns' speed
      EXPECT_NEAR(*s.kept_speed.geomean_speedup(), 1.5, 1e-9);  // what a user keeps
    }
  }
}

TEST(SimulationSpeed, FastGroupsAreLeftAlone) {
  auto p = sim_timed_params(1.3);
  p.gate.optimise.speedup = 1.2;
  for (const auto& s : simulate(p)) {
    EXPECT_EQ(s.optimised, 0u);  // decide_optimise: closed_fast
    EXPECT_EQ(s.optimise_turns, 0u);
  }
}

TEST(SimulationSpeed, CertainBreakingBreaksOnceAndKeepsTheFirstKernel) {
  auto p = sim_timed_params(1.0);
  p.gate.policy = gate_policy::none;
  p.gate.optimise.speedup = 1.2;
  p.gate.optimise.max_turns = 2;
  p.model.optimise_improve_probability = 0.0;
  p.model.optimise_break_probability = 1.0;
  for (const auto& s : simulate(p)) {
    const auto passes = sim_first_turn_passes(s);
    EXPECT_EQ(s.optimise_turns, passes);  // a broken turn ends the rollout
    EXPECT_EQ(s.optimise_broken, passes);
    EXPECT_EQ(s.optimise_kept, 0u);
  }
}

TEST(SimulationSpeed, TrainingOnBrokenTurnsLowersTheBreakProbabilityOnlyWhenTrained) {
  // Slow enough that the groups stay open while the speed skill grows.
  auto p = sim_timed_params(0.5);
  p.model.speedup_spread = 0.05;  // rank_speed ranks the passes, and the groups stay slow
  p.gate.policy = gate_policy::none;
  p.gate.optimise.speedup = 1.2;
  p.model.optimise_improve_probability = 0.3;
  p.model.optimise_break_probability = 0.5;
  p.reward.kind = reward_kind::rank_speed;
  p.model.skill_gain = 2.0;
  p.steps = 10;
  const auto measured = simulate(p);
  for (const auto& s : measured) {
    EXPECT_DOUBLE_EQ(s.optimise_break_probability, 0.5);
    EXPECT_DOUBLE_EQ(s.optimise_improve_probability, 0.3);
  }
  p.gate.optimise.train = true;
  const auto trained = simulate(p);
  EXPECT_LT(trained.back().optimise_break_probability, 0.5 - 0.05);
  std::size_t broken_measured = 0;
  std::size_t broken_trained = 0;
  for (std::size_t i = measured.size() / 2; i < measured.size(); ++i) {
    EXPECT_GT(measured[i].optimised, 0u);
    broken_measured += measured[i].optimise_broken;
    broken_trained += trained[i].optimise_broken;
  }
  EXPECT_LT(broken_trained, broken_measured);
}

TEST(SimulationSpeed, RankSpeedGivesAllPassGroupsASignalAndRaisesSpeed) {
  // Every task passes at once: rank ties a whole group (no signal); rank_speed ranks by speed.
  auto p = sim_timed_params(1.0);
  p.model.difficulty_alpha = 1000.0;
  p.model.difficulty_beta = 0.001;
  p.model.speedup_spread = 0.3;
  p.model.speedup_noise = 0.01;
  p.reward.speed_tie = 0.01;
  p.model.skill_gain = 1.0;
  p.steps = 15;
  const auto rank = simulate(p);
  p.reward.kind = reward_kind::rank_speed;
  const auto speed = simulate(p);
  std::size_t rank_signal = 0;
  std::size_t speed_signal = 0;
  for (std::size_t i = 0; i < rank.size(); ++i) {
    rank_signal += rank[i].signal_groups;
    speed_signal += speed[i].signal_groups;
  }
  EXPECT_LT(rank_signal, speed_signal / 2);
  EXPECT_GT(speed.back().expected_speedup, 1.1);
  EXPECT_LT(rank.back().expected_speedup, speed.back().expected_speedup);
}

// ---- profiles and structural terms (issue 34) -------------------------------------------------

// Profiled (verifier.profile on), the terms off unless a test sets weights.
simulation_params sim_struct_params() {
  auto p = small_params();
  p.profiled = true;
  return p;
}

void sim_struct_expect_same_run(const std::vector<simulation_step>& a,
                                const std::vector<simulation_step>& b, std::size_t steps) {
  ASSERT_GE(a.size(), steps);
  ASSERT_GE(b.size(), steps);
  for (std::size_t i = 0; i < steps; ++i) {
    // Bit for bit: the same draws through the same code, not two computations of one number.
    EXPECT_EQ(a[i].cumulative_accuracy, b[i].cumulative_accuracy) << "step " << i + 1;
    EXPECT_EQ(a[i].verifications, b[i].verifications) << "step " << i + 1;
    EXPECT_EQ(a[i].expected_first_turn_accuracy, b[i].expected_first_turn_accuracy);
    EXPECT_EQ(a[i].debug_fix_probability, b[i].debug_fix_probability);
    EXPECT_EQ(a[i].speed.geomean_speedup(), b[i].speed.geomean_speedup());
    EXPECT_EQ(a[i].expected_speedup, b[i].expected_speedup);
    ASSERT_EQ(a[i].groups.size(), b[i].groups.size());
    for (std::size_t g = 0; g < a[i].groups.size(); ++g) {
      EXPECT_EQ(a[i].groups[g].advantages, b[i].groups[g].advantages);
    }
  }
}

TEST(SimulationStructure, ProfilesDrawFromTheirOwnStreamAndChangeNothingWithoutTerms) {
  // Profiled with every weight 0: the run is the unprofiled one, untimed and timed.
  for (const bool timed : {false, true}) {
    auto plain = small_params();
    plain.timed = timed;
    auto profiled = plain;
    profiled.profiled = true;
    const auto a = simulate(plain);
    const auto b = simulate(profiled);
    sim_struct_expect_same_run(a, b, a.size());
    for (const auto& s : b) {
      EXPECT_GT(s.profiled_turns, 0u);
      EXPECT_EQ(s.structural_term, 0.0);
      EXPECT_EQ(s.scored_passes, 0u);
    }
    for (const auto& s : a) {
      EXPECT_EQ(s.profiled_turns, 0u);
    }
  }
  // With the terms on, the first step's passes, speeds and verifications are still the
  // unprofiled run's; only the advantages (and so what the policy learns) change.
  auto plain = small_params();
  plain.timed = true;
  plain.steps = 1;
  auto paid = plain;
  paid.profiled = true;
  paid.reward.structural.weights = {0.02, 0.02, 0.02, 0.02, 0.02};
  const auto a = simulate(plain);
  const auto b = simulate(paid);
  EXPECT_EQ(a[0].cumulative_accuracy, b[0].cumulative_accuracy);
  EXPECT_EQ(a[0].verifications, b[0].verifications);
  EXPECT_EQ(a[0].speed.geomean_speedup(), b[0].speed.geomean_speedup());
  EXPECT_GT(b[0].structural_term, 0.0);
  bool advantages_differ = false;
  for (std::size_t g = 0; g < a[0].groups.size(); ++g) {
    advantages_differ = advantages_differ || a[0].groups[g].advantages != b[0].groups[g].advantages;
  }
  EXPECT_TRUE(advantages_differ);
}

// The closed form of one group's terms with every kernel clean of every family: each pass gains
// min(weight sum, bound, half the gap to the group's next higher reward); `rewards` of the
// reward kind, one per outcome.
struct sim_struct_expected {
  double term_sum = 0.0;
  std::size_t passes = 0;
  std::size_t capped_by_gap = 0;
};

void sim_struct_add_closed_form(const std::vector<rollout_outcome>& outcomes,
                                const std::vector<double>& rewards, double weight_sum, double bound,
                                sim_struct_expected& e) {
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    if (!outcomes[i].passed()) {
      continue;
    }
    double term = std::min(weight_sum, bound);
    for (double r : rewards) {
      if (r > rewards[i]) {
        term = std::min(term, (r - rewards[i]) / 2.0);
      }
    }
    ++e.passes;
    e.term_sum += term;
    e.capped_by_gap += term < std::min(weight_sum, bound) ? 1 : 0;
  }
}

TEST(SimulationStructure, AlwaysCleanKernelsPayTheWeightsWithinTheBoundAndHalfTheGap) {
  auto p = sim_struct_params();
  p.gate.policy = gate_policy::full;  // passes at turns 1 to 3, so half the gap bites
  p.model.debug_fix_probability = 0.5;
  p.model.structural_clean = 1.0;  // every kernel clean of every family
  p.model.structural_kernels = 3;
  p.reward.kind = reward_kind::static_scalar;  // 1, 0.5, 0.25 by turn; 0 for a failure
  p.reward.structural.weights = {0.3, 0.0, 0.3, 0.0, 0.0};
  p.reward.structural.bound = 0.4;  // below the weights' sum 0.6
  std::size_t gap_capped = 0;
  for (const auto& s : simulate(p)) {
    sim_struct_expected e;
    for (const auto& g : s.groups) {
      std::vector<double> rewards;
      for (const auto& o : g.outcomes) {
        rewards.push_back(o.passed() ? p.reward.static_rewards[o.passed_at_turn - 1] : 0.0);
      }
      sim_struct_add_closed_form(g.outcomes, rewards, 0.6, 0.4, e);
    }
    ASSERT_GT(e.passes, 0u);
    EXPECT_EQ(s.passes, e.passes);
    EXPECT_NEAR(s.structural_term, e.term_sum / static_cast<double>(e.passes), 1e-9);
    EXPECT_EQ(s.profiled_turns, e.passes);  // a failing turn is not profiled; a pass ends it
    EXPECT_EQ(s.scored_passes, e.passes);
    EXPECT_EQ(s.capped_by_bound, e.passes);  // 0.6 > 0.4 for every pass
    EXPECT_EQ(s.capped_by_gap, e.capped_by_gap);
    gap_capped += s.capped_by_gap;
    for (std::size_t f = 0; f < structural_families.size(); ++f) {
      EXPECT_EQ(s.clean_share[f], 1.0);
      EXPECT_EQ(s.expected_clean_share[f], 1.0);
    }
  }
  EXPECT_GT(gap_capped, 0u);
}

TEST(SimulationStructure, ZeroWeightsOrMissingProfilesPayNothing) {
  auto p = sim_struct_params();
  p.model.structural_clean = 1.0;
  for (const auto& s : simulate(p)) {  // weights 0: the terms are off
    EXPECT_GT(s.profiled_turns, 0u);
    EXPECT_EQ(s.structural_term, 0.0);
    EXPECT_EQ(s.scored_passes, 0u);
  }
  p.reward.structural.weights = {0.05, 0.05, 0.0, 0.0, 0.0};
  p.model.structural_missing = 1.0;  // no profile arrives in time
  for (const auto& s : simulate(p)) {
    EXPECT_EQ(s.profiled_turns, 0u);
    EXPECT_GT(s.missing_profiles, 0u);
    EXPECT_EQ(s.structural_term, 0.0);
    EXPECT_EQ(s.scored_passes, 0u);
  }
  p.model.structural_missing = 0.0;
  for (const auto& s : simulate(p)) {  // the control: the same run with its profiles pays
    EXPECT_GT(s.structural_term, 0.0);
  }
}

double sim_struct_mean_expected(const simulation_step& s) {
  return std::accumulate(s.expected_clean_share.begin(), s.expected_clean_share.end(), 0.0) /
         static_cast<double>(s.expected_clean_share.size());
}

TEST(SimulationStructure, PaidTermsTeachCleanKernelsUnpaidOnesDoNot) {
  auto p = sim_struct_params();
  p.steps = 20;
  p.batch_size = 32;
  p.model.skill_gain = 2.0;
  p.model.difficulty_alpha = 4.0;  // mostly easy tasks: many all-pass groups
  p.model.structural_clean = 0.3;
  const auto off = simulate(p);
  p.reward.structural.weights = {0.02, 0.02, 0.02, 0.02, 0.02};
  p.reward.structural.bound = 0.1;
  const auto on = simulate(p);
  const double start_off = sim_struct_mean_expected(off.front());
  const double start_on = sim_struct_mean_expected(on.front());
  EXPECT_GT(sim_struct_mean_expected(on.back()), start_on + 0.15);
  EXPECT_LT(std::abs(sim_struct_mean_expected(off.back()) - start_off), 0.05);
  // The profiled kernels follow the policy.
  EXPECT_GT(std::accumulate(on.back().clean_share.begin(), on.back().clean_share.end(), 0.0),
            std::accumulate(off.back().clean_share.begin(), off.back().clean_share.end(), 0.0));
}

}  // namespace
}  // namespace leap
