// The gate and its debug-turn actors on CAF's deterministic test coordinator: first-turn verdicts
// stream in, a group decides while others still generate, closed groups finish at once, debug
// turns run only for an opened group's failures, and a group is stored before the learner sees it.
#include "orchestrator/gate.hpp"
#include "tests/actors/experiment_fixture.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using testing::coordinator;
using testing::dcp_gate;

// "run/0/train/3/2/1" -> {group 3, rollout 2, turn 1}.
struct turn_id {
  std::uint32_t group = 0;
  std::uint32_t rollout = 0;
  int turn = 0;
};
turn_id parse(const std::string& request_id) {
  std::vector<std::string> parts;
  std::stringstream in(request_id);
  for (std::string p; std::getline(in, p, '/');) {
    parts.push_back(p);
  }
  return {static_cast<std::uint32_t>(std::stoul(parts.at(3))),
          static_cast<std::uint32_t>(std::stoul(parts.at(4))), std::stoi(parts.at(5))};
}

// Which (group, rollout) pass at which turn (1-based; 0: never).
using pass_table = std::map<std::pair<std::uint32_t, std::uint32_t>, int>;

instant_policy scripted(const pass_table& table) {
  instant_policy p;
  p.correct = [table](const std::string& id, const std::string&, int turn) {
    const auto t = parse(id);
    auto it = table.find({t.group, t.rollout});
    const int passes_at = it == table.end() ? 0 : it->second;
    return passes_at != 0 && turn + 1 >= passes_at;
  };
  return p;
}

// The gate over the doubles; `parent` records what the gate tells the driver.
struct gate_fixture : testing::doubles {
  group_services services;

  gate_fixture(instant_policy policy, const gate_config& gate) {
    spawn_services(services, std::move(policy));
    services.parent = c.keep(c.system().spawn(testing::test_parent, gate, shared));
  }

  group_actor start(std::uint32_t group, int group_size, int max_turns, bool probe = false,
                    optimise_config optimise = {}) {
    group_settings s;
    s.optimise = optimise;
    s.run_id = "run";
    s.key = {0, split_kind::train, group};
    s.task = {"task-" + std::to_string(group), "prompt " + std::to_string(group)};
    s.group_size = group_size;
    s.max_turns = max_turns;
    s.probe_if_closed = probe;
    return c.keep(spawn_group(c.system(), s, services));
  }

  std::optional<group_record> stored(std::uint32_t group) {
    auto g = store->get_group({"run", 0, split_kind::train, group});
    EXPECT_TRUE(g.ok());
    return g.ok() ? *g : std::nullopt;
  }

  const group_report* report(std::uint32_t group) const {
    for (const auto& r : shared->reports) {
      if (r.key.group == group) {
        return &r;
      }
    }
    return nullptr;
  }
};

std::vector<int> turns_per_rollout(const group_record& g) {
  std::vector<int> out;
  for (const auto& r : g.rollouts) {
    out.push_back(static_cast<int>(r.turns.size()));
  }
  return out;
}

TEST(GroupActorTest, AGroupDecidesAndDebugsWhileAnotherStillGenerates) {
  // Group 0: rollouts 0 and 1 pass at once, 2 and 3 fail and are fixed at turn 2: N_fail = 2 of 4
  // opens it ([0.5, 1] of G). Group 1's answers are held back.
  gate_fixture f(scripted({{{0, 0}, 1}, {{0, 1}, 1}, {{0, 2}, 2}, {{0, 3}, 2}}),
                 dcp_gate(0.5, 1.0));
  f.shared->hold = [](const std::string& id) {
    return id.rfind("run/0/train/1/", 0) == 0 && turn_of_request(id) == 0;
  };
  f.start(0, 4, 3);
  auto held_group = f.start(1, 4, 3);
  f.c.run();

  // Group 0 is gated, debugged, scored, stored and learned; group 1 has only its requests out.
  ASSERT_NE(f.report(0), nullptr);
  EXPECT_EQ(f.report(0)->gate, gate_decision::open);
  EXPECT_EQ(f.report(1), nullptr);
  EXPECT_EQ(f.shared->count_events("gen run/0/train/1/"), 4u);
  EXPECT_EQ(f.shared->count_events("ver run/0/train/1/"), 0u);
  EXPECT_EQ(f.shared->decided, (std::vector<group_key>{{0, split_kind::train, 0}}));
  // Debug turns only for the two failures, one turn each (they passed at turn 2).
  EXPECT_EQ(f.shared->count_events("gen run/0/train/0/2/1"), 1u);
  EXPECT_EQ(f.shared->count_events("gen run/0/train/0/3/1"), 1u);
  EXPECT_EQ(f.shared->count_events("gen run/0/train/0/0/1"), 0u);
  auto g0 = f.stored(0);
  ASSERT_TRUE(g0);
  EXPECT_EQ(turns_per_rollout(*g0), (std::vector<int>{1, 1, 2, 2}));
  EXPECT_EQ(g0->rollouts[2].outcome.passed_at_turn, 2);
  EXPECT_EQ(g0->n_fail, 2);
  EXPECT_EQ(g0->thresholds, (fail_range{2, 4}));
  // The debug turn's input is the feedback, after the whole first turn.
  EXPECT_EQ(g0->rollouts[2].turns[1].input_tokens,
            (std::vector<token_id>{static_cast<token_id>(std::string("wrong answer").size())}));

  caf::anon_send(caf::actor_cast<testing::test_generator_actor>(f.services.generator),
                 release_atom_v, std::string("run/0/train/1/"));
  f.c.run();
  ASSERT_NE(f.report(1), nullptr);
  EXPECT_TRUE(f.shared->failures.empty());
  (void)held_group;
}

