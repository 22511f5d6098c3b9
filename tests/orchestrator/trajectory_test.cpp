#include "orchestrator/trajectory.hpp"

#include "orchestrator/advantage.hpp"
#include "tests/orchestrator/records_fixture.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_turn;
using test::rich_group;
using test::rich_step;

TEST(TrajectoryFlatten, TurnsBecomeOneSequenceWithMaskTurnIndexAndLogprobs) {
  rollout_record r;
  r.turns.push_back(make_turn({10, 11}, {20, 21, 22}, false));
  r.turns.push_back(make_turn({30}, {40}, true));
  auto flat = flatten(r);
  ASSERT_TRUE(flat.ok()) << flat.err().message;
  EXPECT_EQ(flat->tokens, (std::vector<token_id>{10, 11, 20, 21, 22, 30, 40}));
  EXPECT_EQ(flat->mask, (std::vector<std::uint8_t>{0, 0, 1, 1, 1, 0, 1}));
  EXPECT_EQ(flat->token_turn,
            (std::vector<int>{not_generated, not_generated, 0, 0, 0, not_generated, 1}));
  EXPECT_EQ(flat->behaviour_logprobs,
            (std::vector<float>{0.0F, 0.0F, -0.25F, -0.5F, -0.75F, 0.0F, -0.25F}));
}

TEST(TrajectoryFlatten, Cases) {
  struct test_case {
    std::string name;
    std::vector<turn_record> turns;
    std::vector<int> token_turn;  // expected; ignored when error is set
    std::string error;
  };
  turn_record bad = make_turn({1}, {2, 3}, false);
  bad.output_logprobs.pop_back();
  const std::vector<test_case> cases = {
      {"no turns", {}, {}, ""},
      {"feedback-free turn", {make_turn({}, {5, 6}, true)}, {0, 0}, ""},
      {"empty output turn",
       {make_turn({1}, {}, false), make_turn({2}, {3}, true)},
       {not_generated, not_generated, 1},
       ""},
      {"log-prob count mismatch",
       {make_turn({1}, {2}, false), bad},
       {},
       "rollout 4 turn 1: 2 output tokens but 1 log-probs"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    rollout_record r;
    r.index = 4;
    r.turns = c.turns;
    auto flat = flatten(r);
    if (!c.error.empty()) {
      ASSERT_FALSE(flat.ok());
      EXPECT_NE(flat.err().message.find(c.error), std::string::npos) << flat.err().message;
      continue;
    }
    ASSERT_TRUE(flat.ok()) << flat.err().message;
    EXPECT_EQ(flat->token_turn, c.token_turn);
    EXPECT_EQ(flat->tokens.size(), c.token_turn.size());
    EXPECT_EQ(flat->mask.size(), c.token_turn.size());
    EXPECT_EQ(flat->behaviour_logprobs.size(), c.token_turn.size());
  }
}

// The flattened token_turn is exactly what the per-turn advantage assignment takes: tokens of the
// earlier turn are discounted once, the last turn's tokens get A, prompt and feedback get 0.
TEST(TrajectoryFlatten, TokenTurnFeedsTokenAdvantages) {
  rollout_record r;
  r.turns.push_back(make_turn({10, 11}, {20, 21}, false));
  r.turns.push_back(make_turn({30}, {40}, true));
  auto flat = flatten(r);
  ASSERT_TRUE(flat.ok());
  const auto adv = token_advantages(flat->token_turn, 2.0, 0.5);
  EXPECT_EQ(adv, (std::vector<float>{0.0F, 0.0F, 1.0F, 1.0F, 0.0F, 2.0F}));
}

// ---- outcomes and summaries --------------------------------------------------------------------

TEST(TrajectoryOutcomeFromTurns, Cases) {
  struct test_case {
    std::vector<bool> passed;
    int passed_at_turn;
    int generated_turns;
  };
  const std::vector<test_case> cases = {
      {{}, 0, 1},
      {{true}, 1, 1},
      {{false}, 0, 1},
      {{false, false, true}, 3, 3},
      {{false, true, true}, 2, 3},
  };
  for (const auto& c : cases) {
    rollout_record r;
    for (const bool p : c.passed) {
      r.turns.push_back(make_turn({}, {1}, p));
    }
    const auto o = outcome_from_turns(r);
    EXPECT_EQ(o.passed_at_turn, c.passed_at_turn) << c.passed.size() << " turns";
    EXPECT_EQ(o.generated_turns, c.generated_turns) << c.passed.size() << " turns";
  }
}

TEST(TrajectorySummarize, TakesGateOutcomesAndAdvantagesInStoredOrder) {
  const auto g = rich_group();
  const auto s = summarize(g);
  EXPECT_EQ(s.gate, gate_decision::open);
  ASSERT_EQ(s.outcomes.size(), 3U);
  ASSERT_EQ(s.advantages.size(), 3U);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.outcomes[i].passed_at_turn, g.rollouts[i].outcome.passed_at_turn);
    EXPECT_EQ(s.outcomes[i].generated_turns, g.rollouts[i].outcome.generated_turns);
    EXPECT_EQ(s.advantages[i], g.rollouts[i].advantage);
  }
}

