#include "storage/keys.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace leap {
namespace {

constexpr auto max64 = std::numeric_limits<std::uint64_t>::max();
constexpr auto max32 = std::numeric_limits<std::uint32_t>::max();

TEST(Keys, GroupKeyLayoutIsRunNulStepSplitGroupBigEndian) {
  const auto k = keys::group({"ab", 0x0102030405060708ULL, split_kind::validation, 0x0A0B0C0DU});
  EXPECT_EQ(k, std::string("ab\0\x01\x02\x03\x04\x05\x06\x07\x08\x01\x0A\x0B\x0C\x0D", 16));
  EXPECT_EQ(keys::step("ab", 258), std::string("ab\0\0\0\0\0\0\0\x01\x02", 11));
  EXPECT_EQ(keys::metric("r", "loss", 1), std::string("r\0loss\0\0\0\0\0\0\0\0\x01", 15));
  EXPECT_EQ(keys::task("t", {"r", 1, split_kind::train, 2}),
            std::string("t\0r\0\0\0\0\0\0\0\0\x01\0\0\0\0\x02", 17));
}

// Bytewise order of the keys is the order of (run, step, split, group), whatever the values.
TEST(Keys, GroupKeysSortLikeTheirFields) {
  std::vector<group_ref> refs;
  for (const std::string run : {"a", "a-", "ab", "b", "a\x01", "\xff"}) {
    for (const std::uint64_t step : std::vector<std::uint64_t>{0, 1, 255, 256, 1ULL << 32, max64}) {
      for (const auto split : {split_kind::train, split_kind::validation}) {
        for (const std::uint32_t group : {0U, 1U, 255U, 256U, max32}) {
          refs.push_back({run, step, split, group});
        }
      }
    }
  }
  auto by_fields = refs;
  std::sort(by_fields.begin(), by_fields.end(), [](const group_ref& a, const group_ref& b) {
    return std::tuple(a.run_id, a.step, a.split, a.group_index) <
           std::tuple(b.run_id, b.step, b.split, b.group_index);
  });
  auto by_key = refs;
  std::sort(by_key.begin(), by_key.end(),
            [](const group_ref& a, const group_ref& b) { return keys::group(a) < keys::group(b); });
  EXPECT_EQ(by_key, by_fields);
}

TEST(Keys, MetricKeysSortByRunNameStep) {
  const std::vector<std::string> ordered = {
      keys::metric("a", "x", 0),  keys::metric("a", "x", 1), keys::metric("a", "x", max64),
      keys::metric("a", "xy", 0), keys::metric("a", "y", 0), keys::metric("ab", "a", 0),
  };
  EXPECT_TRUE(std::is_sorted(ordered.begin(), ordered.end()));
}

TEST(Keys, EveryKeyParsesBack) {
  for (const group_ref& ref :
       {group_ref{"run", 0, split_kind::train, 0},
        group_ref{"r", max64, split_kind::validation, max32},
        group_ref{"with space/and:colon", 1ULL << 40, split_kind::train, 7}}) {
    SCOPED_TRACE(ref.run_id);
    EXPECT_EQ(keys::parse_group(keys::group(ref)), ref);
    const auto task = keys::parse_task(keys::task("kernelbench/1", ref));
    ASSERT_TRUE(task.has_value());
    EXPECT_EQ(task->first, "kernelbench/1");
    EXPECT_EQ(task->second, ref);
    const auto step = keys::parse_step(keys::step(ref.run_id, ref.step));
    ASSERT_TRUE(step.has_value());
    EXPECT_EQ(step->first, ref.run_id);
    EXPECT_EQ(step->second, ref.step);
    const auto metric = keys::parse_metric(keys::metric(ref.run_id, "accuracy@1", ref.step));
    ASSERT_TRUE(metric.has_value());
    EXPECT_EQ(metric->run_id, ref.run_id);
    EXPECT_EQ(metric->name, "accuracy@1");
    EXPECT_EQ(metric->step, ref.step);
    const auto turn = keys::parse_turn(keys::turn(ref, 3, max32));
    ASSERT_TRUE(turn.has_value());
    EXPECT_EQ(turn->group, ref);
    EXPECT_EQ(turn->rollout, 3u);
    EXPECT_EQ(turn->turn, max32);
    EXPECT_TRUE(keys::turn(ref, 3, 0).starts_with(keys::turns_of_group(ref)));
    EXPECT_TRUE(keys::turns_of_group(ref).starts_with(keys::turns_of_run(ref.run_id)));
    EXPECT_FALSE(keys::parse_turn(keys::group(ref)).has_value());
  }
}

TEST(Keys, MalformedKeysDoNotParse) {
  const auto good = keys::group({"r", 1, split_kind::train, 2});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"no terminator", "r"},
      {"empty run id", good.substr(1)},
      {"short tail", good.substr(0, good.size() - 1)},
      {"long tail", good + "x"},
      {"split byte 2", std::string("r\0\0\0\0\0\0\0\0\x01\x02\0\0\0\x02", 15)},
  };
  for (const auto& [name, key] : cases) {
    EXPECT_FALSE(keys::parse_group(key).has_value()) << name;
  }
  EXPECT_FALSE(keys::parse_step(std::string("r\0\x01", 3)).has_value());
  EXPECT_FALSE(keys::parse_metric(keys::step("r", 1)).has_value());
  EXPECT_FALSE(keys::parse_task(good).has_value());
}

TEST(Keys, PrefixEndCases) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""},       {"a", "b"},       {std::string("a\0", 2), "a\x01"},
      {"a\xff", "b"}, {"\xff\xff", ""}, {"a\x7f", "a\x80"},
  };
  for (const auto& [prefix, end] : cases) {
    EXPECT_EQ(keys::prefix_end(prefix), end) << "prefix of " << prefix.size() << " bytes";
  }
  // Every key of run "a" lies below the end of its prefix; run "a\x01" does not.
  const auto end = keys::prefix_end(keys::id_prefix("a"));
  EXPECT_LT(keys::group({"a", max64, split_kind::validation, max32}), end);
  EXPECT_GE(keys::group({"a\x01", 0, split_kind::train, 0}), end);
}

}  // namespace
}  // namespace leap
