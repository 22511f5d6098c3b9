// The experiment driver with the whole graph on CAF's deterministic test coordinator: steps end
// when their groups are scored and the learner stepped, barrier vs streaming ordering, bounded
// staleness, validation, and a failed group. The driver resumed from the store (the plan as
// `leap run` makes it) is tested in tests/launch/resume_test.cpp.
#include "tests/actors/experiment_fixture.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap::actors {
namespace {

using testing::coin_policy;
using testing::driver_fixture;
using testing::hub;
using testing::small_config;
using testing::tasks;

// Timed passes (issue 31): the speedups reach the stored turns and the step record's speed
// metrics (fast_p over all rollouts, the geomean over the timed passes).
TEST(ExperimentTest, StepRecordsCarryTheSpeedOfTimedPasses) {
  driver_fixture f(coin_policy());
  f.shared->pass_speedup = 1.5;
  experiment_settings s;
  s.config = small_config(2, 2, 4, 2);
  s.train_tasks = tasks(4);
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  ASSERT_EQ((*out)->status, run_status::finished) << (*out)->error;
  auto records = f.store->steps("run");
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 2u);
  int with_passes = 0;
  for (const auto& r : *records) {
    const double pass_rate = r.metrics.at("acc_at_2");
    if (r.counts.passed_rollouts == 0) {
      EXPECT_FALSE(r.metrics.count("fast_0"));
      continue;
    }
    ++with_passes;
    EXPECT_DOUBLE_EQ(r.metrics.at("timed_passes"), r.counts.passed_rollouts);
    EXPECT_DOUBLE_EQ(r.metrics.at("fast_1.0"), pass_rate);  // every pass at 1.5x
    EXPECT_DOUBLE_EQ(r.metrics.at("fast_1.2"), pass_rate);
    EXPECT_DOUBLE_EQ(r.metrics.at("fast_1.5"), 0.0);  // not > 1.5
    EXPECT_NEAR(r.metrics.at("speedup_geomean"), 1.5, 1e-12);
    group_query q;
    q.run_id = "run";
    q.first_step = r.step;
    q.last_step = r.step;
    auto groups = f.store->groups(q);
    ASSERT_TRUE(groups.ok());
    for (const auto& g : *groups) {
      for (const auto& ro : g.rollouts) {
        for (const auto& t : ro.turns) {
          EXPECT_EQ(t.speedup, t.passed ? 1.5 : 0.0);
        }
      }
    }
  }
  EXPECT_GT(with_passes, 0);
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
    // Nothing was timed: no speed metric at all, rather than a 0.
    EXPECT_FALSE(r.metrics.count("fast_0") || r.metrics.count("speedup_geomean"));
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
