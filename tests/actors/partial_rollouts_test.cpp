// schedule.partial driven by the experiment driver (issue 33): a step starts batch +
// over_provision groups, trains on the first batch to complete without waiting for a slow one,
// carries it into the next step, where it trains, and drops a carried group once it is too stale.
// The whole graph on CAF's deterministic test coordinator with the real store (RocksDB): held
// generations stand in for slow groups, so nothing depends on the machine's speed.
#include "orchestrator/replay.hpp"
#include "storage/replay_data.hpp"
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

// The learner's keys mapped back to the groups they were started as: a carried group reaches the
// learner as group + (batch + over_provision) x steps carried, under the step that trains it.
std::vector<group_key> origins(const std::vector<group_key>& learned, std::uint32_t width) {
  std::vector<group_key> out;
  out.reserve(learned.size());
  for (const auto& k : learned) {
    out.push_back({k.step - k.group / width, k.split, k.group % width});
  }
  return out;
}

// Each group the learner got, as started, once: nothing trains twice.
void expect_each_trained_once(const std::vector<group_key>& learned) {
  auto keys = origins(learned, 3);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end())
      << "a group trained twice: " << to_string(*std::adjacent_find(keys.begin(), keys.end()));
}

// Runs `s` until it is stopped with the driver idle (the held generations still held); returns
// the learner's keys so far.
void run_and_stop(driver_fixture& f, const experiment_settings& s) {
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

// The plan `leap run` makes for a restart after step 0 (tools/launch/resume.hpp, built here by
// hand from the store): step 1's stored groups are taken back.
resume_plan plan_after_step_0(const trajectory_store& store) {
  resume_plan plan;
  plan.first_step = 1;
  plan.weight_version = 1;
  auto stored = store.completed_groups("run", 1);
  EXPECT_TRUE(stored.ok());
  if (stored.ok() && !stored->empty()) {
    plan.train_done[1] = *stored;
  }
  return plan;
}

// A run stopped while a carried group is half-way (one of its four turns still generating) and
// one of the next step's own groups is in flight, then restarted. The carry decision was stored
// with step 0's record, so the restart puts the carried group back into step 1's pool, generates
// only its unfinished turn (the three finished ones are taken from the store with the weights
// that sampled them), and trains it once, in step 1; the step's stored group is read back, not
// generated; nothing trains twice.
TEST(PartialRolloutsDriverTest, AGroupCarriedAtTheStopResumesAndTrainsOnceInTheStepItJoined) {
  driver_fixture f(testing::failing_policy());  // every rollout runs both turns
  auto s = partial_run_settings();
  s.config.rollout.max_turns = 2;
  // Step 0's group 0 waits for turn 2 of its rollout 0; step 1's group 1 waits from its start.
  f.shared->hold = [](const std::string& id) {
    return id == "run/0/train/0/0/1" || id.rfind("run/1/train/1/", 0) == 0;
  };
  run_and_stop(f, s);
  if (HasFatalFailure()) {
    return;
  }
  // Step 0 carried group 0 (sampled with version 0, unfinished) and stored that decision with
  // its record; step 1 took it over and started 2 groups of its own, stored its group 0.
  auto carry = f.store->get_carry("run", 0);
  ASSERT_TRUE(carry.ok()) << carry.err().message;
  ASSERT_TRUE(carry->has_value());
  ASSERT_EQ((*carry)->groups.size(), 1u);
  EXPECT_EQ((*carry)->groups[0].origin_step, 0u);
  EXPECT_EQ((*carry)->groups[0].group, 0u);
  EXPECT_EQ((*carry)->groups[0].sampled_version, 0u);
  EXPECT_FALSE((*carry)->groups[0].complete);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/2/"), 0u);
  auto in_progress = f.store->partial_turns("run");
  ASSERT_TRUE(in_progress.ok());
  std::size_t carried_turns = 0;
  for (const auto& t : *in_progress) {
    carried_turns += t.group.step == 0 && t.group.group_index == 0 ? 1 : 0;
  }
  EXPECT_EQ(carried_turns, 3u);
  const std::vector<group_key> first(f.shared->learned);

  f.shared->hold = nullptr;
  f.shared->events.clear();
  f.services.learner = f.new_learner();
  auto resumed = s;
  resumed.resume = plan_after_step_0(*f.store);
  ASSERT_EQ(resumed.resume.train_done[1], (std::vector<std::uint32_t>{0}));
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(resumed, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
  EXPECT_EQ((*out)->steps_completed, 2u);
  EXPECT_EQ((*out)->turns_resumed, 3u);
  // Of the carried group only the held turn is generated again; step 1 starts 2 groups, as the
  // stopped process did, and takes its group 0 from the store.
  EXPECT_EQ(f.shared->count_events("gen run/0/"), 1u);
  EXPECT_EQ(f.shared->count_events("gen run/0/train/0/0/1"), 1u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/1/"), 4u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/2/"), 0u);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.carried_in"), 1.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.started"), 2.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.trained_carried"), 1.0);
  // It trains in step 1 (index 0 + 3), before step 1's own groups, once.
  const std::vector<group_key> second(
      f.shared->learned.begin() + static_cast<std::ptrdiff_t>(first.size()),
      f.shared->learned.end());
  EXPECT_EQ(std::count(second.begin(), second.end(), group_key{1, split_kind::train, 3}), 1);
  EXPECT_EQ(std::count(second.begin(), second.end(), group_key{1, split_kind::train, 0}), 1);
  EXPECT_EQ(second.size(), 4u);  // steps 1 and 2, 2 groups each
  expect_each_trained_once(f.shared->learned);
  // Stored whole now, its turns with the weights that sampled them: those of the first process
  // with version 0, the one generated after the restart with version 1.
  auto group = f.store->get_group({"run", 0, split_kind::train, 0});
  ASSERT_TRUE(group.ok());
  ASSERT_TRUE(group->has_value());
  ASSERT_EQ((*group)->rollouts.size(), 2u);
  ASSERT_EQ((*group)->rollouts[0].turns.size(), 2u);
  ASSERT_EQ((*group)->rollouts[1].turns.size(), 2u);
  EXPECT_EQ((*group)->rollouts[0].turns[0].weight_version, 0u);
  EXPECT_EQ((*group)->rollouts[0].turns[1].weight_version, 1u);
  EXPECT_EQ((*group)->rollouts[1].turns[0].weight_version, 0u);
  EXPECT_EQ((*group)->rollouts[1].turns[1].weight_version, 0u);
  EXPECT_TRUE(f.store->partial_turns("run")->empty());
  // `leap replay` reads the same story across the restart: what step 0 carried, step 1 took over.
  auto data = load_replay_data(*f.store, "run");
  ASSERT_TRUE(data.ok()) << data.err().message;
  const auto report = build_replay_report(*data, 4);
  ASSERT_EQ(report.steps.size(), 3u);
  ASSERT_TRUE(report.steps[0].partial.has_value());
  ASSERT_TRUE(report.steps[1].partial.has_value());
  EXPECT_EQ(report.steps[0].partial->carried, 1u);
  EXPECT_EQ(report.steps[1].partial->carried_in, 1u);
  EXPECT_EQ(report.steps[1].partial->trained_carried, 1u);
  EXPECT_EQ(report.steps[1].partial->started, 2u);
}