TEST(GroupActorTest, DecisionsAndTurnsFollowTheFirstTurnFailures) {
  // G = 4, M = 3, dcp in [0.5, 0.75]: open for 2 or 3 failures.
  struct row {
    const char* name;
    pass_table passes;  // of group 0
    gate_decision decision;
    std::vector<int> turns;
    std::vector<int> passed_at;
  };
  const std::vector<row> rows = {
      {"no failure: closed at once",
       {{{0, 0}, 1}, {{0, 1}, 1}, {{0, 2}, 1}, {{0, 3}, 1}},
       gate_decision::closed_no_debug,
       {1, 1, 1, 1},
       {1, 1, 1, 1}},
      {"one failure: easy, closed at once",
       {{{0, 0}, 1}, {{0, 1}, 1}, {{0, 2}, 1}},
       gate_decision::closed_easy,
       {1, 1, 1, 1},
       {1, 1, 1, 0}},
      {"four failures: hopeless, closed at once",
       {},
       gate_decision::closed_hopeless,
       {1, 1, 1, 1},
       {0, 0, 0, 0}},
      {"three failures: open, each failure debugs up to M turns",
       {{{0, 0}, 1}, {{0, 1}, 2}, {{0, 2}, 3}},
       gate_decision::open,
       {1, 2, 3, 3},
       {1, 2, 3, 0}},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    gate_fixture f(scripted(r.passes), dcp_gate(0.5, 0.75));
    f.start(0, 4, 3);
    f.c.run();
    ASSERT_EQ(f.shared->reports.size(), 1u);
    EXPECT_EQ(f.shared->reports[0].gate, r.decision);
    auto g = f.stored(0);
    ASSERT_TRUE(g);
    EXPECT_EQ(turns_per_rollout(*g), r.turns);
    std::vector<int> passed_at;
    for (const auto& o : g->rollouts) {
      passed_at.push_back(o.outcome.passed_at_turn);
    }
    EXPECT_EQ(passed_at, r.passed_at);
    // Generation requests are exactly the stored turns: nothing requested and dropped.
    std::size_t turns = 0;
    for (int t : r.turns) {
      turns += static_cast<std::size_t>(t);
    }
    EXPECT_EQ(f.shared->count_events("gen "), turns);
    EXPECT_TRUE(f.shared->failures.empty());
  }
}

TEST(GroupActorTest, ProbeGroupsDebugForMeasurementButTrainOnTheFirstTurn) {
  // Hopeless (4 of 4 failed) yet probed: the failures debug; rollout 1 is fixed at turn 2.
  gate_fixture f(scripted({{{0, 1}, 2}}), dcp_gate(0.5, 0.75));
  f.start(0, 4, 2, /*probe=*/true);
  f.c.run();
  auto g = f.stored(0);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->gate, gate_decision::closed_hopeless);
  EXPECT_TRUE(g->probe);
  EXPECT_EQ(turns_per_rollout(*g), (std::vector<int>{2, 2, 2, 2}));
  // Training sees first turns only: all failed, so no rollout passed and rewards are all 0.
  for (const auto& r : g->rollouts) {
    EXPECT_EQ(r.outcome.passed_at_turn, 0);
    EXPECT_EQ(r.advantage, 0.0);
  }
  EXPECT_EQ(outcome_from_turns(g->rollouts[1]).passed_at_turn, 2);
  ASSERT_EQ(f.shared->reports.size(), 1u);
  EXPECT_EQ(f.shared->reports[0].measured[1].passed_at_turn, 2);
}

