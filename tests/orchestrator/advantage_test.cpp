#include "orchestrator/advantage.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace leap {
namespace {

advantage_config config_of(advantage_kind kind, double epsilon = 1e-6) {
  advantage_config c;
  c.kind = kind;
  c.epsilon = epsilon;
  return c;
}

struct advantage_case {
  std::string name;
  advantage_config config;
  std::vector<double> rewards;
  std::vector<double> expected;
};

TEST(Advantage, HandComputedGroups) {
  using enum advantage_kind;
  // {2,4,4,4,5,5,7,9}: mean 5, population std 2 (the sample std would be 2.138).
  const std::vector<double> classic = {2, 4, 4, 4, 5, 5, 7, 9};
  const double s = 2.0 + 1e-6;
  const std::vector<advantage_case> cases = {
      {"grpo uses the population std",
       config_of(grpo),
       classic,
       {-3 / s, -1 / s, -1 / s, -1 / s, 0, 0, 2 / s, 4 / s}},
      {"grpo epsilon adds to std",
       config_of(grpo, 1.0),
       classic,
       {-1.0, -1 / 3.0, -1 / 3.0, -1 / 3.0, 0, 0, 2 / 3.0, 4 / 3.0}},
      {"grpo epsilon 0", config_of(grpo, 0.0), {1.0, -1.0}, {1.0, -1.0}},
      {"grpo two-valued",
       config_of(grpo, 0.0),
       {1.0, 0.0, 0.0, 0.0},
       // mean 0.25, std sqrt(3)/4
       {0.75 / (std::sqrt(3.0) / 4), -0.25 / (std::sqrt(3.0) / 4), -0.25 / (std::sqrt(3.0) / 4),
        -0.25 / (std::sqrt(3.0) / 4)}},
      {"mean_only", config_of(mean_only), classic, {-3, -1, -1, -1, 0, 0, 2, 4}},
      {"none", config_of(none), classic, classic},
      {"none keeps equal rewards", config_of(none), {0.3, 0.3}, {0.3, 0.3}},
      {"grpo G=1", config_of(grpo), {0.7}, {0.0}},
      {"mean_only G=1", config_of(mean_only), {0.7}, {0.0}},
      {"none G=1", config_of(none), {0.7}, {0.7}},
      {"grpo empty", config_of(grpo), {}, {}},
      {"mean_only empty", config_of(mean_only), {}, {}},
      {"none empty", config_of(none), {}, {}},
  };
  for (const advantage_case& k : cases) {
    const std::vector<double> a = compute_advantages(k.config, k.rewards);
    ASSERT_EQ(a.size(), k.expected.size()) << k.name;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], k.expected[i], 1e-12) << k.name << " rollout " << i;
    }
  }
}

// Exactly 0, not a rounding residue of R - mean amplified by 1 / epsilon: 0.1 + 0.1 + 0.1 over 3
// is not 0.1 in binary floating point.
TEST(Advantage, AllEqualRewardsGiveExactlyZero) {
  const std::vector<std::vector<double>> groups = {
      {0.1, 0.1, 0.1}, {-1.0, -1.0}, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, {1.0 / 3, 1.0 / 3}};
  for (const advantage_kind kind : {advantage_kind::grpo, advantage_kind::mean_only}) {
    for (const auto& rewards : groups) {
      for (const double a : compute_advantages(config_of(kind), rewards)) {
        EXPECT_EQ(a, 0.0) << to_string(kind) << " reward " << rewards.front();
      }
    }
  }
}

TEST(Advantage, GrpoIsCentredAndScaled) {
  const std::vector<double> rewards = {1.0, 4.0 / 7, -2.0 / 7, -5.0 / 7, -5.0 / 7, 1.0 / 7};
  const std::vector<double> a = compute_advantages(config_of(advantage_kind::grpo, 0.0), rewards);
  double sum = 0.0;
  double squares = 0.0;
  for (const double x : a) {
    sum += x;
    squares += x * x;
  }
  EXPECT_NEAR(sum, 0.0, 1e-12);
  EXPECT_NEAR(squares / static_cast<double>(a.size()), 1.0, 1e-12);  // population variance 1
}

