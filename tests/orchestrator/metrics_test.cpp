#include "orchestrator/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace leap {
namespace {

constexpr auto open = gate_decision::open;

// passed_at_turn and generated_turns per rollout.
rollout_outcome o(int passed_at_turn, int generated_turns) {
  return {passed_at_turn, generated_turns};
}

std::size_t count(const composition_bucket& b, outcome_kind kind, bool positive) {
  return b.counts[static_cast<std::size_t>(kind)][positive ? 1 : 0];
}

// Five groups of four rollouts, M = 3, hand-counted below.
std::vector<group_summary> sample_groups() {
  return {
      // Opened: a first-turn pass, a failure after 3 turns, recoveries at turns 2 and 3.
      {open, {o(1, 1), o(0, 3), o(2, 2), o(3, 3)}, {1.2, -0.9, 0.3, 0.0}},
      // Easy: three first-turn passes, finished at once.
      {gate_decision::closed_easy, {o(1, 1), o(1, 1), o(1, 1), o(0, 1)}, {0.5, 0.5, 0.5, -1.5}},
      // Hopeless: all failed on turn 1; all advantages 0.
      {gate_decision::closed_hopeless, {o(0, 1), o(0, 1), o(0, 1), o(0, 1)}, {0, 0, 0, 0}},
      // Opened: one recovery at turn 2.
      {open, {o(0, 3), o(0, 3), o(2, 2), o(0, 3)}, {-0.5, -0.5, 1.5, -0.5}},
      // Opened, no recovery; advantages not recorded.
      {open, {o(1, 1), o(0, 3), o(0, 3), o(0, 3)}, {}},
  };
}

TEST(Metrics, CumulativeAccuracy) {
  const auto groups = sample_groups();
  // 20 rollouts; passes at turn 1: 1 + 3 + 1 = 5, at turn 2: 2, at turn 3: 1.
  const std::vector<double> acc = cumulative_accuracy(groups, 3);
  ASSERT_EQ(acc.size(), 3U);
  EXPECT_DOUBLE_EQ(acc[0], 5.0 / 20);
  EXPECT_DOUBLE_EQ(acc[1], 7.0 / 20);
  EXPECT_DOUBLE_EQ(acc[2], 8.0 / 20);
  // A budget of 2 turns: the pass at turn 3 counts at no m.
  EXPECT_EQ(cumulative_accuracy(groups, 2), (std::vector<double>{5.0 / 20, 7.0 / 20}));
  const std::vector<double> five = cumulative_accuracy(groups, 5);
  EXPECT_EQ(five, (std::vector<double>{0.25, 0.35, 0.4, 0.4, 0.4}));
  EXPECT_TRUE(cumulative_accuracy(groups, 0).empty());
}

TEST(Metrics, ActivatedGroupFraction) {
  const auto groups = sample_groups();
  EXPECT_DOUBLE_EQ(activated_group_fraction(groups), 3.0 / 5);
  EXPECT_DOUBLE_EQ(activated_group_fraction(std::span(groups).first(3)), 1.0 / 3);
  EXPECT_DOUBLE_EQ(activated_group_fraction(std::span(groups).subspan(1, 2)), 0.0);
}

TEST(Metrics, Recovery) {
  const auto groups = sample_groups();
  // Opened groups 1, 4, 5: first-turn failures 3 + 4 + 3 = 10, recovered 2 + 1 + 0 = 3; groups with
  // a recovery 2 of 3. The easy and hopeless groups do not count.
  const recovery_rates r = recovery(groups);
  EXPECT_DOUBLE_EQ(r.per_rollout, 3.0 / 10);
  EXPECT_DOUBLE_EQ(r.per_group, 2.0 / 3);
  const recovery_rates first = recovery(std::span(groups).first(1));
  EXPECT_DOUBLE_EQ(first.per_rollout, 2.0 / 3);
  EXPECT_DOUBLE_EQ(first.per_group, 1.0);
}

TEST(Metrics, TurnsPerPass) {
  const auto groups = sample_groups();
  // Turns: 9 + 4 + 4 + 11 + 10 = 38; passes: 3 + 3 + 0 + 1 + 1 = 8.
  EXPECT_DOUBLE_EQ(turns_per_pass(groups), 38.0 / 8);
  // Single-turn, everything passed: exactly 1.
  const std::vector<group_summary> single = {
      {gate_decision::closed_no_debug, {o(1, 1), o(1, 1)}, {}}};
  EXPECT_DOUBLE_EQ(turns_per_pass(single), 1.0);
}

TEST(Metrics, RolloutComposition) {
  auto groups = sample_groups();
  // A fully passed group lands in the last bucket.
  groups.push_back({open, {o(1, 1), o(1, 1), o(2, 2), o(2, 2)}, {0.8, 0.8, -0.8, -0.8}});
  // Advantages not as long as the outcomes: skipped.
  groups.push_back({open, {o(1, 1), o(0, 3)}, {1.0}});
  const std::vector<composition_bucket> b = rollout_composition(groups, 4);
  ASSERT_EQ(b.size(), 4U);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_DOUBLE_EQ(b[k].lo, 0.25 * static_cast<double>(k));
    EXPECT_DOUBLE_EQ(b[k].hi, 0.25 * static_cast<double>(k + 1));
  }
  using enum outcome_kind;
  // Bucket 0 (pass rate 0): the hopeless group, all advantages 0.
  EXPECT_EQ(b[0].counts, composition_bucket{}.counts);
  // Bucket 1 (pass rate 1/4): group 4; group 5 has no advantages.
  EXPECT_EQ(count(b[1], failure, false), 3U);
  EXPECT_EQ(count(b[1], debug_pass, true), 1U);
  EXPECT_EQ(count(b[1], first_turn_pass, true), 0U);
  EXPECT_EQ(b[2].counts, composition_bucket{}.counts);
  // Bucket 3 (pass rate 3/4 and 1): groups 1, 2 and the fully passed one. Group 1's turn-3
  // recovery has advantage 0 and is not counted.
  EXPECT_EQ(count(b[3], first_turn_pass, true), 1U + 3U + 2U);
  EXPECT_EQ(count(b[3], first_turn_pass, false), 0U);
  EXPECT_EQ(count(b[3], debug_pass, true), 1U);
  EXPECT_EQ(count(b[3], debug_pass, false), 2U);
  EXPECT_EQ(count(b[3], failure, false), 1U + 1U);
  EXPECT_EQ(count(b[3], failure, true), 0U);

