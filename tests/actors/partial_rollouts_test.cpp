// schedule.partial driven by the experiment driver (issue 33): a step starts batch +
// over_provision groups, trains on the first batch to complete without waiting for a slow one,
// carries it into the next step, where it trains, and drops a carried group once it is too stale.
// The whole graph on CAF's deterministic test coordinator with the real store (RocksDB): held
// generations stand in for slow groups, so nothing depends on the machine's speed.
#include "tests/actors/experiment_fixture.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using testing::coin_policy;
using testing::driver_fixture;
using testing::small_config;
using testing::tasks;

// 3 steps of batch 2, G = 2, one turn; one group over-provisioned, at most one carried.
experiment_settings partial_run_settings() {
  experiment_settings s;
  s.config = small_config(3, 2, 2, 1);
  s.config.schedule.partial_over_provision = 1;
  s.config.schedule.partial_max_carry = 1;
  s.train_tasks = tasks(9);
  return s;
}

double partial_step_metric(const trajectory_store& store, std::uint64_t step,
                           const std::string& name) {
  auto record = store.get_step("run", step);
  if (!record.ok() || !record->has_value()) {
    return -1.0;
  }
  auto it = (*record)->metrics.find(name);
  return it == (*record)->metrics.end() ? -1.0 : it->second;
}

bool was_learned(const testing::hub& h, group_key key) {
  return std::find(h.learned.begin(), h.learned.end(), key) != h.learned.end();
}

TEST(PartialRolloutsDriverTest, AStepTrainsWithoutItsSlowGroupWhichTrainsInTheNextStep) {
  driver_fixture f(coin_policy());
  // Step 0's group 0 and step 1's group 1 are slow: their generations wait for a release.
  f.shared->hold = [](const std::string& id) {
    return id.rfind("run/0/train/0/", 0) == 0 || id.rfind("run/1/train/1/", 0) == 0;
  };
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(partial_run_settings(), out);
  f.c.run();

  // Step 0 started 3 groups and trained on the 2 that completed, group 0 still generating.
  EXPECT_EQ(f.shared->count_events("gen run/0/train/2/"), 2u);
  EXPECT_EQ(f.shared->count_events("train 0"), 1u);
  EXPECT_TRUE(was_learned(*f.shared, {0, split_kind::train, 1}));
  EXPECT_TRUE(was_learned(*f.shared, {0, split_kind::train, 2}));
  EXPECT_FALSE(was_learned(*f.shared, {0, split_kind::train, 0}));
  EXPECT_EQ(f.shared->trained_sequences[0], 4u);  // 2 groups of G = 2
  EXPECT_EQ(partial_step_metric(*f.store, 0, "partial.started"), 3.0);
  EXPECT_EQ(partial_step_metric(*f.store, 0, "partial.carried"), 1.0);
  EXPECT_EQ(partial_step_metric(*f.store, 0, "partial.dropped"), 0.0);
  // Step 1 took group 0 over and started only 2 new groups; its batch waits (1 of 2 complete).
  EXPECT_EQ(f.shared->count_events("gen run/1/train/2/"), 0u);
  EXPECT_EQ(f.shared->count_events("train 1"), 0u);
  EXPECT_FALSE(out->has_value());

  // The slow group completes: it trains in step 1 (before step 1's group 1, still slow), under
  // index 0 + (batch + over_provision) as the learner sees it, from weights 1 step behind.
  f.release_generation("run/0/train/0/");
  f.c.run();
  EXPECT_EQ(f.shared->count_events("train 1"), 1u);
  EXPECT_TRUE(was_learned(*f.shared, {1, split_kind::train, 3}));
  EXPECT_TRUE(was_learned(*f.shared, {1, split_kind::train, 0}));
  EXPECT_FALSE(was_learned(*f.shared, {1, split_kind::train, 1}));
  EXPECT_EQ(f.shared->trained_sequences[1], 4u);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.carried_in"), 1.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.trained_carried"), 1.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.started"), 2.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.carried"), 1.0);  // group 1, still slow
  // The store keeps it under the step that started it, sampled with version 0.
  auto slow = f.store->get_group({"run", 0, split_kind::train, 0});
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE(slow->has_value());
  EXPECT_EQ((*slow)->rollouts[0].turns[0].weight_version, 0u);

  // Step 2 (the last) trains its own 2 groups; step 1's group 1, sampled with version 1, would
  // be 2 versions behind the earliest weights after step 2: dropped as stale, and its gate ends,
  // so the run finishes without it.
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
  EXPECT_EQ(f.shared->count_events("train 2"), 1u);
  EXPECT_EQ(partial_step_metric(*f.store, 2, "partial.carried_in"), 1.0);
  EXPECT_EQ(partial_step_metric(*f.store, 2, "partial.trained_carried"), 0.0);
  EXPECT_EQ(partial_step_metric(*f.store, 2, "partial.dropped"), 1.0);
  EXPECT_EQ(partial_step_metric(*f.store, 2, "partial.dropped_stale"), 1.0);
  EXPECT_FALSE(was_learned(*f.shared, {2, split_kind::train, 4}));
  auto dropped = f.store->get_group({"run", 1, split_kind::train, 1});
  ASSERT_TRUE(dropped.ok());
  EXPECT_FALSE(dropped->has_value());
  EXPECT_EQ(f.shared->trained_sequences[2], 4u);
}

