// A damaged store is refused and left as it is, and a store that lost acknowledged writes is
// detected: real RocksDB stores, damaged by deleting and truncating their real files.
#include "storage/trajectory_store.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::open_ok;
using test::scratch_dir;

// Every file of a folder with its bytes: what "left untouched" is checked against.
std::map<std::string, std::string> contents(const std::filesystem::path& folder) {
  std::map<std::string, std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::ifstream in(entry.path(), std::ios::binary);
    out[entry.path().filename().string()] =
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

std::vector<std::filesystem::path> files_ending(const std::filesystem::path& folder,
                                                const std::string& suffix) {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const auto name = entry.path().filename().string();
    if (name.size() >= suffix.size() && name.ends_with(suffix)) {
      out.push_back(entry.path());
    }
  }
  return out;
}

// A store whose older groups are in table files (RocksDB flushes the log when it reopens a
// store) and whose newer groups are only in the write-ahead log: steps 0 (groups 0-5) and 1
// (groups 0-3). Each group is its own synced write, as the store actor's are when idle.
void write_store(const std::filesystem::path& path) {
  {
    auto store = open_ok(path);
    ASSERT_NE(store, nullptr);
    for (std::uint32_t g = 0; g < 6; ++g) {
      ASSERT_TRUE(store->put_group(make_group("run", 0, g)));
    }
    ASSERT_TRUE(store->close());
  }
  {
    auto store = open_ok(path);
    ASSERT_NE(store, nullptr);
    for (std::uint32_t g = 0; g < 4; ++g) {
      ASSERT_TRUE(store->put_group(make_group("run", 1, g)));
    }
    ASSERT_TRUE(store->close());
  }
  ASSERT_FALSE(files_ending(path, ".sst").empty());
  ASSERT_FALSE(files_ending(path, ".log").empty());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TrajectoryStoreDamage, MissingCurrentIsRefusedAgainAndAgainAndNothingIsTouched) {
  scratch_dir dir;
  const auto db = dir / "db";
  write_store(db);
  std::filesystem::remove(db / "CURRENT");
  const auto before = contents(db);

  // The old code created a fresh database here, and the open after it deleted the old files.
  for (const store_options& options :
       {store_options{}, store_options{}, store_options{.read_only = true}}) {
    auto store = trajectory_store::open(db, options);
    ASSERT_FALSE(store.ok());
    const auto& message = store.err().message;
    EXPECT_TRUE(contains(message, "no CURRENT file")) << message;
    EXPECT_TRUE(contains(message, "nothing in it was changed")) << message;
    EXPECT_TRUE(contains(message, "leap repair-store " + db.string() + " COPY")) << message;
  }
  EXPECT_EQ(contents(db), before);

  // RocksDB's repair into a copy recovers every group, from the table files and the log.
  auto report = repair_store_copy(db, dir / "copy");
  ASSERT_TRUE(report.ok()) << report.err().message;
  EXPECT_EQ(report->groups, 10U);
  EXPECT_FALSE(report->lost.has_value());
  EXPECT_EQ(contents(db), before);
  auto repaired = open_ok(dir / "copy");
  ASSERT_NE(repaired, nullptr);
  for (std::uint32_t g = 0; g < 6; ++g) {
    EXPECT_EQ(**repaired->get_group({"run", 0, split_kind::train, g}), make_group("run", 0, g));
  }
  for (std::uint32_t g = 0; g < 4; ++g) {
    EXPECT_EQ(**repaired->get_group({"run", 1, split_kind::train, g}), make_group("run", 1, g));
  }
  // A copy target that holds something is refused.
  auto again = repair_store_copy(db, dir / "copy");
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(contains(again.err().message, "exists and is not an empty folder"))
      << again.err().message;
}

