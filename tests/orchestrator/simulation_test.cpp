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
  p.tasks = 64;
  p.seed = 7;
  return p;
}

std::size_t total_turns(const simulation_step& s) {
  std::size_t turns = 0;
  for (const auto& g : s.groups) {
    for (const auto& o : g.outcomes) turns += static_cast<std::size_t>(o.generated_turns);
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
  p.debug_fix_probability = 1.0;
  p.skill_gain = 0.0;  // keep q at exactly 1
  for (const auto& s : simulate(p)) {
    ASSERT_EQ(s.cumulative_accuracy.size(), 3u);
    EXPECT_DOUBLE_EQ(s.cumulative_accuracy[1], 1.0);
    EXPECT_EQ(total_turns(s), s.verifications);
    if (s.cumulative_accuracy[0] < 1.0) EXPECT_DOUBLE_EQ(s.recovery.per_rollout, 1.0);
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
  p.skill_gain = 0.0;
  const auto steps = simulate(p);
  for (const auto& s : steps) {
    EXPECT_DOUBLE_EQ(s.expected_first_turn_accuracy, steps.front().expected_first_turn_accuracy);
    EXPECT_DOUBLE_EQ(s.debug_fix_probability, p.debug_fix_probability);
  }
}

TEST(Simulation, RankRewardRaisesFirstTurnSkill) {
  auto p = small_params();
  p.steps = 40;
  p.batch_size = 32;
  p.skill_gain = 2.0;
  const auto steps = simulate(p);
  EXPECT_GT(steps.back().expected_first_turn_accuracy,
            steps.front().expected_first_turn_accuracy + 0.05);
}

TEST(Simulation, ReportsEveryStepInOrder) {
  std::vector<int> seen;
  simulate(small_params(), [&](const simulation_step& s) { seen.push_back(s.step); });
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3, 4, 5, 6}));
}

}  // namespace
}  // namespace leap
