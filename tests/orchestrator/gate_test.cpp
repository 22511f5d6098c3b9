#include "orchestrator/gate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace leap {
namespace {

constexpr auto easy = gate_decision::closed_easy;
constexpr auto hopeless = gate_decision::closed_hopeless;
constexpr auto no_debug = gate_decision::closed_no_debug;
constexpr auto open = gate_decision::open;

gate_config make_config(gate_policy policy, threshold_unit unit, double tau_min, double tau_max) {
  gate_config c;
  c.policy = policy;
  c.unit = unit;
  c.tau_min = tau_min;
  c.tau_max = tau_max;
  return c;
}

std::string describe(const gate_config& c, int n_fail, int g) {
  return to_string(c.policy) + " " + to_string(c.unit) + " tau=[" + std::to_string(c.tau_min) +
         ", " + std::to_string(c.tau_max) + "] G=" + std::to_string(g) +
         " N_fail=" + std::to_string(n_fail);
}

TEST(Gate, DefaultConfigIsThePapersDcpRange) {
  const gate_config c;
  EXPECT_EQ(c.policy, gate_policy::dcp);
  EXPECT_EQ(c.unit, threshold_unit::fraction);
  EXPECT_EQ(resolve_thresholds(c, 8), (fail_range{4, 8}));
}

// The paper's setting: G = 8, open when at least half the first turns failed.
TEST(Gate, PaperDefaultForEveryFailureCountOfEight) {
  const std::vector<gate_decision> expected = {no_debug, easy, easy, easy, open,
                                               open,     open, open, open};
  for (int n_fail = 0; n_fail <= 8; ++n_fail) {
    EXPECT_EQ(decide(gate_config{}, n_fail, 8), expected[static_cast<std::size_t>(n_fail)])
        << "N_fail=" << n_fail;
  }
}

struct decide_case {
  gate_policy policy;
  threshold_unit unit;
  double tau_min;
  double tau_max;
  int group_size;
  int n_fail;
  gate_decision expected;
};

TEST(Gate, DecisionTable) {
  using enum gate_policy;
  using enum threshold_unit;
  const std::vector<decide_case> cases = {
      // none never debugs.
      {none, fraction, 0.5, 1.0, 8, 0, no_debug},
      {none, fraction, 0.5, 1.0, 8, 1, no_debug},
      {none, fraction, 0.5, 1.0, 8, 4, no_debug},
      {none, fraction, 0.5, 1.0, 8, 8, no_debug},
      {none, count, 0, 100, 8, 5, no_debug},
      // full opens on any failure, whatever the thresholds say.
      {full, fraction, 0.5, 1.0, 8, 0, no_debug},
      {full, fraction, 0.5, 1.0, 8, 1, open},
      {full, fraction, 0.5, 1.0, 8, 3, open},
      {full, fraction, 0.5, 1.0, 8, 8, open},
      {full, count, 7, 7, 8, 1, open},
      {full, fraction, 0.5, 1.0, 1, 1, open},
      // dcp over fractions [0.25, 0.75] of 8: counts [2, 6].
      {dcp, fraction, 0.25, 0.75, 8, 0, no_debug},
      {dcp, fraction, 0.25, 0.75, 8, 1, easy},
      {dcp, fraction, 0.25, 0.75, 8, 2, open},
      {dcp, fraction, 0.25, 0.75, 8, 6, open},
      {dcp, fraction, 0.25, 0.75, 8, 7, hopeless},
      {dcp, fraction, 0.25, 0.75, 8, 8, hopeless},
      // Fractions between counts: ceil(0.3 * 8) = 3, floor(0.7 * 8) = 5.
      {dcp, fraction, 0.3, 0.7, 8, 2, easy},
      {dcp, fraction, 0.3, 0.7, 8, 3, open},
      {dcp, fraction, 0.3, 0.7, 8, 5, open},
      {dcp, fraction, 0.3, 0.7, 8, 6, hopeless},
      // 0.3 and 0.7 are not exact in binary; of 10 they still mean 3 and 7.
      {dcp, fraction, 0.3, 0.7, 10, 2, easy},
      {dcp, fraction, 0.3, 0.7, 10, 3, open},
      {dcp, fraction, 0.3, 0.7, 10, 7, open},
      {dcp, fraction, 0.3, 0.7, 10, 8, hopeless},
      // 0.28 * 25 is 7.000000000000001 and 0.58 * 50 is 28.999999999999996 in binary: the rounding
      // tolerance keeps them 7 and 29.
      {dcp, fraction, 0.28, 1.0, 25, 7, open},
      {dcp, fraction, 0.28, 1.0, 25, 6, easy},
      {dcp, fraction, 0.14, 0.58, 50, 29, open},
      {dcp, fraction, 0.14, 0.58, 50, 30, hopeless},
      // The paper's "<= 50%" range (easier problems): fail fraction in (0, 0.5].
      {dcp, fraction, 0.0, 0.5, 8, 0, no_debug},
      {dcp, fraction, 0.0, 0.5, 8, 1, open},
      {dcp, fraction, 0.0, 0.5, 8, 4, open},
      {dcp, fraction, 0.0, 0.5, 8, 5, hopeless},
      // Counts.
      {dcp, count, 2, 6, 8, 1, easy},
      {dcp, count, 2, 6, 8, 2, open},
      {dcp, count, 2, 6, 8, 6, open},
      {dcp, count, 2, 6, 8, 7, hopeless},
      {dcp, count, 0, 8, 8, 0, no_debug},  // tau_min 0 still never opens a group without failure
      {dcp, count, 0, 8, 8, 1, open},
      {dcp, count, 2.5, 6.5, 8, 2, easy},  // N_fail >= 2.5 means 3
      {dcp, count, 2.5, 6.5, 8, 3, open},
      {dcp, count, 2.5, 6.5, 8, 6, open},
      {dcp, count, 2.5, 6.5, 8, 7, hopeless},
      {dcp, count, 4, 100, 8, 8, open},  // tau_max beyond G
      // Tiny groups.
      {dcp, fraction, 0.5, 1.0, 1, 0, no_debug},
      {dcp, fraction, 0.5, 1.0, 1, 1, open},
      {dcp, fraction, 0.5, 1.0, 2, 1, open},
      {dcp, fraction, 0.5, 1.0, 2, 2, open},
      {dcp, fraction, 0.6, 1.0, 2, 1, easy},
      // An empty range opens nothing: below lo is easy, above hi hopeless.
      {dcp, fraction, 0.3, 0.35, 8, 2, easy},
      {dcp, fraction, 0.3, 0.35, 8, 3, hopeless},
      {dcp, count, 6, 2, 8, 4, easy},
      // dcp_adaptive through the stateless decide: the static thresholds.
      {dcp_adaptive, fraction, 0.5, 1.0, 8, 3, easy},
      {dcp_adaptive, fraction, 0.5, 1.0, 8, 4, open},
      {dcp_adaptive, count, 2, 6, 8, 7, hopeless},
      {dcp_adaptive, count, 2, 6, 8, 0, no_debug},
      // Out of contract: n_fail clamped to [0, G], G < 1 decides closed_no_debug.
      {dcp, fraction, 0.5, 1.0, 8, -3, no_debug},
      {dcp, fraction, 0.5, 1.0, 8, 12, open},
      {dcp, fraction, 0.25, 0.75, 8, 12, hopeless},
      {full, fraction, 0.5, 1.0, 0, 0, no_debug},
      {full, fraction, 0.5, 1.0, -4, 2, no_debug},
      {dcp, fraction, 0.5, 1.0, 0, 1, no_debug},
  };
  for (const decide_case& k : cases) {
    const gate_config c = make_config(k.policy, k.unit, k.tau_min, k.tau_max);
    EXPECT_EQ(decide(c, k.n_fail, k.group_size), k.expected)
        << describe(c, k.n_fail, k.group_size) << ": got "
        << to_string(decide(c, k.n_fail, k.group_size));
  }
}

struct resolve_case {
  threshold_unit unit;
  double tau_min;
  double tau_max;
  int group_size;
  fail_range expected;
};

TEST(Gate, RulingRangeIsWhatEachPolicyOpens) {
  // The range recorded beside a decision must be the one the decision used: every count inside it
  // opens the group and every count outside does not.
  for (const auto policy :
       {gate_policy::none, gate_policy::full, gate_policy::dcp, gate_policy::dcp_adaptive}) {
    gate_config c;
    c.policy = policy;
    adaptive_gate gate(c);
    const int g = 8;
    const fail_range range = gate.ruling_range(g);
    for (int n = 1; n <= g; ++n) {
      adaptive_gate fresh(c);
      const bool opens = fresh.decide_and_record(n, g) == gate_decision::open;
      EXPECT_EQ(opens, range.lo <= n && n <= range.hi)
          << "policy " << static_cast<int>(policy) << ", " << n << " of " << g;
    }
  }
  gate_config none;
  none.policy = gate_policy::none;
  EXPECT_EQ(adaptive_gate(none).ruling_range(8), (fail_range{1, 0}));
  gate_config full;
  full.policy = gate_policy::full;
  EXPECT_EQ(adaptive_gate(full).ruling_range(8), (fail_range{1, 8}));
}

TEST(Gate, ResolveThresholdsTable) {
  using enum threshold_unit;
  const double nan = std::nan("");
  const std::vector<resolve_case> cases = {
      {fraction, 0.5, 1.0, 8, {4, 8}},
      {fraction, 0.5, 1.0, 7, {4, 7}},  // ceil(3.5)
      {fraction, 0.5, 0.5, 7, {4, 3}},  // 3.5 failures is no count: empty
      {fraction, 0.25, 0.75, 8, {2, 6}},
      {fraction, 0.3, 0.7, 10, {3, 7}},
      {fraction, 0.28, 0.56, 25, {7, 14}},  // 7.000000000000001, 14.000000000000002
      {fraction, 0.14, 0.58, 50, {7, 29}},  // 7.000000000000001, 28.999999999999996
      {fraction, 0.1, 0.9, 10, {1, 9}},
      {fraction, 0.0, 1.0, 8, {1, 8}},
      {fraction, -0.5, 2.0, 8, {1, 8}},
      {fraction, 0.5, 1.0, 1, {1, 1}},
      {fraction, 0.5, 1.0, 16, {8, 16}},
      {count, 4, 8, 8, {4, 8}},
      {count, 0, 3, 8, {1, 3}},
      {count, 2.5, 6.5, 8, {3, 6}},
      {count, 3, 100, 8, {3, 8}},
      {count, 20, 30, 8, {9, 8}},
      {count, 1e300, 1e300, 8, {9, 8}},
      {fraction, nan, 1.0, 8, {9, 8}},
      {fraction, 0.5, nan, 8, {4, 0}},
      {fraction, 0.5, 1.0, 0, {1, 0}},
  };
  for (const resolve_case& k : cases) {
    const gate_config c = make_config(gate_policy::dcp, k.unit, k.tau_min, k.tau_max);
    const fail_range got = resolve_thresholds(c, k.group_size);
    EXPECT_EQ(got, k.expected) << describe(c, 0, k.group_size) << ": got [" << got.lo << ", "
                               << got.hi << "]";
  }
}

// ceil/floor promise: a fraction never opens a group whose failure fraction lies outside
// [tau_min, tau_max], and opens every one inside. Thresholds k/20 keep the check in integers.
TEST(Gate, FractionsOpenExactlyTheGroupsInsideTheRange) {
  for (int group_size = 1; group_size <= 16; ++group_size) {
    for (int lo20 = 0; lo20 <= 20; ++lo20) {
      for (int hi20 = lo20; hi20 <= 20; ++hi20) {
        const gate_config c =
            make_config(gate_policy::dcp, threshold_unit::fraction, lo20 / 20.0, hi20 / 20.0);
        for (int n_fail = 0; n_fail <= group_size; ++n_fail) {
          // n_fail / G >= lo20 / 20  <=>  20 * n_fail >= lo20 * G.
          const bool inside = 20 * n_fail >= lo20 * group_size && 20 * n_fail <= hi20 * group_size;
          EXPECT_EQ(is_open(decide(c, n_fail, group_size)), inside && n_fail > 0)
              << describe(c, n_fail, group_size);
        }
      }
    }
  }
}

TEST(Gate, QuantileIsLinearInterpolationLikeNumpy) {
  const std::vector<double> v = {4.0, 1.0, 3.0, 2.0};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(quantile_linear(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(quantile_linear(v, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile_linear(v, 0.95), 3.85);  // numpy.quantile([1,2,3,4], 0.95)
  EXPECT_DOUBLE_EQ(quantile_linear(v, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(quantile_linear(v, 1.0 / 3.0), 2.0);
  EXPECT_DOUBLE_EQ(quantile_linear(v, -1.0), 1.0);  // clamped
  EXPECT_DOUBLE_EQ(quantile_linear(v, 7.0), 4.0);
  const std::vector<double> one = {0.625};
  EXPECT_DOUBLE_EQ(quantile_linear(one, 0.3), 0.625);
  EXPECT_TRUE(std::isnan(quantile_linear(std::vector<double>{}, 0.5)));
  EXPECT_TRUE(std::isnan(quantile_linear(v, std::nan(""))));
}

gate_config adaptive_config() {
  gate_config c;
  c.policy = gate_policy::dcp_adaptive;
  c.adaptive_window = 8;
  c.adaptive_min_groups = 4;
  c.adaptive_low_quantile = 0.5;
  c.adaptive_high_quantile = 0.95;
  return c;  // static tau: fractions [0.5, 1.0], counts [4, 8] of 8
}

TEST(AdaptiveGate, StaticThresholdsUntilMinGroupsSeen) {
  adaptive_gate gate(adaptive_config());
  EXPECT_EQ(gate.current_range(8), (fail_range{4, 8}));
  // Three groups with one failure each: still static, so one failure is easy.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(gate.decide_and_record(1, 8), easy);
  }
  EXPECT_EQ(gate.groups_seen(), 3U);
  EXPECT_EQ(gate.current_range(8), (fail_range{4, 8}));
  // The fourth is decided before it is recorded: static again.
  EXPECT_EQ(gate.decide_and_record(1, 8), easy);
  EXPECT_EQ(gate.groups_seen(), 4U);
  // Now every fraction in the window is 1/8: both quantiles 1/8, the range is {1, 1}.
  EXPECT_EQ(gate.current_range(8), (fail_range{1, 1}));
  EXPECT_EQ(gate.decide_and_record(1, 8), open);
  EXPECT_EQ(gate.decide_and_record(2, 8), hopeless);
}

// The thresholds follow the distribution of failure fractions as it shifts from easy groups
// (1-4 failures of 8) to hard ones (5-8 failures of 8).
TEST(AdaptiveGate, ThresholdsFollowAShiftingDistribution) {
  adaptive_gate gate(adaptive_config());
  for (int round = 0; round < 2; ++round) {
    for (int n_fail = 1; n_fail <= 4; ++n_fail) {
      (void)gate.decide_and_record(n_fail, 8);
    }
  }
  // Window {1,1,2,2,3,3,4,4}/8: median 2.5/8 -> ceil 3; q95 at h = 6.65 -> 4/8 -> 4.
  EXPECT_EQ(gate.current_range(8), (fail_range{3, 4}));
  EXPECT_EQ(gate.current_range(16), (fail_range{5, 8}));  // 0.3125 * 16 = 5, 0.5 * 16 = 8
  {
    adaptive_gate probe = gate;
    EXPECT_EQ(probe.decide_and_record(2, 8), easy);
    EXPECT_EQ(probe.decide_and_record(3, 8), open);
    EXPECT_EQ(probe.decide_and_record(5, 8), hopeless);
  }
  // The first round evicted by hard groups: {1,2,3,4,5,6,7,8}/8.
  for (int n_fail = 5; n_fail <= 8; ++n_fail) {
    (void)gate.decide_and_record(n_fail, 8);
  }
  EXPECT_EQ(gate.groups_seen(), 8U);
  // Median (4 + 5) / 2 / 8 -> ceil(4.5) = 5; q95 at h = 6.65: 7 + 0.65 -> floor(7.65) = 7.
  EXPECT_EQ(gate.current_range(8), (fail_range{5, 7}));
  for (int n_fail = 5; n_fail <= 8; ++n_fail) {
    (void)gate.decide_and_record(n_fail, 8);
  }
  // Window {5,5,6,6,7,7,8,8}/8: median 6.5 -> 7; q95 -> 8.
  EXPECT_EQ(gate.current_range(8), (fail_range{7, 8}));
  EXPECT_EQ(gate.decide_and_record(6, 8), easy);
  EXPECT_EQ(gate.decide_and_record(7, 8), open);
  EXPECT_EQ(gate.decide_and_record(8, 8), open);
  EXPECT_EQ(gate.groups_seen(), 8U);  // the window never grows past adaptive_window
}

TEST(AdaptiveGate, GroupsWithoutFailureShapeTheDistributionButNeverOpen) {
  adaptive_gate gate(adaptive_config());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(gate.decide_and_record(0, 8), no_debug);
  }
  // Both quantiles 0: lo is raised to 1 and hi to lo, never an empty range.
  EXPECT_EQ(gate.current_range(8), (fail_range{1, 1}));
  EXPECT_EQ(gate.decide_and_record(0, 8), no_debug);
  EXPECT_EQ(gate.decide_and_record(1, 8), open);
}

TEST(AdaptiveGate, RoundingNeverEmptiesTheAdaptiveRange) {
  gate_config c = adaptive_config();
  c.adaptive_low_quantile = 0.5;
  c.adaptive_high_quantile = 0.5;
  adaptive_gate gate(c);
  for (const int n_fail : {1, 1, 2, 2}) {
    (void)gate.decide_and_record(n_fail, 4);
  }
  // Median 1.5/4 of 4: ceil 2 > floor 1, so hi becomes 2.
  EXPECT_EQ(gate.current_range(4), (fail_range{2, 2}));
}

TEST(AdaptiveGate, OtherPoliciesDecideAsTheStatelessGate) {
  for (const gate_policy policy : {gate_policy::none, gate_policy::full, gate_policy::dcp}) {
    gate_config c = adaptive_config();
    c.policy = policy;
    adaptive_gate gate(c);
    for (int round = 0; round < 3; ++round) {
      for (int n_fail = 0; n_fail <= 8; ++n_fail) {
        EXPECT_EQ(gate.decide_and_record(n_fail, 8), decide(c, n_fail, 8))
            << to_string(policy) << " N_fail=" << n_fail;
      }
    }
    EXPECT_EQ(gate.groups_seen(), 8U);
    EXPECT_EQ(gate.current_range(8), resolve_thresholds(c, 8));
  }
}

TEST(AdaptiveGate, DegenerateConfigsKeepTheStaticThresholds) {
  gate_config no_window = adaptive_config();
  no_window.adaptive_window = 0;
  gate_config min_above_window = adaptive_config();
  min_above_window.adaptive_min_groups = 9;
  gate_config nan_quantile = adaptive_config();
  nan_quantile.adaptive_high_quantile = std::nan("");
  for (const gate_config& c : {no_window, min_above_window, nan_quantile}) {
    adaptive_gate gate(c);
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(gate.decide_and_record(1, 8), easy);
    }
    EXPECT_EQ(gate.current_range(8), (fail_range{4, 8}));
  }
}

TEST(AdaptiveGate, MinGroupsZeroAdaptsFromTheFirstGroup) {
  gate_config c = adaptive_config();
  c.adaptive_min_groups = 0;
  adaptive_gate gate(c);
  EXPECT_EQ(gate.decide_and_record(2, 8), easy);  // nothing seen yet: static [4, 8]
  EXPECT_EQ(gate.current_range(8), (fail_range{2, 2}));
}

TEST(AdaptiveGate, OutOfContractGroupsAreClampedOrIgnored) {
  adaptive_gate gate(adaptive_config());
  EXPECT_EQ(gate.decide_and_record(3, 0), no_debug);
  EXPECT_EQ(gate.decide_and_record(3, -1), no_debug);
  EXPECT_EQ(gate.groups_seen(), 0U);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(gate.decide_and_record(12, 8), open);  // clamped to 8 of 8
  }
  EXPECT_EQ(gate.current_range(8), (fail_range{8, 8}));
  EXPECT_EQ(gate.current_range(0), (fail_range{1, 0}));
}

// record() builds the history decide_and_record() builds (a resumed run replays the stored groups
// with it): the same clamping, the same ignored groups, the same window. The history is private,
// so it is compared through what it determines: its size and the thresholds for every G.
TEST(AdaptiveGate, RecordBuildsTheHistoryDecideAndRecordBuilds) {
  const std::vector<std::pair<int, int>> groups = {
      {1, 8}, {3, 0}, {5, 8}, {12, 8}, {0, 8}, {2, 4},  {-1, 8}, {7, 8}, {3, 6},
      {4, 8}, {6, 8}, {1, 2}, {8, 8},  {2, 8}, {3, -2}, {5, 8},  {6, 16}};
  adaptive_gate decided(adaptive_config());
  adaptive_gate recorded(adaptive_config());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto [n_fail, size] = groups[i];
    (void)decided.decide_and_record(n_fail, size);
    recorded.record(n_fail, size);
    ASSERT_EQ(recorded.groups_seen(), decided.groups_seen()) << "after group " << i;
    for (int g = 0; g <= 16; ++g) {
      ASSERT_EQ(recorded.current_range(g), decided.current_range(g))
          << "after group " << i << ", G=" << g;
    }
  }
  EXPECT_EQ(recorded.groups_seen(), 8U);  // the window's cap
  for (int n_fail = 0; n_fail <= 8; ++n_fail) {
    adaptive_gate a = decided;
    adaptive_gate b = recorded;
    EXPECT_EQ(b.decide_and_record(n_fail, 8), a.decide_and_record(n_fail, 8)) << n_fail;
  }
  gate_config no_window = adaptive_config();
  no_window.adaptive_window = 0;
  adaptive_gate none(no_window);
  none.record(3, 8);
  EXPECT_EQ(none.groups_seen(), 0U);
}

// ---- Optimisation turns (issue 31) ---------------------------------------------------------

optimise_config optimise_at(double speedup, int max_turns = 1) {
  optimise_config c;
  c.speedup = speedup;
  c.max_turns = max_turns;
  return c;
}

struct optimise_case {
  const char* name;
  optimise_config config;
  std::vector<double> pass_speedups;
  int turns_left;
  optimise_decision expected;
};

TEST(GateOptimise, DecisionTable) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr double inf = std::numeric_limits<double>::infinity();
  const std::vector<optimise_case> cases = {
      {"off by default", optimise_config{}, {0.5, 0.9}, 2, optimise_decision::off},
      {"off with a zero factor", optimise_at(0.0), {0.5}, 2, optimise_decision::off},
      {"off with a NaN factor", optimise_at(nan), {0.5}, 2, optimise_decision::off},
      {"every pass below the factor",
       optimise_at(1.2),
       {0.5, 1.1, 0.9},
       2,
       optimise_decision::open},
      {"a pass exactly at the factor does not beat it",
       optimise_at(1.2),
       {1.2, 0.8},
       1,
       optimise_decision::open},
      {"one pass above the factor",
       optimise_at(1.2),
       {0.5, 1.21, 0.9},
       2,
       optimise_decision::closed_fast},
      {"no pass", optimise_at(1.2), {}, 2, optimise_decision::closed_no_pass},
      {"a pass without timing", optimise_at(1.2), {0.5, 0.0}, 2, optimise_decision::closed_untimed},
      {"a NaN speedup is not a measurement",
       optimise_at(1.2),
       {nan, 0.5},
       2,
       optimise_decision::closed_untimed},
      {"an infinite speedup is not a measurement",
       optimise_at(1.2),
       {inf},
       2,
       optimise_decision::closed_untimed},
      {"a negative speedup is not a measurement",
       optimise_at(1.2),
       {-1.0},
       2,
       optimise_decision::closed_untimed},
      {"untimed wins over fast: no claim about speed",
       optimise_at(1.2),
       {0.0, 3.0},
       2,
       optimise_decision::closed_untimed},
      {"no turn left under rollout.max_turns",
       optimise_at(1.2),
       {0.5},
       0,
       optimise_decision::closed_budget},
      {"gate.optimise.max_turns 0",
       optimise_at(1.2, 0),
       {0.5},
       2,
       optimise_decision::closed_budget},
      {"fast wins over budget", optimise_at(1.2), {1.5}, 0, optimise_decision::closed_fast},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(decide_optimise(c.config, c.pass_speedups, c.turns_left), c.expected) << c.name;
  }
}

