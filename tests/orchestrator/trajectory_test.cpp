#include "orchestrator/trajectory.hpp"

#include "orchestrator/advantage.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace leap {
namespace {

turn_record make_turn(std::vector<token_id> in, std::vector<token_id> out, bool passed) {
  turn_record t;
  t.input_tokens = std::move(in);
  t.output_tokens = std::move(out);
  for (std::size_t i = 0; i < t.output_tokens.size(); ++i) {
    t.output_logprobs.push_back(-0.25F * static_cast<float>(i + 1));
  }
  t.passed = passed;
  t.verdict = passed ? verdict_category::pass : verdict_category::compile;
  return t;
}

// A group that exercises every field with a value other than its default.
group_record rich_group() {
  group_record g;
  g.run_id = "run-7";
  g.step = 0x0102030405060708ULL;
  g.split = split_kind::validation;
  g.group_index = 513;
  g.task_id = "kernelbench/level1/19_relu";
  g.max_turns = 3;
  g.gate = gate_decision::open;
  g.n_fail = 5;
  g.thresholds = {4, 8};
  g.probe = true;
  g.started_unix_ms = 1'700'000'000'123;
  g.gated_unix_ms = 1'700'000'004'000;
  g.finished_unix_ms = -1;  // any int64 round-trips
  for (std::uint32_t i = 0; i < 3; ++i) {
    rollout_record r;
    r.index = 2 - i;
    r.turns.push_back(make_turn({1, 2, 3}, {100, 200 + static_cast<token_id>(i)}, false));
    auto& t0 = r.turns.back();
    t0.text = "```cuda\n__global__ void k() {}\n```";
    t0.code_hash = "sha256:abc" + std::to_string(i);
    t0.feedback = std::string("error: identifier \"x\" is undefined\n\0binary", 45);
    t0.timings = {1234.5, 800.25, 0.0, 12.0, 3.5, 0.125};
    t0.weight_version = 41;
    t0.finish = finish_reason::length;
    t0.endpoint = "http://127.0.0.1:8000";
    if (i != 1) {
      r.turns.push_back(make_turn({7, -1, std::numeric_limits<token_id>::max()}, {5}, i == 0));
      r.turns.back().weight_version = std::numeric_limits<std::uint64_t>::max();
    }
    r.outcome = outcome_from_turns(r);
    r.rank = i == 0 ? 2 : 0;
    r.reward = i == 0 ? 1.0 : -0.5;
    r.advantage = i == 0 ? 1.4142135623730951 : -0.7071067811865476;
    r.truncated = true;
    g.rollouts.push_back(std::move(r));
  }
  return g;
}

step_record rich_step() {
  step_record s;
  s.run_id = "run-7";
  s.step = 12;
  s.weight_version = 13;
  s.started_unix_ms = 1'700'000'000'000;
  s.finished_unix_ms = 1'700'000'060'000;
  s.timings = {60000.0, 30000.5, 10000.25, 5000.0, 12000.0, 2999.25};
  s.counts = {32, 20, 3, 256, 100, 400, 410, 1'000'000'000'000ULL};
  s.metrics = {{"accuracy@1", 0.25}, {"accuracy@3", 0.5}, {"loss", -1e-300}};
  return s;
}

// ---- flatten -----------------------------------------------------------------------------------

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

// ---- names -------------------------------------------------------------------------------------

TEST(TrajectoryNames, EveryEnumValueRoundTrips) {
  for (const auto e : {split_kind::train, split_kind::validation}) {
    EXPECT_EQ(parse_split_kind(to_string(e)), e);
  }
  for (int v = 0; v <= static_cast<int>(run_status::interrupted); ++v) {
    const auto e = static_cast<run_status>(v);
    EXPECT_EQ(parse_run_status(to_string(e)), e);
  }
}

// ---- binary encoding ---------------------------------------------------------------------------

TEST(TrajectoryEncoding, GroupRoundTrips) {
  const auto g = rich_group();
  const auto bytes = encode(g);
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[0]), trajectory_format_version);
  auto back = decode_group(bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, g);
  EXPECT_EQ(encode(*back), bytes);
}

TEST(TrajectoryEncoding, EmptyRecordsRoundTrip) {
  EXPECT_EQ(*decode_group(encode(group_record{})), group_record{});
  EXPECT_EQ(*decode_step(encode(step_record{})), step_record{});
  EXPECT_EQ(*decode_run(encode(run_record{})), run_record{});
}

TEST(TrajectoryEncoding, StepAndRunRoundTrip) {
  const auto s = rich_step();
  auto step = decode_step(encode(s));
  ASSERT_TRUE(step.ok()) << step.err().message;
  EXPECT_EQ(*step, s);

  run_record r{"run-7", "gate:\n  policy: dcp\n", 1'700'000'000'000, run_status::interrupted};
  auto run = decode_run(encode(r));
  ASSERT_TRUE(run.ok()) << run.err().message;
  EXPECT_EQ(*run, r);
}

TEST(TrajectoryEncoding, DecodingWithoutTokensKeepsEverythingElse) {
  const auto g = rich_group();
  auto light = decode_group(encode(g), {.tokens = false});
  ASSERT_TRUE(light.ok()) << light.err().message;
  auto expected = g;
  for (auto& r : expected.rollouts) {
    for (auto& t : r.turns) {
      t.input_tokens.clear();
      t.output_tokens.clear();
      t.output_logprobs.clear();
    }
  }
  EXPECT_EQ(*light, expected);
}

