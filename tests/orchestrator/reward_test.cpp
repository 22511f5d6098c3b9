#include "orchestrator/reward.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace leap {
namespace {

rollout_outcome pass_at(int turn) { return {turn, turn}; }
rollout_outcome failure(int turns = 1) { return {0, turns}; }

reward_config rank_config() { return {}; }

std::vector<double> rank_rewards(const std::vector<rollout_outcome>& outcomes, int max_turns) {
  return compute_rewards(rank_config(), outcomes, max_turns);
}

// Outcomes with tier counts: counts[k] rollouts in tier k, tier k passing at turn k + 1 and the
// last tier failing; then shuffled by a fixed permutation (stride 5 is coprime with the sizes used,
// 6 and 8) so that the reward's order-preservation is tested too. tier_of receives each rollout's
// tier.
std::vector<rollout_outcome> group_of(const std::vector<int>& counts, std::vector<int>& tier_of) {
  std::vector<int> tiers;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    tiers.insert(tiers.end(), static_cast<std::size_t>(counts[k]), static_cast<int>(k));
  }
  const std::size_t g = tiers.size();
  tier_of.assign(g, 0);
  std::vector<rollout_outcome> outcomes(g);
  for (std::size_t i = 0; i < g; ++i) {
    const int tier = tiers[(i * 5) % g];
    tier_of[i] = tier;
    const bool failed = tier + 1 == static_cast<int>(counts.size());
    outcomes[i] = failed ? failure(static_cast<int>(counts.size()) - 1) : pass_at(tier + 1);
  }
  return outcomes;
}

// Sec. 3.4 of the paper, eqs. (7)-(9), for every split of G = 8 into (N1, N2, N3), M = 2.
TEST(RankReward, ClosedFormsForEverySplitOfEightWithTwoTurns) {
  int splits = 0;
  for (int n1 = 0; n1 <= 8; ++n1) {
    for (int n2 = 0; n1 + n2 <= 8; ++n2) {
      const int n3 = 8 - n1 - n2;
      ++splits;
      std::vector<int> tier_of;
      const std::vector<rollout_outcome> outcomes = group_of({n1, n2, n3}, tier_of);
      const std::vector<double> r = rank_rewards(outcomes, 2);
      ASSERT_EQ(r.size(), 8U);
      const double expected[3] = {(n2 + n3) / 7.0, (n3 - n1) / 7.0, -(n1 + n2) / 7.0};
      double sum = 0.0;
      for (std::size_t i = 0; i < r.size(); ++i) {
        EXPECT_DOUBLE_EQ(r[i], expected[tier_of[i]])
            << "N=(" << n1 << "," << n2 << "," << n3 << ") rollout " << i << " tier " << tier_of[i];
        EXPECT_GE(r[i], -1.0);
        EXPECT_LE(r[i], 1.0);
        sum += r[i];
      }
      EXPECT_NEAR(sum, 0.0, 1e-12) << "N=(" << n1 << "," << n2 << "," << n3 << ")";
    }
  }
  EXPECT_EQ(splits, 45);
}

// M = 3: a rollout in tier k beats every rollout in a later tier and loses to every one in an
// earlier tier: R = (sum_{j>k} N_j - sum_{j<k} N_j) / (G - 1). Every split of G = 6 into 4 tiers.
TEST(RankReward, TierFormulaForEverySplitOfSixWithThreeTurns) {
  int splits = 0;
  for (int a = 0; a <= 6; ++a) {
    for (int b = 0; a + b <= 6; ++b) {
      for (int c = 0; a + b + c <= 6; ++c) {
        const std::vector<int> counts = {a, b, c, 6 - a - b - c};
        ++splits;
        std::vector<int> tier_of;
        const std::vector<double> r = rank_rewards(group_of(counts, tier_of), 3);
        double sum = 0.0;
        for (std::size_t i = 0; i < r.size(); ++i) {
          const auto k = static_cast<std::size_t>(tier_of[i]);
          const auto tier = counts.begin() + static_cast<std::ptrdiff_t>(k);
          const int worse = std::accumulate(tier + 1, counts.end(), 0);
          const int better = std::accumulate(counts.begin(), tier, 0);
          EXPECT_DOUBLE_EQ(r[i], (worse - better) / 5.0)
              << "counts=(" << a << "," << b << "," << c << "," << counts[3] << ") rollout " << i;
          sum += r[i];
        }
        EXPECT_NEAR(sum, 0.0, 1e-12);
      }
    }
  }
  EXPECT_EQ(splits, 84);
}

