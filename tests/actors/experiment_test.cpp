// The experiment driver with the whole graph on CAF's deterministic test coordinator: steps end
// when their groups are scored and the learner stepped, barrier vs streaming ordering, bounded
// staleness, validation, and resume from the store without redoing a stored group.
#include "tests/actors/test_support.hpp"
#include "tools/launch/resume.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <ostream>

namespace leap::actors {
namespace {

using testing::coordinator;
using testing::hub;
using testing::temp_dir;
// The resume tests build their plan as `leap run` does (tools/launch/resume.hpp).
using launch::plan_resume;

experiment_config small_config(int steps, int batch, int group, int turns) {
  experiment_config c;
  c.experiment.name = "run";
  c.experiment.seed = 11;
  c.experiment.steps = steps;
  c.data.batch_size = batch;
  c.rollout.group_size = group;
  c.rollout.max_turns = turns;
  c.rollout.validation.every = 0;
  c.gate.policy = gate_policy::dcp;
  c.gate.unit = threshold_unit::fraction;
  c.gate.tau_min = 0.25;
  c.gate.tau_max = 1.0;
  return c;
}

std::vector<group_task> tasks(int n, const std::string& prefix = "t") {
  std::vector<group_task> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({prefix + std::to_string(i), prefix + " prompt " + std::to_string(i)});
  }
  return out;
}

struct driver_fixture {
  temp_dir dir;
  coordinator c;
  std::shared_ptr<hub> shared = std::make_shared<hub>();
  std::shared_ptr<trajectory_store> store = testing::open_store(dir.path());
  experiment_services services;
  std::vector<step_progress> steps;
  std::vector<validation_progress> validations;
  std::vector<log_line> logs;

  explicit driver_fixture(instant_policy policy) {
    shared->store = store;
    services.generator =
        c.keep(c.system().spawn(testing::test_generator, std::move(policy), shared));
    services.verifier = c.keep(c.system().spawn(testing::test_verifier, shared));
    services.scorer = c.keep(spawn_scorer(c.system(), reward_config{}, advantage_config{}));
    store_actor_config sc;
    sc.detached = false;
    services.store = c.keep(spawn_store(c.system(), store, sc));
    services.learner = c.keep(c.system().spawn(testing::test_learner, shared));
  }

  experiment_actor start(experiment_settings settings,
                         std::shared_ptr<std::optional<run_summary>> out) {
    settings.run_id = "run";
    settings.progress.on_step = [this](const step_progress& p) { steps.push_back(p); };
    settings.progress.on_validation = [this](const validation_progress& p) {
      validations.push_back(p);
    };
    settings.progress.on_log = [this](const log_line& l) { logs.push_back(l); };
    auto driver = c.keep(spawn_experiment(c.system(), std::move(settings), services));
    testing::request_run(c, driver, out);
    return driver;
  }

