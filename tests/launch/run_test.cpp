// launch::run on the whole graph (real CAF actor system, real RocksDB store in a temporary run
// folder), with the instant policy and verifier and a null learner in place of the config's, as
// bench_pipeline builds its runs: a run goes to its end and records itself, a second run on the
// folder continues it, another experiment in the folder is refused, a stop ends it interrupted,
// and a run folder that cannot be made is an error naming it.
#include "tests/actors/test_support.hpp"
#include "tests/doubles/instant_services.hpp"
#include "tools/launch/launch.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;
using actors::testing::temp_dir;

run_preflight checked_run(const fs::path& run_dir, int steps) {
  run_preflight checked;
  auto& c = checked.config;
  c.experiment.name = "run";
  c.experiment.seed = 7;
  c.experiment.steps = steps;
  c.experiment.run_dir = run_dir.string();
  c.data.batch_size = 2;
  c.rollout.group_size = 2;
  c.rollout.max_turns = 2;
  c.rollout.validation.every = 0;
  for (int i = 0; i < 4; ++i) {
    auto t = std::make_shared<sandbox::task>();
    t->id = "t/" + std::to_string(i);
    t->prompt = "prompt " + std::to_string(i);
    checked.tasks.train.push_back(std::move(t));
  }
  return checked;
}

// The instant services in place of the policy, the verifier and the learner; `plans` gets the
// resume plan the run starts from.
run_options instant_options(std::vector<actors::resume_plan>* plans) {
  run_options options;
  options.scheduler_threads = 2;
  options.services.generator = [](caf::actor_system& system) {
    actors::instant_policy policy;
    policy.seed = 3;
    return actors::spawn_instant_generator(system, policy);
  };
  options.services.verifier = [](caf::actor_system& system) {
    return actors::spawn_instant_verifier(system, actors::latency_profile{}, 3);
  };
  options.services.learner = [](std::uint64_t version) {
    return std::make_shared<actors::null_learner>(0.0, version);
  };
  options.events.on_resume = [plans](const actors::resume_plan& p) { plans->push_back(p); };
  return options;
}

result<run_outcome> start_and_wait(run& r) {
  if (auto started = r.start(); !started) {
    return started.err();
  }
  return r.wait();
}

TEST(LaunchRun, RunsTheGraphToItsEndAndRecordsTheRun) {
  temp_dir dir;
  std::vector<actors::resume_plan> plans;
  run r(checked_run(dir.path() / "run", 3), instant_options(&plans));
  auto outcome = start_and_wait(r);
  ASSERT_TRUE(outcome.ok()) << outcome.err().message;
  EXPECT_EQ(outcome->status, run_status::finished) << outcome->summary.error;
  EXPECT_EQ(outcome->summary.steps_completed, 3u);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].first_step, 0u);

  auto record = r.store()->get_run("run");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->status, run_status::finished);
  auto steps = r.store()->steps("run");
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->size(), 3u);
  // The live metrics were written at the end.
  EXPECT_TRUE(fs::exists(dir.path() / "run" / "metrics.prom"));
  EXPECT_TRUE(fs::exists(dir.path() / "run" / "metrics.json"));
}

TEST(LaunchRun, ASecondRunOnTheFolderContinuesFromTheStore) {
  temp_dir dir;
  std::vector<actors::resume_plan> plans;
  {
    run first(checked_run(dir.path() / "run", 2), instant_options(&plans));
    auto outcome = start_and_wait(first);
    ASSERT_TRUE(outcome.ok()) << outcome.err().message;
    ASSERT_EQ(outcome->status, run_status::finished) << outcome->summary.error;
  }
  // More steps is the same experiment: the run continues at step 2 with the weights of step 2.
  run second(checked_run(dir.path() / "run", 4), instant_options(&plans));
  auto outcome = start_and_wait(second);
  ASSERT_TRUE(outcome.ok()) << outcome.err().message;
  EXPECT_EQ(outcome->status, run_status::finished) << outcome->summary.error;
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[1].first_step, 2u);
  EXPECT_EQ(plans[1].weight_version, 2u);
  EXPECT_EQ(outcome->summary.first_step, 2u);
  EXPECT_EQ(outcome->summary.steps_completed, 2u);
  auto steps = second.store()->steps("run");
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->size(), 4u);
}

TEST(LaunchRun, AnotherExperimentInTheFolderIsRefusedWithTheDifferences) {
  temp_dir dir;
  std::vector<actors::resume_plan> plans;
  {
    run first(checked_run(dir.path() / "run", 1), instant_options(&plans));
    auto outcome = start_and_wait(first);
    ASSERT_TRUE(outcome.ok()) << outcome.err().message;
  }
  auto other = checked_run(dir.path() / "run", 1);
  other.config.rollout.group_size = 4;
  run second(std::move(other), instant_options(&plans));
  const auto started = second.start();
  ASSERT_FALSE(started.ok());
  const auto& message = started.err().message;
  EXPECT_NE(message.find("holds run 'run' started with another config"), std::string::npos)
      << message;
  EXPECT_NE(message.find("rollout.group_size"), std::string::npos) << message;
  EXPECT_EQ(plans.size(), 1u);  // no plan: the store's run is not touched
}

TEST(LaunchRun, AStopBeforeTheGraphRunsEndsItInterrupted) {
  temp_dir dir;
  std::vector<actors::resume_plan> plans;
  auto options = instant_options(&plans);
  bool stopping = false;
  options.events.on_stopping = [&stopping] { stopping = true; };
  run r(checked_run(dir.path() / "run", 50), std::move(options));
  ASSERT_TRUE(r.start().ok());
  r.stop();
  auto outcome = r.wait();
  ASSERT_TRUE(outcome.ok()) << outcome.err().message;
  EXPECT_EQ(outcome->status, run_status::interrupted) << outcome->summary.error;
  EXPECT_EQ(outcome->summary.steps_completed, 0u);
  EXPECT_TRUE(stopping);
  auto record = r.store()->get_run("run");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->status, run_status::interrupted);
}

TEST(LaunchRun, ARunFolderThatCannotBeMadeIsAnErrorNamingIt) {
  temp_dir dir;
  std::ofstream(dir.path() / "file") << "not a folder";
  std::vector<actors::resume_plan> plans;
  run r(checked_run(dir.path() / "file" / "run", 1), instant_options(&plans));
  const auto started = r.start();
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.err().message.find((dir.path() / "file" / "run").string() +
                                       ": cannot create the run folder"),
            std::string::npos)
      << started.err().message;
}

}  // namespace
}  // namespace leap::launch
