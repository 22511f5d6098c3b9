// Per-turn resume and the weight version of validation groups, with the whole graph on CAF's
// deterministic test coordinator and a real RocksDB store: a group stopped half-way keeps its
// finished turns across a restart (taken as stored, never generated again), only turns sampled
// with the version the restarted run samples with are reused, and a validation group's turns all
// carry the weights of the step it validates even while training goes on. And the driver resumed
// from the plan `leap run` makes (tools/launch/resume.hpp): stored groups are not redone, a resumed
// step's wall time counts the earlier processes' time, and dcp_adaptive's gate history survives.
#include "tools/launch/resume.hpp"

#include "tests/actors/experiment_fixture.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using launch::plan_resume;
using launch::reusable_turns;

using testing::coin_policy;
using testing::driver_fixture;
using testing::failing_policy;
using testing::small_config;
using testing::tasks;

stored_turn turn_of(std::uint32_t rollout, std::uint32_t turn, std::uint64_t version,
                    bool passed = false) {
  stored_turn t;
  t.group = {"run", 1, split_kind::train, 0};
  t.rollout = rollout;
  t.turn = turn;
  t.record.output_tokens = {static_cast<token_id>(100 * rollout + turn)};
  t.record.output_logprobs = {-0.5f};
  t.record.weight_version = version;
  t.record.passed = passed;
  return t;
}

// The first process of a resumed run: the driver over `f` runs `s` until everything that is not
// held is done, then is stopped. `ended_before_stop` (when given): whether the run had already
// ended by itself. Returns the run's summary (nullopt: the driver never answered).
std::optional<run_summary> run_then_stop(driver_fixture& f, const experiment_settings& s,
                                         bool* ended_before_stop = nullptr) {
  auto out = std::make_shared<std::optional<run_summary>>();
  auto driver = f.start(s, out);
  f.c.run();
  if (ended_before_stop != nullptr) {
    *ended_before_stop = out->has_value();
  }
  caf::anon_send(driver, stop_atom_v);
  f.c.run();
  return *out;
}

// The restarted process: nothing held, a fresh learner (as a new process has), `s` resumed from
// `plan` and run to its end.
std::optional<run_summary> restart_from(driver_fixture& f, experiment_settings s,
                                        const resume_plan& plan) {
  f.shared->hold = nullptr;
  f.services.learner = f.new_learner();
  s.resume = plan;
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  return *out;
}

// Per rollout, the turn indices reusable_turns keeps.
std::vector<std::vector<int>> kept_turns(const std::vector<std::vector<turn_record>>& kept) {
  std::vector<std::vector<int>> out;
  for (const auto& rollout : kept) {
    std::vector<int> turns;
    turns.reserve(rollout.size());
    for (const auto& t : rollout) {
      turns.push_back(static_cast<int>(t.output_tokens.at(0) % 100));
    }
    out.push_back(turns);
  }
  return out;
}

