// The structural reward terms in a run's actors: a gate over the real sandbox verifier pool, with a
// stand-in ncu the test can hold, pulls its passes' profile summaries when the group is finished
// and scores with them. A profile that arrives in time adds the pass's structural term to its
// stored reward; one still held by ncu when verifier.profile_wait_s runs out adds nothing, and the
// group is finished without it.
#include "actors/group.hpp"
#include "actors/messages.hpp"
#include "actors/scorer.hpp"
#include "actors/store.hpp"
#include "actors/verifier.hpp"
#include "sandbox/verifier.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/actors/profile_support.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/profile_stand_in.hpp"
#include "tests/sandbox/test_support.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>

namespace leap::actors {
namespace {

struct structural_system {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  structural_system() {
    register_message_types(config);
    system = std::make_unique<caf::actor_system>(config);
  }
};

TEST(StructuralRewardActorTest, AProfileInTimeAddsItsTermAndALateOneNothing) {
  const sandbox::engine_config engine = sandbox::testing::test_engine_config();
  std::string why;
  if (!sandbox::testing::python_has_module(engine.python, "torch", &why)) {
    GTEST_SKIP() << why;
  }
  // The stand-in ncu writes the H200 capture at once, unless the test holds it (a `hold` file):
  // then only once the test writes `release`.
  sandbox::testing::stand_in_ncu ncu(testing::k_ncu_held_when_asked);
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  const auto folder = std::filesystem::path(ncu.path()).parent_path();
  const testing::ncu_release_on_exit guard{folder / "release"};

  const sandbox::verifier_config vc = testing::profiling_verifier_config(ncu.path());
  auto created = sandbox::verifier::create(vc);
  ASSERT_TRUE(created.ok()) << created.err().message;

  const task_table table = testing::profiled_problem_table();
  const auto problem = testing::profiled_problem();

  structural_system ts;
  auto& sys = *ts.system;
  testing::temp_dir dir;
  const auto trajectories = testing::open_store(dir.path());
  ASSERT_TRUE(trajectories);
  const auto store = spawn_store(sys, trajectories);
  verifier_pool_config pool_config;
  pool_config.profile_store = store;
  const auto pool = spawn_verifier_pool(sys, **created, table, pool_config);

  reward_config reward;
  reward.kind = reward_kind::binary;
  reward.structural.weights = {0.02, 0.02, 0.02, 0.02, 0.02};
  reward.structural.bound = 1.0;
  advantage_config advantage;
  advantage.kind = advantage_kind::none;

  caf::scoped_actor self{sys};
  const auto patience = std::chrono::minutes(5);
  // Runs group `group` (G = 2, one turn) to its report and returns its stored record.
  const auto run_group = [&](std::uint32_t group, std::chrono::milliseconds wait,
                             const std::string& tag) -> std::optional<group_record> {
    group_services services;
    services.generator = testing::rollout0_passes_generator(sys, tag);
    services.verifier = pool;
    services.profiles = profiles_of(pool);
    services.profile_summaries = profile_summaries_of(pool);
    services.profile_wait = wait;
    services.scorer = spawn_scorer(sys, reward, advantage);
    services.store = store;
    services.parent = testing::reporting_parent(sys, caf::actor_cast<caf::actor>(self));
    group_settings settings;
    settings.run_id = "run";
    settings.key = {0, split_kind::train, group};
    settings.task = {problem->id, "prompt"};
    settings.group_size = 2;
    settings.max_turns = 1;
    settings.local_gate = gate_config{};
    settings.train = false;
    auto gate = spawn_group(sys, settings, services);
    bool done = false;
    self->receive([&](group_done_atom, const group_report&) { done = true; },
                  [&](group_failed_atom, const group_key&, const std::string& message) {
                    ADD_FAILURE() << message;
                  },
                  caf::after(patience) >> [&] { ADD_FAILURE() << "no report"; });
    if (!done) {
      return std::nullopt;
    }
    auto stored = trajectories->get_group({"run", 0, split_kind::train, group});
    EXPECT_TRUE(stored.ok());
    return stored.ok() ? *stored : std::nullopt;
  };

  // In time: the profile is made at once and the group waits for it (up to 5 minutes).
  const auto in_time =
      run_group(0, std::chrono::duration_cast<std::chrono::milliseconds>(patience), "in time");
  ASSERT_TRUE(in_time.has_value());
  ASSERT_EQ(in_time->rollouts.size(), 2U);
  ASSERT_TRUE(in_time->rollouts[0].outcome.passed());
  ASSERT_FALSE(in_time->rollouts[1].outcome.passed());
  auto profiles = trajectories->profiles("run");
  ASSERT_TRUE(profiles.ok()) << profiles.err().message;
  ASSERT_EQ(profiles->size(), 1U);  // the pass's, stored before the group
  ASSERT_FALSE(profiles->front().kernels.empty()) << profiles->front().note;
  const double term = structural_score(reward.structural, profiles->front().kernels);
  EXPECT_GT(term, 0.0);
  EXPECT_NEAR(in_time->rollouts[0].reward, 1.0 + term, 1e-9);
  EXPECT_NEAR(in_time->rollouts[1].reward, 0.0, 1e-9);

  // Late: ncu holds the profile past the wait; the group is scored without it.
  std::ofstream(folder / "hold") << "hold\n";
  const auto late = run_group(1, std::chrono::milliseconds(500), "late");
  std::ofstream(folder / "release") << "go\n";  // before any assertion can end the test
  ASSERT_TRUE(late.has_value());
  ASSERT_TRUE(late->rollouts[0].outcome.passed());
  EXPECT_NEAR(late->rollouts[0].reward, 1.0, 1e-9);
  EXPECT_NEAR(late->rollouts[1].reward, 0.0, 1e-9);

  self->send_exit(pool, caf::exit_reason::user_shutdown);
  self->wait_for(pool);
  self->send_exit(store, caf::exit_reason::user_shutdown);
  self->wait_for(store);
}

}  // namespace
}  // namespace leap::actors