TEST(GroupActorTest, AGroupIsStoredBeforeTheLearnerSeesIt) {
  gate_fixture f(scripted({{{0, 0}, 1}, {{0, 1}, 2}, {{1, 2}, 1}, {{2, 0}, 3}}),
                 dcp_gate(0.25, 1.0));
  for (std::uint32_t g = 0; g < 3; ++g) {
    f.start(g, 4, 3);
  }
  f.c.run();
  EXPECT_EQ(f.shared->learned.size(), 3u);
  EXPECT_TRUE(f.shared->learned_unstored.empty())
      << "learned before stored: " << f.shared->learned_unstored.front();
  EXPECT_EQ(f.shared->reports.size(), 3u);
}

TEST(GroupActorTest, ValidationGroupsDecideLocallyAndAreNotLearned) {
  gate_fixture f(scripted({{{0, 0}, 2}}), dcp_gate(0.5, 0.75));
  group_settings s;
  s.run_id = "run";
  s.key = {0, split_kind::validation, 0};
  s.task = {"task", "prompt"};
  s.group_size = 1;
  s.max_turns = 2;
  gate_config full;
  full.policy = gate_policy::full;
  s.local_gate = full;
  s.train = false;
  auto services = f.services;
  services.learner = learner_actor{};
  f.c.keep(spawn_group(f.c.system(), s, services));
  f.c.run();
  EXPECT_TRUE(f.shared->decided.empty());
  EXPECT_TRUE(f.shared->learned.empty());
  auto g = f.store->get_group({"run", 0, split_kind::validation, 0});
  ASSERT_TRUE(g.ok() && g->has_value());
  EXPECT_EQ((*g)->rollouts[0].outcome.passed_at_turn, 2);
}

TEST(GroupActorTest, AVerifierFailureFailsTheGroup) {
  gate_fixture f(scripted({}), dcp_gate(0.5, 1.0));
  // A verifier that cannot judge (no compiler): the group fails with its message, nothing stored.
  auto failing =
      f.c.keep(f.c.system().spawn([](verifier_actor::pointer) -> verifier_actor::behavior_type {
        return {[](verify_atom, const verification_request&) {
          verification_result v;
          v.infrastructure_error = "no compiler for kind cpp";
          return v;
        }};
      }));
  f.services.verifier = failing;
  f.start(0, 2, 2);
  f.c.run();
  ASSERT_EQ(f.shared->failures.size(), 1u);
  EXPECT_NE(f.shared->failures[0].find("no compiler for kind cpp"), std::string::npos);
  EXPECT_NE(f.shared->failures[0].find("step 1 | train group 0"), std::string::npos);
  EXPECT_TRUE(f.shared->reports.empty());
  auto g = f.stored(0);
  EXPECT_FALSE(g.has_value());
}

// A generator that answers no turn whose request id ends with one of `failing` (the turn suffix
// "/rollout/turn"): finish_reason::error, as the pool answers a turn the client gave up on.
generation_actor failing_generator(coordinator& c, const instant_policy& policy,
                                   const std::vector<std::string>& failing) {
  return c.keep(c.system().spawn([policy, failing](
                                     generation_actor::pointer) -> generation_actor::behavior_type {
    return {[policy, failing](generate_atom, const generation_request& r) {
      for (const auto& suffix : failing) {
        if (r.request_id.size() >= suffix.size() &&
            r.request_id.compare(r.request_id.size() - suffix.size(), suffix.size(), suffix) == 0) {
          generation_result g;
          g.finish = finish_reason::error;
          g.error = "unavailable: gave up after 6 failed attempts; last: /tokenize: HTTP 503";
          return g;
        }
      }
      return testing::test_answer(policy, r, 0);
    }};
  }));
}