struct reward_case {
  std::string name;
  std::vector<rollout_outcome> outcomes;
  int max_turns;
  std::vector<double> expected;
};

TEST(RankReward, HandComputedGroups) {
  const std::vector<reward_case> cases = {
      {"G=0", {}, 3, {}},
      {"G=1 pass", {pass_at(1)}, 3, {0.0}},
      {"G=1 failure", {failure()}, 3, {0.0}},
      {"G=2 pass beats failure", {pass_at(1), failure()}, 2, {1.0, -1.0}},
      {"G=2 later pass loses", {pass_at(2), pass_at(1)}, 2, {-1.0, 1.0}},
      {"G=2 tie of passes", {pass_at(1), pass_at(1)}, 2, {0.0, 0.0}},
      {"G=2 tie of failures", {failure(), failure(2)}, 2, {0.0, 0.0}},
      {"M=3 one per tier",
       {pass_at(1), pass_at(2), pass_at(3), failure(3)},
       3,
       {1.0, 1.0 / 3, -1.0 / 3, -1.0}},
      {"M=3 ties",
       {pass_at(1), pass_at(1), pass_at(3), failure(3), failure(3)},
       3,
       {0.75, 0.75, 0.0, -0.75, -0.75}},
      {"M=3 all second-turn", {pass_at(2), pass_at(2), pass_at(2)}, 3, {0.0, 0.0, 0.0}},
      {"M=3 lone debug pass among failures",
       {failure(3), pass_at(3), failure(3), failure(3)},
       3,
       {-1.0 / 3, 1.0, -1.0 / 3, -1.0 / 3}},
      // Out of contract: a pass after max_turns counts as a pass at max_turns.
      {"pass beyond M", {pass_at(3), pass_at(2), failure(2)}, 2, {0.5, 0.5, -1.0}},
      {"pass beyond M still loses to turn 1", {pass_at(5), pass_at(1)}, 2, {-1.0, 1.0}},
      {"negative turn is a failure", {{-2, 1}, pass_at(1)}, 2, {-1.0, 1.0}},
      {"max_turns 0 taken as 1", {pass_at(1), pass_at(2), failure()}, 0, {0.5, 0.5, -1.0}},
  };
  for (const reward_case& k : cases) {
    const std::vector<double> r = rank_rewards(k.outcomes, k.max_turns);
    ASSERT_EQ(r.size(), k.expected.size()) << k.name;
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT_DOUBLE_EQ(r[i], k.expected[i]) << k.name << " rollout " << i;
    }
  }
}

// An absolute winner gets exactly +1, an absolute loser exactly -1 (Sec. 3.2), for every G.
TEST(RankReward, AbsoluteWinnerAndLoserReachTheBounds) {
  for (int g = 2; g <= 64; ++g) {
    std::vector<rollout_outcome> outcomes(static_cast<std::size_t>(g), pass_at(2));
    outcomes.front() = pass_at(1);
    outcomes.back() = failure(2);
    const std::vector<double> r = rank_rewards(outcomes, 2);
    EXPECT_EQ(r.front(), 1.0) << "G=" << g;
    EXPECT_EQ(r.back(), -1.0) << "G=" << g;
  }
}

struct rank_case {
  int passed_at_turn;
  int max_turns;
  int expected;
};