struct token_case {
  std::string name;
  std::vector<int> token_turn;
  double advantage;
  double gamma;
  std::vector<float> expected;
};

TEST(TokenAdvantages, HandComputedTrajectories) {
  constexpr int f = not_generated;
  // Prompt, turn 0, feedback, turn 1, feedback, turn 2: T = 3.
  const std::vector<int> three_turns = {f, f, 0, 0, 0, f, f, 1, 1, f, 2, 2, 2};
  const std::vector<token_case> cases = {
      // gamma^(3-t-1) * A: 0.25 * 0.8, 0.5 * 0.8, 0.8.
      {"positive, gamma 0.5",
       three_turns,
       0.8,
       0.5,
       {0, 0, 0.2F, 0.2F, 0.2F, 0, 0, 0.4F, 0.4F, 0, 0.8F, 0.8F, 0.8F}},
      {"negative: beta 1",
       three_turns,
       -0.6,
       0.5,
       {0, 0, -0.6F, -0.6F, -0.6F, 0, 0, -0.6F, -0.6F, 0, -0.6F, -0.6F, -0.6F}},
      {"zero takes the gamma branch and stays 0", three_turns, 0.0, 0.5,
       std::vector<float>(13, 0.0F)},
      {"gamma 1: no discount",
       three_turns,
       1.5,
       1.0,
       {0, 0, 1.5F, 1.5F, 1.5F, 0, 0, 1.5F, 1.5F, 0, 1.5F, 1.5F, 1.5F}},
      {"gamma 0.9, two turns", {0, 0, f, 1}, 2.0, 0.9, {1.8F, 1.8F, 0, 2.0F}},
      {"single turn keeps A", {f, 0, 0, 0}, 0.7, 0.5, {0, 0.7F, 0.7F, 0.7F}},
      // T comes from the largest index present, even when a turn in between has no token.
      {"missing middle turn", {0, 2}, 1.0, 0.5, {0.25F, 1.0F}},
      {"other negative indices are not generated", {-5, 0, -2}, 1.0, 0.5, {0, 1.0F, 0}},
      {"no generated token", {f, f, f}, 1.0, 0.5, {0, 0, 0}},
      {"empty", {}, 1.0, 0.5, {}},
  };
  for (const token_case& k : cases) {
    const std::vector<float> got = token_advantages(k.token_turn, k.advantage, k.gamma);
    ASSERT_EQ(got.size(), k.expected.size()) << k.name;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_FLOAT_EQ(got[i], k.expected[i]) << k.name << " token " << i;
    }
  }
}

// The last generated turn always carries the rollout-level advantage unchanged.
TEST(TokenAdvantages, LastTurnCarriesTheRolloutAdvantage) {
  for (const double a : {-2.0, -0.1, 0.0, 0.3, 1.7}) {
    for (const double gamma : {0.1, 0.5, 0.9, 1.0}) {
      const std::vector<int> turns = {0, 1, 1, 2, 3, 3};
      const std::vector<float> got = token_advantages(turns, a, gamma);
      EXPECT_FLOAT_EQ(got.back(), static_cast<float>(a)) << "A=" << a << " gamma=" << gamma;
      EXPECT_FLOAT_EQ(got.front(), static_cast<float>(a >= 0 ? std::pow(gamma, 3) * a : a));
    }
  }
}

TEST(AdvantageConfig, Defaults) {
  const advantage_config c;
  EXPECT_EQ(c.kind, advantage_kind::grpo);
  EXPECT_EQ(c.epsilon, 1e-6);
  EXPECT_EQ(c.gamma, 0.9);
}

}  // namespace
}  // namespace leap