  // One bucket holds everything countable.
  const std::vector<composition_bucket> one = rollout_composition(groups, 1);
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(count(one[0], failure, false), 5U);
  EXPECT_DOUBLE_EQ(one[0].lo, 0.0);
  EXPECT_DOUBLE_EQ(one[0].hi, 1.0);
  EXPECT_TRUE(rollout_composition(groups, 0).empty());
}

struct bucket_case {
  int passes;
  int rollouts;
  std::size_t bucket_count;
  std::size_t expected;
};

// Integer bucketing: a pass rate on a boundary belongs to the bucket above, never below by
// rounding (13 / 23 * 23 is 12.999999999999998 in binary, 7 / 10 * 90 is 62.99999999999999).
TEST(Metrics, CompositionBucketBoundaries) {
  const std::vector<bucket_case> cases = {
      {0, 8, 4, 0}, {1, 8, 4, 0},   {2, 8, 4, 1},   {3, 8, 4, 1},     {4, 8, 4, 2},    {7, 8, 4, 3},
      {8, 8, 4, 3}, {3, 10, 10, 3}, {7, 10, 10, 7}, {10, 10, 10, 9},  {1, 3, 3, 1},    {2, 3, 3, 2},
      {5, 8, 8, 5}, {1, 1, 5, 4},   {0, 1, 5, 0},   {13, 23, 23, 13}, {7, 10, 90, 63},
  };
  for (const bucket_case& k : cases) {
    group_summary g;
    g.gate = open;
    for (int i = 0; i < k.rollouts; ++i) {
      g.outcomes.push_back(i < k.passes ? o(1, 1) : o(0, 1));
      g.advantages.push_back(1.0);
    }
    const std::vector<group_summary> groups = {g};
    const std::vector<composition_bucket> b = rollout_composition(groups, k.bucket_count);
    for (std::size_t j = 0; j < b.size(); ++j) {
      std::size_t total = 0;
      for (const auto& by_sign : b[j].counts) {
        total += by_sign[0] + by_sign[1];
      }
      EXPECT_EQ(total, j == k.expected ? static_cast<std::size_t>(k.rollouts) : 0U)
          << k.passes << "/" << k.rollouts << " in " << k.bucket_count << " buckets, bucket " << j;
    }
  }
}

