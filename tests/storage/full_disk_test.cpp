// A full disk under a live store: a real small filesystem (a tmpfs of a few MiB) is filled by
// another file while the store writes. Every write that fails must be an error value naming the
// store and the free space, never an abort (RocksDB's own info log tripped an assertion on its
// first line after "No space left on device"); the store then takes no more writes; once space is
// freed, a new open holds every acknowledged write and takes new ones.
//
// The tmpfs is mounted in a private mount namespace that a child process holds; this process
// reaches it through /proc/CHILD/root, where a path resolves in the child's namespace. Mounting
// needs root (CI runs as root); elsewhere the tests skip, saying why.
#include "storage/trajectory_store.hpp"
#include "tests/storage/small_disk.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::open_ok;
using test::scratch_dir;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Group i of the sequence the tests write: about 40 KB, so a few fill a page of the log.
group_record numbered_group(std::uint32_t i) {
  auto g = make_group("full", i / 8, i % 8, split_kind::train, "", 8, 4);
  g.rollouts[0].turns[0].text.append(
      std::string(std::size_t{16} * 1024, static_cast<char>('a' + i % 26)));
  return g;
}

step_record numbered_step(std::uint64_t step) {
  step_record s;
  s.run_id = "full";
  s.step = step;
  s.metrics = {{"reward", 0.5 * static_cast<double>(step)}, {"loss", 1.0}};
  return s;
}

// One kind of store write, and a check that the n-th such write is stored.
struct write_kind {
  std::string name;
  std::function<status(trajectory_store&, std::uint32_t)> write;
  std::function<void(trajectory_store&, std::uint32_t)> expect_stored;
};

std::vector<write_kind> write_kinds() {
  return {
      {"put_group",
       [](trajectory_store& s, std::uint32_t i) { return s.put_group(numbered_group(i)); },
       [](trajectory_store& s, std::uint32_t i) {
         const auto g = numbered_group(i);
         auto got = s.get_group({g.run_id, g.step, g.split, g.group_index});
         ASSERT_TRUE(got.ok()) << got.err().message;
         ASSERT_TRUE(got->has_value()) << "group " << i << " was acknowledged and is gone";
         EXPECT_EQ(**got, g);
       }},
      {"batched put_group",
       [](trajectory_store& s, std::uint32_t i) {
         auto batch = s.batch();
         if (auto st = batch.put_group(numbered_group(2 * i)); !st) {
           return st;
         }
         if (auto st = batch.put_group(numbered_group(2 * i + 1)); !st) {
           return st;
         }
         return s.write(batch);
       },
       [](trajectory_store& s, std::uint32_t i) {
         for (const auto k : {2 * i, 2 * i + 1}) {
           const auto g = numbered_group(k);
           auto got = s.get_group({g.run_id, g.step, g.split, g.group_index});
           ASSERT_TRUE(got.ok()) << got.err().message;
           ASSERT_TRUE(got->has_value()) << "group " << k << " was acknowledged and is gone";
           EXPECT_EQ(**got, g);
         }
       }},
      {"put_turn",
       [](trajectory_store& s, std::uint32_t i) {
         return s.put_turn({"full", 0, split_kind::train, 0}, i, 0,
                           numbered_group(i).rollouts[0].turns[0]);
       },
       [](trajectory_store& s, std::uint32_t i) {
         auto turns = s.partial_turns("full");
         ASSERT_TRUE(turns.ok()) << turns.err().message;
         ASSERT_GT(turns->size(), i) << "turn " << i << " was acknowledged and is gone";
         EXPECT_EQ((*turns)[i].record, numbered_group(i).rollouts[0].turns[0]);
       }},
      {"put_step",
       [](trajectory_store& s, std::uint32_t i) {
         // Big enough to fill the log: a group with it, as the learner's step follows its groups.
         if (auto st = s.put_group(numbered_group(i)); !st) {
           return st;
         }
         return s.put_step(numbered_step(i));
       },
       [](trajectory_store& s, std::uint32_t i) {
         auto got = s.get_step("full", i);
         ASSERT_TRUE(got.ok()) << got.err().message;
         ASSERT_TRUE(got->has_value()) << "step " << i << " was acknowledged and is gone";
         EXPECT_EQ(**got, numbered_step(i));
       }},
  };
}

