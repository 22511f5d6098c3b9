// Buffered retry (gate.retry, issue 35) in the experiment driver, on the deterministic test
// coordinator with the real store: an all-failed group's task comes back in a later step in place
// of a fresh task, with its extra rollouts, and reaches the learner when it passes; the buffer is
// stored after each step and a new driver (a restarted process) plans its first step from it.
#include "tests/actors/experiment_fixture.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using testing::driver_fixture;
using testing::small_config;
using testing::tasks;

// Nothing passes in step 0 (0-based); from step 1 on, even rollouts pass at their first turn.
instant_policy hard_then_easy() {
  instant_policy p;
  p.correct = [](const std::string& request_id, const std::string&, int turn) {
    // "run/<step>/<split>/<group>/<rollout>/<turn>"
    std::vector<std::string> parts;
    std::size_t from = 0;
    for (std::size_t slash = request_id.find('/'); slash != std::string::npos;
         slash = request_id.find('/', from)) {
      parts.push_back(request_id.substr(from, slash - from));
      from = slash + 1;
    }
    parts.push_back(request_id.substr(from));
    const auto step = std::stoull(parts.at(1));
    const auto rollout = std::stoull(parts.at(4));
    return step >= 1 && rollout % 2 == 0 && turn == 0;
  };
  return p;
}

experiment_config retry_config_of(int steps) {
  auto c = small_config(steps, 2, 4, 2);
  c.gate.retry.buffer = 4;
  c.gate.retry.delay = 1;
  c.gate.retry.attempts = 1;
  c.gate.retry.extra_rollouts = 2;
  return c;
}

std::vector<group_record> train_groups(trajectory_store& store, std::uint64_t step) {
  group_query q;
  q.run_id = "run";
  q.first_step = step;
  q.last_step = step;
  q.split = split_kind::train;
  auto groups = store.groups(q);
  EXPECT_TRUE(groups.ok());
  return groups.ok() ? *groups : std::vector<group_record>{};
}

TEST(ExperimentRetry, AnAllFailedGroupIsRetriedAndTrains) {
  driver_fixture f(hard_then_easy());
  experiment_settings s;
  s.config = retry_config_of(2);
  s.train_tasks = tasks(8);
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  ASSERT_EQ((*out)->status, run_status::finished) << (*out)->error;

  const auto step0 = train_groups(*f.store, 0);
  const auto step1 = train_groups(*f.store, 1);
  ASSERT_EQ(step0.size(), 2U);
  ASSERT_EQ(step1.size(), 2U);
  // Step 1 ran step 0's tasks again (the batch size unchanged), with 4 + 2 rollouts.
  const std::set<std::string> failed{step0[0].task_id, step0[1].task_id};
  const std::set<std::string> retried{step1[0].task_id, step1[1].task_id};
  EXPECT_EQ(retried, failed);
  for (const auto& g : step1) {
    EXPECT_EQ(g.rollouts.size(), 6U);
  }
  // The retried groups reached the learner.
  EXPECT_EQ(std::count_if(f.shared->learned.begin(), f.shared->learned.end(),
                          [](const group_key& k) { return k.step == 1; }),
            2);

  auto after0 = f.store->get_retry("run", 0);
  ASSERT_TRUE(after0.ok() && after0->has_value());
  EXPECT_EQ((*after0)->counts.admitted, 2U);
  EXPECT_EQ((*after0)->buffer.entries.size(), 2U);
  auto after1 = f.store->get_retry("run", 1);
  ASSERT_TRUE(after1.ok() && after1->has_value());
  EXPECT_EQ((*after1)->retried, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ((*after1)->counts.recovered, 2U);
  EXPECT_TRUE((*after1)->buffer.entries.empty());
  auto record = f.store->get_step("run", 1);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->metrics.at("retry.recovered"), 2.0);
  EXPECT_EQ((*record)->metrics.at("retry.retried"), 2.0);
}

// A run that stops after step 0 and a new driver (as a restarted process) that resumes at step 1:
// the buffer comes back from the store, and step 1 retries what step 0 left in it.
TEST(ExperimentRetry, AResumedRunRetriesFromTheStoredBuffer) {
  driver_fixture f(hard_then_easy());
  {
    experiment_settings s;
    s.config = retry_config_of(1);
    s.train_tasks = tasks(8);
    auto out = std::make_shared<std::optional<run_summary>>();
    f.start(s, out);
    f.c.run();
    ASSERT_TRUE(out->has_value());
    ASSERT_EQ((*out)->status, run_status::finished) << (*out)->error;
  }
  const auto step0 = train_groups(*f.store, 0);
  ASSERT_EQ(step0.size(), 2U);

  f.services.learner = f.new_learner();
  experiment_settings s;
  s.config = retry_config_of(2);
  s.train_tasks = tasks(8);
  s.resume.first_step = 1;
  s.resume.weight_version = 1;
  auto out = std::make_shared<std::optional<run_summary>>();
  f.start(s, out);
  f.c.run();
  ASSERT_TRUE(out->has_value());
  ASSERT_EQ((*out)->status, run_status::finished) << (*out)->error;
  const auto step1 = train_groups(*f.store, 1);
  ASSERT_EQ(step1.size(), 2U);
  const std::set<std::string> failed{step0[0].task_id, step0[1].task_id};
  const std::set<std::string> retried{step1[0].task_id, step1[1].task_id};
  EXPECT_EQ(retried, failed);
  auto after1 = f.store->get_retry("run", 1);
  ASSERT_TRUE(after1.ok() && after1->has_value());
  EXPECT_EQ((*after1)->counts.recovered, 2U);
}

}  // namespace
}  // namespace leap::actors
