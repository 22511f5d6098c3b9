// `leap replay`'s input read from a real store: groups without tokens, in key order, beside the
// run's step records; nothing of another run.
#include "storage/replay_data.hpp"

#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::scratch_dir;

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class Replay : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = trajectory_store::open(dir_ / "db", {.sync = false});
    ASSERT_TRUE(store.ok()) << store.err().message;
    store_ = std::move(store).value();
  }

  scratch_dir dir_;
  std::unique_ptr<trajectory_store> store_;
};

TEST_F(Replay, GroupsInKeyOrderBesideTheirStepRecords) {
  // Written out of order: step 1 first, validation before train.
  ASSERT_TRUE(store_->put_group(make_group("run", 1, 0, split_kind::train, "", 2, 3)).ok());
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 0, split_kind::validation, "", 3, 1)).ok());
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 1)).ok());
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 0)).ok());
  // Another run must not leak in, nor its step record.
  ASSERT_TRUE(store_->put_group(make_group("run2", 0, 0, split_kind::train, "", 4, 5)).ok());
  step_record other;
  other.run_id = "run2";
  other.step = 0;
  ASSERT_TRUE(store_->put_step(other).ok());
  for (std::uint64_t step : {3U, 0U}) {  // step 3 has a record and no group
    step_record s;
    s.run_id = "run";
    s.step = step;
    s.timings.learner_ms = 42.0 + static_cast<double>(step);
    ASSERT_TRUE(store_->put_step(s).ok());
  }

  auto data = load_replay_data(*store_, "run");
  ASSERT_TRUE(data.ok()) << data.err().message;
  EXPECT_EQ(data->run_id, "run");
  EXPECT_EQ(data->max_turns, 3);
  ASSERT_EQ(data->groups.size(), 4U);
  const std::vector<std::tuple<std::uint64_t, split_kind, std::uint32_t>> order = {
      {0, split_kind::train, 0},
      {0, split_kind::train, 1},
      {0, split_kind::validation, 0},
      {1, split_kind::train, 0}};
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& g = data->groups[i];
    EXPECT_EQ(std::make_tuple(g.step, g.split, g.group), order[i]) << i;
  }
  // make_group: rollouts pass at their last turn when their index is even.
  const auto& last = data->groups[3];
  ASSERT_EQ(last.measured.size(), 2U);
  EXPECT_EQ(last.measured[0].passed_at_turn, 3);
  EXPECT_EQ(last.measured[1].passed_at_turn, 0);
  EXPECT_EQ(last.turns, 6U);
  ASSERT_EQ(data->steps.size(), 2U);
  EXPECT_EQ(data->steps[0].step, 0U);
  EXPECT_EQ(data->steps[1].step, 3U);
  EXPECT_EQ(data->steps[1].timings.learner_ms, 45.0);
}

turn_profile_record replay_profile(std::uint64_t step, split_kind split, std::uint32_t rollout,
                                   std::vector<std::string> bottlenecks, double seconds) {
  turn_profile_record p;
  p.turn = turn_ref{"run", step, split, 0, rollout, 0};
  for (std::size_t i = 0; i < bottlenecks.size(); ++i) {
    p.kernels.push_back({"k" + std::to_string(i), 100.0, bottlenecks[i], {}});
  }
  p.seconds = seconds;
  return p;
}

// The profiles stored beside the groups (issue 34) become replay's table of bottleneck classes and
// profiling seconds per step: training turns only, a profile without kernels counted as profiled.
TEST_F(Replay, ProfilesAreCountedPerStepByBottleneckClass) {
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 0)).ok());
  ASSERT_TRUE(store_->put_group(make_group("run", 1, 0)).ok());
  for (const auto& p :
       {replay_profile(0, split_kind::train, 0, {"memory-bound", "launch-bound"}, 2.0),
        replay_profile(0, split_kind::train, 2, {"memory-bound"}, 1.5),
        replay_profile(0, split_kind::validation, 0, {"compute-bound"}, 9.0),  // not a step's
        replay_profile(1, split_kind::train, 0, {"latency-bound", "compute-bound"}, 4.0),
        replay_profile(1, split_kind::train, 2, {}, 0.25)}) {  // profiling failed: a note
    ASSERT_TRUE(store_->put_profile(p).ok());
  }
  auto data = load_replay_data(*store_, "run");
  ASSERT_TRUE(data.ok()) << data.err().message;
  ASSERT_EQ(data->profiles.size(), 2U);
  const auto report = build_replay_report(*data, 4);
  ASSERT_EQ(report.steps.size(), 2U);
  const auto memory = bottleneck_class_index("memory-bound");
  const auto compute = bottleneck_class_index("compute-bound");
  EXPECT_EQ(report.steps[0].profiles.profiles, 2U);
  EXPECT_EQ(report.steps[0].profiles.kernels[memory], 2U);
  EXPECT_EQ(report.steps[0].profiles.kernels[compute], 0U);
  EXPECT_NEAR(report.steps[0].profiles.seconds, 3.5, 1e-9);
  EXPECT_EQ(report.steps[1].profiles.profiles, 2U);
  EXPECT_EQ(report.steps[1].profiles.kernels[compute], 1U);
  EXPECT_EQ(report.total.profiles.profiles, 4U);
  EXPECT_NEAR(report.total.profiles.seconds, 7.75, 1e-9);

  const auto table = format_profile_table(report);
  EXPECT_NE(table.find("step profiled  memory  compute  latency  launch  unknown   seconds"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("     1        2       2        0        0       1        0       3.5"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("   all        4       2        1        1       1        0       7.8"),
            std::string::npos)
      << table;
  EXPECT_EQ(profile_csv(report),
            "step,profiled,memory_bound,compute_bound,latency_bound,launch_bound,unknown,seconds\n"
            "0,2,2,0,0,1,0,3.5\n"
            "1,2,0,1,1,0,0,4.25\n");

  // A run without profiles has no table.
  ASSERT_TRUE(store_->put_group(make_group("plain", 0, 0)).ok());
  auto plain = load_replay_data(*store_, "plain");
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_EQ(format_profile_table(build_replay_report(*plain, 4)), "");
  EXPECT_EQ(profile_csv(build_replay_report(*plain, 4)), "");
}

TEST_F(Replay, UnknownOrEmptyRunGivesNothing) {
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 0)).ok());
  for (const std::string id : {"unknown", ""}) {
    auto data = load_replay_data(*store_, id);
    ASSERT_TRUE(data.ok()) << data.err().message;
    EXPECT_TRUE(data->groups.empty()) << "'" << id << "'";
    EXPECT_TRUE(data->steps.empty()) << "'" << id << "'";
    EXPECT_EQ(data->max_turns, 1);
  }
}

}  // namespace
}  // namespace leap
