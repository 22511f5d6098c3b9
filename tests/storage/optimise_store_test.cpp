// The optimisation decision stored with a group (gate.optimise, issue 31): written in the group's
// own write under a key of its own, read back by every group read (one group, a run's scan, a
// task's groups) after closing and reopening, and absent (not an error) for groups stored without
// one, as in stores made before it existed. The group record's bytes do not change.
#include "storage/keys.hpp"
#include "storage/record_codec.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::open_ok;
using test::scratch_dir;

TEST(OptimiseStore, TheDecisionTravelsWithItsGroupThroughEveryRead) {
  scratch_dir dir;
  auto opened = make_group("run-a", 0, 0, split_kind::train, "cpp/axpby");
  opened.optimise = optimise_decision::open;
  auto fast = make_group("run-a", 0, 1, split_kind::train, "cpp/axpby");
  fast.optimise = optimise_decision::closed_fast;
  auto plain = make_group("run-a", 1, 0, split_kind::train, "cpp/axpby");
  {
    auto store = open_ok(dir / "db");
    ASSERT_TRUE(store);
    for (const auto* g : {&opened, &fast, &plain}) {
      auto s = store->put_group(*g);
      ASSERT_TRUE(s.ok()) << s.err().message;
    }
    ASSERT_TRUE(store->close().ok());
  }
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  auto one = store->get_group({"run-a", 0, split_kind::train, 1});
  ASSERT_TRUE(one.ok()) << one.err().message;
  ASSERT_TRUE(one->has_value());
  EXPECT_EQ((*one)->optimise, optimise_decision::closed_fast);
  EXPECT_EQ(**one, fast);

  group_query query;
  query.run_id = "run-a";
  query.decode.tokens = false;  // replay's way of reading
  auto all = store->groups(query);
  ASSERT_TRUE(all.ok()) << all.err().message;
  ASSERT_EQ(all->size(), 3U);
  EXPECT_EQ((*all)[0].optimise, optimise_decision::open);
  EXPECT_EQ((*all)[1].optimise, optimise_decision::closed_fast);
  EXPECT_FALSE((*all)[2].optimise.has_value());

  std::vector<std::optional<optimise_decision>> by_task;
  auto s = store->for_each_group_of_task("cpp/axpby", "run-a", [&](group_record&& g) {
    by_task.push_back(g.optimise);
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(by_task, (std::vector<std::optional<optimise_decision>>{
                         optimise_decision::open, optimise_decision::closed_fast, std::nullopt}));

  // In-progress turns share the default family: no scan mistakes a decision for one.
  auto turns = store->partial_turns("run-a");
  ASSERT_TRUE(turns.ok()) << turns.err().message;
  EXPECT_TRUE(turns->empty());
}

TEST(OptimiseStore, TheGroupRecordsBytesAreThoseOfAGroupWithoutOne) {
  // Builds that do not know the decision read the group as before: it is not in the group's bytes.
  auto g = make_group("run", 2, 3);
  const auto without = encode(g);
  g.optimise = optimise_decision::open;
  EXPECT_EQ(encode(g), without);
  EXPECT_EQ(static_cast<std::uint8_t>(without[0]), trajectory_format_version);
}

TEST(OptimiseStore, TheDecisionsRecordRoundTripsAndRefusesDamage) {
  for (auto d : {optimise_decision::off, optimise_decision::closed_no_pass,
                 optimise_decision::closed_untimed, optimise_decision::closed_fast,
                 optimise_decision::closed_budget, optimise_decision::open}) {
    auto back = decode_optimise(encode_optimise(d));
    ASSERT_TRUE(back.ok()) << back.err().message;
    EXPECT_EQ(*back, d);
  }
  auto bytes = encode_optimise(optimise_decision::open);
  ASSERT_EQ(bytes.size(), 3U);  // version, kind, the decision's byte
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[1]), static_cast<std::uint8_t>(record_kind::optimise));
  auto unknown = bytes;
  unknown[2] = static_cast<char>(static_cast<std::uint8_t>(optimise_decision::open) + 1);
  EXPECT_FALSE(decode_optimise(unknown).ok());
  EXPECT_FALSE(decode_optimise(bytes + "x").ok());
  EXPECT_FALSE(decode_optimise(bytes.substr(0, 2)).ok());
  EXPECT_FALSE(decode_optimise(encode(partial_carry_record{})).ok());  // another kind
}

TEST(OptimiseStore, ItsKeysLieOutsideEveryOtherPrefixOfTheDefaultFamily) {
  const group_ref ref{"run", 4, split_kind::validation, 9};
  const auto key = keys::optimise(ref);
  for (const auto& other :
       {keys::turns_of_run("run"), keys::retries_of_run("run"), keys::carries_of_run("run")}) {
    EXPECT_FALSE(key.starts_with(other));
  }
  EXPECT_NE(key, keys::optimise({"run", 4, split_kind::train, 9}));
  EXPECT_NE(key, keys::optimise({"run", 4, split_kind::validation, 8}));
}

}  // namespace
}  // namespace leap
