// The profile of a turn (verifier.profile, issue 34), stored under a key of its own whenever it
// arrives, before or after its group: it round-trips through the codec and a reopened store, reads
// back in turn order with its turn's ids from the key, lies outside every other scan of the default
// family, and a store holding none (one made before profiles were stored) reads as having none.
#include "storage/keys.hpp"
#include "storage/record_codec.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::open_ok;
using test::scratch_dir;

turn_profile_record profile_store_sample(const std::string& run, std::uint64_t step,
                                         std::uint32_t group, std::uint32_t rollout,
                                         std::uint32_t turn) {
  turn_profile_record p;
  p.turn = turn_ref{run, step, split_kind::train, group, rollout, turn};
  p.kernels.push_back(
      {"copy_strided", 1234.5, "memory-bound", {"uncoalesced_global", "dram_bound"}});
  p.kernels.push_back({"tiny", 2100.0, "launch-bound", {}});
  p.note = "";
  p.seconds = 3.25;
  return p;
}

TEST(ProfileStore, TheRecordRoundTripsAndRefusesDamage) {
  auto p = profile_store_sample("run", 1, 2, 3, 1);
  p.note = "ncu: counters not permitted";
  auto back = decode_profile(encode(p));
  ASSERT_TRUE(back.ok()) << back.err().message;
  // The turn's ids are the key's, not the value's.
  EXPECT_EQ(back->turn, turn_ref{});
  back->turn = p.turn;
  EXPECT_EQ(*back, p);

  const auto bytes = encode(p);
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[0]), trajectory_format_version);
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[1]), static_cast<std::uint8_t>(record_kind::profile));
  EXPECT_FALSE(decode_profile(bytes + "x").ok());
  EXPECT_FALSE(decode_profile(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(decode_profile(encode(partial_carry_record{})).ok());  // another kind
  EXPECT_FALSE(decode_optimise(bytes).ok());
  // A profile with no kernel (profiling failed) keeps its note.
  turn_profile_record failed;
  failed.note = "no kernel of the candidate's own";
  failed.seconds = 0.5;
  auto failed_back = decode_profile(encode(failed));
  ASSERT_TRUE(failed_back.ok()) << failed_back.err().message;
  EXPECT_EQ(*failed_back, failed);
}

// The profile's source (format version 7): an events profile keeps it through the codec, and a
// version 6 record (those bytes without the source's string at the end) reads as ncu's.
TEST(ProfileStore, TheSourceRoundTripsAndAnOldRecordReadsAsNcus) {
  auto p = profile_store_sample("run", 1, 2, 3, 1);
  p.source = "events";
  auto back = decode_profile(encode(p));
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(back->source, "events");

  p.source = "ncu";
  std::string old = encode(p);
  const std::size_t source_bytes = 4 + std::string("ncu").size();  // u32 length, then the bytes
  ASSERT_GT(old.size(), source_bytes);
  old.resize(old.size() - source_bytes);
  old[0] = static_cast<char>(6);
  p.source = "events";  // what the old bytes must not read as
  auto old_back = decode_profile(old);
  ASSERT_TRUE(old_back.ok()) << old_back.err().message;
  EXPECT_EQ(old_back->source, "ncu");
  EXPECT_EQ(old_back->kernels, p.kernels);
  EXPECT_EQ(old_back->seconds, p.seconds);
  // Version 7 bytes cut before the source are damage, not an old record.
  old[0] = static_cast<char>(7);
  EXPECT_FALSE(decode_profile(old).ok());
}

TEST(ProfileStore, ProfilesArriveAfterTheirGroupAndReadBackInTurnOrderAfterReopening) {
  scratch_dir dir;
  const auto group = make_group("run-a", 0, 0, split_kind::train, "cpp/axpby");
  const auto late = profile_store_sample("run-a", 0, 0, 1, 0);
  const auto early = profile_store_sample("run-a", 0, 0, 0, 1);
  auto dropped = profile_store_sample("run-a", 3, 7, 0, 0);  // a group never stored
  dropped.kernels.clear();
  dropped.note = "the time limit";
  const auto other_run = profile_store_sample("run-ab", 0, 0, 0, 0);
  {
    auto store = open_ok(dir / "db");
    ASSERT_TRUE(store);
    // One profile before its group, the others after it: each is written when it arrives.
    ASSERT_TRUE(store->put_profile(early).ok());
    ASSERT_TRUE(store->put_group(group).ok());
    for (const auto* p :
         std::initializer_list<const turn_profile_record*>{&late, &dropped, &other_run}) {
      auto s = store->put_profile(*p);
      ASSERT_TRUE(s.ok()) << s.err().message;
    }
    ASSERT_TRUE(store->close().ok());
  }
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  auto all = store->profiles("run-a");
  ASSERT_TRUE(all.ok()) << all.err().message;
  ASSERT_EQ(all->size(), 3U);
  EXPECT_EQ((*all)[0], early);  // rollout 0 turn 1 before rollout 1 turn 0
  EXPECT_EQ((*all)[1], late);
  EXPECT_EQ((*all)[2], dropped);
  auto other = store->profiles("run-ab");
  ASSERT_TRUE(other.ok()) << other.err().message;
  ASSERT_EQ(other->size(), 1U);
  EXPECT_EQ(other->front(), other_run);

  // The group's put_group deleted in-progress turns: not the profile stored before it; and no
  // other scan of the default family mistakes a profile for its record.
  auto turns = store->partial_turns("run-a");
  ASSERT_TRUE(turns.ok()) << turns.err().message;
  EXPECT_TRUE(turns->empty());
  auto retries = store->retry_steps("run-a");
  ASSERT_TRUE(retries.ok()) << retries.err().message;
  EXPECT_TRUE(retries->empty());
  auto got = store->get_group({"run-a", 0, split_kind::train, 0});
  ASSERT_TRUE(got.ok()) << got.err().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, group);
}

