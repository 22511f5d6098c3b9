// The host reference's time kept in the compile cache (issue 31): other engines on the same cache
// (another `leap verify`, a verifier node, a resumed run) compare against the first one's
// measurement instead of timing the reference again; the timing repetitions are part of the key;
// a damaged entry is timed again and replaced. Real g++ builds and sandboxed runs on the CPU (the
// cpp kind: its reference is the same host program as the cuda kind's).
#include "sandbox/engine.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace leap::sandbox {
namespace {

using testing::fenced;

const std::string rtc_doubling =
    "void solve(const float* x, float* y, int n) {\n  for (int i = 0; i < n; ++i) y[i] = x[i] * "
    "2;\n}\n";

// Changes the year of every kept reference time's measured_at (its JSON stays valid and its times
// plausible: only the digest tells); returns how many entries it changed.
int rtc_damage_kept_times(const std::filesystem::path& folder) {
  return testing::damage_cache_entries(
      folder, "LREFTIM1 ",
      [](const std::string& bytes, std::size_t) -> std::optional<std::size_t> {
        const auto at = bytes.find("\"measured_at\":\"");
        if (at == std::string::npos) {
          return std::nullopt;
        }
        return at + 15 + 3;  // the year's last digit
      },
      [](char digit) { return digit == '1' ? '2' : '1'; });
}

struct rtc_verified {
  verdict v;
  std::uint64_t timings = 0;  // the engine's reference_timings() after it
};

// One verification of the doubling candidate by a fresh engine (as a new process would make).
rtc_verified rtc_verify(const engine_config& config) {
  auto e = engine::create(config);
  EXPECT_TRUE(e.ok()) << e.err().message;
  if (!e.ok()) {
    return {};
  }
  auto v = (*e)->verify(testing::doubling_task(), fenced("cpp", rtc_doubling));
  EXPECT_TRUE(v.ok()) << v.err().message;
  if (!v.ok()) {
    return {};
  }
  EXPECT_TRUE(v->passed) << v->feedback;
  EXPECT_TRUE(v->reference_time.has_value() && v->candidate_time.has_value() &&
              v->speedup.has_value())
      << v->feedback;
  return {v.value(), (*e)->reference_timings()};
}

TEST(ReferenceTimeCacheTest, KeptOnDiskPerRepetitionsAndTimedAgainWhenDamaged) {
  const testing::temp_folder scratch("leap-reftime-");
  ASSERT_FALSE(scratch.path().empty());
  const std::string& folder = scratch.path();
  engine_config config = testing::test_engine_config();
  config.cache_dir = folder;
  config.timing_reps = 5;

  const auto first = rtc_verify(config);
  ASSERT_TRUE(first.v.reference_time.has_value());
  EXPECT_EQ(first.timings, 1u);
  EXPECT_EQ(first.v.reference_time->reps, 5);
  EXPECT_NE(first.v.timing_note.find("reference timed now (kept in the compile cache)"),
            std::string::npos)
      << first.v.timing_note;

  // Another engine on the same cache: the reference's time is read back, this run's own times of
  // it are not used, and the speedup is over the first engine's median.
  const auto second = rtc_verify(config);
  ASSERT_TRUE(second.v.reference_time && second.v.candidate_time && second.v.speedup);
  EXPECT_EQ(second.timings, 0u);
  EXPECT_EQ(second.v.reference_time->median_ms, first.v.reference_time->median_ms);
  EXPECT_EQ(second.v.reference_time->q1_ms, first.v.reference_time->q1_ms);
  EXPECT_EQ(second.v.reference_time->q3_ms, first.v.reference_time->q3_ms);
  EXPECT_EQ(second.v.reference_time->reps, 5);
  EXPECT_NEAR(*second.v.speedup,
              first.v.reference_time->median_ms / second.v.candidate_time->median_ms,
              1e-9 * *second.v.speedup);
  EXPECT_NE(second.v.timing_note.find("reference time kept from 20"), std::string::npos)
      << second.v.timing_note;

  // Other timing repetitions: another protocol, another entry; the first one stays.
  config.timing_reps = 6;
  const auto six = rtc_verify(config);
  ASSERT_TRUE(six.v.reference_time.has_value());
  EXPECT_EQ(six.timings, 1u);
  EXPECT_EQ(six.v.reference_time->reps, 6);
  config.timing_reps = 5;
  const auto five = rtc_verify(config);
  ASSERT_TRUE(five.v.reference_time.has_value());
  EXPECT_EQ(five.timings, 0u);
  EXPECT_EQ(five.v.reference_time->median_ms, first.v.reference_time->median_ms);

  // A damaged entry is not trusted: the reference is timed again, its new time replaces the
  // entry, and the engine after it reads that one.
  EXPECT_EQ(rtc_damage_kept_times(folder), 2) << "at 5 and at 6 repetitions";
  const auto again = rtc_verify(config);
  ASSERT_TRUE(again.v.reference_time.has_value());
  EXPECT_EQ(again.timings, 1u);
  EXPECT_NE(again.v.timing_note.find("damaged"), std::string::npos) << again.v.timing_note;
  const auto after = rtc_verify(config);
  ASSERT_TRUE(after.v.reference_time.has_value());
  EXPECT_EQ(after.timings, 0u);
  EXPECT_EQ(after.v.reference_time->median_ms, again.v.reference_time->median_ms);
}

}  // namespace
}  // namespace leap::sandbox