TEST(Metrics, NoGroups) {
  const std::vector<group_summary> none;
  EXPECT_EQ(cumulative_accuracy(none, 3), (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_EQ(activated_group_fraction(none), 0.0);
  EXPECT_EQ(recovery(none).per_rollout, 0.0);
  EXPECT_EQ(recovery(none).per_group, 0.0);
  EXPECT_EQ(turns_per_pass(none), 0.0);
  const auto b = rollout_composition(none, 3);
  ASSERT_EQ(b.size(), 3U);
  for (const auto& bucket : b) {
    EXPECT_EQ(bucket.counts, composition_bucket{}.counts);
  }
}

TEST(Metrics, NothingPassed) {
  const std::vector<group_summary> groups = {
      {open, {o(0, 3), o(0, 3)}, {0, 0}},
      {gate_decision::closed_hopeless, {o(0, 1), o(0, 1)}, {0, 0}},
  };
  EXPECT_EQ(cumulative_accuracy(groups, 3), (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_EQ(turns_per_pass(groups), 0.0);
  EXPECT_DOUBLE_EQ(activated_group_fraction(groups), 0.5);
  EXPECT_EQ(recovery(groups).per_rollout, 0.0);
  EXPECT_EQ(recovery(groups).per_group, 0.0);
}

TEST(Metrics, NothingOpened) {
  const std::vector<group_summary> groups = {
      {gate_decision::closed_easy, {o(1, 1), o(0, 1)}, {1, -1}},
      {gate_decision::closed_no_debug, {o(1, 1), o(1, 1)}, {0, 0}},
  };
  EXPECT_EQ(activated_group_fraction(groups), 0.0);
  EXPECT_EQ(recovery(groups).per_rollout, 0.0);
  EXPECT_EQ(recovery(groups).per_group, 0.0);
  EXPECT_DOUBLE_EQ(turns_per_pass(groups), 4.0 / 3);
}

TEST(Metrics, OpenedGroupWithoutFirstTurnFailures) {
  const std::vector<group_summary> groups = {{open, {o(1, 1), o(1, 1)}, {}}};
  EXPECT_EQ(recovery(groups).per_rollout, 0.0);
  EXPECT_EQ(recovery(groups).per_group, 0.0);
}

TEST(Metrics, EmptyGroupCountsAsAGroupButNoRollout) {
  const std::vector<group_summary> groups = {{open, {}, {}},
                                             {gate_decision::closed_easy, {o(1, 1)}, {0}}};
  EXPECT_DOUBLE_EQ(activated_group_fraction(groups), 0.5);
  EXPECT_EQ(cumulative_accuracy(groups, 1), (std::vector<double>{1.0}));
  EXPECT_EQ(recovery(groups).per_group, 0.0);
}

TEST(OutcomeKind, KindOfAnOutcome) {
  EXPECT_EQ(kind_of(o(1, 1)), outcome_kind::first_turn_pass);
  EXPECT_EQ(kind_of(o(2, 2)), outcome_kind::debug_pass);
  EXPECT_EQ(kind_of(o(5, 5)), outcome_kind::debug_pass);
  EXPECT_EQ(kind_of(o(0, 3)), outcome_kind::failure);
  EXPECT_EQ(kind_of(o(-1, 1)), outcome_kind::failure);
}

// ---- speed
// ---------------------------------------------------------------------------------------

rollout_outcome passed(int turn) { return {turn, turn}; }
rollout_outcome failed() { return {0, 1}; }
pass_speed timed(double s) { return {s, std::nullopt}; }

// KernelBench's fast_p: correct AND speedup > p, over every rollout attempted.
TEST(SpeedSummary, FastPOverAllRolloutsAndGeomeanOverTimedPasses) {
  speed_summary s;
  s.add(passed(1), timed(0.5));
  s.add(passed(1), timed(1.0));   // not > 1.0
  s.add(passed(2), timed(1.25));  // > 1.2
  s.add(passed(1), timed(4.0));
  s.add(passed(1), {});         // correct, untimed: in the denominator, fast nowhere
  s.add(failed(), timed(9.0));  // a failure's speedup is never read
  s.add(failed(), {});
  s.add(passed(1), timed(std::numeric_limits<double>::infinity()));  // not measured
  EXPECT_EQ(s.rollouts(), 8u);
  EXPECT_EQ(s.passes(), 6u);
  EXPECT_EQ(s.timed_passes(), 4u);
  const std::vector<double> expected = {4.0 / 8, 2.0 / 8, 2.0 / 8, 1.0 / 8, 1.0 / 8};
  ASSERT_EQ(expected.size(), fast_p_thresholds.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(s.fast_p(i).has_value()) << fast_p_name(i);
    EXPECT_DOUBLE_EQ(*s.fast_p(i), expected[i]) << fast_p_name(i);
  }
  EXPECT_FALSE(s.fast_p(fast_p_thresholds.size()).has_value());
  ASSERT_TRUE(s.geomean_speedup().has_value());
  EXPECT_NEAR(*s.geomean_speedup(), std::pow(0.5 * 1.0 * 1.25 * 4.0, 0.25), 1e-12);
  EXPECT_EQ(fast_p_name(0), "fast_0");
  EXPECT_EQ(fast_p_name(2), "fast_1.2");

  speed_summary other;
  other.add(passed(1), timed(2.5));
  s.merge(other);
  EXPECT_EQ(s.rollouts(), 9u);
  EXPECT_DOUBLE_EQ(*s.fast_p(4), 2.0 / 9);
}

// Nothing timed: undefined, not 0 (a run without timing must not read as "never fast").
TEST(SpeedSummary, NothingTimedIsUndefined) {
  speed_summary s;
  EXPECT_FALSE(s.fast_p(0).has_value());
  EXPECT_FALSE(s.geomean_speedup().has_value());
  s.add(passed(1), {});
  s.add(failed(), {});
  EXPECT_FALSE(s.fast_p(1).has_value());
  EXPECT_FALSE(s.geomean_speedup().has_value());
  EXPECT_EQ(s.rollouts(), 2u);
}

}  // namespace
}  // namespace leap