// Four bytes flipped in the middle of the store's largest table file: inside a data block, whose
// checksum RocksDB checks only when a read needs that block.
std::filesystem::path flip_bytes_in_a_table(const std::filesystem::path& db) {
  auto tables = files_ending(db, ".sst");
  EXPECT_FALSE(tables.empty());
  std::sort(tables.begin(), tables.end(), [](const auto& a, const auto& b) {
    return std::filesystem::file_size(a) > std::filesystem::file_size(b);
  });
  const auto& table = tables.front();
  std::fstream file(table, std::ios::binary | std::ios::in | std::ios::out);
  const auto middle = static_cast<std::streamoff>(std::filesystem::file_size(table) / 2);
  std::string bytes(4, '\0');
  file.seekg(middle);
  file.read(bytes.data(), 4);
  for (auto& b : bytes) {
    b = static_cast<char>(~b);
  }
  file.seekp(middle);
  file.write(bytes.data(), 4);
  EXPECT_TRUE(file.good());
  return table;
}

TEST(TrajectoryStoreDamage, AFlippedTableIsRefusedAtEveryOpenNamingItAndNothingIsCompacted) {
  scratch_dir dir;
  const auto db = dir / "db";
  write_store(db);
  const auto table = flip_bytes_in_a_table(db);
  const auto before = contents(db);

  // The old code opened it, and a writable open went on to flush and compact (rewriting tables
  // from the damaged one) while reads of the damaged block failed later.
  for (const store_options& options :
       {store_options{}, store_options{.accept_lost_writes = true},
        store_options{.read_only = true},
        store_options{.read_only = true, .accept_lost_writes = true}}) {
    auto store = trajectory_store::open(db, options);
    ASSERT_FALSE(store.ok()) << "a store with a damaged table file was opened";
    const auto& message = store.err().message;
    EXPECT_TRUE(contains(message, "table file " + table.string() + " is damaged")) << message;
    EXPECT_TRUE(contains(message, "checksum mismatch")) << message;
    EXPECT_TRUE(contains(message, "nothing was compacted")) << message;
    EXPECT_TRUE(contains(message, "leap repair-store " + db.string() + " COPY")) << message;
  }
  EXPECT_EQ(contents(db), before);

  // The repair the message names recovers the rest into a copy that passes the check (its open
  // verifies every table): RocksDB's repair sets the damaged table aside whole, so the copy holds
  // the 4 groups of step 1 (in the log) and none of the 6 of step 0 (in the damaged table).
  auto report = repair_store_copy(db, dir / "copy");
  ASSERT_TRUE(report.ok()) << report.err().message;
  EXPECT_EQ(report->groups, 4U);
  EXPECT_EQ(contents(db), before);
  EXPECT_NE(open_ok(dir / "copy"), nullptr);
}

TEST(TrajectoryStoreDamage, AHealthyStoreOpensWithCompactionsOnAgain) {
  scratch_dir dir;
  const auto db = dir / "db";
  write_store(db);
  auto store = open_ok(db);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->groups({.run_id = "run"})->size(), 10U);
  // RocksDB writes the options in force to its newest OPTIONS file, SetOptions included: every
  // family opened with compactions off must have them on again once the check passed.
  auto options_files = files_ending(db, "");
  std::erase_if(options_files, [](const auto& p) {
    return !p.filename().string().starts_with("OPTIONS-") || p.extension() == ".dbtmp";
  });
  ASSERT_FALSE(options_files.empty());
  const auto newest = *std::max_element(options_files.begin(), options_files.end());
  std::ifstream in(newest);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "disable_auto_compactions=false")) << newest;
  EXPECT_FALSE(contains(text, "disable_auto_compactions=true")) << newest;
}

TEST(TrajectoryStoreDamage, AStoreIsCreatedOnlyInAnEmptyFolder) {
  scratch_dir dir;
  std::filesystem::create_directories(dir / "db");
  {
    std::ofstream stray(dir / "db" / "notes.txt");
    stray << "mine";
  }
  auto store = trajectory_store::open(dir / "db");
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(contains(store.err().message, "holds 1 files (notes.txt) but no CURRENT file"))
      << store.err().message;
  EXPECT_EQ(contents(dir / "db"), (std::map<std::string, std::string>{{"notes.txt", "mine"}}));
  // An empty folder is fine.
  std::filesystem::create_directories(dir / "empty");
  EXPECT_NE(open_ok(dir / "empty"), nullptr);
}