TEST(RankReward, OutcomeRankTable) {
  const std::vector<rank_case> cases = {
      {0, 3, 0}, {1, 3, 3}, {2, 3, 2}, {3, 3, 1},  {4, 3, 1}, {100, 3, 1}, {-1, 3, 0},
      {1, 1, 1}, {2, 1, 1}, {1, 0, 1}, {3, -2, 1}, {0, 0, 0}, {1, 2, 2},   {2, 2, 1},
  };
  for (const rank_case& k : cases) {
    EXPECT_EQ(outcome_rank({k.passed_at_turn, 1}, k.max_turns), k.expected)
        << "passed_at_turn=" << k.passed_at_turn << " M=" << k.max_turns;
  }
}

TEST(StaticReward, ScalarPerTurnAndFailureReward) {
  reward_config c;
  c.kind = reward_kind::static_scalar;
  const std::vector<reward_case> cases = {
      {"defaults", {pass_at(1), pass_at(2), pass_at(3), failure(3)}, 3, {1.0, 0.5, 0.25, 0.0}},
      {"G=1", {pass_at(2)}, 3, {0.5}},
      {"beyond M clamps to M", {pass_at(4)}, 3, {0.25}},
      {"negative turn is a failure", {{-1, 1}}, 3, {0.0}},
      {"empty", {}, 3, {}},
  };
  for (const reward_case& k : cases) {
    EXPECT_EQ(compute_rewards(c, k.outcomes, k.max_turns), k.expected) << k.name;
  }

  c.failure_reward = -0.5;
  EXPECT_EQ(compute_rewards(c, std::vector{pass_at(1), failure()}, 3),
            (std::vector<double>{1.0, -0.5}));

  // Shorter than max_turns: the last value serves the later turns.
  c.static_rewards = {1.0, 0.4};
  EXPECT_EQ(compute_rewards(c, std::vector{pass_at(1), pass_at(2), pass_at(3), pass_at(9)}, 3),
            (std::vector<double>{1.0, 0.4, 0.4, 0.4}));
  // Empty: a pass is worth the binary 1.
  c.static_rewards.clear();
  EXPECT_EQ(compute_rewards(c, std::vector{pass_at(2), failure()}, 3),
            (std::vector<double>{1.0, -0.5}));
}

TEST(BinaryReward, OneForAnyPass) {
  reward_config c;
  c.kind = reward_kind::binary;
  EXPECT_EQ(compute_rewards(c, std::vector{pass_at(1), pass_at(3), failure(3), pass_at(7)}, 3),
            (std::vector<double>{1.0, 1.0, 0.0, 1.0}));
  c.failure_reward = -1.0;
  EXPECT_EQ(compute_rewards(c, std::vector{failure(), pass_at(2)}, 3),
            (std::vector<double>{-1.0, 1.0}));
  EXPECT_TRUE(compute_rewards(c, std::vector<rollout_outcome>{}, 3).empty());
}

// ---- rank_speed ------------------------------------------------------------------------------

reward_config rank_speed_config(double tie = 0.05) {
  reward_config c;
  c.kind = reward_kind::rank_speed;
  c.speed_tie = tie;
  return c;
}

pass_speed timed(double speedup) { return {speedup, std::nullopt}; }
pass_speed noisy(double speedup, double noise) { return {speedup, noise}; }
const pass_speed untimed{};

struct speed_case {
  std::string name;
  std::vector<rollout_outcome> outcomes;
  std::vector<pass_speed> speeds;
  std::vector<double> expected;
};

// Without speedups (or with all of one turn untimed) rank_speed is rank, for every split of G = 6
// over M = 3.
TEST(RankSpeedReward, WithoutSpeedupsItIsRank) {
  for (int a = 0; a <= 6; ++a) {
    for (int b = 0; a + b <= 6; ++b) {
      for (int c = 0; a + b + c <= 6; ++c) {
        std::vector<int> tier_of;
        const auto outcomes = group_of({a, b, c, 6 - a - b - c}, tier_of);
        const auto expected = rank_rewards(outcomes, 3);
        EXPECT_EQ(compute_rewards(rank_speed_config(), outcomes, 3), expected);
        const std::vector<pass_speed> none(outcomes.size());
        EXPECT_EQ(compute_rewards(rank_speed_config(), outcomes, 3, none), expected);
      }
    }
  }
}