TEST(ReusableTurns, KeepsEachRolloutsLeadingTurnsOfTheResumedVersion) {
  struct test_case {
    std::string name;
    std::vector<stored_turn> stored;
    std::vector<std::vector<int>> kept;  // group of 3 rollouts, 3 turns, version 4
  };
  const std::vector<test_case> cases = {
      {"none stored", {}, {{}, {}, {}}},
      {"in any order", {turn_of(1, 1, 4), turn_of(0, 0, 4), turn_of(1, 0, 4)}, {{0}, {0, 1}, {}}},
      {"an older version is redone, and so is every turn after it",
       {turn_of(0, 0, 3), turn_of(0, 1, 4), turn_of(1, 0, 4), turn_of(1, 1, 3), turn_of(1, 2, 4)},
       {{}, {0}, {}}},
      {"a gap ends the rollout's reuse", {turn_of(2, 0, 4), turn_of(2, 2, 4)}, {{}, {}, {0}}},
      {"nothing after a pass", {turn_of(0, 0, 4, true), turn_of(0, 1, 4)}, {{0}, {}, {}}},
      {"rollouts and turns outside the group are ignored",
       {turn_of(5, 0, 4), turn_of(0, 0, 4), turn_of(0, 1, 4), turn_of(0, 2, 4), turn_of(0, 3, 4)},
       {{0, 1, 2}, {}, {}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(kept_turns(reusable_turns(c.stored, 4, 3, 3)), c.kept);
  }
}

// The line `leap run` prints for its plan (tests/e2e pin the same texts through the binary).
TEST(DescribeResume, SaysWhatTheRunContinuesFrom) {
  const auto config = small_config(4, 3, 2, 2);
  actors::resume_plan plan;
  EXPECT_EQ(launch::describe_resume(plan, config), "");
  plan.train_done[0] = {0, 2};
  EXPECT_EQ(launch::describe_resume(plan, config),
            "resuming run 'run' at step 1/4 (2 groups of the steps in progress stored)");
  plan.first_step = 2;
  plan.train_done = {{2, {1}}, {3, {0, 1}}};
  EXPECT_EQ(launch::describe_resume(plan, config),
            "resuming run 'run' at step 3/4 (3 groups of the steps in progress stored)");
  plan.first_step = 4;
  plan.train_done.clear();
  EXPECT_EQ(launch::describe_resume(plan, config), "run 'run': all 4 steps are stored already");
  plan.validation_pending = {{1, {0}}, {3, {}}};
  EXPECT_EQ(launch::describe_resume(plan, config),
            "run 'run': all 4 steps are stored already (finishing the validation of 2 of them)");
}

// The first run stops while one group waits for its last turn; the restart takes the group's 11
// finished turns from the store as they were (token ids, log-probs, verdicts) and asks the
// generator for the one turn that was in flight only.
TEST(PerTurnResume, ARestartRedoesOnlyTheTurnsInFlight) {
  driver_fixture f(failing_policy());
  experiment_settings s;
  s.config = small_config(2, 2, 4, 3);
  s.train_tasks = tasks(3);
  const std::string in_flight = "run/1/train/1/0/2";
  f.shared->hold = [&](const std::string& id) { return id == in_flight; };
  bool ended_before_stop = false;
  const auto first = run_then_stop(f, s, &ended_before_stop);
  ASSERT_FALSE(ended_before_stop);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->steps_completed, 1u);

  auto stored = f.store->partial_turns("run");
  ASSERT_TRUE(stored.ok()) << stored.err().message;
  ASSERT_EQ(stored->size(), 11u);  // 4 rollouts x 3 turns, less the one held
  std::map<std::pair<std::uint32_t, std::uint32_t>, turn_record> before;
  for (const auto& t : *stored) {
    EXPECT_EQ(t.group, (group_ref{"run", 1, split_kind::train, 1})) << t.rollout << "/" << t.turn;
    EXPECT_EQ(t.record.weight_version, 1u);
    before[{t.rollout, t.turn}] = t.record;
  }

  auto plan = plan_resume(*f.store, "run", s.config, 0);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  ASSERT_EQ(plan->partial_turns.size(), 1u);
  const auto& offered = plan->partial_turns.at(group_key{1, split_kind::train, 1});
  ASSERT_EQ(offered.size(), 4u);
  EXPECT_EQ(offered[0].size(), 2u);
  EXPECT_EQ(offered[3].size(), 3u);

  f.shared->events.clear();
  const auto second = restart_from(f, s, *plan);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->status, run_status::finished) << second->error;
  EXPECT_EQ(second->turns_resumed, 11u);
  // Of the unfinished group only the turn in flight was generated and verified again.
  EXPECT_EQ(f.shared->count_events("gen run/1/train/1/"), 1u);
  EXPECT_EQ(f.shared->count_events("gen " + in_flight), 1u);
  EXPECT_EQ(f.shared->count_events("ver run/1/train/1/"), 1u);

  auto group = f.store->get_group({"run", 1, split_kind::train, 1});
  ASSERT_TRUE(group.ok() && group->has_value());
  for (const auto& [where, turn] : before) {
    const auto& r = (*group)->rollouts.at(where.first);
    ASSERT_GT(r.turns.size(), where.second);
    EXPECT_EQ(r.turns[where.second], turn) << where.first << "/" << where.second;
  }
  EXPECT_EQ((*group)->rollouts[0].turns.size(), 3u);
  // Stored groups take their turns with them.
  auto left = f.store->partial_turns("run");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

// Turns sampled with another version than the restarted run's are sampled again.
TEST(PerTurnResume, TurnsOfAnotherWeightVersionAreRedone) {
  driver_fixture f(failing_policy());
  experiment_settings s;
  s.config = small_config(2, 2, 4, 3);
  s.train_tasks = tasks(3);
  f.shared->hold = [](const std::string& id) { return id == "run/1/train/1/0/2"; };
  ASSERT_TRUE(run_then_stop(f, s).has_value());
  auto plan = plan_resume(*f.store, "run", s.config, 0);
  ASSERT_TRUE(plan.ok());
  // As if the learner's step record were of another version than the turns were sampled with.
  auto record = f.store->get_step("run", 0);
  ASSERT_TRUE(record.ok() && record->has_value());
  auto changed = **record;
  changed.weight_version = 9;
  ASSERT_TRUE(f.store->put_step(changed).ok());
  auto replanned = plan_resume(*f.store, "run", s.config, 0);
  ASSERT_TRUE(replanned.ok());
  EXPECT_EQ(plan->partial_turns.size(), 1u);
  EXPECT_TRUE(replanned->partial_turns.empty());
}

// Validation after step 1 is slow (its first turns wait) while training goes on: every turn of
// its groups is still sampled with step 1's weights, and the group records that version.
TEST(ValidationWeights, EveryValidationTurnIsSampledWithItsStepsWeights) {
  driver_fixture f(failing_policy());
  experiment_settings s;
  s.config = small_config(3, 2, 2, 2);
  s.config.rollout.validation.every = 1;
  s.config.rollout.validation.n = 2;
  s.train_tasks = tasks(3);
  s.validation_tasks = tasks(1, "v");
  auto slow = [](const std::string& id) {
    return id.rfind("run/0/validation/", 0) == 0 && id.size() > 2 &&
           id.compare(id.size() - 2, 2, "/0") == 0;
  };
  f.shared->hold = slow;
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();  // everything that does not wait for the held validation turns
  f.shared->hold = nullptr;
  caf::anon_send(caf::actor_cast<testing::test_generator_actor>(f.services.generator),
                 release_atom_v, std::string("run/0/validation/"));
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;

  auto steps = f.store->steps("run");
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 3u);
  group_query q;
  q.run_id = "run";
  q.split = split_kind::validation;
  auto groups = f.store->groups(q);
  ASSERT_TRUE(groups.ok());
  ASSERT_EQ(groups->size(), 3u);  // after each of the 3 steps
  for (const auto& g : *groups) {
    SCOPED_TRACE("validation after step " + std::to_string(g.step));
    const auto expected = (*steps)[g.step].weight_version;
    EXPECT_EQ(g.weight_version, std::optional<std::uint64_t>{expected});
    for (const auto& r : g.rollouts) {
      ASSERT_EQ(r.turns.size(), 2u);  // every turn fails: a debug turn follows the first
      for (const auto& t : r.turns) {
        EXPECT_EQ(t.weight_version, expected);
      }
    }
  }
  // Training groups carry no group-wide version.
  q.split = split_kind::train;
  auto train = f.store->groups(q);
  ASSERT_TRUE(train.ok());
  for (const auto& g : *train) {
    EXPECT_FALSE(g.weight_version.has_value());
  }
}