// A carried group that completed before the stop lies in the store whole: the restart puts it
// into step 1's pool complete, generates none of it, and trains it once.
TEST(PartialRolloutsDriverTest, ACarriedGroupCompleteAtTheStopTrainsOnceFromTheStore) {
  driver_fixture f(coin_policy());
  const auto s = partial_run_settings();
  f.shared->hold = [](const std::string& id) {
    return id.rfind("run/0/train/0/", 0) == 0 || id.rfind("run/1/", 0) == 0;
  };
  auto out = std::make_shared<std::optional<run_summary>>();
  auto driver = f.start(s, out);
  f.c.run();
  // Step 0 carried its group 0; it completes in step 1's pool, whose own groups are all held.
  f.release_generation("run/0/train/0/");
  f.c.run();
  ASSERT_FALSE(out->has_value());
  ASSERT_TRUE(f.store->get_group({"run", 0, split_kind::train, 0})->has_value());
  EXPECT_EQ(f.shared->count_events("train 1"), 0u);
  caf::anon_send(driver, stop_atom_v);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->steps_completed, 1u);
  const auto learned_before = f.shared->learned.size();

  f.shared->hold = nullptr;
  f.shared->events.clear();
  f.services.learner = f.new_learner();
  auto resumed = s;
  resumed.resume = plan_after_step_0(*f.store);
  EXPECT_TRUE(resumed.resume.train_done.empty());
  out = std::make_shared<std::optional<run_summary>>();
  f.start(resumed, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
  EXPECT_EQ((*out)->groups_resumed, 1u);
  EXPECT_EQ(f.shared->count_events("gen run/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/2/"), 0u);  // 2 started, as before the stop
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.carried_in"), 1.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.trained_carried"), 1.0);
  const std::vector<group_key> second(
      f.shared->learned.begin() + static_cast<std::ptrdiff_t>(learned_before),
      f.shared->learned.end());
  EXPECT_EQ(std::count(second.begin(), second.end(), group_key{1, split_kind::train, 3}), 1);
  expect_each_trained_once(f.shared->learned);
}