TEST(GroupActorTest, AFirstTurnWithNoAnswerFailsTheGroupAndIsNeverScored) {
  // Rollout 1 of group 0 gets no answer (the servers failed it): the group fails with the reason;
  // nothing is scored, stored or trained, so the other rollouts' advantages never see it.
  gate_fixture f(scripted({{{0, 0}, 1}}), dcp_gate(0.5, 1.0));
  f.services.generator = failing_generator(f.c, scripted({{{0, 0}, 1}}), {"/1/0"});
  f.start(0, 3, 2);
  f.c.run();
  ASSERT_EQ(f.shared->failures.size(), 1u);
  EXPECT_NE(f.shared->failures[0].find("generator: unavailable: gave up after 6 failed attempts"),
            std::string::npos)
      << f.shared->failures[0];
  EXPECT_TRUE(f.shared->reports.empty());
  EXPECT_TRUE(f.shared->learned.empty());
  EXPECT_FALSE(f.stored(0).has_value());
}

TEST(GroupActorTest, ADebugTurnWithNoAnswerFailsTheGroup) {
  // Rollouts 1 and 2 fail their first turn; the gate opens; rollout 2's debug turn gets no answer.
  gate_fixture f(scripted({{{0, 0}, 1}}), dcp_gate(0.5, 1.0));
  f.services.generator = failing_generator(f.c, scripted({{{0, 0}, 1}}), {"/2/1"});
  f.start(0, 3, 3);
  f.c.run();
  ASSERT_EQ(f.shared->failures.size(), 1u);
  EXPECT_NE(f.shared->failures[0].find("generator: unavailable"), std::string::npos);
  EXPECT_TRUE(f.shared->reports.empty());
  EXPECT_FALSE(f.stored(0).has_value());
}

// A verifier that passes every candidate, timed: `first` is the first turn's speedup, `later` every
// later turn's.
verifier_actor timed_verifier(coordinator& c, double first, double later) {
  return c.keep(
      c.system().spawn([first, later](verifier_actor::pointer) -> verifier_actor::behavior_type {
        return {[first, later](verify_atom, const verification_request& r) {
          verification_result v;
          v.verdict = verdict_category::pass;
          v.passed = true;
          v.speedup = turn_of_request(r.request_id) == 0 ? first : later;
          return v;
        }};
      }));
}

// A verifier that passes every candidate, timed: rollout 0 at 1.5x, the others at 0.8x.
verifier_actor split_speed_verifier(coordinator& c) {
  return c.keep(c.system().spawn([](verifier_actor::pointer) -> verifier_actor::behavior_type {
    return {[](verify_atom, const verification_request& r) {
      verification_result v;
      v.verdict = verdict_category::pass;
      v.passed = true;
      v.speedup = parse(r.request_id).rollout == 0 ? 1.5 : 0.8;
      return v;
    }};
  }));
}

TEST(GroupActorTest, OptimisationTurnsAskSlowPassesForAFasterVersionWithTheirSpeedup) {
  // Every first turn passes at 0.8x, below gate.optimise.speedup 1.2: each rollout gets an
  // optimisation turn whose input is the optimisation feedback; at 1.5x it beats the factor and
  // the rollout is done, though gate.optimise.max_turns would allow another.
  gate_config none;
  none.policy = gate_policy::none;
  gate_fixture f(scripted({}), none);
  f.services.verifier = timed_verifier(f.c, 0.8, 1.5);
  optimise_config optimise;
  optimise.speedup = 1.2;
  optimise.max_turns = 2;
  f.start(0, 2, 3, false, optimise);
  f.c.run();
  ASSERT_NE(f.report(0), nullptr);
  EXPECT_TRUE(f.shared->failures.empty());
  auto g = f.stored(0);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->gate, gate_decision::closed_no_debug);  // DCP: nothing failed
  EXPECT_EQ(turns_per_rollout(*g), (std::vector<int>{2, 2}));
  const auto feedback = optimise_feedback(0.8, 1.2);
  for (const auto& r : g->rollouts) {
    EXPECT_EQ(r.turns[1].input_tokens,
              (std::vector<token_id>{static_cast<token_id>(feedback.size())}));
    EXPECT_EQ(r.turns[1].speedup, 1.5);
    EXPECT_EQ(r.outcome.passed_at_turn, 1);
  }
  EXPECT_EQ(f.shared->count_events("gen run/0/train/0/0/2"), 0u);
  // The decision is stored with the group (issue 31), so that replay reports it as taken here.
  EXPECT_EQ(g->optimise, optimise_decision::open);
}