// ---- the driver resumed from its plan -----------------------------------------------------------

TEST(DriverResume, ResumeRedoesOnlyTheGroupsNotStored) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = small_config(3, 3, 2, 2);
  s.train_tasks = tasks(5);
  // First run: step 1's group 2 never gets its answers; the run is stopped there.
  f.shared->hold = [](const std::string& id) { return id.rfind("run/1/train/2/", 0) == 0; };
  bool ended_before_stop = false;
  const auto first = run_then_stop(f, s, &ended_before_stop);
  ASSERT_FALSE(ended_before_stop);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status, run_status::interrupted);
  EXPECT_EQ(first->steps_completed, 1u);

  auto plan = plan_resume(*f.store, "run", s.config, 0);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  EXPECT_EQ(plan->first_step, 1u);
  EXPECT_EQ(plan->weight_version, 1u);
  EXPECT_EQ(plan->train_done.at(1), (std::vector<std::uint32_t>{0, 1}));

  // Second run from the plan: nothing stored is generated again.
  f.shared->events.clear();
  f.shared->trained_sequences.clear();
  const auto second = restart_from(f, s, *plan);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->status, run_status::finished) << second->error;
  EXPECT_EQ(second->first_step, 1u);
  EXPECT_EQ(second->steps_completed, 2u);
  EXPECT_EQ(second->groups_resumed, 2u);
  EXPECT_EQ(second->groups_completed, 4u);
  EXPECT_EQ(f.shared->count_events("gen run/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/0/"), 0u);
  EXPECT_EQ(f.shared->count_events("gen run/1/train/1/"), 0u);
  EXPECT_GE(f.shared->count_events("gen run/1/train/2/"), 2u);
  // The learner got step 1 whole: two groups from the store and one redone.
  EXPECT_EQ(f.shared->trained_sequences[1], 6u);
  auto records = f.store->steps("run");
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 3u);
  for (const auto& r : *records) {
    EXPECT_EQ(r.counts.groups, 3u);
  }
}

