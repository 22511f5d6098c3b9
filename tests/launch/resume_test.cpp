// Per-turn resume and the weight version of validation groups, with the whole graph on CAF's
// deterministic test coordinator and a real RocksDB store: a group stopped half-way keeps its
// finished turns across a restart (taken as stored, never generated again), only turns sampled
// with the version the restarted run samples with are reused, and a validation group's turns all
// carry the weights of the step it validates even while training goes on.
#include "tools/launch/resume.hpp"

#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using launch::plan_resume;
using launch::reusable_turns;

using testing::coordinator;
using testing::hub;
using testing::temp_dir;

experiment_config config_of(int steps, int batch, int group, int turns) {
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
  for (int i = 0; i < n; ++i) out.push_back({prefix + std::to_string(i), prefix + " prompt"});
  return out;
}

// Every turn fails: every group opens and every rollout runs all its turns.
instant_policy failing_policy() {
  instant_policy p;
  p.correct = [](const std::string&, const std::string&, int) { return false; };
  return p;
}

struct fixture {
  temp_dir dir;
  coordinator c;
  std::shared_ptr<hub> shared = std::make_shared<hub>();
  std::shared_ptr<trajectory_store> store = testing::open_store(dir.path());
  experiment_services services;

  fixture() {
    shared->store = store;
    services.generator =
        c.keep(c.system().spawn(testing::test_generator, failing_policy(), shared));
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
    auto driver = c.keep(spawn_experiment(c.system(), std::move(settings), services));
    testing::request_run(c, driver, out);
    return driver;
  }
};

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

// Per rollout, the turn indices reusable_turns keeps.
std::vector<std::vector<int>> kept_turns(const std::vector<std::vector<turn_record>>& kept) {
  std::vector<std::vector<int>> out;
  for (const auto& rollout : kept) {
    std::vector<int> turns;
    for (const auto& t : rollout) turns.push_back(static_cast<int>(t.output_tokens.at(0) % 100));
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

// The first run stops while one group waits for its last turn; the restart takes the group's 11
// finished turns from the store as they were (token ids, log-probs, verdicts) and asks the
// generator for the one turn that was in flight only.
TEST(PerTurnResume, ARestartRedoesOnlyTheTurnsInFlight) {
  fixture f;
  experiment_settings s;
  s.config = config_of(2, 2, 4, 3);
  s.train_tasks = tasks(3);
  const std::string in_flight = "run/1/train/1/0/2";
  f.shared->hold = [&](const std::string& id) { return id == in_flight; };
  auto first = std::make_shared<std::optional<run_summary>>();
  auto driver = f.start(s, first);
  f.c.run();
  ASSERT_FALSE(first->has_value());
  caf::anon_send(driver, stop_atom_v);
  f.c.run();
  ASSERT_TRUE(first->has_value());
  ASSERT_EQ((*first)->steps_completed, 1u);

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

  f.shared->hold = nullptr;
  f.shared->events.clear();
  f.services.learner = f.c.keep(f.c.system().spawn(testing::test_learner, f.shared));
  s.resume = *plan;
  auto second = std::make_shared<std::optional<run_summary>>();
  f.start(s, second);
  f.c.run();
  ASSERT_TRUE(second->has_value());
  EXPECT_EQ((*second)->status, run_status::finished) << (*second)->error;
  EXPECT_EQ((*second)->turns_resumed, 11u);
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
  fixture f;
  experiment_settings s;
  s.config = config_of(2, 2, 4, 3);
  s.train_tasks = tasks(3);
  f.shared->hold = [](const std::string& id) { return id == "run/1/train/1/0/2"; };
  auto first = std::make_shared<std::optional<run_summary>>();
  auto driver = f.start(s, first);
  f.c.run();
  caf::anon_send(driver, stop_atom_v);
  f.c.run();
  ASSERT_TRUE(first->has_value());
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
  fixture f;
  experiment_settings s;
  s.config = config_of(3, 2, 2, 2);
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
      for (const auto& t : r.turns) EXPECT_EQ(t.weight_version, expected);
    }
  }
  // Training groups carry no group-wide version.
  q.split = split_kind::train;
  auto train = f.store->groups(q);
  ASSERT_TRUE(train.ok());
  for (const auto& g : *train) EXPECT_FALSE(g.weight_version.has_value());
}

}  // namespace
}  // namespace leap::actors