// The profiles a pool made after its verdicts (profile_actor): rollout 0's first turn has a
// diagnosis, every other id none; the ids asked for are counted.
profile_actor rollout_zero_profiles(coordinator& c,
                                    const std::shared_ptr<std::vector<std::string>>& asked) {
  return c.keep(c.system().spawn([asked](profile_actor::pointer) -> profile_actor::behavior_type {
    return {[asked](profile_atom, const std::string& id) {
      asked->push_back(id);
      return id == "run/0/train/0/0/0" ? std::string("\n\nProfile of `k`: memory-bound")
                                       : std::string();
    }};
  }));
}

TEST(GroupActorTest, AnOptimisationTurnReadsThePassesProfileAfterTheRequest) {
  gate_config none;
  none.policy = gate_policy::none;
  gate_fixture f(scripted({}), none);
  f.services.verifier = timed_verifier(f.c, 0.8, 1.5);
  auto asked = std::make_shared<std::vector<std::string>>();
  f.services.profiles = rollout_zero_profiles(f.c, asked);
  optimise_config optimise;
  optimise.speedup = 1.2;
  f.start(0, 2, 3, false, optimise);
  f.c.run();
  auto g = f.stored(0);
  ASSERT_TRUE(g);
  ASSERT_EQ(turns_per_rollout(*g), (std::vector<int>{2, 2}));
  // The scripted policy's input token is the length of what the turn read.
  const auto ask = optimise_feedback(0.8, 1.2);
  const auto with_profile = ask + "\n\nProfile of `k`: memory-bound";
  EXPECT_EQ(g->rollouts[0].turns[1].input_tokens,
            (std::vector<token_id>{static_cast<token_id>(with_profile.size())}));
  EXPECT_EQ(g->rollouts[1].turns[1].input_tokens,
            (std::vector<token_id>{static_cast<token_id>(ask.size())}));
  // Each turn after the first asked for the turn before it; the first turns asked for nothing.
  std::sort(asked->begin(), asked->end());
  EXPECT_EQ(*asked, (std::vector<std::string>{"run/0/train/0/0/0", "run/0/train/0/1/0"}));
}

// A pool whose profiles never come (queued behind others, or ncu still running): the asks are
// held, never answered.
struct held_profiles_state {
  std::vector<caf::typed_response_promise<std::string>> held;
  static inline const char* name = "test.held_profiles";
};
profile_actor held_profiles(coordinator& c) {
  return c.keep(c.system().spawn([](profile_actor::stateful_pointer<held_profiles_state> self)
                                     -> profile_actor::behavior_type {
    return {[self](profile_atom, const std::string&) -> caf::result<std::string> {
      auto promise = self->make_response_promise<std::string>();
      self->state.held.push_back(promise);
      return promise;
    }};
  }));
}

TEST(GroupActorTest, AProfileThatDoesNotComeInTimeLeavesTheTurnWithTheVerdictsFeedback) {
  gate_config none;
  none.policy = gate_policy::none;
  gate_fixture f(scripted({}), none);
  f.services.verifier = timed_verifier(f.c, 0.8, 1.5);
  f.services.profiles = held_profiles(f.c);
  f.services.profile_wait = std::chrono::milliseconds(50);
  optimise_config optimise;
  optimise.speedup = 1.2;
  f.start(0, 2, 3, false, optimise);
  f.c.run();
  // Both optimisation turns wait for their profiles: nothing is stored yet.
  EXPECT_FALSE(f.stored(0));
  ASSERT_GT(f.c.trigger_timeouts(), 0U);
  f.c.run();
  auto g = f.stored(0);
  ASSERT_TRUE(g);
  ASSERT_EQ(turns_per_rollout(*g), (std::vector<int>{2, 2}));
  const auto ask = optimise_feedback(0.8, 1.2);
  for (const auto& r : g->rollouts) {
    EXPECT_EQ(r.turns[1].input_tokens, (std::vector<token_id>{static_cast<token_id>(ask.size())}));
  }
}

TEST(GroupActorTest, AClosedOptimisationDecisionIsStoredWithItsReason) {
  // A first-turn pass at 1.5x beats gate.optimise.speedup 1.2: the group is not opened, and the
  // store keeps why (closed_fast); the other rollout's 0.8x does not matter.
  gate_config none;
  none.policy = gate_policy::none;
  gate_fixture f(scripted({}), none);
  f.services.verifier = split_speed_verifier(f.c);
  optimise_config optimise;
  optimise.speedup = 1.2;
  f.start(0, 2, 3, false, optimise);
  f.c.run();
  auto g = f.stored(0);
  ASSERT_TRUE(g);
  EXPECT_EQ(turns_per_rollout(*g), (std::vector<int>{1, 1}));
  EXPECT_EQ(g->optimise, optimise_decision::closed_fast);
}