TEST(TrajectoryStoreDamage, ADeletedLogIsDetectedWithTheCountsUntilTheLossIsAccepted) {
  scratch_dir dir;
  const auto db = dir / "db";
  write_store(db);
  for (const auto& log : files_ending(db, ".log")) {
    std::filesystem::remove(log);
  }
  const auto before = contents(db);

  // The 4 groups of step 1 (3 writes each) were acknowledged and are gone.
  auto refused = trajectory_store::open(db);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.err().message, "it lost 12 record writes it had acknowledged"))
      << refused.err().message;
  EXPECT_TRUE(contains(refused.err().message, "leap run --accept-lost-writes"))
      << refused.err().message;
  EXPECT_EQ(contents(db), before);

  // Read-only, accepted: the loss is reported and nothing is changed.
  {
    auto reader = open_ok(db, {.read_only = true, .accept_lost_writes = true});
    ASSERT_NE(reader, nullptr);
    ASSERT_TRUE(reader->lost_writes().has_value());
    EXPECT_EQ(reader->lost_writes()->acknowledged - reader->lost_writes()->present, 12U);
    EXPECT_EQ(reader->groups({.run_id = "run"})->size(), 6U);
  }
  EXPECT_TRUE(trajectory_store::open(db).err().message.find("lost 12") != std::string::npos);

  // Writable, accepted: reported once; the store as it is becomes the new mark.
  {
    auto writer = open_ok(db, {.accept_lost_writes = true});
    ASSERT_NE(writer, nullptr);
    EXPECT_TRUE(writer->lost_writes().has_value());
    ASSERT_TRUE(writer->put_group(make_group("run", 1, 0)));
  }
  auto clean = open_ok(db);
  ASSERT_NE(clean, nullptr);
  EXPECT_FALSE(clean->lost_writes().has_value());
  EXPECT_EQ(clean->groups({.run_id = "run"})->size(), 7U);
}

TEST(TrajectoryStoreDamage, ATruncatedLogIsDetected) {
  scratch_dir dir;
  const auto db = dir / "db";
  write_store(db);
  const auto logs = files_ending(db, ".log");
  ASSERT_EQ(logs.size(), 1U);
  // Cut into the last record: RocksDB drops the torn tail silently (point-in-time recovery).
  std::filesystem::resize_file(logs[0], std::filesystem::file_size(logs[0]) - 100);
  auto refused = trajectory_store::open(db);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.err().message, "it lost 3 record writes it had acknowledged"))
      << refused.err().message;
}

TEST(TrajectoryStoreDamage, ADamagedMarkIsRefusedAndAMissingOneIsNotAnError) {
  scratch_dir dir;
  const auto db = dir / "db";
  write_store(db);
  {
    std::ofstream mark(db / acknowledged_mark_file, std::ios::binary | std::ios::trunc);
    mark << "garbage";
  }
  auto refused = trajectory_store::open(db);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.err().message, "is damaged, so whether it lost"))
      << refused.err().message;

  // A store made before the mark existed: opened, and the mark made.
  std::filesystem::remove(db / acknowledged_mark_file);
  EXPECT_NE(open_ok(db), nullptr);
  EXPECT_TRUE(std::filesystem::exists(db / acknowledged_mark_file));
  EXPECT_NE(open_ok(db), nullptr);
}

TEST(TrajectoryStoreDamage, BatchedWritesKeepTheMarkCurrent) {
  scratch_dir dir;
  const auto db = dir / "db";
  {
    auto store = open_ok(db);
    ASSERT_NE(store, nullptr);
    auto batch = store->batch();
    for (std::uint32_t g = 0; g < 5; ++g) {
      ASSERT_TRUE(batch.put_group(make_group("run", 0, g)));
    }
    ASSERT_TRUE(store->write(batch));
  }
  for (const auto& log : files_ending(db, ".log")) {
    std::filesystem::remove(log);
  }
  auto refused = trajectory_store::open(db);
  ASSERT_FALSE(refused.ok());
  // The schema record and the 5 groups.
  EXPECT_TRUE(contains(refused.err().message, "it lost 16 record writes")) << refused.err().message;
}

}  // namespace
}  // namespace leap