TEST(ProfileStore, AStoreWithoutProfilesReadsAsHavingNone) {
  // As a store made before profiles were stored: groups, turns and steps, no profile key.
  scratch_dir dir;
  {
    auto store = open_ok(dir / "db");
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->put_group(make_group("run-a", 0, 0)).ok());
    ASSERT_TRUE(store->put_turn({"run-a", 0, split_kind::train, 1}, 0, 0, turn_record{}).ok());
    ASSERT_TRUE(store->close().ok());
  }
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  auto none = store->profiles("run-a");
  ASSERT_TRUE(none.ok()) << none.err().message;
  EXPECT_TRUE(none->empty());
  // An in-progress turn is not a profile, nor a profile an in-progress turn.
  ASSERT_TRUE(store->put_profile(profile_store_sample("run-a", 0, 1, 0, 0)).ok());
  auto turns = store->partial_turns("run-a");
  ASSERT_TRUE(turns.ok()) << turns.err().message;
  EXPECT_EQ(turns->size(), 1U);
}

TEST(ProfileStore, ADamagedProfileIsAnErrorNamingItsTurn) {
  scratch_dir dir;
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  auto p = profile_store_sample("run-a", 4, 2, 1, 3);
  p.turn.run_id.clear();
  EXPECT_FALSE(store->put_profile(p).ok());  // no run id
  p.turn.run_id = "run-a";
  ASSERT_TRUE(store->put_profile(p).ok());
  EXPECT_EQ(keys::parse_profile(keys::profile({"run-a", 4, split_kind::train, 2}, 1, 3))->rollout,
            1U);
  EXPECT_FALSE(keys::parse_profile(keys::turn({"run-a", 4, split_kind::train, 2}, 1, 3)));
  EXPECT_FALSE(keys::parse_turn(keys::profile({"run-a", 4, split_kind::train, 2}, 1, 3)));
}

TEST(ProfileStore, TurnIdsAndBottleneckCountsFollowTheSandboxsNames) {
  auto ref = turn_of_request("runs/a/3/validation/2/1/0");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(*ref, (turn_ref{"runs/a", 3, split_kind::validation, 2, 1, 0}));
  EXPECT_FALSE(turn_of_request("3/train/2/1/0"));  // no run id
  EXPECT_FALSE(turn_of_request("run/3/test/2/1/0"));
  EXPECT_FALSE(turn_of_request("run/3/train/2/1/-1"));
  EXPECT_FALSE(turn_of_request("a client's own id"));

  profile_counts counts;
  counts.add(profile_store_sample("run", 0, 0, 0, 0));
  turn_profile_record odd;
  odd.kernels.push_back({"k", 1.0, "bound by the moon", {}});
  odd.seconds = 0.75;
  counts.add(odd);
  EXPECT_EQ(counts.profiles, 2U);
  EXPECT_EQ(counts.kernels[bottleneck_class_index("memory-bound")], 1U);
  EXPECT_EQ(counts.kernels[bottleneck_class_index("launch-bound")], 1U);
  EXPECT_EQ(counts.kernels[bottleneck_class_index("unknown")], 1U);
  EXPECT_EQ(counts.kernels[bottleneck_class_index("compute-bound")], 0U);
  EXPECT_NEAR(counts.seconds, 4.0, 1e-9);
}

}  // namespace
}  // namespace leap