// A store whose steps were stored without a carry decision (made before it was stored) resumes
// as such stores always did: nothing is carried into the step it resumes at, which starts
// batch + over_provision groups afresh and takes its stored group from the store.
TEST(PartialRolloutsDriverTest, AStoreWithoutCarryDecisionsResumesWithNothingCarried) {
  driver_fixture f(coin_policy());
  const auto s = partial_run_settings();
  step_record step0;
  step0.run_id = "run";
  step0.step = 0;
  step0.weight_version = 1;
  step0.metrics = {{"partial.started", 3.0}, {"partial.carried", 1.0}};
  ASSERT_TRUE(f.store->put_step(step0).ok());
  // Step 1's group 0, stored before the stop: two rollouts of one failed turn.
  group_record stored;
  stored.run_id = "run";
  stored.step = 1;
  stored.group_index = 0;
  stored.task_id = "t0";
  stored.max_turns = 1;
  for (std::uint32_t r = 0; r < 2; ++r) {
    rollout_record rollout;
    rollout.index = r;
    turn_record turn;
    turn.output_tokens = {10, 11};
    turn.output_logprobs = {-0.1F, -0.2F};
    turn.verdict = verdict_category::wrong_answer;
    turn.weight_version = 1;
    rollout.turns.push_back(turn);
    rollout.outcome = outcome_from_turns(rollout);
    stored.rollouts.push_back(rollout);
  }
  ASSERT_TRUE(f.store->put_group(stored).ok());

  auto resumed = s;
  resumed.resume = plan_after_step_0(*f.store);
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(resumed, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
  EXPECT_EQ((*out)->groups_resumed, 1u);
  EXPECT_EQ(f.shared->count_events("gen run/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/2/"), 2u);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.carried_in"), 0.0);
  EXPECT_EQ(partial_step_metric(*f.store, 1, "partial.started"), 3.0);
  for (const auto& k : f.shared->learned) {
    EXPECT_GE(k.step, 1u) << to_string(k);
    if (k.step == 1) {
      EXPECT_LT(k.group, 3u) << to_string(k);  // nothing carried in
    }
  }
  expect_each_trained_once(f.shared->learned);
}

}  // namespace
}  // namespace leap::actors
