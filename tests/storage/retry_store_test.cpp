// The retry buffer in the store (issue 35): it survives closing and reopening, stays apart from
// other runs, and a store that never had one (every store made before it) reads as having none.
#include "storage/record_codec.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

namespace leap {
namespace {

using test::open_ok;
using test::scratch_dir;

retry_step_record make_retry(std::uint64_t step) {
  retry_step_record r;
  r.step = step;
  r.buffer.entries = {{7, step, step, 0}, {3, 1, step, 2}, {1ULL << 40, 0, 1, 1}};
  r.buffer.total = {11, 4, 5, 2, 1};
  r.retried = {0, 2, static_cast<std::uint32_t>(step)};
  r.counts = {2, 1, 1, 0, static_cast<std::uint32_t>(step % 3)};
  return r;
}

TEST(RetryStore, SurvivesCloseAndReopen) {
  scratch_dir dir;
  {
    auto store = open_ok(dir / "db");
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->put_group(test::make_group("run-a", 0, 0)).ok());
    for (std::uint64_t step : {2, 0, 1}) {
      ASSERT_TRUE(store->put_retry("run-a", make_retry(step)).ok());
    }
    ASSERT_TRUE(store->put_retry("run-ab", make_retry(9)).ok());
    ASSERT_TRUE(store->close().ok());
  }
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  auto all = store->retry_steps("run-a");
  ASSERT_TRUE(all.ok()) << all.err().message;
  ASSERT_EQ(all->size(), 3U);  // run-ab's is not run-a's
  for (std::uint64_t step = 0; step < 3; ++step) {
    EXPECT_EQ((*all)[step], make_retry(step));
  }
  auto one = store->get_retry("run-a", 1);
  ASSERT_TRUE(one.ok()) << one.err().message;
  ASSERT_TRUE(one->has_value());
  EXPECT_EQ(**one, make_retry(1));
  auto missing = store->get_retry("run-a", 5);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  // The per-turn resume records share the default family; neither scan sees the other's keys.
  auto turns = store->partial_turns("run-a");
  ASSERT_TRUE(turns.ok()) << turns.err().message;
  EXPECT_TRUE(turns->empty());
  // A rewrite replaces.
  auto changed = make_retry(1);
  changed.buffer.entries.clear();
  ASSERT_TRUE(store->put_retry("run-a", changed).ok());
  EXPECT_EQ(**store->get_retry("run-a", 1), changed);
}

TEST(RetryStore, AStoreWithoutRetriesHasNone) {
  scratch_dir dir;
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->put_group(test::make_group("run-a", 0, 0)).ok());
  auto all = store->retry_steps("run-a");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  EXPECT_FALSE(store->put_retry("", make_retry(0)).ok());
}

TEST(RetryStore, TruncatedRecordIsAnErrorNamingTheField) {
  const auto bytes = encode(make_retry(4));
  auto back = decode_retry(bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, make_retry(4));
  auto cut = decode_retry(std::string_view(bytes).substr(0, bytes.size() - 3));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.err().message.find("entries"), std::string::npos) << cut.err().message;
  EXPECT_FALSE(decode_turn(bytes).ok());  // another kind
}

}  // namespace
}  // namespace leap