TEST(TrajectorySummarize, ProbeSummaryIsOpenWithOutcomesFromTurns) {
  group_record g;
  g.gate = gate_decision::closed_hopeless;
  g.probe = true;
  rollout_record r;
  r.turns = {make_turn({}, {1}, false), make_turn({}, {2}, true)};
  r.outcome = {0, 1};  // what training used: the first turn only
  g.rollouts.push_back(r);
  EXPECT_EQ(summarize(g).gate, gate_decision::closed_hopeless);
  EXPECT_EQ(summarize(g).outcomes[0].passed_at_turn, 0);
  const auto p = probe_summary(g);
  EXPECT_EQ(p.gate, gate_decision::open);
  EXPECT_EQ(p.outcomes[0].passed_at_turn, 2);
  EXPECT_EQ(p.outcomes[0].generated_turns, 2);
}

// ---- validation --------------------------------------------------------------------------------

TEST(TrajectoryValidate, GroupCases) {
  struct test_case {
    std::string name;
    void (*mutate)(group_record&);
    std::string error;  // empty: valid
  };
  const std::vector<test_case> cases = {
      {"valid", [](group_record&) {}, ""},
      {"empty run id", [](group_record& g) { g.run_id.clear(); }, "run id is empty"},
      {"NUL in run id", [](group_record& g) { g.run_id = std::string("a\0b", 3); },
       "run id contains a NUL byte"},
      {"empty task id", [](group_record& g) { g.task_id.clear(); }, "task id is empty"},
      {"duplicate rollout", [](group_record& g) { g.rollouts[1].index = g.rollouts[0].index; },
       "rollout index 2 appears twice"},
      {"log-prob mismatch", [](group_record& g) { g.rollouts[0].turns[1].output_logprobs.clear(); },
       "rollout 2 turn 1: 1 output tokens but 0 log-probs"},
      {"passed without pass verdict", [](group_record& g) { g.rollouts[0].turns[0].passed = true; },
       "passed is true but the verdict is compile"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = rich_group();
    c.mutate(g);
    const auto s = validate(g);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << s.err().message;
    } else {
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.err().message.find(c.error), std::string::npos) << s.err().message;
    }
  }
}

TEST(TrajectoryValidate, StepAndRunCases) {
  auto step = rich_step();
  EXPECT_TRUE(validate(step).ok());
  step.metrics[""] = 1.0;
  ASSERT_FALSE(validate(step).ok());
  EXPECT_NE(validate(step).err().message.find("metric name is empty"), std::string::npos);
  run_record run;
  EXPECT_NE(validate(run).err().message.find("run id is empty"), std::string::npos);
  run.id = "r";
  EXPECT_TRUE(validate(run).ok());
}

}  // namespace
}  // namespace leap
