// The driver's pure decisions: batches, splits, probes, validation steps, step-time attribution.
#include "orchestrator/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace leap {
namespace {

TEST(StepBatchTest, EveryTaskOncePerEpochAndAFunctionOfSeedAndStep) {
  const std::size_t tasks = 10;
  const std::size_t batch = 4;
  // Steps 0..4 cover two epochs (20 positions): each task exactly twice.
  std::map<std::size_t, int> seen;
  for (std::uint64_t step = 0; step < 5; ++step) {
    const auto b = step_batch(7, step, tasks, batch);
    ASSERT_EQ(b.size(), batch);
    for (auto t : b) {
      ASSERT_LT(t, tasks);
      ++seen[t];
    }
  }
  ASSERT_EQ(seen.size(), tasks);
  for (const auto& [task, count] : seen) {
    EXPECT_EQ(count, 2) << "task " << task;
  }

  // A function of (seed, step): a resumed run sees the same batch.
  EXPECT_EQ(step_batch(7, 3, tasks, batch), step_batch(7, 3, tasks, batch));
  EXPECT_NE(step_batch(7, 0, tasks, batch), step_batch(8, 0, tasks, batch));
}

TEST(StepBatchTest, EdgeCases) {
  struct row {
    std::size_t tasks, batch;
    std::size_t expected_size;
  };
  for (const row& r : {row{0, 4, 0}, row{5, 0, 0}, row{1, 3, 3}, row{3, 7, 7}}) {
    const auto b = step_batch(1, 0, r.tasks, r.batch);
    EXPECT_EQ(b.size(), r.expected_size) << r.tasks << " tasks, batch " << r.batch;
    for (auto t : b) {
      EXPECT_LT(t, r.tasks);
    }
  }
  // A batch larger than the task list repeats tasks across epochs, each epoch complete.
  auto b = step_batch(1, 0, 3, 6);
  std::sort(b.begin(), b.end());
  EXPECT_EQ(b, (std::vector<std::size_t>{0, 0, 1, 1, 2, 2}));
}

TEST(SplitTasksTest, HoldsOutASeededFraction) {
  struct row {
    std::size_t tasks;
    double fraction;
    std::size_t held_out;
  };
  for (const row& r : {row{10, 0.0, 0}, row{10, 0.2, 2}, row{10, 0.01, 1}, row{2, 0.9, 1},
                       row{1, 0.5, 0}, row{0, 0.5, 0}, row{7, 0.99, 6}}) {
    const auto split = split_tasks(3, r.tasks, r.fraction);
    EXPECT_EQ(split.validation.size(), r.held_out) << r.tasks << " x " << r.fraction;
    EXPECT_EQ(split.train.size() + split.validation.size(), r.tasks);
    std::set<std::size_t> all(split.train.begin(), split.train.end());
    all.insert(split.validation.begin(), split.validation.end());
    EXPECT_EQ(all.size(), r.tasks);
    EXPECT_TRUE(std::is_sorted(split.train.begin(), split.train.end()));
  }
  EXPECT_EQ(split_tasks(3, 50, 0.2).validation, split_tasks(3, 50, 0.2).validation);
  EXPECT_NE(split_tasks(3, 50, 0.2).validation, split_tasks(4, 50, 0.2).validation);
}

TEST(ProbeGroupTest, SeededCoinWithTheGivenRate) {
  EXPECT_FALSE(probe_group(1, 0, 0, 0.0));
  EXPECT_TRUE(probe_group(1, 0, 0, 1.0));
  int probes = 0;
  for (std::uint32_t g = 0; g < 4000; ++g) {
    probes += probe_group(5, g / 40, g % 40, 0.25) ? 1 : 0;
  }
  EXPECT_NEAR(probes / 4000.0, 0.25, 0.03);
  EXPECT_EQ(probe_group(5, 3, 7, 0.5), probe_group(5, 3, 7, 0.5));
}

TEST(ValidationDueTest, EveryKStepsAndAfterTheLast) {
  struct row {
    std::uint64_t step, steps;
    int every;
    bool due;
  };
  for (const row& r :
       {row{0, 10, 0, false}, row{9, 10, 0, false}, row{0, 10, 1, true}, row{1, 10, 2, true},
        row{2, 10, 2, false}, row{9, 10, 4, true}, row{3, 10, 4, true}, row{4, 10, 4, false}}) {
    EXPECT_EQ(validation_due(r.step, r.steps, r.every), r.due)
        << "step " << r.step << " of " << r.steps << " every " << r.every;
  }
}

TEST(AttributeStepTimeTest, EachInstantGoesToOneActivity) {
  using k = activity_kind;
  struct row {
    const char* name;
    std::vector<activity> activities;
    double start, end;
    step_timings expected;  // wall, generation, compile, run, learner, idle
  };
  const std::vector<row> rows = {
      {"nothing: all idle", {}, 0, 10, {10, 0, 0, 0, 0, 10}},
      {"empty step", {{k::generation, 0, 5}}, 5, 5, {0, 0, 0, 0, 0, 0}},
      {"sequential stages",
       {{k::generation, 0, 4}, {k::compile, 4, 6}, {k::run, 6, 7}, {k::learner, 8, 10}},
       0,
       10,
       {10, 4, 2, 1, 2, 1}},
      {"generation wins over overlapping verification",
       {{k::generation, 0, 6}, {k::compile, 2, 8}, {k::run, 7, 9}},
       0,
       10,
       {10, 6, 2, 1, 0, 1}},
      {"the learner wins over everything",
       {{k::generation, 0, 10}, {k::learner, 5, 10}},
       0,
       10,
       {10, 5, 0, 0, 5, 0}},
      {"activities are clipped to the step",
       {{k::generation, -5, 2}, {k::run, 8, 20}},
       0,
       10,
       {10, 2, 0, 2, 0, 6}},
      {"overlapping turns of one stage count once",
       {{k::generation, 0, 4}, {k::generation, 1, 3}, {k::generation, 2, 6}},
       0,
       8,
       {8, 6, 0, 0, 0, 2}},
  };
  for (const auto& r : rows) {
    const auto t = attribute_step_time(r.activities, r.start, r.end);
    EXPECT_DOUBLE_EQ(t.wall_ms, r.expected.wall_ms) << r.name;
    EXPECT_DOUBLE_EQ(t.generation_ms, r.expected.generation_ms) << r.name;
    EXPECT_DOUBLE_EQ(t.compile_ms, r.expected.compile_ms) << r.name;
    EXPECT_DOUBLE_EQ(t.run_ms, r.expected.run_ms) << r.name;
    EXPECT_DOUBLE_EQ(t.learner_ms, r.expected.learner_ms) << r.name;
    EXPECT_DOUBLE_EQ(t.idle_ms, r.expected.idle_ms) << r.name;
  }
}

TEST(ReportOfTest, SummarisesAStoredGroup) {
  group_record g;
  g.step = 2;
  g.split = split_kind::train;
  g.group_index = 1;
  g.task_id = "t";
  g.gate = gate_decision::open;
  g.n_fail = 1;
  g.probe = false;
  rollout_record pass_first;
  pass_first.index = 0;
  pass_first.turns.resize(1);
  pass_first.turns[0].passed = true;
  pass_first.turns[0].verdict = verdict_category::pass;
  pass_first.turns[0].output_tokens = {1, 2, 3};
  pass_first.outcome = {1, 1};
  pass_first.advantage = 1.0;
  pass_first.turns[0].speedup = 1.25;
  rollout_record fixed;
  fixed.index = 1;
  fixed.turns.resize(2);
  fixed.turns[0].finish = finish_reason::error;  // no answer: not verified
  fixed.turns[1].passed = true;
  fixed.turns[1].verdict = verdict_category::pass;
  fixed.turns[1].output_tokens = {4};
  fixed.outcome = {2, 2};
  fixed.advantage = -1.0;
  g.rollouts = {pass_first, fixed};
  const auto r = report_of(g);
  EXPECT_EQ(r.key, (group_key{2, split_kind::train, 1}));
  EXPECT_EQ(r.turns, 3u);
  EXPECT_EQ(r.verifier_jobs, 2u);
  EXPECT_EQ(r.generated_tokens, 4u);
  ASSERT_EQ(r.measured.size(), 2u);
  EXPECT_EQ(r.measured[1].passed_at_turn, 2);
  EXPECT_EQ(summary_of(r).advantages, (std::vector<double>{1.0, -1.0}));
  EXPECT_EQ(probe_summary_of(r).gate, gate_decision::open);
  EXPECT_EQ(r.speedups, (std::vector<double>{1.25, 0.0}));  // the second pass was not timed
}

}  // namespace
}  // namespace leap