// Without a slow group, every step trains the first `batch` groups to complete and carries the
// over-provisioned one; the last step carries nothing, so no group is left in flight.
TEST(PartialRolloutsDriverTest, EveryStepTrainsAFullBatch) {
  driver_fixture f(coin_policy());
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(partial_run_settings(), out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
  for (std::uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_EQ(f.shared->trained_sequences[step], 4u);
    const double carried = partial_step_metric(*f.store, step, "partial.carried");
    const double dropped = partial_step_metric(*f.store, step, "partial.dropped");
    EXPECT_EQ(carried + dropped, 1.0);  // batch + 1 in flight, batch trained
    if (step == 2) {
      EXPECT_EQ(carried, 0.0);
    }
  }
}

// A run stopped while a carried group and one of the next step's groups are in flight, then
// restarted from what the store holds (the plan `leap run` makes: tools/launch/resume.hpp, built
// here by hand from the store). The store keeps groups under the step that started them and not
// the carry decision, so the carried group is not resumed: it trains in neither process (never
// twice), and the restarted step takes its stored group from the store without generating it.
TEST(PartialRolloutsDriverTest, AResumedStepTakesItsStoredGroupsAndTrainsNothingTwice) {
  driver_fixture f(coin_policy());
  const auto s = partial_run_settings();
  f.shared->hold = [](const std::string& id) {
    return id.rfind("run/0/train/0/", 0) == 0 || id.rfind("run/1/train/1/", 0) == 0;
  };
  {
    auto out = std::make_shared<std::optional<run_summary>>();
    auto driver = f.start(s, out);
    f.c.run();
    ASSERT_FALSE(out->has_value());
    caf::anon_send(driver, stop_atom_v);
    f.c.run();
    ASSERT_TRUE(out->has_value());
    EXPECT_EQ((*out)->status, run_status::interrupted);
    EXPECT_EQ((*out)->steps_completed, 1u);
  }
  // Step 1 had group 0 stored; group 1 (its own) and step 0's group 0 (carried) were in flight.
  auto stored = f.store->completed_groups("run", 1);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(*stored, (std::vector<std::uint32_t>{0}));
  const auto learned_before = f.shared->learned.size();

  resume_plan plan;
  plan.first_step = 1;
  plan.weight_version = 1;
  plan.train_done[1] = *stored;
  f.shared->hold = nullptr;
  f.shared->events.clear();
  f.services.learner = f.new_learner();
  auto resumed = s;
  resumed.resume = plan;
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(resumed, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
  EXPECT_EQ((*out)->steps_completed, 2u);
  EXPECT_EQ((*out)->groups_resumed, 1u);
  // Step 1 starts batch + over_provision groups afresh (nothing carried in); its stored group is
  // read back, not generated, and trains there (it finished before any of this process's).
  EXPECT_EQ(f.shared->count_events("gen run/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/2/"), 2u);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.carried_in"), 0.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.started"), 3.0);
  const std::vector<group_key> second(
      f.shared->learned.begin() + static_cast<std::ptrdiff_t>(learned_before),
      f.shared->learned.end());
  EXPECT_NE(std::find(second.begin(), second.end(), group_key{1, split_kind::train, 0}),
            second.end());
  // Nothing of step 0 trains again, the lost carried group included (it would be index 3).
  for (const auto& k : second) {
    EXPECT_GE(k.step, 1u) << to_string(k);
    EXPECT_NE(k, (group_key{1, split_kind::train, 3})) << to_string(k);
  }
  EXPECT_EQ(second.size(), 4u);  // steps 1 and 2, 2 groups each
}

}  // namespace
}  // namespace leap::actors