  void release_generation(const std::string& prefix) {
    caf::anon_send(caf::actor_cast<testing::test_generator_actor>(services.generator),
                   release_atom_v, prefix);
  }
  void release_training() {
    caf::anon_send(caf::actor_cast<testing::test_learner_actor>(services.learner), release_atom_v);
  }
};

instant_policy coin_policy(double pass = 0.5, double fix = 0.5) {
  instant_policy p;
  p.seed = 3;
  p.default_pass = pass;
  p.fix_probability = fix;
  return p;
}

TEST(ExperimentTest, StreamingRunCompletesEveryStepAndValidates) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = small_config(3, 3, 4, 2);
  s.config.rollout.validation.every = 2;
  s.config.rollout.validation.n = 2;
  s.train_tasks = tasks(5);
  s.validation_tasks = tasks(2, "v");
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();

  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
  EXPECT_EQ((*out)->steps_completed, 3u);
  EXPECT_EQ((*out)->groups_completed, 9u);
  auto records = f.store->steps("run");
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 3u);
  for (std::uint64_t step = 0; step < 3; ++step) {
    const auto& r = (*records)[step];
    EXPECT_EQ(r.step, step);
    EXPECT_EQ(r.counts.groups, 3u);
    EXPECT_EQ(r.counts.rollouts, 12u);
    EXPECT_EQ(r.weight_version, step + 1);
    EXPECT_EQ(f.shared->trained_sequences[step], 12u);
    EXPECT_TRUE(r.metrics.count("acc_at_1") && r.metrics.count("acc_at_2"));
    auto groups = f.store->completed_groups("run", step);
    ASSERT_TRUE(groups.ok());
    EXPECT_EQ(*groups, (std::vector<std::uint32_t>{0, 1, 2}));
  }
  // Each step's start is logged with the run's and the step's ids as fields, not in the text.
  std::vector<std::int64_t> started;
  for (const auto& l : f.logs) {
    if (l.text.rfind("started: ", 0) != 0) {
      continue;
    }
    started.push_back(l.ids.step);
    EXPECT_EQ(l.ids.run, "run");
    EXPECT_EQ(l.ids.group, -1);
    EXPECT_EQ(l.text.find("step"), std::string::npos) << l.text;
  }
  EXPECT_EQ(started, (std::vector<std::int64_t>{1, 2, 3}));
  ASSERT_EQ(f.steps.size(), 3u);
  EXPECT_EQ(f.steps.back().step, 2u);
  EXPECT_EQ(f.steps.back().accuracy.size(), 2u);
  // Validation after steps 1 and 2 (every 2, and after the last), never learned.
  ASSERT_EQ(f.validations.size(), 2u);
  EXPECT_EQ(f.validations[0].step, 1u);
  EXPECT_EQ(f.validations[0].groups, 2u);
  EXPECT_EQ(f.validations[0].rollouts, 4u);
  auto validation = f.store->completed_groups("run", 2, split_kind::validation);
  ASSERT_TRUE(validation.ok());
  EXPECT_EQ(validation->size(), 2u);
  for (const auto& key : f.shared->learned) {
    EXPECT_EQ(key.split, split_kind::train);
  }
  EXPECT_TRUE(f.shared->learned_unstored.empty());
}

// The index of every event with a prefix, per turn index.
std::vector<std::size_t> positions(const hub& h, const std::string& kind, int turn) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < h.events.size(); ++i) {
    const auto& e = h.events[i];
    if (e.rfind(kind, 0) != 0) {
      continue;
    }
    if (turn_of_request(e.substr(kind.size())) == turn) {
      out.push_back(i);
    }
  }
  return out;
}

TEST(ExperimentTest, BarrierRunsEachStepInLockstepRounds) {
  driver_fixture f(coin_policy(0.4, 0.4));
  experiment_settings s;
  s.config = small_config(2, 4, 4, 3);
  s.config.schedule.mode = schedule_mode::barrier;
  s.config.gate.policy = gate_policy::full;
  s.train_tasks = tasks(6);
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  ASSERT_EQ((*out)->status, run_status::finished) << (*out)->error;

  // Per step, round t's generations all precede its verifications, which all precede round t+1.
  for (std::uint64_t step = 0; step < 2; ++step) {
    hub h;
    for (const auto& e : f.shared->events) {
      if (e.find(" run/" + std::to_string(step) + "/") != std::string::npos) {
        h.events.push_back(e);
      }
    }
    int rounds = 0;
    for (int t = 0; t < 3; ++t) {
      const auto gen = positions(h, "gen ", t);
      const auto ver = positions(h, "ver ", t);
      if (gen.empty()) {
        break;
      }
      ++rounds;
      ASSERT_FALSE(ver.empty());
      EXPECT_LT(gen.back(), ver.front()) << "step " << step << " round " << t;
      const auto next = positions(h, "gen ", t + 1);
      if (!next.empty()) {
        EXPECT_LT(ver.back(), next.front()) << "step " << step << " round " << t;
      }
    }
    EXPECT_GE(rounds, 2) << "the workload should need debug rounds";
  }
}