TEST(DriverResume, AResumedStepsWallTimeCountsTheTimeEarlierProcessesSpentOnIt) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = small_config(2, 3, 2, 2);
  s.train_tasks = tasks(5);
  f.shared->hold = [](const std::string& id) { return id.rfind("run/1/train/2/", 0) == 0; };
  ASSERT_TRUE(run_then_stop(f, s).has_value());

  // The earlier process worked on step 1's stored groups for 10 s (two overlapping spans), a
  // fifth of the turns' time generating... as their records say.
  for (std::uint32_t g = 0; g < 2; ++g) {
    auto stored = f.store->get_group({"run", 1, split_kind::train, g});
    ASSERT_TRUE(stored.ok() && stored->has_value());
    auto group = **stored;
    group.started_unix_ms = 1'000'000 + 4'000 * g;
    group.gated_unix_ms = group.started_unix_ms + 1;
    group.finished_unix_ms = group.started_unix_ms + 6'000;
    for (auto& r : group.rollouts) {
      for (auto& t : r.turns) {
        t.timings = {.generation_ms = 100, .compile_ms = 300, .run_ms = 100};
      }
    }
    ASSERT_TRUE(f.store->put_group(group).ok());
  }

  auto plan = plan_resume(*f.store, "run", s.config, 0);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  const auto second = restart_from(f, s, *plan);
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(second->status, run_status::finished) << second->error;

  auto record = f.store->get_step("run", 1);
  ASSERT_TRUE(record.ok() && record->has_value());
  const auto& t = (*record)->timings;
  // Before, only this process's few milliseconds counted.
  EXPECT_GE(t.wall_ms, 10'000.0);
  EXPECT_GE(t.compile_ms, 6'000.0 - 1e-6);
  EXPECT_GE(t.generation_ms, 2'000.0 - 1e-6);
  EXPECT_NEAR(t.generation_ms + t.compile_ms + t.run_ms + t.learner_ms + t.idle_ms, t.wall_ms,
              1e-6 * t.wall_ms);
  EXPECT_EQ((*record)->started_unix_ms, 1'000'000);
}

// ---- dcp_adaptive across a resume -------------------------------------------------------------

// A small window so that the adaptive thresholds take over after one step and differ from the
// static ones (tau [0.25, 1.0] of 4: {1, 4}).
experiment_config adaptive_run_config(int steps) {
  experiment_config c = small_config(steps, 3, 4, 2);
  c.gate.policy = gate_policy::dcp_adaptive;
  c.gate.adaptive_window = 5;
  c.gate.adaptive_min_groups = 3;
  c.gate.adaptive_low_quantile = 0.5;
  c.gate.adaptive_high_quantile = 0.8;
  return c;
}

// What the gate said of each stored training group from `first_step` on, in key order.
struct gate_trace {
  std::uint64_t step = 0;
  std::uint32_t group = 0;
  gate_decision gate = gate_decision::closed_no_debug;
  int n_fail = 0;
  fail_range thresholds;

  friend bool operator==(const gate_trace&, const gate_trace&) = default;
  friend std::ostream& operator<<(std::ostream& os, const gate_trace& t) {
    return os << t.step << "/" << t.group << ": " << to_string(t.gate) << " n_fail " << t.n_fail
              << " [" << t.thresholds.lo << ", " << t.thresholds.hi << "]";
  }
};

std::vector<gate_trace> gate_traces(const trajectory_store& store, std::uint64_t first_step) {
  group_query q{
      "run", first_step, std::numeric_limits<std::uint64_t>::max(), split_kind::train, {}};
  q.decode.tokens = false;
  auto groups = store.groups(q);
  EXPECT_TRUE(groups.ok());
  std::vector<gate_trace> out;
  if (!groups.ok()) {
    return out;
  }
  for (const auto& g : *groups) {
    out.push_back({g.step, g.group_index, g.gate, g.n_fail, g.thresholds});
  }
  return out;
}

// Runs `stop_after` steps, then resumes from the store to `steps`; `replay_history` false drops
// the plan's gate history (the behaviour before the fix).
std::vector<gate_trace> run_with_resume(int stop_after, int steps, bool replay_history) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = adaptive_run_config(stop_after);
  s.train_tasks = tasks(7);
  auto first = std::make_shared<std::optional<run_summary>>();
  f.start(s, first);
  f.c.run();
  EXPECT_TRUE(first->has_value() && (*first)->status == run_status::finished);

  s.config = adaptive_run_config(steps);
  auto plan = plan_resume(*f.store, "run", s.config, 0);
  EXPECT_TRUE(plan.ok());
  if (!plan.ok()) {
    return {};
  }
  EXPECT_EQ(plan->first_step, static_cast<std::uint64_t>(stop_after));
  EXPECT_EQ(plan->gate_history.size(), 5u);
  if (!replay_history) {
    plan->gate_history.clear();
  }
  const auto second = restart_from(f, s, *plan);
  EXPECT_TRUE(second.has_value() && second->status == run_status::finished);
  return gate_traces(*f.store, static_cast<std::uint64_t>(stop_after));
}

// The instant services answer each turn as a function of its request id, so both runs see the
// same first-turn failures per group and the gate's decisions are a function of its history.
TEST(DriverResume, ResumedAdaptiveGateDecidesAsTheUninterruptedRun) {
  constexpr int steps = 5;
  constexpr int stop_after = 2;
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = adaptive_run_config(steps);
  s.train_tasks = tasks(7);
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  ASSERT_EQ((*out)->status, run_status::finished) << (*out)->error;
  const auto uninterrupted = gate_traces(*f.store, stop_after);
  ASSERT_EQ(uninterrupted.size(), 9u);

  EXPECT_EQ(run_with_resume(stop_after, steps, true), uninterrupted);
  // The workload is one where the history matters: without it the resumed gate decides otherwise.
  EXPECT_NE(run_with_resume(stop_after, steps, false), uninterrupted);
}

// The plan's gate history: the last adaptive_window training groups stored, stored steps in
// flight included, validation groups (G = 2 here) never.
TEST(DriverResume, PlanResumeKeepsTheLastWindowOfTrainingGroupsInStepGroupOrder) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = adaptive_run_config(5);
  s.config.rollout.validation.every = 1;
  s.config.rollout.validation.n = 2;
  s.train_tasks = tasks(7);
  s.validation_tasks = tasks(2, "v");
  // Step 3's group 2 never gets its answers: the run is stopped with step 3 in flight.
  f.shared->hold = [](const std::string& id) { return id.rfind("run/3/train/2/", 0) == 0; };
  const auto out = run_then_stop(f, s);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->steps_completed, 3u);

  auto plan = plan_resume(*f.store, "run", s.config, s.validation_tasks.size());
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  ASSERT_EQ(plan->first_step, 3u);
  auto stored = f.store->groups({"run", 2, 3, split_kind::train, {}});
  ASSERT_TRUE(stored.ok());
  std::vector<std::string> keys;
  std::vector<gate_observation> expected;
  for (const auto& g : *stored) {
    keys.push_back(std::to_string(g.step) + "/" + std::to_string(g.group_index));
    expected.push_back({g.n_fail, 4});
  }
  ASSERT_EQ(keys, (std::vector<std::string>{"2/0", "2/1", "2/2", "3/0", "3/1"}));
  EXPECT_EQ(plan->gate_history, expected);

  // Other policies need no history.
  s.config.gate.policy = gate_policy::dcp;
  auto plain = plan_resume(*f.store, "run", s.config, s.validation_tasks.size());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->gate_history.empty());
}

}  // namespace
}  // namespace leap::actors
