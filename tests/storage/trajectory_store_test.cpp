#include "storage/trajectory_store.hpp"

#include "storage/keys.hpp"
#include "storage/record_codec.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <atomic>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::open_ok;
using test::scratch_dir;

std::vector<std::uint32_t> indices(const std::vector<group_record>& groups) {
  std::vector<std::uint32_t> out;
  out.reserve(groups.size());
  for (const auto& g : groups) {
    out.push_back(g.group_index);
  }
  return out;
}

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class TrajectoryStore : public ::testing::Test {
 protected:
  void SetUp() override {
    // No fsync per write: these tests are about content, and crash_test.cpp covers durability.
    store_ = open_ok(dir_ / "db", {.sync = false});
    ASSERT_NE(store_, nullptr);
  }

  scratch_dir dir_;
  std::unique_ptr<trajectory_store> store_;
};

TEST_F(TrajectoryStore, GroupRoundTripsAndMissingIsEmpty) {
  const auto g = make_group("run", 3, 5);
  ASSERT_TRUE(store_->put_group(g).ok());
  auto back = store_->get_group(ref_of(g));
  ASSERT_TRUE(back.ok()) << back.err().message;
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(**back, g);

  auto missing = store_->get_group({"run", 3, split_kind::validation, 5});
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  auto light = store_->get_group(ref_of(g), {.tokens = false});
  ASSERT_TRUE(light.ok() && light->has_value());
  EXPECT_TRUE((*light)->rollouts[0].turns[0].output_tokens.empty());
  EXPECT_EQ((*light)->rollouts[0].turns[0].text, g.rollouts[0].turns[0].text);
}

TEST_F(TrajectoryStore, RewritingAGroupReplacesItWhole) {
  auto g = make_group("run", 1, 0, split_kind::train, "", 4);
  ASSERT_TRUE(store_->put_group(g).ok());
  auto redone = make_group("run", 1, 0, split_kind::train, "", 2);
  ASSERT_TRUE(store_->put_group(redone).ok());
  EXPECT_EQ(**store_->get_group(ref_of(g)), redone);
}

TEST_F(TrajectoryStore, InvalidRecordsAreRefusedAndNothingIsStored) {
  auto g = make_group("run", 1, 0);
  g.rollouts[1].turns[0].output_logprobs.pop_back();
  const auto s = store_->put_group(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.err().message.find("rollout 1 turn 0: 24 output tokens but 23 log-probs"),
            std::string::npos)
      << s.err().message;
  EXPECT_NE(s.err().message.find((dir_ / "db").string()), std::string::npos);
  EXPECT_FALSE(store_->get_group(ref_of(g))->has_value());
  EXPECT_TRUE(store_->completed_groups("run", 1)->empty());
}

TEST_F(TrajectoryStore, RunsAreListedById) {
  const run_record b{"b", "steps: 2\n", 2, run_status::finished};
  const run_record a{"a", "", 1, run_status::running};
  ASSERT_TRUE(store_->put_run(b).ok());
  ASSERT_TRUE(store_->put_run(a).ok());
  auto runs = store_->runs();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(*runs, (std::vector<run_record>{a, b}));
  EXPECT_EQ(**store_->get_run("b"), b);
  EXPECT_FALSE(store_->get_run("c")->has_value());

  auto finished = a;
  finished.status = run_status::finished;
  ASSERT_TRUE(store_->put_run(finished).ok());
  EXPECT_EQ((*store_->get_run("a"))->status, run_status::finished);
}

