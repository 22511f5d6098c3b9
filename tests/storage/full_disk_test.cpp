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
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <sched.h>
#include <string>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::open_ok;
using test::scratch_dir;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A tmpfs of `bytes`, mounted on a folder of `scratch` in the mount namespace of a child process
// that waits until the destructor kills it.
class small_disk {
 public:
  small_disk(const scratch_dir& scratch, std::size_t bytes) {
    const auto mount_point = scratch / "disk";
    std::filesystem::create_directories(mount_point);
    const std::string point = mount_point.string();
    const std::string data = "size=" + std::to_string(bytes) + ",mode=0755";
    int report[2];
    if (::pipe(report) != 0) {
      skip_reason_ = std::string("pipe: ") + std::strerror(errno);
      return;
    }
    child_ = ::fork();
    if (child_ == 0) {
      // Only system calls between fork and _exit: the parent has threads. The child dies with
      // the parent, so that an aborted test leaves no process behind.
      ::close(report[0]);
      int err = 0;
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::unshare(CLONE_NEWNS) != 0 ||
          ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount("tmpfs", point.c_str(), "tmpfs", 0, data.c_str()) != 0) {
        err = errno;
      }
      (void)!::write(report[1], &err, sizeof err);
      ::close(report[1]);
      if (err != 0) {
        ::_exit(1);
      }
      for (;;) {
        ::pause();
      }
    }
    ::close(report[1]);
    int err = -1;
    if (child_ < 0 || ::read(report[0], &err, sizeof err) != sizeof err) {
      err = errno;
    }
    ::close(report[0]);
    if (err != 0) {
      skip_reason_ = "cannot mount a tmpfs in a private mount namespace (" +
                     std::string(std::strerror(err)) +
                     "): these tests need root or CAP_SYS_ADMIN, as in CI";
      return;
    }
    root_ = "/proc/" + std::to_string(child_) + "/root" + point;
  }
  ~small_disk() {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }
  small_disk(const small_disk&) = delete;
  small_disk& operator=(const small_disk&) = delete;

  // Empty when the disk is mounted.
  [[nodiscard]] const std::string& skip_reason() const { return skip_reason_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const {
    return root_ / name;
  }

  // Another process's file takes every free byte: written until the filesystem says ENOSPC.
  void fill() {
    const auto file = root_ / ("filler-" + std::to_string(fillers_++));
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << file << ": " << std::strerror(errno);
    const std::string chunk(4096, 'f');
    int err = 0;
    for (;;) {
      if (::write(fd, chunk.data(), chunk.size()) < 0) {
        err = errno;
        break;
      }
    }
    // The last partial page too, byte by byte at the end.
    while (::write(fd, chunk.data(), 1) == 1) {
    }
    ::close(fd);
    ASSERT_EQ(err, ENOSPC) << std::strerror(err);
  }
  // Frees what fill() took.
  void free_space() {
    for (int i = 0; i < fillers_; ++i) {
      std::filesystem::remove(root_ / ("filler-" + std::to_string(i)));
    }
    fillers_ = 0;
  }

 private:
  pid_t child_ = -1;
  std::filesystem::path root_;
  std::string skip_reason_;
  int fillers_ = 0;
};

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
    small_disk disk(scratch, 8U << 20U);
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
      EXPECT_TRUE(contains(failure, "free of 8.0 MiB on its filesystem")) << failure;
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
  small_disk disk(scratch, 8U << 20U);
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
    EXPECT_TRUE(contains(store.err().message, "free of 8.0 MiB")) << store.err().message;
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