TEST(RankSpeedReward, HandComputedGroups) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<speed_case> cases = {
      {"faster wins, within 5% ties",
       {pass_at(1), pass_at(1), pass_at(1)},
       {timed(2.0), timed(1.0), timed(1.04)},
       {1.0, -0.5, -0.5}},
      {"strict order", {pass_at(1), pass_at(1)}, {timed(1.0), timed(1.2)}, {-1.0, 1.0}},
      {"untimed ties with its turn's slowest",
       {pass_at(1), pass_at(1), pass_at(1), failure()},
       {timed(2.0), timed(1.0), untimed, untimed},
       {1.0, 0.0, 0.0, -1.0}},
      {"untimed never above a slow timed pass",
       {pass_at(1), pass_at(1)},
       {untimed, timed(0.5)},
       {0.0, 0.0}},
      {"the slowest is per turn",
       {pass_at(1), pass_at(2), pass_at(2), pass_at(1)},
       {timed(0.2), timed(3.0), untimed, timed(0.3)},
       // turn 1: 0.3 beats 0.2; turn 2: the untimed one stands in as 3.0 and ties
       {1.0 / 3, -2.0 / 3, -2.0 / 3, 1.0}},
      {"speed never crosses turns",
       {pass_at(2), pass_at(1), failure()},
       {timed(10.0), timed(0.1), timed(50.0)},
       {0.0, 1.0, -1.0}},
      {"a failure's speedup is ignored", {failure(), failure()}, {timed(5.0), untimed}, {0.0, 0.0}},
      {"not finite or not positive is untimed",
       {pass_at(1), pass_at(1), pass_at(1), pass_at(1)},
       {timed(inf), timed(nan), timed(-2.0), timed(0.0)},
       {0.0, 0.0, 0.0, 0.0}},
      {"stated noise of both widens the tie",
       {pass_at(1), pass_at(1)},
       {noisy(1.3, 0.2), noisy(1.0, 0.2)},
       {0.0, 0.0}},
      {"stated noise of both narrows the tie",
       {pass_at(1), pass_at(1)},
       {noisy(1.03, 0.01), noisy(1.0, 0.01)},
       {1.0, -1.0}},
      {"noise of one only: speed_tie",
       {pass_at(1), pass_at(1)},
       {noisy(1.03, 0.001), timed(1.0)},
       {0.0, 0.0}},
      {"fewer speeds than outcomes: the rest untimed, tied with the one timed",
       {pass_at(1), pass_at(1), pass_at(1), failure()},
       {timed(2.0)},
       {1.0 / 3, 1.0 / 3, 1.0 / 3, -1.0}},
      {"G=1", {pass_at(1)}, {timed(3.0)}, {0.0}},
  };
  for (const speed_case& k : cases) {
    const auto r = compute_rewards(rank_speed_config(), k.outcomes, 3, k.speeds);
    ASSERT_EQ(r.size(), k.expected.size()) << k.name;
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT_DOUBLE_EQ(r[i], k.expected[i]) << k.name << " rollout " << i;
    }
  }
  // A tie margin of 0: any difference counts.
  EXPECT_EQ(compute_rewards(rank_speed_config(0.0), std::vector{pass_at(1), pass_at(1)}, 3,
                            std::vector{timed(1.01), timed(1.0)}),
            (std::vector<double>{1.0, -1.0}));
}