TEST_F(TrajectoryStore, ScansSelectByRunStepRangeAndSplit) {
  // Runs "a" and "ab" share a prefix: neither may leak into the other's scans.
  for (const std::string run : {"a", "ab"}) {
    for (std::uint64_t step = 0; step < 4; ++step) {
      for (std::uint32_t i = 0; i < 3; ++i) {
        ASSERT_TRUE(store_->put_group(make_group(run, step, i)).ok());
      }
      ASSERT_TRUE(store_->put_group(make_group(run, step, 0, split_kind::validation)).ok());
    }
  }
  struct test_case {
    std::string name;
    group_query query;
    std::size_t count;
  };
  const std::vector<test_case> cases = {
      {"run a", {.run_id = "a"}, 16},
      {"run ab", {.run_id = "ab"}, 16},
      {"every run", {}, 32},
      {"unknown run", {.run_id = "b"}, 0},
      {"steps 1..2", {.run_id = "a", .first_step = 1, .last_step = 2}, 8},
      {"step 3 to the end", {.run_id = "a", .first_step = 3}, 4},
      {"empty range", {.run_id = "a", .first_step = 2, .last_step = 1}, 0},
      {"validation", {.run_id = "a", .split = split_kind::validation}, 4},
      {"train of step 0",
       {.run_id = "a", .first_step = 0, .last_step = 0, .split = split_kind::train},
       3},
      {"every run, step 2 only", {.first_step = 2, .last_step = 2}, 8},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto groups = store_->groups(c.query);
    ASSERT_TRUE(groups.ok()) << groups.err().message;
    EXPECT_EQ(groups->size(), c.count);
    for (const auto& g : *groups) {
      if (!c.query.run_id.empty()) {
        EXPECT_EQ(g.run_id, c.query.run_id);
      }
      EXPECT_GE(g.step, c.query.first_step);
      EXPECT_LE(g.step, c.query.last_step);
      EXPECT_EQ(g, make_group(g.run_id, g.step, g.group_index, g.split));
    }
  }
  // Key order: step, then train before validation, then group index.
  auto step1 = store_->groups({.run_id = "a", .first_step = 1, .last_step = 1});
  ASSERT_TRUE(step1.ok());
  EXPECT_EQ(indices(*step1), (std::vector<std::uint32_t>{0, 1, 2, 0}));
  EXPECT_EQ(step1->back().split, split_kind::validation);
}

TEST_F(TrajectoryStore, AVisitorErrorStopsTheScan) {
  for (std::uint32_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->put_group(make_group("run", 0, i)).ok());
  }
  int visited = 0;
  const auto s = store_->for_each_group({.run_id = "run"}, [&](group_record&&) -> status {
    if (++visited == 2) {
      return error{"enough"};
    }
    return ok_status();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().message, "enough");
  EXPECT_EQ(visited, 2);
}

TEST_F(TrajectoryStore, GroupsOfATaskAcrossRuns) {
  ASSERT_TRUE(store_->put_group(make_group("r1", 0, 0, split_kind::train, "relu")).ok());
  ASSERT_TRUE(store_->put_group(make_group("r1", 2, 1, split_kind::validation, "relu")).ok());
  ASSERT_TRUE(store_->put_group(make_group("r1", 1, 1, split_kind::train, "gelu")).ok());
  ASSERT_TRUE(store_->put_group(make_group("r2", 0, 4, split_kind::train, "relu")).ok());
  ASSERT_TRUE(store_->put_group(make_group("r2", 0, 5, split_kind::train, "relu2")).ok());

  auto collect = [&](std::string_view task, std::string_view run) {
    std::vector<std::string> seen;
    const auto s = store_->for_each_group_of_task(task, run, [&](group_record&& g) -> status {
      EXPECT_EQ(g.task_id, task);
      seen.push_back(g.run_id + "/" + std::to_string(g.step) + "/" + std::to_string(g.group_index));
      return ok_status();
    });
    EXPECT_TRUE(s.ok()) << s.err().message;
    return seen;
  };
  EXPECT_EQ(collect("relu", ""), (std::vector<std::string>{"r1/0/0", "r1/2/1", "r2/0/4"}));
  EXPECT_EQ(collect("relu", "r2"), (std::vector<std::string>{"r2/0/4"}));
  EXPECT_EQ(collect("gelu", ""), (std::vector<std::string>{"r1/1/1"}));
  EXPECT_TRUE(collect("tanh", "").empty());

  // A group redone with another task leaves its old index entry, which scans skip.
  ASSERT_TRUE(store_->put_group(make_group("r1", 0, 0, split_kind::train, "gelu")).ok());
  EXPECT_EQ(collect("relu", ""), (std::vector<std::string>{"r1/2/1", "r2/0/4"}));
  EXPECT_EQ(collect("gelu", ""), (std::vector<std::string>{"r1/0/0", "r1/1/1"}));
}

