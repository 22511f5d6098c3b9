// Partial rollouts' pure decisions (issue 33): how many groups a step starts, when its batch is
// ready, and which groups train, carry or drop.
#include "orchestrator/partial_rollouts.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace leap {
namespace {

using ids = std::vector<std::uint64_t>;

partial_settings settings(std::uint32_t batch, std::uint32_t over, std::uint32_t carry,
                          std::uint32_t staleness = 1) {
  partial_settings s;
  s.batch = batch;
  s.over_provision = over;
  s.max_carry = carry;
  s.max_staleness = staleness;
  return s;
}

partial_group done(std::uint64_t id, std::uint64_t version, double finished_ms) {
  return {id, version, true, finished_ms, 1.0};
}

partial_group running(std::uint64_t id, std::uint64_t version, double progress) {
  return {id, version, false, 0.0, progress};
}

TEST(PartialRolloutsTest, StaleBoundIsAtLeastOne) {
  EXPECT_EQ(partial_staleness_bound(0), 1U);
  EXPECT_EQ(partial_staleness_bound(1), 1U);
  EXPECT_EQ(partial_staleness_bound(2), 2U);
  EXPECT_EQ(partial_staleness_bound(-3), 1U);
}

TEST(PartialRolloutsTest, GroupsToStartKeepBatchPlusOverProvisionInFlight) {
  struct row {
    std::uint32_t batch, over, carried, expected;
  };
  for (const row& r : {row{8, 0, 0, 8}, row{8, 4, 0, 12}, row{8, 4, 3, 9}, row{8, 4, 12, 0},
                       row{8, 4, 20, 0}, row{0, 0, 0, 0}}) {
    EXPECT_EQ(groups_to_start(settings(r.batch, r.over, 4), r.carried), r.expected)
        << r.batch << " + " << r.over << " with " << r.carried << " carried";
  }
}

TEST(PartialRolloutsTest, BatchReadyCountsOnlyCompleteGroupsWithinTheBound) {
  const auto s = settings(2, 2, 2, 1);
  const std::vector<partial_group> one = {done(1, 5, 10), running(2, 5, 0.9), running(3, 5, 0.1)};
  EXPECT_FALSE(batch_ready(s, one, 5));
  const std::vector<partial_group> two = {done(1, 5, 10), done(2, 5, 20), running(3, 5, 0.1)};
  EXPECT_TRUE(batch_ready(s, two, 5));
  // Two complete, but one sampled 2 versions behind the trainer under bound 1.
  const std::vector<partial_group> stale = {done(1, 3, 10), done(2, 5, 20), running(3, 5, 0.1)};
  EXPECT_FALSE(batch_ready(s, stale, 5));
  EXPECT_FALSE(batch_ready(settings(0, 0, 0), two, 5));
}

TEST(PartialRolloutsTest, SplitTable) {
  struct row {
    std::string name;
    partial_settings s;
    std::vector<partial_group> groups;
    std::uint64_t version;
    ids batch, carry, stale, over;
  };
  const std::vector<row> rows = {
      {"no over-provisioning: the batch is every group",
       settings(3, 0, 0),
       {done(1, 4, 30), done(2, 4, 10), done(3, 4, 20)},
       4,
       {2, 3, 1},
       {},
       {},
       {}},
      {"carried (older version) groups train first, then earliest finished",
       settings(2, 2, 2),
       {done(1, 4, 5), done(2, 3, 50), done(3, 4, 1), running(4, 4, 0.5)},
       4,
       {2, 3},
       {1, 4},
       {},
       {}},
      {"unfinished carried most advanced first, the rest over max_carry",
       settings(2, 3, 2),
       {done(1, 4, 5), done(2, 4, 6), running(3, 4, 0.2), running(4, 4, 0.9), running(5, 4, 0.5)},
       4,
       {1, 2},
       {4, 5},
       {},
       {3}},
      {"complete leftovers carry before unfinished ones",
       settings(1, 2, 1),
       {done(1, 4, 5), done(2, 4, 6), running(3, 4, 0.99)},
       4,
       {1},
       {2},
       {},
       {3}},
      {"a group carried once more would be 2 behind under bound 1: dropped as stale",
       settings(2, 2, 4, 1),
       {done(1, 4, 5), done(2, 4, 6), running(3, 3, 0.9), running(4, 4, 0.1)},
       4,
       {1, 2},
       {4},
       {3},
       {}},
      {"bound 2 keeps it",
       settings(2, 2, 4, 2),
       {done(1, 4, 5), done(2, 4, 6), running(3, 3, 0.9), running(4, 4, 0.1)},
       4,
       {1, 2},
       {3, 4},
       {},
       {}},
      {"a complete group already beyond the bound never trains",
       settings(1, 1, 1, 1),
       {done(1, 2, 1), done(2, 4, 9)},
       4,
       {2},
       {},
       {1},
       {}},
      {"max_carry 0: every unfinished group is dropped and counted",
       settings(1, 2, 0),
       {done(1, 4, 1), running(2, 4, 0.5), running(3, 4, 0.4)},
       4,
       {1},
       {},
       {},
       {2, 3}},
      {"too few complete: a short batch, the rest carried",
       settings(3, 0, 4),
       {done(1, 4, 1), running(2, 4, 0.5)},
       4,
       {1},
       {2},
       {},
       {}},
  };
  for (const auto& r : rows) {
    const auto split = split_partial(r.s, r.groups, r.version);
    EXPECT_EQ(split.batch, r.batch) << r.name;
    EXPECT_EQ(split.carry, r.carry) << r.name;
    EXPECT_EQ(split.dropped_stale, r.stale) << r.name;
    EXPECT_EQ(split.dropped_over_carry, r.over) << r.name;
    // Every group lands in exactly one list.
    std::multiset<std::uint64_t> all;
    for (const auto* list :
         {&split.batch, &split.carry, &split.dropped_stale, &split.dropped_over_carry}) {
      all.insert(list->begin(), list->end());
    }
    EXPECT_EQ(all.size(), r.groups.size()) << r.name;
    for (const auto& g : r.groups) {
      EXPECT_EQ(all.count(g.id), 1U) << r.name << ": " << g.id;
    }
  }
}

}  // namespace
}  // namespace leap