// Speed only moves reward between passes of one turn: per turn, the rewards sum to rank's; the
// group sums to 0, every reward is in [-1, 1], and the fastest timed pass of a turn never gets
// less than an untimed pass of that turn.
TEST(RankSpeedReward, RedistributesWithinATurnOnly) {
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> turn(0, 3);
  std::uniform_real_distribution<double> log_speed(-2.0, 2.0);
  std::bernoulli_distribution has_time(0.7);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<rollout_outcome> outcomes;
    std::vector<pass_speed> speeds;
    for (int i = 0; i < 8; ++i) {
      const int t = turn(rng);
      outcomes.push_back(t == 0 ? failure(3) : pass_at(t));
      speeds.push_back(has_time(rng) ? timed(std::exp(log_speed(rng))) : untimed);
    }
    const auto fast = compute_rewards(rank_speed_config(), outcomes, 3, speeds);
    const auto plain = rank_rewards(outcomes, 3);
    double total = 0;
    for (int t = 0; t <= 3; ++t) {
      double a = 0;
      double b = 0;
      double best_timed = -2;
      double best_speed = 0;
      double untimed_reward = 2;
      for (std::size_t i = 0; i < 8; ++i) {
        if (outcomes[i].passed_at_turn != t) {
          continue;
        }
        a += fast[i];
        b += plain[i];
        if (t > 0 && speeds[i].speedup && *speeds[i].speedup > best_speed) {
          best_speed = *speeds[i].speedup;
          best_timed = fast[i];
        }
        if (t > 0 && !speeds[i].speedup) {
          untimed_reward = std::min(untimed_reward, fast[i]);
        }
      }
      EXPECT_NEAR(a, b, 1e-12) << "trial " << trial << " turn " << t;
      if (best_speed > 0 && untimed_reward < 2) {
        EXPECT_GE(best_timed, untimed_reward) << "trial " << trial << " turn " << t;
      }
    }
    for (const double r : fast) {
      EXPECT_GE(r, -1.0);
      EXPECT_LE(r, 1.0);
      total += r;
    }
    EXPECT_NEAR(total, 0.0, 1e-12) << "trial " << trial;
  }
}

// ---- speed bonus ----------------------------------------------------------------------------