TEST_F(TrajectoryStore, StepsAndMetricsOverTime) {
  for (std::uint64_t step = 0; step < 5; ++step) {
    step_record s;
    s.run_id = "run";
    s.step = step;
    s.weight_version = step + 1;
    s.timings = {1000.0, 500.0, 200.0, 100.0, 150.0, 50.0};
    s.counts.groups = 32;
    s.metrics = {{"accuracy@1", 0.1 * static_cast<double>(step)},
                 {"loss", 1.0 / (1.0 + static_cast<double>(step))}};
    ASSERT_TRUE(store_->put_step(s).ok());
  }
  ASSERT_TRUE(store_->put_metric("run", 2, "validation/accuracy@1", 0.75).ok());
  ASSERT_TRUE(store_->put_metric("other", 0, "loss", 9.0).ok());

  auto steps = store_->steps("run", 1, 3);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 3U);
  EXPECT_EQ(steps->front().step, 1U);
  EXPECT_EQ(steps->back().weight_version, 4U);
  EXPECT_EQ(steps->front().timings.learner_ms, 150.0);
  EXPECT_EQ(store_->steps("run")->size(), 5U);
  EXPECT_TRUE(store_->steps("run", 3, 2)->empty());
  EXPECT_EQ((*store_->get_step("run", 4))->metrics.at("loss"), 0.2);
  EXPECT_FALSE(store_->get_step("run", 5)->has_value());

  auto loss = store_->metric_series("run", "loss");
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(*loss,
            (std::vector<metric_point>{{0, 1.0}, {1, 0.5}, {2, 1.0 / 3}, {3, 0.25}, {4, 0.2}}));
  EXPECT_EQ(*store_->metric_series("run", "validation/accuracy@1"),
            (std::vector<metric_point>{{2, 0.75}}));
  EXPECT_TRUE(store_->metric_series("run", "acc")->empty());  // a name prefix is not a name
  EXPECT_EQ(*store_->metric_names("run"),
            (std::vector<std::string>{"accuracy@1", "loss", "validation/accuracy@1"}));
  EXPECT_EQ(*store_->metric_names("other"), (std::vector<std::string>{"loss"}));

  const auto bad = store_->put_metric("run", 0, std::string("a\0b", 3), 1.0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("metric name is empty or contains a NUL byte"),
            std::string::npos);
}

TEST_F(TrajectoryStore, ResumeSeesCompletedGroupsAndStepsAfterReopen) {
  for (std::uint32_t i : {0U, 2U, 3U}) {
    ASSERT_TRUE(store_->put_group(make_group("run", 7, i)).ok());
  }
  ASSERT_TRUE(store_->put_group(make_group("run", 7, 1, split_kind::validation)).ok());
  ASSERT_TRUE(store_->put_group(make_group("run", 8, 9)).ok());
  for (std::uint64_t step : {5ULL, 6ULL}) {
    step_record s;
    s.run_id = "run";
    s.step = step;
    ASSERT_TRUE(store_->put_step(s).ok());
  }
  step_record other;
  other.run_id = "run2";  // sorts after "run": must not be taken for its last step
  other.step = 100;
  ASSERT_TRUE(store_->put_step(other).ok());
  ASSERT_TRUE(store_->close().ok());
  ASSERT_TRUE(store_->close().ok());  // twice is fine

  store_ = open_ok(dir_ / "db", {.sync = false});
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(*store_->completed_groups("run", 7), (std::vector<std::uint32_t>{0, 2, 3}));
  EXPECT_EQ(*store_->completed_groups("run", 7, split_kind::validation),
            (std::vector<std::uint32_t>{1}));
  EXPECT_TRUE(store_->completed_groups("run", 6)->empty());
  EXPECT_EQ(*store_->last_completed_step("run"), std::optional<std::uint64_t>{6});
  EXPECT_EQ(*store_->last_completed_step("run2"), std::optional<std::uint64_t>{100});
  EXPECT_EQ(*store_->last_completed_step("ru"), std::nullopt);
  EXPECT_EQ(*store_->last_completed_step("nope"), std::nullopt);
  EXPECT_EQ(**store_->get_group({"run", 8, split_kind::train, 9}), make_group("run", 8, 9));
}