TEST(GroupActorTest, WithoutOptimisationTimedSlowPassesAreDoneAtOnce) {
  gate_config none;
  none.policy = gate_policy::none;
  gate_fixture f(scripted({}), none);
  f.services.verifier = timed_verifier(f.c, 0.8, 1.5);
  f.start(0, 2, 3);
  f.c.run();
  auto g = f.stored(0);
  ASSERT_TRUE(g);
  EXPECT_EQ(turns_per_rollout(*g), (std::vector<int>{1, 1}));
  // gate.optimise off stores no decision: a run without it writes what it wrote before.
  EXPECT_FALSE(g->optimise.has_value());
}

// gate.optimise.train through the actor graph (issue 31): every candidate passes; the first turns
// at 0.8x (below gate.optimise.speedup 1.2, so the group opens), rollout 0's optimisation turn at
// 1.5x and rollout 1's at 0.9x.
verifier_actor opt_train_verifier(coordinator& c) {
  return c.keep(c.system().spawn([](verifier_actor::pointer) -> verifier_actor::behavior_type {
    return {[](verify_atom, const verification_request& r) {
      verification_result v;
      v.verdict = verdict_category::pass;
      v.passed = true;
      const auto id = parse(r.request_id);
      v.speedup = turn_of_request(r.request_id) == 0 ? 0.8 : (id.rollout == 0 ? 1.5 : 0.9);
      return v;
    }};
  }));
}

// The real scorer and the real record learner, with and without gate.optimise.train: trained on,
// the batch holds both turns of each rollout (3 + 3 sampled tokens), rollout 0 is paid for its
// 1.5x (positive advantage, its first turn discounted by gamma 0.5) and rollout 1 for its 0.9x
// (negative, undiscounted); off, each sequence is its first turn and the tied 0.8x passes get 0.
TEST(GroupActorTest, OptimisationTurnsReachTheRecordLearnersBatchOnlyWhenTrained) {
  for (const bool train : {false, true}) {
    SCOPED_TRACE(train ? "train" : "off");
    gate_config none;
    none.policy = gate_policy::none;
    gate_fixture f(scripted({}), none);
    f.services.verifier = opt_train_verifier(f.c);
    reward_config rank_speed;
    rank_speed.kind = reward_kind::rank_speed;
    f.services.scorer = f.c.keep(spawn_scorer(f.c.system(), rank_speed, advantage_config{}, train));
    learner_actor_config lc;
    lc.detached = false;
    lc.gamma = 0.5;
    lc.train_optimisation = train;
    const auto batches = f.dir.path() / "batches";
    f.services.learner = f.c.keep(spawn_learner(
        f.c.system(), std::shared_ptr<learner_backend>(make_record_learner(batches)), lc));
    optimise_config optimise;
    optimise.speedup = 1.2;
    optimise.train = train;
    f.start(0, 2, 2, false, optimise);
    f.c.run();
    auto g = f.stored(0);
    ASSERT_TRUE(g);
    ASSERT_EQ(turns_per_rollout(*g), (std::vector<int>{2, 2}));
    caf::anon_send(f.services.learner, train_atom_v, std::uint64_t{0});
    f.c.run();

    std::ifstream in(record_batch_path(batches, 0));
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) {
      lines.push_back(nlohmann::json::parse(line));
    }
    ASSERT_EQ(lines.size(), 2u);
    for (const auto& line : lines) {
      const auto mask = line.at("mask").get<std::vector<int>>();
      const auto adv = line.at("advantages").get<std::vector<float>>();
      const int rollout = line.at("rollout").get<int>();
      std::vector<float> sampled;
      for (std::size_t k = 0; k < mask.size(); ++k) {
        if (mask[k] == 1) {
          sampled.push_back(adv[k]);
        }
      }
      if (!train) {
        EXPECT_EQ(sampled, std::vector<float>(3, 0.0f)) << line.dump();
        continue;
      }
      ASSERT_EQ(sampled.size(), 6u) << line.dump();
      if (rollout == 0) {
        EXPECT_GT(sampled.back(), 0.5f);
        EXPECT_FLOAT_EQ(sampled.front(), 0.5f * sampled.back());
      } else {
        EXPECT_LT(sampled.back(), -0.5f);
        EXPECT_FLOAT_EQ(sampled.front(), sampled.back());
      }
    }
  }
}

}  // namespace
}  // namespace leap::actors