// Version 1 bytes, written once and frozen here: every later build must still read them the same.
// A change of the encoding that breaks this test needs a new format version, not a new fixture.
group_record v1_group() {
  group_record g;
  g.run_id = "r1";
  g.step = 3;
  g.split = split_kind::train;
  g.group_index = 2;
  g.task_id = "t";
  g.max_turns = 2;
  g.gate = gate_decision::open;
  g.n_fail = 1;
  g.thresholds = {1, 2};
  g.started_unix_ms = 10;
  g.gated_unix_ms = 20;
  g.finished_unix_ms = 30;
  rollout_record r;
  r.index = 1;
  turn_record t;
  t.input_tokens = {7};
  t.output_tokens = {8, 9};
  t.output_logprobs = {-0.5F, -1.0F};
  t.text = "x";
  t.code_hash = "h";
  t.verdict = verdict_category::pass;
  t.passed = true;
  t.timings.generation_ms = 1.5;
  t.weight_version = 4;
  t.finish = finish_reason::stop;
  t.endpoint = "e";
  r.turns.push_back(t);
  r.outcome = {1, 1};
  r.rank = 2;
  r.reward = 1.0;
  r.advantage = 0.5;
  g.rollouts.push_back(r);
  return g;
}

constexpr std::string_view v1_group_hex =
    "0101020000007231030000000000000000020000000100000074020000000301000000010000000200000000"
    "0a0000000000000014000000000000001e000000000000000100000001000000010000000100000002000000"
    "000000000000f03f000000000000e03f00010000000100000007000000020000000800000009000000020000"
    "00000000bf000080bf0100000078010100000068000100000000000000000000f83f00000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000400000000000000000100000065";

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xF]);
  }
  return out;
}

TEST(TrajectoryEncoding, VersionOneGroupBytesAreStillRead) {
  auto g = decode_group(from_hex(v1_group_hex));
  ASSERT_TRUE(g.ok()) << g.err().message;
  EXPECT_EQ(*g, v1_group());
}

TEST(TrajectoryEncoding, VersionTwoAddsTheGroupsWeightVersionAfterTheVersionOneFields) {
  // Version 2 writes version 1's fields unchanged, then the measured weight version.
  auto v2 = v1_group();
  auto bytes = encode(v2);
  ASSERT_EQ(static_cast<std::uint8_t>(bytes[0]), 2);
  const auto v1 = from_hex(v1_group_hex);
  EXPECT_EQ(to_hex(bytes.substr(1, v1.size() - 1)), to_hex(v1.substr(1)));
  EXPECT_EQ(bytes.size(), v1.size() + 9);
  v2.split = split_kind::validation;
  v2.weight_version = 7;
  auto g = decode_group(encode(v2));
  ASSERT_TRUE(g.ok()) << g.err().message;
  EXPECT_EQ(g->weight_version, std::optional<std::uint64_t>{7});
  EXPECT_EQ(*g, v2);
}

TEST(TrajectoryEncoding, TurnRecordsRoundTripAndRefuseOtherKinds) {
  const auto group = rich_group();
  const auto& turn = group.rollouts.at(0).turns.at(0);
  auto back = decode_turn(encode(turn));
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, turn);
  EXPECT_NE(decode_turn(encode(group)).err().message.find("record kind 1 where kind 4"),
            std::string::npos);
  const auto bytes = encode(turn);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    ASSERT_FALSE(decode_turn(std::string_view(bytes).substr(0, n)).ok()) << n;
  }
}

TEST(TrajectoryEncoding, EveryTruncationIsAnErrorNeverACrash) {
  const auto bytes = encode(rich_group());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto g = decode_group(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(g.ok()) << "prefix of " << n << " bytes decoded";
    ASSERT_NE(g.err().message.find("group record"), std::string::npos) << g.err().message;
  }
  const auto step = encode(rich_step());
  for (std::size_t n = 0; n < step.size(); ++n) {
    ASSERT_FALSE(decode_step(std::string_view(step).substr(0, n)).ok()) << n;
  }
}

TEST(TrajectoryEncoding, CorruptionCases) {
  const auto good = encode(v1_group());
  struct test_case {
    std::string name;
    std::string bytes;
    std::string error;
  };
  auto patched = [&](std::size_t offset, std::string_view with) {
    auto b = good;
    b.replace(offset, with.size(), with);
    return b;
  };
  // Byte offsets in v1_group_hex: run_id 2, step 8, split 16, gate 30, probe 43, rollouts 68.
  const std::vector<test_case> cases = {
      {"trailing byte", good + "x", "1 trailing bytes"},
      {"newer version", patched(0, "\x03"), "format version 3 is not readable"},
      {"version zero", patched(0, std::string(1, '\0')), "format version 0"},
      {"step bytes as a group", encode(rich_step()), "record kind 2 where kind 1"},
      {"unknown split", patched(16, "\x07"), "'split'): unknown value 7"},
      {"unknown gate", patched(30, "\x04"), "'gate'): unknown value 4"},
      {"bool byte 2", patched(43, "\x02"), "'probe'): bool byte 2"},
      {"huge rollout count", patched(68, "\xff\xff\xff\x7f"), "'rollouts'): count 2147483647"},
      {"huge string", patched(2, "\xff\xff\xff\x00"), "'run_id'): truncated"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = decode_group(c.bytes);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.err().message.find(c.error), std::string::npos) << g.err().message;
  }
  EXPECT_NE(decode_run(good).err().message.find("record kind 1 where kind 3"), std::string::npos);
}

}  // namespace
}  // namespace leap