TEST_F(TrajectoryStore, LastCompletedStepAtTheTopOfTheRange) {
  step_record s;
  s.run_id = "run";
  s.step = std::numeric_limits<std::uint64_t>::max();
  ASSERT_TRUE(store_->put_step(s).ok());
  EXPECT_EQ(*store_->last_completed_step("run"), std::optional<std::uint64_t>{s.step});
  EXPECT_EQ(store_->steps("run", s.step)->size(), 1U);
}

TEST_F(TrajectoryStore, WriteBatchCommitsAllAtOnce) {
  auto batch = store_->batch();
  EXPECT_TRUE(batch.empty());
  for (std::uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(batch.put_group(make_group("run", 0, i)).ok());
  }
  step_record s;
  s.run_id = "run";
  s.metrics = {{"m", 1.0}};
  ASSERT_TRUE(batch.put_step(s).ok());
  ASSERT_TRUE(batch.put_run({"run", "", 0, run_status::running}).ok());
  ASSERT_TRUE(batch.put_metric("run", 0, "n", 2.0).ok());
  EXPECT_EQ(batch.groups(), 4U);
  EXPECT_EQ(batch.records(), 7U);
  EXPECT_GT(batch.bytes(), 4 * 2 * 4 * 40 * 4U);  // at least the token arrays

  // An invalid record is refused and leaves the batch as it was.
  const auto before = batch.bytes();
  auto bad = make_group("run", 0, 9);
  bad.task_id.clear();
  EXPECT_FALSE(batch.put_group(bad).ok());
  EXPECT_EQ(batch.bytes(), before);
  EXPECT_EQ(batch.groups(), 4U);

  // Nothing is visible before the commit.
  EXPECT_TRUE(store_->completed_groups("run", 0)->empty());
  ASSERT_TRUE(store_->write(batch).ok());
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(batch.groups(), 0U);
  EXPECT_EQ(*store_->completed_groups("run", 0), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(*store_->last_completed_step("run"), std::optional<std::uint64_t>{0});
  EXPECT_EQ(*store_->metric_names("run"), (std::vector<std::string>{"m", "n"}));
  EXPECT_TRUE(store_->write(batch).ok());  // an empty batch is a no-op
}

TEST_F(TrajectoryStore, BatchOfAnotherStoreIsRefused) {
  auto other = open_ok(dir_ / "other");
  ASSERT_NE(other, nullptr);
  auto batch = other->batch();
  ASSERT_TRUE(batch.put_group(make_group("run", 0, 0)).ok());
  const auto s = store_->write(batch);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.err().message.find("batch made by another store"), std::string::npos);
  EXPECT_EQ(batch.groups(), 1U);
}

TEST_F(TrajectoryStore, ClosedStoreReturnsErrors) {
  ASSERT_TRUE(store_->close().ok());
  EXPECT_NE(store_->put_group(make_group("run", 0, 0)).err().message.find("the store is closed"),
            std::string::npos);
  EXPECT_FALSE(store_->get_group({"run", 0, split_kind::train, 0}).ok());
  EXPECT_FALSE(store_->groups({}).ok());
  EXPECT_FALSE(store_->last_completed_step("run").ok());
  EXPECT_FALSE(store_->metric_names("run").ok());
}

TEST_F(TrajectoryStore, ConcurrentWritersAndReaders) {
  constexpr int writers = 4;
  constexpr std::uint32_t per_writer = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  threads.reserve(writers);
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (std::uint32_t i = 0; i < per_writer; ++i) {
        if (!store_->put_group(make_group("run", static_cast<std::uint64_t>(w), i)).ok()) {
          ++failures;
        }
        // Readers see whole groups only.
        auto g = store_->get_group({"run", static_cast<std::uint64_t>(w), split_kind::train, i});
        if (!g.ok() || !g->has_value() ||
            **g != make_group("run", static_cast<std::uint64_t>(w), i)) {
          ++failures;
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (int k = 0; k < 20; ++k) {
      if (!store_
               ->for_each_group({.run_id = "run", .decode = {.tokens = false}},
                                [](group_record&&) { return ok_status(); })
               .ok()) {
        ++failures;
      }
    }
  });
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->groups({.run_id = "run"})->size(), writers * per_writer);
}