TEST(ExperimentTest, StreamingLetsOneGroupDebugWhileAnotherGenerates) {
  instant_policy p;
  p.correct = [](const std::string&, const std::string&, int turn) { return turn >= 1; };
  driver_fixture f(p);
  experiment_settings s;
  s.config = small_config(1, 2, 2, 2);
  s.config.gate.policy = gate_policy::full;
  s.train_tasks = tasks(2);
  // Group 1's first turns are held back: group 0 must go through its debug turns meanwhile.
  f.shared->hold = [](const std::string& id) {
    return id.rfind("run/0/train/1/", 0) == 0 && turn_of_request(id) == 0;
  };
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  EXPECT_FALSE(out->has_value());
  EXPECT_EQ(f.shared->count_events("gen run/0/train/0/0/1"), 1u);
  EXPECT_EQ(f.shared->count_events("ver run/0/train/0/1/1"), 1u);
  EXPECT_EQ(f.shared->count_events("ver run/0/train/1/"), 0u);
  f.release_generation("run/0/train/1/");
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
}

TEST(ExperimentTest, StalenessBoundsHowFarGenerationRunsAheadOfTheLearner) {
  for (int staleness : {0, 1}) {
    SCOPED_TRACE("max_staleness " + std::to_string(staleness));
    driver_fixture f(coin_policy());
    f.shared->hold_train = true;
    experiment_settings s;
    s.config = small_config(3, 2, 2, 1);
    s.config.schedule.max_staleness = staleness;
    s.train_tasks = tasks(4);
    auto out = std::make_shared<std::optional<run_summary>>();
    f.start(s, out);
    f.c.run();
    // Step 0 trains (held); step 1 generates meanwhile only when staleness allows; step 2 never.
    EXPECT_EQ(f.shared->count_events("train 0"), 1u);
    EXPECT_EQ(f.shared->count_events("gen run/1/") > 0, staleness >= 1);
    EXPECT_EQ(f.shared->count_events("gen run/2/"), 0u);
    for (int i = 0; i < 10 && !out->has_value(); ++i) {
      f.release_training();
      f.c.run();
    }
    ASSERT_TRUE(out->has_value());
    EXPECT_EQ((*out)->status, run_status::finished) << (*out)->error;
    // Step 1's turns were sampled from the weights before step 0's update exactly when stale.
    auto groups = f.store->groups({"run", 1, 1, split_kind::train, {}});
    ASSERT_TRUE(groups.ok());
    ASSERT_FALSE(groups->empty());
    EXPECT_EQ(groups->front().rollouts[0].turns[0].weight_version, staleness >= 1 ? 0u : 1u);
  }
}

TEST(ExperimentTest, ResumeRedoesOnlyTheGroupsNotStored) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = small_config(3, 3, 2, 2);
  s.train_tasks = tasks(5);
  // First run: step 1's group 2 never gets its answers; the run is stopped there.
  f.shared->hold = [](const std::string& id) { return id.rfind("run/1/train/2/", 0) == 0; };
  auto first = std::make_shared<std::optional<run_summary>>();
  auto driver = f.start(s, first);
  f.c.run();
  ASSERT_FALSE(first->has_value());
  caf::anon_send(driver, stop_atom_v);
  f.c.run();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->status, run_status::interrupted);
  EXPECT_EQ((*first)->steps_completed, 1u);

  auto plan = plan_resume(*f.store, "run", s.config, 0);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  EXPECT_EQ(plan->first_step, 1u);
  EXPECT_EQ(plan->weight_version, 1u);
  EXPECT_EQ(plan->train_done.at(1), (std::vector<std::uint32_t>{0, 1}));

  // Second run from the plan: nothing stored is generated again.
  f.shared->hold = nullptr;
  f.shared->events.clear();
  f.shared->trained_sequences.clear();
  f.services.learner = f.c.keep(f.c.system().spawn(testing::test_learner, f.shared));
  s.resume = *plan;
  auto second = std::make_shared<std::optional<run_summary>>();
  f.start(s, second);
  f.c.run();
  ASSERT_TRUE(second->has_value());
  EXPECT_EQ((*second)->status, run_status::finished) << (*second)->error;
  EXPECT_EQ((*second)->first_step, 1u);
  EXPECT_EQ((*second)->steps_completed, 2u);
  EXPECT_EQ((*second)->groups_resumed, 2u);
  EXPECT_EQ((*second)->groups_completed, 4u);
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

