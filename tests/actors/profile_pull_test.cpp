// A verdict's profile reaches the turn that follows it: the pool's shelf (pure), the feedback a
// turn reads with a profile, and the pool around the real sandbox verifier on the CPU, where a
// stand-in ncu holds a KernelBench candidate's profiling run until the test lets it go: the verdict
// is out at once, and the profile asked for by the turn's request id arrives when ncu finishes; it
// is stored with its turn (issue 34) after the turn's record was, and the step record put after it
// carries its step metrics.
#include "actors/debug_turn.hpp"
#include "actors/messages.hpp"
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
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>

namespace leap::actors {
namespace {

TEST(ProfileShelfTest, AnExpectedProfileIsPendingUntilItArrivesAndIsTakenOnce) {
  profile_shelf shelf(4);
  EXPECT_FALSE(shelf.pending("a"));
  shelf.expect("a");
  EXPECT_TRUE(shelf.pending("a"));
  EXPECT_FALSE(shelf.take("a").has_value());
  shelf.arrive("a", "diagnosis");
  EXPECT_FALSE(shelf.pending("a"));
  EXPECT_EQ(shelf.held(), 1U);
  EXPECT_EQ(shelf.take("a"), std::optional<std::string>("diagnosis"));
  EXPECT_FALSE(shelf.take("a").has_value());  // taken once
  EXPECT_EQ(shelf.held(), 0U);
}

TEST(ProfileShelfTest, TheOldestUnclaimedProfilesMakeWayBeyondTheCapacity) {
  profile_shelf shelf(2);
  for (const std::string id : {"a", "b", "c"}) {
    shelf.expect(id);
    shelf.arrive(id, "text of " + id);
  }
  EXPECT_EQ(shelf.held(), 2U);
  EXPECT_FALSE(shelf.take("a").has_value());
  EXPECT_EQ(shelf.take("b"), std::optional<std::string>("text of b"));
  // A taken id leaves room: two more arrive and only the older of c, d, e goes.
  shelf.arrive("d", "text of d");
  shelf.arrive("e", "text of e");
  EXPECT_EQ(shelf.held(), 2U);
  EXPECT_FALSE(shelf.take("c").has_value());
  EXPECT_TRUE(shelf.take("d").has_value());
  EXPECT_TRUE(shelf.take("e").has_value());
}

TEST(ProfileShelfTest, ADroppedProfileIsNeitherPendingNorKept) {
  profile_shelf shelf(4);
  shelf.expect("a");
  shelf.drop("a");
  EXPECT_FALSE(shelf.pending("a"));
  EXPECT_FALSE(shelf.take("a").has_value());
  // Capacity 0 keeps nothing: every profile must go straight to a waiting turn.
  profile_shelf none(0);
  none.expect("a");
  none.arrive("a", "text");
  EXPECT_FALSE(none.pending("a"));
  EXPECT_FALSE(none.take("a").has_value());
}

turn_record profile_pull_turn(bool passed, double speedup, std::string feedback) {
  turn_record t;
  t.passed = passed;
  t.verdict = passed ? verdict_category::pass : verdict_category::wrong_answer;
  t.speedup = speedup;
  t.feedback = std::move(feedback);
  return t;
}

TEST(TurnFeedbackTest, AFailuresProfileStandsForItsFeedback) {
  group_settings group;
  const auto failed = profile_pull_turn(false, 0.0, "Wrong on trial 1.");
  EXPECT_EQ(turn_feedback(group, failed), "Wrong on trial 1.");
  EXPECT_EQ(turn_feedback(group, failed, "Wrong on trial 1.\n\nProfile of `k`: memory-bound"),
            "Wrong on trial 1.\n\nProfile of `k`: memory-bound");
}

TEST(TurnFeedbackTest, APassesProfileFollowsTheRequestForAFasterVersion) {
  group_settings group;
  group.optimise.speedup = 1.2;
  const auto passed = profile_pull_turn(true, 0.8, "");
  const std::string ask = optimise_feedback(0.8, 1.2);
  EXPECT_EQ(turn_feedback(group, passed), ask);
  // A pass's verdict has no text of its own (or a line the turn need not read again): what
  // follows the request is the diagnosis, after one blank line.
  EXPECT_EQ(turn_feedback(group, passed, "\n\nProfile of `k`: memory-bound"),
            ask + "\n\nProfile of `k`: memory-bound");
}

// ---- the pool around the real sandbox verifier --------------------------------------------------

// One system per test: a static one would be destroyed after CAF's own statics at exit.
struct profile_pull_system {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  profile_pull_system() {
    register_message_types(config);
    system = std::make_unique<caf::actor_system>(config);
  }
};

std::string profile_pull_answer(const std::string& op) {
  return sandbox::testing::scale_add_ops_candidate("profile pull", op);
}

TEST(VerifierPoolProfileTest, TheTurnAfterAVerdictGetsItsProfileWhenNcuIsDone) {
  const sandbox::engine_config engine = sandbox::testing::test_engine_config();
  std::string why;
  if (!sandbox::testing::python_has_module(engine.python, "torch", &why)) {
    GTEST_SKIP() << why;
  }
  // The stand-in ncu waits for the test's release file, then writes the H200 capture.
  sandbox::testing::stand_in_ncu ncu(testing::k_ncu_held_until_released);
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  const auto release = std::filesystem::path(ncu.path()).parent_path() / "release";
  const testing::ncu_release_on_exit guard{release};

  const sandbox::verifier_config vc = testing::profiling_verifier_config(ncu.path());
  auto created = sandbox::verifier::create(vc);
  ASSERT_TRUE(created.ok()) << created.err().message;

  const task_table table = testing::profiled_problem_table();
  const auto problem = testing::profiled_problem();
  profile_pull_system ts;
  auto& sys = *ts.system;
  testing::temp_dir dir;
  const auto trajectories = testing::open_store(dir.path());
  ASSERT_TRUE(trajectories);
  const auto store = spawn_store(sys, trajectories);
  verifier_pool_config pool_config;
  pool_config.profile_store = store;
  const auto pool = spawn_verifier_pool(sys, **created, table, pool_config);
  const auto profiles = profiles_of(pool);
  const auto patience = std::chrono::minutes(5);
  {
    caf::scoped_actor self{sys};
    auto fail = [](caf::error& e) { FAIL() << caf::to_string(e); };
    verification_result passed;
    self->request(pool, patience, verify_atom_v,
                  verification_request{"run/0/train/0/0/0", problem->id, profile_pull_answer("+")})
        .receive([&](verification_result& r) { passed = std::move(r); }, fail);
    ASSERT_TRUE(passed.passed) << passed.feedback;
    // The verdict came while ncu is held: it carries no diagnosis.
    EXPECT_EQ(passed.feedback.find("Profile of"), std::string::npos) << passed.feedback;
    // The turn's record is stored before its profile has been made.
    turn_record turn;
    turn.passed = true;
    turn.verdict = verdict_category::pass;
    std::string put_error = "unanswered";
    self->request(store, patience, put_turn_atom_v, std::string("run"),
                  group_key{0, split_kind::train, 0}, std::uint32_t{0}, std::uint32_t{0}, turn)
        .receive([&](ack& a) { put_error = a.error; }, fail);
    ASSERT_EQ(put_error, "");
    {
      auto none_yet = trajectories->profiles("run");
      ASSERT_TRUE(none_yet.ok()) << none_yet.err().message;
      EXPECT_TRUE(none_yet->empty());
    }

    // A failing verdict is not profiled under `passing`: its turn is answered at once, empty.
    verification_result failed;
    self->request(pool, patience, verify_atom_v,
                  verification_request{"run/0/train/0/1/0", problem->id, profile_pull_answer("-")})
        .receive([&](verification_result& r) { failed = std::move(r); }, fail);
    EXPECT_FALSE(failed.passed);
    std::string failed_profile = "unanswered";
    self->request(profiles, patience, profile_atom_v, std::string("run/0/train/0/1/0"))
        .receive([&](std::string& text) { failed_profile = std::move(text); }, fail);
    EXPECT_EQ(failed_profile, "");

    // The pass's profile is asked for while ncu still holds it; the reply waits for the release.
    auto asked =
        self->request(profiles, patience, profile_atom_v, std::string("run/0/train/0/0/0"));
    std::ofstream(release) << "go\n";
    std::string profiled;
    asked.receive([&](std::string& text) { profiled = std::move(text); }, fail);
    EXPECT_EQ(profiled.rfind(passed.feedback + "\n\nProfile of `", 0), 0U) << profiled;

    // The pool sent the profile to the store before it answered: a step put now commits after it,
    // and carries its metrics.
    step_record step;
    step.run_id = "run";
    step.step = 0;
    put_error = "unanswered";
    self->request(store, patience, put_step_atom_v, step)
        .receive([&](ack& a) { put_error = a.error; }, fail);
    ASSERT_EQ(put_error, "");
    auto stored = trajectories->profiles("run");
    ASSERT_TRUE(stored.ok()) << stored.err().message;
    ASSERT_EQ(stored->size(), 1U);  // the failure was not profiled
    const auto& p = stored->front();
    EXPECT_EQ(p.turn, (turn_ref{"run", 0, split_kind::train, 0, 0, 0}));
    ASSERT_FALSE(p.kernels.empty()) << p.note;
    // The diagnosis the turn read names the H200 capture's strided copy as memory-bound; the
    // stored summary says the same of it, with the analysers that fired.
    ASSERT_NE(profiled.find("Profile of `copy_strided`"), std::string::npos) << profiled;
    const auto strided =
        std::find_if(p.kernels.begin(), p.kernels.end(),
                     [](const kernel_profile& k) { return k.name == "copy_strided"; });
    ASSERT_NE(strided, p.kernels.end());
    EXPECT_EQ(strided->bottleneck, "memory-bound");
    EXPECT_FALSE(strided->findings.empty());
    EXPECT_GT(strided->duration_ns, 0.0);
    EXPECT_GT(p.seconds, 0.0);
    auto partial = trajectories->partial_turns("run");
    ASSERT_TRUE(partial.ok()) << partial.err().message;
    EXPECT_EQ(partial->size(), 1U);  // the turn's record, beside its profile
    auto step_back = trajectories->get_step("run", 0);
    ASSERT_TRUE(step_back.ok() && step_back->has_value());
    const auto& metrics = (*step_back)->metrics;
    EXPECT_EQ(metrics.count("profile.turns"), 1U);
    EXPECT_EQ(metrics.count("profile.turns") != 0U ? metrics.at("profile.turns") : 0.0, 1.0);
    double classified = 0;
    for (std::size_t i = 0; i < bottleneck_class_names.size(); ++i) {
      const auto found = metrics.find(profile_metric_of_class(i));
      classified += found == metrics.end() ? 0.0 : found->second;
    }
    EXPECT_EQ(classified, static_cast<double>(p.kernels.size()));

    // Taken once; an id the pool never judged has no profile coming.
    for (const std::string id : {"run/0/train/0/0/0", "run/0/train/9/9/9"}) {
      std::string again = "unanswered";
      self->request(profiles, patience, profile_atom_v, id)
          .receive([&](std::string& text) { again = std::move(text); }, fail);
      EXPECT_EQ(again, "") << id;
    }
    self->send_exit(pool, caf::exit_reason::user_shutdown);
    self->wait_for(pool);
    self->send_exit(store, caf::exit_reason::user_shutdown);
    self->wait_for(store);
  }
}

}  // namespace
}  // namespace leap::actors
