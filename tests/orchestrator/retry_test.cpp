#include "orchestrator/retry.hpp"

#include "orchestrator/simulation.hpp"

#include <gtest/gtest.h>

#include <numeric>

namespace leap {
namespace {

retry_config on(std::size_t buffer, int delay = 1, int attempts = 1) {
  retry_config c;
  c.buffer = buffer;
  c.delay = delay;
  c.attempts = attempts;
  return c;
}

std::vector<std::size_t> fresh_batch(std::size_t n, std::size_t first = 100) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The outcomes of a plan's groups: the tasks in `failing` fail every rollout.
std::vector<retry_outcome> outcomes_of(const retry_plan& plan,
                                       const std::vector<std::size_t>& failing) {
  std::vector<retry_outcome> out;
  for (std::size_t g = 0; g < plan.tasks.size(); ++g) {
    const bool failed = std::find(failing.begin(), failing.end(), plan.tasks[g]) != failing.end();
    out.push_back({plan.tasks[g], plan.retries[g], failed});
  }
  return out;
}

TEST(Retry, OffChangesNothing) {
  retry_buffer buffer;
  const auto fresh = fresh_batch(4);
  auto plan = plan_step(buffer, retry_config{}, 0, fresh);
  EXPECT_EQ(plan.tasks, fresh);
  EXPECT_EQ(plan.retried(), 0U);
  const auto counts = settle(buffer, retry_config{}, 0, outcomes_of(plan, {100, 101}));
  EXPECT_EQ(counts, retry_counts{});
  EXPECT_TRUE(buffer.entries.empty());
}

TEST(Retry, AdmitsOnlyAllFailedFreshGroups) {
  retry_buffer buffer;
  const auto config = on(8);
  auto plan = plan_step(buffer, config, 0, fresh_batch(4));
  const auto counts = settle(buffer, config, 0, outcomes_of(plan, {101, 103}));
  EXPECT_EQ(counts.admitted, 2U);
  ASSERT_EQ(buffer.entries.size(), 2U);
  EXPECT_EQ(buffer.entries[0], (retry_entry{101, 0, 0, 0}));
  EXPECT_EQ(buffer.entries[1], (retry_entry{103, 0, 0, 0}));
  // A task already waiting is not admitted twice.
  auto again = plan_step(buffer, on(8, 5), 1, fresh_batch(4));
  EXPECT_EQ(again.retried(), 0U);
  EXPECT_EQ(settle(buffer, on(8, 5), 1, outcomes_of(again, {101})).admitted, 0U);
  EXPECT_EQ(buffer.entries.size(), 2U);
}

TEST(Retry, WaitsForTheDelayThenTakesSlotsOldestFirst) {
  retry_buffer buffer;
  const auto config = on(8, 2);
  auto plan = plan_step(buffer, config, 0, fresh_batch(3, 10));
  settle(buffer, config, 0, outcomes_of(plan, {10, 12}));
  // Step 1: failed at 0, delay 2: not yet due.
  plan = plan_step(buffer, config, 1, fresh_batch(3, 20));
  EXPECT_EQ(plan.retried(), 0U);
  EXPECT_EQ(plan.tasks, fresh_batch(3, 20));
  settle(buffer, config, 1, outcomes_of(plan, {}));
  // Step 2: both due; they fill the first slots and displace the last fresh tasks.
  plan = plan_step(buffer, config, 2, fresh_batch(3, 30));
  EXPECT_EQ(plan.tasks, (std::vector<std::size_t>{10, 12, 30}));
  ASSERT_TRUE(plan.retries[0] && plan.retries[1]);
  EXPECT_FALSE(plan.retries[2]);
  EXPECT_EQ(plan.retries[0]->attempts, 1U);
  EXPECT_TRUE(buffer.entries.empty());
}

TEST(Retry, NeverTakesMoreSlotsThanTheBatch) {
  retry_buffer buffer;
  const auto config = on(8);
  auto plan = plan_step(buffer, config, 0, fresh_batch(4));
  settle(buffer, config, 0, outcomes_of(plan, {100, 101, 102, 103}));
  plan = plan_step(buffer, config, 1, fresh_batch(2, 200));
  EXPECT_EQ(plan.tasks, (std::vector<std::size_t>{100, 101}));
  EXPECT_EQ(buffer.entries.size(), 2U);  // still waiting, oldest taken first
  EXPECT_EQ(buffer.entries[0].task, 102U);
}

TEST(Retry, RecoveryAttemptsAndExhaustion) {
  retry_buffer buffer;
  const auto config = on(8, 1, 2);
  auto plan = plan_step(buffer, config, 0, fresh_batch(2));
  settle(buffer, config, 0, outcomes_of(plan, {100, 101}));
  // Step 1: 100 recovers, 101 fails again with an attempt left and goes back.
  plan = plan_step(buffer, config, 1, fresh_batch(2, 200));
  ASSERT_EQ(plan.retried(), 2U);
  auto counts = settle(buffer, config, 1, outcomes_of(plan, {101}));
  EXPECT_EQ(counts.recovered, 1U);
  EXPECT_EQ(counts.requeued, 1U);
  EXPECT_EQ(counts.admitted, 0U);
  ASSERT_EQ(buffer.entries.size(), 1U);
  EXPECT_EQ(buffer.entries[0], (retry_entry{101, 0, 1, 1}));
  // Step 2: its second (last) attempt fails: given up.
  plan = plan_step(buffer, config, 2, fresh_batch(2, 300));
  ASSERT_EQ(plan.retried(), 1U);
  EXPECT_EQ(plan.retries[0]->attempts, 2U);
  counts = settle(buffer, config, 2, outcomes_of(plan, {101}));
  EXPECT_EQ(counts.exhausted, 1U);
  EXPECT_TRUE(buffer.entries.empty());
  EXPECT_EQ(buffer.total.admitted, 2U);
  EXPECT_EQ(buffer.total.recovered, 1U);
  EXPECT_EQ(buffer.total.requeued, 1U);
  EXPECT_EQ(buffer.total.exhausted, 1U);
}

TEST(Retry, BoundedWithTheOldestEvictedAndCounted) {
  retry_buffer buffer;
  const auto config = on(3, 100);
  for (std::uint64_t step = 0; step < 3; ++step) {
    auto plan = plan_step(buffer, config, step, fresh_batch(2, 10 * (step + 1)));
    settle(buffer, config, step, outcomes_of(plan, plan.tasks));
    EXPECT_LE(buffer.entries.size(), 3U);
  }
  // Six admitted into three places: the three oldest evicted.
  EXPECT_EQ(buffer.total.admitted, 6U);
  EXPECT_EQ(buffer.total.evicted, 3U);
  ASSERT_EQ(buffer.entries.size(), 3U);
  EXPECT_EQ(buffer.entries[0].task, 21U);
  EXPECT_EQ(buffer.entries[1].task, 30U);
  EXPECT_EQ(buffer.entries[2].task, 31U);
}

// A difficulty mix with many hopeless tasks: retry spends verifications on retried groups, some of
// which recover, and never lets the buffer exceed its bound.
TEST(Retry, SimulationRecoversSignalAtACost) {
  simulation_params p;
  p.steps = 30;
  p.batch_size = 16;
  p.model.tasks = 64;
  p.model.difficulty_alpha = 0.3;
  p.model.difficulty_beta = 1.0;
  p.max_turns = 2;
  p.model.debug_fix_probability = 0.05;
  const auto without = simulate(p);
  p.gate.retry = on(8, 1, 2);
  p.gate.retry.extra_rollouts = 8;
  const auto with = simulate(p);
  std::size_t retried = 0;
  std::size_t recovered = 0;
  std::size_t retry_verifications = 0;
  for (const auto& s : with) {
    EXPECT_LE(s.buffered, 8U);
    EXPECT_EQ(s.groups.size(), 16U);
    retried += s.retried;
    recovered += s.recovered;
    retry_verifications += s.retry_verifications;
    EXPECT_LE(s.recovered, s.retried);
  }
  EXPECT_GT(retried, 0U);
  EXPECT_GT(recovered, 0U);
  // A retried group runs 16 rollouts: at least 16 first turns each.
  EXPECT_GE(retry_verifications, 16 * retried);
  for (const auto& s : without) {
    EXPECT_EQ(s.retried, 0U);
    EXPECT_EQ(s.buffered, 0U);
  }
}

}  // namespace
}  // namespace leap