// ---- open and its errors -----------------------------------------------------------------------

TEST(TrajectoryStoreOpen, ErrorCases) {
  scratch_dir dir;
  {
    std::ofstream file(dir / "a-file");
    file << "not a database";
  }
  struct test_case {
    std::string name;
    std::filesystem::path path;
    store_options options;
    std::string error;
  };
  const std::vector<test_case> cases = {
      {"read-only of a missing store",
       dir / "missing",
       {.read_only = true},
       "no trajectory store there"},
      {"create_if_missing off",
       dir / "missing",
       {.create_if_missing = false},
       "no trajectory store there (and create_if_missing is off)"},
      {"a file in the way", dir / "a-file" / "db", {}, "cannot create the folder"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto store = trajectory_store::open(c.path, c.options);
    ASSERT_FALSE(store.ok());
    EXPECT_NE(store.err().message.find(c.error), std::string::npos) << store.err().message;
    EXPECT_NE(store.err().message.find("trajectory store '" + c.path.string() + "'"),
              std::string::npos)
        << store.err().message;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "missing"));
}

TEST(TrajectoryStoreOpen, CreatesParentFolders) {
  scratch_dir dir;
  auto store = open_ok(dir / "run" / "trajectories");
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "trajectories" / "CURRENT"));
  EXPECT_EQ(store_path_of_run_dir(dir / "run"), dir / "run" / "trajectories");
}

TEST(TrajectoryStoreOpen, SecondWriterIsRefusedWithAHintAndReadersWorkAlongside) {
  scratch_dir dir;
  auto writer = open_ok(dir / "db");
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->put_group(make_group("run", 0, 0)).ok());

  auto second = trajectory_store::open(dir / "db");
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.err().message.find("lock"), std::string::npos) << second.err().message;
  EXPECT_NE(second.err().message.find("another process has this store open for writing"),
            std::string::npos)
      << second.err().message;

  auto reader = open_ok(dir / "db", {.read_only = true});
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(**reader->get_group({"run", 0, split_kind::train, 0}), make_group("run", 0, 0));
  const auto refused = reader->put_group(make_group("run", 0, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.err().message.find("opened read-only"), std::string::npos);
}

// Helpers that write into the store's RocksDB directly, to make what the store itself never writes.
void raw_put(const std::filesystem::path& path, const std::string& family, const std::string& key,
             const std::string& value) {
  rocksdb::DBOptions options;
  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, path.string(), &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.reserve(names.size());
  for (const auto& n : names) {
    descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions());
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, path.string(), descriptors, &handles, &db).ok());
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == family) {
      EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), handles[i], key, value).ok());
    }
  }
  for (auto* h : handles) {
    EXPECT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  }
  EXPECT_TRUE(db->Close().ok());
  delete db;
}

TEST(TrajectoryStoreOpen, NewerSchemaIsRefused) {
  scratch_dir dir;
  ASSERT_NE(open_ok(dir / "db"), nullptr);
  raw_put(dir / "db", "default", "leap.store.schema", std::string("\x02\0\0\0", 4));
  auto store = trajectory_store::open(dir / "db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.err().message.find("schema version 2 is not readable by this build"),
            std::string::npos)
      << store.err().message;
  // The refused open released the database: a raw open still works.
  raw_put(dir / "db", "default", "leap.store.schema", std::string("\x01\0\0\0", 4));
  EXPECT_NE(open_ok(dir / "db"), nullptr);
}