TEST(ExperimentTest, AResumedStepsWallTimeCountsTheTimeEarlierProcessesSpentOnIt) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = small_config(2, 3, 2, 2);
  s.train_tasks = tasks(5);
  f.shared->hold = [](const std::string& id) { return id.rfind("run/1/train/2/", 0) == 0; };
  auto first = std::make_shared<std::optional<run_summary>>();
  auto driver = f.start(s, first);
  f.c.run();
  caf::anon_send(driver, stop_atom_v);
  f.c.run();
  ASSERT_TRUE(first->has_value());

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
  f.shared->hold = nullptr;
  f.services.learner = f.c.keep(f.c.system().spawn(testing::test_learner, f.shared));
  s.resume = *plan;
  auto second = std::make_shared<std::optional<run_summary>>();
  f.start(s, second);
  f.c.run();
  ASSERT_TRUE(second->has_value());
  ASSERT_EQ((*second)->status, run_status::finished) << (*second)->error;

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

// ---- dcp_adaptive across a resume
// ----------------------------------------------------------------

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
  s.resume = *plan;
  f.services.learner = f.c.keep(f.c.system().spawn(testing::test_learner, f.shared));
  auto second = std::make_shared<std::optional<run_summary>>();
  f.start(s, second);
  f.c.run();
  EXPECT_TRUE(second->has_value() && (*second)->status == run_status::finished);
  return gate_traces(*f.store, static_cast<std::uint64_t>(stop_after));
}

// The instant services answer each turn as a function of its request id, so both runs see the
// same first-turn failures per group and the gate's decisions are a function of its history.
TEST(ExperimentTest, ResumedAdaptiveGateDecidesAsTheUninterruptedRun) {
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
TEST(ExperimentTest, PlanResumeKeepsTheLastWindowOfTrainingGroupsInStepGroupOrder) {
  driver_fixture f(coin_policy());
  experiment_settings s;
  s.config = adaptive_run_config(5);
  s.config.rollout.validation.every = 1;
  s.config.rollout.validation.n = 2;
  s.train_tasks = tasks(7);
  s.validation_tasks = tasks(2, "v");
  // Step 3's group 2 never gets its answers: the run is stopped with step 3 in flight.
  f.shared->hold = [](const std::string& id) { return id.rfind("run/3/train/2/", 0) == 0; };
  auto out = std::make_shared<std::optional<run_summary>>();
  auto driver = f.start(s, out);
  f.c.run();
  caf::anon_send(driver, stop_atom_v);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  ASSERT_EQ((*out)->steps_completed, 3u);

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

TEST(ExperimentTest, AFailedGroupEndsTheRunWithItsMessage) {
  driver_fixture f(coin_policy());
  f.services.verifier =
      f.c.keep(f.c.system().spawn([](verifier_actor::pointer) -> verifier_actor::behavior_type {
        return {[](verify_atom, const verification_request&) {
          verification_result v;
          v.infrastructure_error = "nvcc not found";
          return v;
        }};
      }));
  experiment_settings s;
  s.config = small_config(2, 2, 2, 2);
  s.train_tasks = tasks(2);
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, run_status::failed);
  EXPECT_NE((*out)->error.find("nvcc not found"), std::string::npos) << (*out)->error;
}

}  // namespace
}  // namespace leap::actors