TEST(TrajectoryStoreFullDisk, EveryKindOfWriteFailsCleanlyAndNothingAcknowledgedIsLost) {
  for (const auto& kind : write_kinds()) {
    SCOPED_TRACE(kind.name);
    scratch_dir scratch;
    test::small_disk disk(scratch.path(), 8U << 20U);
    if (!disk.skip_reason().empty()) {
      GTEST_SKIP() << disk.skip_reason();
    }
    const auto db = disk / "db";

    std::uint32_t acknowledged = 0;
    std::string failure;
    {
      auto store = open_ok(db);
      ASSERT_NE(store, nullptr);
      for (; acknowledged < 3; ++acknowledged) {
        ASSERT_TRUE(kind.write(*store, acknowledged));
      }
      disk.fill();  // another process takes the rest of the disk
      for (int tries = 0; tries < 200 && failure.empty(); ++tries) {
        if (auto s = kind.write(*store, acknowledged); s) {
          ++acknowledged;  // it fitted in the log's last page
        } else {
          failure = s.err().message;
        }
      }
      ASSERT_FALSE(failure.empty()) << "no write failed on a full disk";
      EXPECT_TRUE(contains(failure, "trajectory store '" + db.string() + "'")) << failure;
      EXPECT_TRUE(contains(failure, "No space left on device")) << failure;
      EXPECT_TRUE(contains(failure, "free of 8 MiB on its filesystem")) << failure;
      EXPECT_TRUE(contains(failure, "this write needs")) << failure;
      EXPECT_TRUE(contains(failure, "takes no more writes")) << failure;

      // Later writes of every kind are refused without touching RocksDB (where the old code
      // aborted), even with space freed meanwhile.
      for (const auto& other : write_kinds()) {
        auto again = other.write(*store, 1000);
        ASSERT_FALSE(again.ok()) << other.name;
        EXPECT_TRUE(contains(again.err().message, "takes no more writes since a write failed"))
            << again.err().message;
      }
      (void)store->close();  // its error (the failed log) is the one already reported
    }

    // Opening on the still-full disk is an error naming the free space, or works and holds all.
    {
      auto reopened = trajectory_store::open(db);
      if (!reopened.ok()) {
        EXPECT_TRUE(contains(reopened.err().message, db.string())) << reopened.err().message;
        EXPECT_TRUE(contains(reopened.err().message, "free of")) << reopened.err().message;
      }
    }

    disk.free_space();
    auto store = open_ok(db);
    ASSERT_NE(store, nullptr);
    for (std::uint32_t i = 0; i < acknowledged; ++i) {
      kind.expect_stored(*store, i);
    }
    EXPECT_FALSE(store->lost_writes().has_value());
    // And the store takes writes again.
    ASSERT_TRUE(kind.write(*store, acknowledged));
    kind.expect_stored(*store, acknowledged);
    ASSERT_TRUE(store->close());
  }
}

// RocksDB's recovery of the log into table files at open needs space too: on a disk filled
// between two runs the open fails with the free space named, and works once space is freed.
TEST(TrajectoryStoreFullDisk, AnOpenOnAFullDiskIsAnErrorAndLaterOpensHoldEverything) {
  scratch_dir scratch;
  test::small_disk disk(scratch.path(), 8U << 20U);
  if (!disk.skip_reason().empty()) {
    GTEST_SKIP() << disk.skip_reason();
  }
  const auto db = disk / "db";
  {
    auto store = open_ok(db);
    ASSERT_NE(store, nullptr);
    for (std::uint32_t i = 0; i < 20; ++i) {
      ASSERT_TRUE(store->put_group(numbered_group(i)));
    }
    ASSERT_TRUE(store->close());
  }
  disk.fill();
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto store = trajectory_store::open(db);
    if (store.ok()) {
      // Nothing needed space after all: it must hold everything.
      EXPECT_EQ((*store)->groups({.run_id = "full"})->size(), 20U);
      continue;
    }
    EXPECT_TRUE(contains(store.err().message, "trajectory store '" + db.string() + "'"))
        << store.err().message;
    EXPECT_TRUE(contains(store.err().message, "free of 8 MiB")) << store.err().message;
  }
  // Readers need no space.
  {
    auto reader = open_ok(db, {.read_only = true});
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(reader->groups({.run_id = "full"})->size(), 20U);
  }
  disk.free_space();
  auto store = open_ok(db);
  ASSERT_NE(store, nullptr);
  auto groups = store->groups({.run_id = "full"});
  ASSERT_TRUE(groups.ok()) << groups.err().message;
  ASSERT_EQ(groups->size(), 20U);
  for (std::uint32_t i = 0; i < 20; ++i) {
    EXPECT_EQ((*groups)[i], numbered_group(i));
  }
}

}  // namespace
}  // namespace leap