// The DCP decision never depends on gate.optimise.
TEST(GateOptimise, DcpDecisionIsTheSameWithOptimisationOn) {
  gate_config on;
  on.optimise = optimise_at(1.2, 2);
  for (int n_fail = 0; n_fail <= 8; ++n_fail) {
    EXPECT_EQ(decide(on, n_fail, 8), decide(gate_config{}, n_fail, 8)) << n_fail;
  }
}

struct continue_case {
  const char* name;
  optimise_config config;
  bool passed;
  double speedup;
  int optimise_turns;
  int turns_left;
  bool expected;
};

TEST(GateOptimise, ContinueTable) {
  const std::vector<continue_case> cases = {
      {"slow pass, budget left", optimise_at(1.2, 3), true, 1.1, 1, 1, true},
      {"fast pass: done", optimise_at(1.2, 3), true, 1.3, 1, 1, false},
      {"failed optimisation turn: done", optimise_at(1.2, 3), false, 0.0, 1, 1, false},
      {"untimed pass: done", optimise_at(1.2, 3), true, 0.0, 1, 1, false},
      {"optimisation turns spent", optimise_at(1.2, 2), true, 1.1, 2, 5, false},
      {"rollout.max_turns spent", optimise_at(1.2, 3), true, 1.1, 1, 0, false},
      {"off", optimise_config{}, true, 1.1, 0, 5, false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(continue_optimising(c.config, c.passed, c.speedup, c.optimise_turns, c.turns_left),
              c.expected)
        << c.name;
  }
}

TEST(GateOptimise, FeedbackSaysCorrectTheSpeedupTheGoalAndAsksForFaster) {
  EXPECT_EQ(optimise_feedback(0.847, 1.2),
            "Your solution is correct. Its measured speedup over the reference implementation is "
            "0.85x; the goal is a speedup above 1.20x. Write a faster version that still produces "
            "correct results.");
  EXPECT_NE(optimise_feedback(1.5, 2.0).find("1.50x"), std::string::npos);
  EXPECT_NE(optimise_feedback(1.5, 2.0).find("above 2.00x"), std::string::npos);
}

}  // namespace
}  // namespace leap