TEST(TrajectoryStoreOpen, FamiliesOfALaterLayoutAreTolerated) {
  scratch_dir dir;
  ASSERT_NE(open_ok(dir / "db"), nullptr);
  {
    rocksdb::DBOptions options;
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, (dir / "db").string(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    descriptors.reserve(names.size());
    for (const auto& n : names) {
      descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, (dir / "db").string(), descriptors, &handles, &db).ok());
    rocksdb::ColumnFamilyHandle* extra = nullptr;
    ASSERT_TRUE(db->CreateColumnFamily(rocksdb::ColumnFamilyOptions(), "future", &extra).ok());
    handles.push_back(extra);
    for (auto* h : handles) {
      ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    }
    ASSERT_TRUE(db->Close().ok());
    delete db;
  }
  auto store = open_ok(dir / "db");
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->put_group(make_group("run", 0, 0)).ok());
  EXPECT_TRUE(store->close().ok());
}

TEST(TrajectoryStoreOpen, ACorruptRecordIsAnErrorNamingItsKey) {
  scratch_dir dir;
  ASSERT_NE(open_ok(dir / "db"), nullptr);
  raw_put(dir / "db", "groups", keys::group({"run", 4, split_kind::train, 2}), "\x01\x01garbage");
  auto store = open_ok(dir / "db");
  ASSERT_NE(store, nullptr);
  auto g = store->get_group({"run", 4, split_kind::train, 2});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.err().message.find("group (run 'run', step 4, train group 2): group record: byte"),
            std::string::npos)
      << g.err().message;
  auto scan = store->groups({.run_id = "run"});
  ASSERT_FALSE(scan.ok());
  EXPECT_NE(scan.err().message.find("step 4, train group 2"), std::string::npos);
  // Resume reads keys only, so it still works.
  EXPECT_EQ(*store->completed_groups("run", 4), (std::vector<std::uint32_t>{2}));
}

// A turn sampled across an in-flight weight update keeps its segments through the store and a
// reopen; a store holding records older than format version 6 reads each turn as one segment; a
// segment that breaks the invariants is refused before anything is written.
TEST(TrajectoryStoreOpen, WeightSegmentsRoundTripAndOlderRecordsReadAsOneSegment) {
  scratch_dir dir;
  auto g = make_group("run", 7, 1);
  g.rollouts[0].turns[1].weight_segments = {{0, 7}, {5, 8}, {20, 9}};
  g.rollouts[2].turns[0].weight_segments.clear();  // built without: read back without
  {
    auto store = open_ok(dir / "db");
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->put_group(g).ok());
    auto bad = make_group("run", 7, 2);
    bad.rollouts[1].turns[0].weight_segments = {{0, 7}, {24, 8}};  // past the 24 output tokens
    const auto s = store->put_group(bad);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.err().message.find("rollout 1 turn 0: weight segment 1 starts at token 24"),
              std::string::npos)
        << s.err().message;
    bad.rollouts[1].turns[0].weight_segments = {{0, 6}};  // not the turn's weight version
    EXPECT_FALSE(store->put_group(bad).ok());
    EXPECT_FALSE(store->get_group(ref_of(bad))->has_value());
  }
  // Version 5 bytes of a group (as a build before version 6 wrote them), put beside it.
  auto old = make_group("run", 7, 3);
  auto bytes = encode(old);
  std::size_t turns = 0;
  for (const auto& r : old.rollouts) {
    turns += r.turns.size();
  }
  bytes = bytes.substr(0, bytes.size() - (4 + 12) * turns);  // one segment per turn
  bytes[0] = 5;
  raw_put(dir / "db", "groups", keys::group(ref_of(old)), bytes);

  auto store = open_ok(dir / "db");
  ASSERT_NE(store, nullptr);
  auto back = store->get_group(ref_of(g));
  ASSERT_TRUE(back.ok() && back->has_value()) << (back.ok() ? "" : back.err().message);
  EXPECT_EQ(**back, g);
  EXPECT_EQ((*back)->rollouts[0].turns[1].weight_segments,
            (std::vector<turn_weight_segment>{{0, 7}, {5, 8}, {20, 9}}));
  auto old_back = store->get_group(ref_of(old));
  ASSERT_TRUE(old_back.ok() && old_back->has_value())
      << (old_back.ok() ? "" : old_back.err().message);
  for (const auto& r : (*old_back)->rollouts) {
    for (const auto& t : r.turns) {
      EXPECT_EQ(t.weight_segments, (std::vector<turn_weight_segment>{{0, 7}}));
    }
  }
}

}  // namespace
}  // namespace leap