TEST(SpeedBonus, ClippedLogSpeedup) {
  const speed_bonus_config c{0.1, 0.7};
  EXPECT_DOUBLE_EQ(speed_bonus(c, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(speed_bonus(c, 2.0), 0.1 * std::log(2.0));
  EXPECT_DOUBLE_EQ(speed_bonus(c, 0.5), -0.1 * std::log(2.0));
  EXPECT_DOUBLE_EQ(speed_bonus(c, 100.0), 0.07);
  EXPECT_DOUBLE_EQ(speed_bonus(c, 0.001), -0.07);
  EXPECT_EQ(speed_bonus(c, 0.0), 0.0);
  EXPECT_EQ(speed_bonus(c, std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(speed_bonus({0.0, 0.7}, 2.0), 0.0);
}

TEST(SpeedBonus, PaysPassesOnlyAndNeverPaysUntimedMore) {
  const double ln2 = std::log(2.0);
  reward_config binary;
  binary.kind = reward_kind::binary;
  binary.speed_bonus = {0.1, 0.7};
  reward_config statik = binary;
  statik.kind = reward_kind::static_scalar;
  statik.failure_reward = -0.5;
  struct bonus_case {
    std::string name;
    const reward_config* config;
    std::vector<rollout_outcome> outcomes;
    std::vector<pass_speed> speeds;
    std::vector<double> expected;
  };
  const std::vector<bonus_case> cases = {
      {"binary: fast, slow, untimed, failure",
       &binary,
       {pass_at(1), pass_at(1), pass_at(2), failure()},
       {timed(2.0), timed(0.5), untimed, timed(3.0)},
       {1.0 + 0.1 * ln2, 1.0 - 0.1 * ln2, 1.0 - 0.1 * ln2, 0.0}},
      {"binary: untimed among fast passes is a plain pass",
       &binary,
       {pass_at(1), pass_at(1)},
       {timed(1.5), untimed},
       {1.0 + 0.1 * std::log(1.5), 1.0}},
      {"binary: clipped both ways",
       &binary,
       {pass_at(1), pass_at(1)},
       {timed(1e6), timed(1e-6)},
       {1.07, 0.93}},
      {"static: per turn plus bonus, failure untouched",
       &statik,
       {pass_at(1), pass_at(2), failure(3)},
       {timed(2.0), timed(2.0), timed(2.0)},
       {1.0 + 0.1 * ln2, 0.5 + 0.1 * ln2, -0.5}},
      {"static: no speeds, no bonus", &statik, {pass_at(3), failure()}, {}, {0.25, -0.5}},
  };
  for (const bonus_case& k : cases) {
    const auto r = compute_rewards(*k.config, k.outcomes, 3, k.speeds);
    ASSERT_EQ(r.size(), k.expected.size()) << k.name;
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT_NEAR(r[i], k.expected[i], 1e-12) << k.name << " rollout " << i;
    }
  }
  // The tournament kinds take no bonus.
  reward_config rank;
  rank.speed_bonus = {0.1, 0.7};
  EXPECT_EQ(compute_rewards(rank, std::vector{pass_at(1), pass_at(1)}, 3,
                            std::vector{timed(2.0), untimed}),
            (std::vector<double>{0.0, 0.0}));
}

// ---- prime_echo ------------------------------------------------------------------------------

reward_config prime_echo_config(double echo) {
  reward_config c;
  c.kind = reward_kind::prime_echo;
  c.echo = echo;
  return c;
}

// M = 2, every split of G = 8 into (N1 first-turn passes, N2 second-turn passes, N3 failures):
// the first-turn tournament gives N1's rollouts (N2 + N3) / 7 and all others -N1 / 7; mixed with
// rank's eqs. (7)-(9) that is (N2 + N3) / 7, (e N3 - N1) / 7 and -(N1 + e N2) / 7.
TEST(PrimeEchoReward, ClosedFormsForEverySplitOfEightWithTwoTurns) {
  for (const double e : {0.0, 0.25, 0.5, 1.0}) {
    for (int n1 = 0; n1 <= 8; ++n1) {
      for (int n2 = 0; n1 + n2 <= 8; ++n2) {
        const int n3 = 8 - n1 - n2;
        std::vector<int> tier_of;
        const std::vector<rollout_outcome> outcomes = group_of({n1, n2, n3}, tier_of);
        const std::vector<double> r = compute_rewards(prime_echo_config(e), outcomes, 2);
        ASSERT_EQ(r.size(), 8U);
        const double expected[3] = {(n2 + n3) / 7.0, (e * n3 - n1) / 7.0, -(n1 + e * n2) / 7.0};
        double sum = 0.0;
        for (std::size_t i = 0; i < r.size(); ++i) {
          EXPECT_NEAR(r[i], expected[tier_of[i]], 1e-12)
              << "echo " << e << " split " << n1 << "," << n2 << "," << n3 << " rollout " << i;
          EXPECT_GE(r[i], -1.0);
          EXPECT_LE(r[i], 1.0);
          sum += r[i];
        }
        EXPECT_NEAR(sum, 0.0, 1e-12);
      }
    }
  }
}

// One rollout per outcome, M = 3, echo 0.5: ranks 3, 2, 1, 0 give rank 1, 1/3, -1/3, -1; the
// first-turn tournament 1, -1/3, -1/3, -1/3; their mean 1, 0, -1/3, -2/3.
TEST(PrimeEchoReward, HandComputedGroupOfFour) {
  const std::vector outcomes{pass_at(1), pass_at(2), pass_at(3), failure(3)};
  const std::vector<double> r = compute_rewards(prime_echo_config(0.5), outcomes, 3);
  const std::vector<double> expected{1.0, 0.0, -1.0 / 3.0, -2.0 / 3.0};
  ASSERT_EQ(r.size(), expected.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    EXPECT_NEAR(r[i], expected[i], 1e-12) << "rollout " << i;
  }
  // echo 0: a debug-turn pass earns exactly what a failure does.
  const std::vector<double> none = compute_rewards(prime_echo_config(0.0), outcomes, 3);
  EXPECT_NEAR(none[0], 1.0, 1e-12);
  for (std::size_t i = 1; i < none.size(); ++i) {
    EXPECT_NEAR(none[i], -1.0 / 3.0, 1e-12) << "rollout " << i;
  }
}

// echo = 1 is rank, and with one turn there is nothing to anchor (every pass is a first-turn pass),
// so every echo is rank; for all 84 splits of G = 6 into three pass turns and failures.
TEST(PrimeEchoReward, EqualsRankAtEchoOneAndWithOneTurn) {
  int splits = 0;
  for (int n1 = 0; n1 <= 6; ++n1) {
    for (int n2 = 0; n1 + n2 <= 6; ++n2) {
      for (int n3 = 0; n1 + n2 + n3 <= 6; ++n3) {
        ++splits;
        std::vector<int> tier_of;
        const auto outcomes = group_of({n1, n2, n3, 6 - n1 - n2 - n3}, tier_of);
        EXPECT_EQ(compute_rewards(prime_echo_config(1.0), outcomes, 3), rank_rewards(outcomes, 3));
        for (const double e : {0.0, 0.3, 1.0}) {
          // Passes beyond max_turns = 1 are clamped to turn 1, as rank clamps them. The mix
          // (1 - e) x + e x need not round back to x, hence a tolerance.
          const std::vector<double> r = compute_rewards(prime_echo_config(e), outcomes, 1);
          const std::vector<double> rank = rank_rewards(outcomes, 1);
          ASSERT_EQ(r.size(), rank.size());
          for (std::size_t i = 0; i < r.size(); ++i) {
            EXPECT_NEAR(r[i], rank[i], 1e-12) << "echo " << e << " rollout " << i;
          }
        }
      }
    }
  }
  EXPECT_EQ(splits, 84);
}

// The order is the paper's (first-turn pass >= later pass >= failure, earlier >= later) for any
// echo; a first-turn pass gains over a second-turn one at least (1 - echo) G / (G - 1), i.e. the
// first turn is the anchor a debug turn cannot make up; G = 1 and an empty group give no signal.
TEST(PrimeEchoReward, OrderBoundsAndDegenerateGroups) {
  std::mt19937 rng(35);
  std::uniform_int_distribution<int> turn(0, 4);
  std::uniform_int_distribution<int> size(2, 12);
  for (int trial = 0; trial < 500; ++trial) {
    const double e = trial % 5 / 4.0;
    std::vector<rollout_outcome> outcomes(static_cast<std::size_t>(size(rng)));
    for (rollout_outcome& o : outcomes) {
      const int t = turn(rng);
      o = t == 0 ? failure(4) : pass_at(t);
    }
    const std::vector<double> r = compute_rewards(prime_echo_config(e), outcomes, 4);
    const auto g = static_cast<double>(outcomes.size());
    double sum = 0.0;
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT_GE(r[i], -1.0 - 1e-12);
      EXPECT_LE(r[i], 1.0 + 1e-12);
      sum += r[i];
      for (std::size_t j = 0; j < r.size(); ++j) {
        const int ri = outcome_rank(outcomes[i], 4);
        const int rj = outcome_rank(outcomes[j], 4);
        if (ri > rj) {
          EXPECT_GE(r[i], r[j] - 1e-12) << "trial " << trial;
        }
        if (ri == 4 && rj < 4) {
          EXPECT_GE(r[i] - r[j], (1.0 - e) * g / (g - 1.0) - 1e-12) << "trial " << trial;
        }
      }
    }
    EXPECT_NEAR(sum, 0.0, 1e-12) << "trial " << trial;
  }
  EXPECT_EQ(compute_rewards(prime_echo_config(0.5), std::vector{pass_at(2)}, 3),
            (std::vector<double>{0.0}));
  EXPECT_TRUE(compute_rewards(prime_echo_config(0.5), std::vector<rollout_outcome>{}, 3).empty());
}

// Not a static reward in disguise: any static_rewards vector, after the group's affine
// normalisation (grpo or mean_only), keeps the ratio of the gaps (turn-1 pass - turn-2 pass) /
// (turn-2 pass - failure) fixed across groups. prime_echo's ratio is (G - e N3) / (e (N2 + N3)),
// which moves with the group's composition, so no static list reproduces it for every group.
TEST(PrimeEchoReward, GapRatioDependsOnTheGroupUnlikeStatic) {
  const auto ratio = [](const std::vector<rollout_outcome>& outcomes) {
    const std::vector<double> r = compute_rewards(prime_echo_config(0.5), outcomes, 2);
    return (r[0] - r[1]) / (r[1] - r[2]);  // rollouts 0, 1, 2 pass at 1, pass at 2, fail
  };
  // G = 4: (N1, N2, N3) = (1, 1, 2) gives (4 - 1) / (0.5 * 3) = 2; (1, 2, 1) gives 3.5 / 1.5.
  const double a = ratio({pass_at(1), pass_at(2), failure(2), failure(2)});
  const double b = ratio({pass_at(1), pass_at(2), failure(2), pass_at(2)});
  EXPECT_NEAR(a, 2.0, 1e-12);
  EXPECT_NEAR(b, 3.5 / 1.5, 1e-12);
  reward_config stat;
  stat.kind = reward_kind::static_scalar;
  stat.static_rewards = {1.0, 0.5};
  const auto static_ratio = [&](const std::vector<rollout_outcome>& outcomes) {
    const std::vector<double> r = compute_rewards(stat, outcomes, 2);
    return (r[0] - r[1]) / (r[1] - r[2]);
  };
  EXPECT_NEAR(static_ratio({pass_at(1), pass_at(2), failure(2), failure(2)}),
              static_ratio({pass_at(1), pass_at(2), failure(2), pass_at(2)}), 1e-12);
}

// An echo outside [0, 1] (the config refuses it) is clamped; NaN counts as the default 0.5.
TEST(PrimeEchoReward, OutOfRangeEchoIsClamped) {
  const std::vector outcomes{pass_at(1), pass_at(2), pass_at(3), failure(3)};
  EXPECT_EQ(compute_rewards(prime_echo_config(7.0), outcomes, 3),
            compute_rewards(prime_echo_config(1.0), outcomes, 3));
  EXPECT_EQ(compute_rewards(prime_echo_config(-2.0), outcomes, 3),
            compute_rewards(prime_echo_config(0.0), outcomes, 3));
  EXPECT_EQ(
      compute_rewards(prime_echo_config(std::numeric_limits<double>::quiet_NaN()), outcomes, 3),
      compute_rewards(prime_echo_config(0.5), outcomes, 3));
}

// Which kinds a speed bonus applies to, and which then pay for speed: the config's reward rules and
// gate.optimise.train ask these two, so a new kind is placed here once.
TEST(SpeedBonus, OnlyScalarKindsTakeItAndPayForSpeedWithIt) {
  struct expected {
    reward_kind kind;
    bool takes_bonus;
    bool pays_without_bonus;
    bool pays_with_bonus;
  };
  const expected table[] = {
      {reward_kind::rank, false, false, false},
      {reward_kind::static_scalar, true, false, true},
      {reward_kind::binary, true, false, true},
      {reward_kind::rank_speed, false, true, true},
      {reward_kind::prime_echo, false, false, false},
  };
  ASSERT_EQ(std::size(table), enum_names::count<reward_kind>());
  for (const auto& e : table) {
    SCOPED_TRACE(to_string(e.kind));
    EXPECT_EQ(takes_speed_bonus(e.kind), e.takes_bonus);
    reward_config config;
    config.kind = e.kind;
    EXPECT_EQ(pays_for_speed(config), e.pays_without_bonus);
    config.speed_bonus.weight = 0.5;
    EXPECT_EQ(pays_for_speed(config), e.pays_with_bonus);
  }
}

}  // namespace
}  // namespace leap
