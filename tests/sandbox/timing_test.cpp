// The timing statistics of a timed run and the speedup's noise: closed-form cases, then one timed
// verification through the engine.
#include "sandbox/engine.hpp"
#include "sandbox/verdict.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace leap::sandbox {
namespace {

TEST(TimingStats, QuartilesInterpolateBetweenTheSortedTimes) {
  const auto odd = timing_stats_of({9, 1, 8, 2, 7, 3, 6, 4, 5});
  EXPECT_EQ(odd.reps, 9);
  EXPECT_DOUBLE_EQ(odd.min_ms, 1);
  EXPECT_DOUBLE_EQ(odd.max_ms, 9);
  EXPECT_DOUBLE_EQ(odd.median_ms, 5);
  EXPECT_DOUBLE_EQ(odd.q1_ms, 3);
  EXPECT_DOUBLE_EQ(odd.q3_ms, 7);
  const auto even = timing_stats_of({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(even.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(even.q1_ms, 1.75);
  EXPECT_DOUBLE_EQ(even.q3_ms, 3.25);
  const auto one = timing_stats_of({2});
  EXPECT_DOUBLE_EQ(one.q1_ms, 2);
  EXPECT_DOUBLE_EQ(one.q3_ms, 2);
  EXPECT_EQ(timing_stats_of({}).reps, 0);
}

TEST(TimingStats, TheSpeedupsNoiseIsHalfEachSidesRelativeSpreadSummed) {
  const auto candidate = timing_stats_of({1, 2, 3, 4, 5});       // IQR 2, median 3
  const auto reference = timing_stats_of({10, 20, 30, 40, 50});  // IQR 20, median 30
  const auto noise = speedup_noise(candidate, reference);
  ASSERT_TRUE(noise.has_value());
  EXPECT_NEAR(*noise, 1.0 / 3.0 + 1.0 / 3.0, 1e-12);
  const auto steady = timing_stats_of({3, 3, 3, 3, 3});
  EXPECT_NEAR(*speedup_noise(steady, steady), 0.0, 1e-12);
  // Too few repetitions to say, or no time at all: unknown, never 0.
  EXPECT_FALSE(speedup_noise(timing_stats_of({1, 2, 3, 4}), reference).has_value());
  EXPECT_FALSE(speedup_noise(candidate, timing_stats_of({1, 2, 3})).has_value());
  EXPECT_FALSE(speedup_noise(timing_stats_of({0, 0, 0, 0, 0}), reference).has_value());
}

TEST(TimingStats, ATimedVerificationCarriesItsSpeedupAndItsNoise) {
  engine_config config = testing::test_engine_config();
  config.cache_dir = testing::test_cache_dir() / "timing-noise";
  config.timing_reps = 7;
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  const task t = testing::doubling_task();
  auto v = (*e)->verify(t, testing::fenced("cpp",
                                           "void solve(const float* x, float* y, int n) {\n"
                                           "  for (int i = 0; i < n; ++i) y[i] = x[i] * 2;\n}\n"));
  ASSERT_TRUE(v.ok()) << v.err().message;
  ASSERT_TRUE(v->passed) << v->feedback;
  ASSERT_TRUE(v->candidate_time && v->reference_time && v->speedup);
  EXPECT_EQ(v->candidate_time->reps, 7);
  EXPECT_LE(v->candidate_time->q1_ms, v->candidate_time->median_ms);
  EXPECT_LE(v->candidate_time->median_ms, v->candidate_time->q3_ms);
  ASSERT_TRUE(v->speedup_noise.has_value());
  EXPECT_TRUE(std::isfinite(*v->speedup_noise));
  EXPECT_GE(*v->speedup_noise, 0.0);
}

}  // namespace
}  // namespace leap::sandbox