// ---- per-turn resume

namespace leap {
namespace {

std::vector<stored_turn> turns_of(const trajectory_store& store, const std::string& run) {
  auto turns = store.partial_turns(run);
  EXPECT_TRUE(turns.ok()) << turns.err().message;
  return turns.ok() ? *turns : std::vector<stored_turn>{};
}

// Turns of groups in flight survive a reopen; a group's put removes its turns and no other's; a
// read-only open beside them reads them too.
TEST_F(TrajectoryStore, InProgressTurnsRoundTripAndGoWithTheirGroup) {
  const auto group = make_group("run", 2, 1);
  const group_ref ref = ref_of(group);
  const group_ref other{"run", 2, split_kind::train, 0};
  const group_ref validation{"run", 2, split_kind::validation, 1};
  const group_ref other_run{"run2", 2, split_kind::train, 1};
  std::vector<stored_turn> expected;
  for (std::uint32_t r = 0; r < 2; ++r) {
    for (std::uint32_t t = 0; t < 2; ++t) {
      expected.push_back({ref, r, t, group.rollouts[r].turns[t]});
    }
  }
  // Written out of order; read back in key order.
  for (auto it = expected.rbegin(); it != expected.rend(); ++it) {
    ASSERT_TRUE(store_->put_turn(it->group, it->rollout, it->turn, it->record).ok());
  }
  const stored_turn of_other{other, 3, 0, group.rollouts[3].turns[0]};
  const stored_turn of_validation{validation, 0, 1, group.rollouts[2].turns[1]};
  ASSERT_TRUE(store_->put_turn(of_other.group, 3, 0, of_other.record).ok());
  ASSERT_TRUE(store_->put_turn(of_validation.group, 0, 1, of_validation.record).ok());
  ASSERT_TRUE(store_->put_turn(other_run, 0, 0, group.rollouts[0].turns[0]).ok());

  ASSERT_TRUE(store_->close().ok());
  store_ = open_ok(dir_ / "db", {.sync = false});
  ASSERT_NE(store_, nullptr);
  auto all = store_->partial_turns("run");
  ASSERT_TRUE(all.ok()) << all.err().message;
  std::vector<stored_turn> want = {of_other};
  want.insert(want.end(), expected.begin(), expected.end());
  want.push_back(of_validation);
  EXPECT_EQ(*all, want);
  auto reader = open_ok(dir_ / "db", {.read_only = true});
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(turns_of(*reader, "run").size(), want.size());

  // The group's put deletes its 4 turns and keeps the others.
  ASSERT_TRUE(store_->put_group(group).ok());
  auto left = store_->partial_turns("run");
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, (std::vector<stored_turn>{of_other, of_validation}));
  EXPECT_EQ(turns_of(*store_, "run2").size(), 1u);
  EXPECT_TRUE(turns_of(*store_, "ru").empty());

  // A batch that puts turns and their group together leaves no turn behind.
  auto batch = store_->batch();
  ASSERT_TRUE(batch.put_turn(other, 0, 0, group.rollouts[0].turns[0]).ok());
  auto other_group = make_group("run", 2, 0);
  ASSERT_TRUE(batch.put_group(other_group).ok());
  ASSERT_TRUE(store_->write(batch).ok());
  EXPECT_EQ(turns_of(*store_, "run"), (std::vector<stored_turn>{of_validation}));
}

TEST_F(TrajectoryStore, InvalidTurnsAreRefused) {
  auto turn = make_group("run", 0, 0).rollouts[0].turns[0];
  EXPECT_FALSE(store_->put_turn({"", 0, split_kind::train, 0}, 0, 0, turn).ok());
  turn.output_logprobs.pop_back();
  auto refused = store_->put_turn({"run", 0, split_kind::train, 0}, 0, 0, turn);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.err().message.find("log-probs"), std::string::npos) << refused.err().message;
  EXPECT_TRUE(turns_of(*store_, "run").empty());
}

}  // namespace
}  // namespace leap
