// What `leap run` says about a run (tools/launch/describe.cpp): the line once it has started, the
// line at its end (the e2e tests read its counts) and the exit status of each way a run ends.
#include "tools/launch/launch.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace leap::launch {
namespace {

TEST(DescribeTest, StartLineNamesTheShapeAndTheTasks) {
  run_preflight checked;
  auto& c = checked.config;
  c.experiment.name = "exp";
  c.experiment.steps = 3;
  c.data.batch_size = 4;
  c.rollout.group_size = 5;
  c.rollout.max_turns = 2;
  for (int i = 0; i < 3; ++i) {
    checked.tasks.train.push_back(std::make_shared<sandbox::task>());
  }
  checked.tasks.validation.push_back(std::make_shared<sandbox::task>());
  EXPECT_EQ(describe_start(checked, "http://127.0.0.1:8000"),
            "run 'exp': 3 steps x 4 tasks x 5 rollouts, up to 2 turns | gate " +
                to_string(c.gate.policy) + ", reward " + to_string(c.reward.kind) + ", schedule " +
                to_string(c.schedule.mode) +
                " | 3 training tasks, 1 validation tasks | policy http://127.0.0.1:8000");
}

TEST(DescribeTest, OutcomeLineCountsWhatThisProcessDidAndWhatItReadBack) {
  run_outcome outcome;
  outcome.status = run_status::interrupted;
  outcome.summary.steps_completed = 2;
  outcome.summary.groups_completed = 7;
  outcome.summary.groups_resumed = 1;
  outcome.summary.turns_resumed = 4;
  EXPECT_EQ(describe_outcome(outcome, "exp", "runs/exp/trajectories"),
            "run 'exp' interrupted: 2 steps completed by this process, 7 groups run, 1 read back "
            "from the store, 4 finished turns of unfinished groups taken from the store | "
            "trajectories in runs/exp/trajectories");
}

TEST(DescribeTest, ExitStatusOfEachEnd) {
  EXPECT_EQ(exit_status(run_status::finished), 0);
  EXPECT_EQ(exit_status(run_status::interrupted), 130);
  EXPECT_EQ(exit_status(run_status::failed), 1);
  EXPECT_EQ(exit_status(run_status::running), 1);
}

}  // namespace
}  // namespace leap::launch
