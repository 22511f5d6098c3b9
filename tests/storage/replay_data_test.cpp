#include "storage/replay_data.hpp"

#include "orchestrator/metrics.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::scratch_dir;

std::vector<int> passed_at(const group_summary& s) {
  std::vector<int> out;
  for (const auto& o : s.outcomes) {
    out.push_back(o.passed_at_turn);
  }
  return out;
}

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

TEST_F(Replay, GroupsBecomeSummariesPerStepBesideTheirStepRecords) {
  // Step 0: two train groups, one validation group; completed.
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 0)).ok());
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 1, split_kind::train, "", 2, 3)).ok());
  ASSERT_TRUE(store_->put_group(make_group("run", 0, 0, split_kind::validation, "", 3, 1)).ok());
  step_record s0;
  s0.run_id = "run";
  s0.step = 0;
  s0.timings.learner_ms = 42.0;
  ASSERT_TRUE(store_->put_step(s0).ok());
  // Step 1: a probe group the gate closed, whose debug turns passed; the run stopped in the step.
  auto probe = make_group("run", 1, 0, split_kind::train, "", 2, 2);
  probe.gate = gate_decision::closed_hopeless;
  probe.probe = true;
  for (auto& r : probe.rollouts) {
    r.outcome = {0, 1};  // trained on the first turn only, which failed
  }
  ASSERT_TRUE(store_->put_group(probe).ok());
  // Another run must not leak in.
  ASSERT_TRUE(store_->put_group(make_group("run2", 0, 0)).ok());

  auto replay = read_replay(*store_, "run");
  ASSERT_TRUE(replay.ok()) << replay.err().message;
  ASSERT_EQ(replay->size(), 2U);

  const auto& step0 = (*replay)[0];
  EXPECT_EQ(step0.step, 0U);
  ASSERT_EQ(step0.train.size(), 2U);
  ASSERT_EQ(step0.validation.size(), 1U);
  EXPECT_TRUE(step0.probes.empty());
  EXPECT_EQ(step0.max_turns, 3U);
  EXPECT_EQ(passed_at(step0.train[0]), (std::vector<int>{2, 0, 2, 0}));
  EXPECT_EQ(passed_at(step0.train[1]), (std::vector<int>{3, 0}));
  EXPECT_EQ(step0.train[0].advantages, (std::vector<double>{0.5, -0.5, 0.5, -0.5}));
  EXPECT_EQ(passed_at(step0.validation[0]), (std::vector<int>{1, 0, 1}));
  ASSERT_TRUE(step0.record.has_value());
  EXPECT_EQ(step0.record->timings.learner_ms, 42.0);

  const auto& step1 = (*replay)[1];
  EXPECT_FALSE(step1.record.has_value());
  ASSERT_EQ(step1.train.size(), 1U);
  EXPECT_EQ(step1.train[0].gate, gate_decision::closed_hopeless);
  EXPECT_EQ(passed_at(step1.train[0]), (std::vector<int>{0, 0}));
  ASSERT_EQ(step1.probes.size(), 1U);
  EXPECT_EQ(step1.probes[0].gate, gate_decision::open);
  EXPECT_EQ(passed_at(step1.probes[0]), (std::vector<int>{2, 0}));

  // The summaries feed the metrics as they are: the probe's debug turn recovered one of two
  // first-turn failures.
  EXPECT_EQ(recovery(step1.probes).per_rollout, 0.5);
  EXPECT_EQ(activated_group_fraction(step1.train), 0.0);
}

TEST_F(Replay, StepRangeAndStepsWithoutGroups) {
  for (std::uint64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(store_->put_group(make_group("run", step, 0)).ok());
  }
  step_record only_record;
  only_record.run_id = "run";
  only_record.step = 9;
  ASSERT_TRUE(store_->put_step(only_record).ok());

  auto middle = read_replay(*store_, "run", {.first_step = 1, .last_step = 3});
  ASSERT_TRUE(middle.ok());
  ASSERT_EQ(middle->size(), 3U);
  EXPECT_EQ(middle->front().step, 1U);
  EXPECT_EQ(middle->back().step, 3U);

  auto all = read_replay(*store_, "run");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 6U);
  EXPECT_EQ(all->back().step, 9U);
  EXPECT_TRUE(all->back().train.empty());
  EXPECT_TRUE(all->back().record.has_value());

  EXPECT_TRUE(read_replay(*store_, "unknown")->empty());
  EXPECT_TRUE(read_replay(*store_, "")->empty());
}

}  // namespace
}  // namespace leap
