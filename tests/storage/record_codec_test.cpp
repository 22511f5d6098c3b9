#include "storage/record_codec.hpp"

#include "tests/orchestrator/records_fixture.hpp"
#include "tests/storage/hex_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace leap {
namespace {

using test::make_turn;
using test::rich_group;
using test::rich_step;

// ---- binary encoding ---------------------------------------------------------------------------

// The format version is derived, not kept by hand: the newest `since` among the stored fields,
// nested records (a list's element, an optional's value) included and unstored fields left out.
struct since_probe_leaf {
  int a = 0;
  int b = 0;
};
template <maybe_const<since_probe_leaf> X>
constexpr auto fields(X& x) {
  return std::tuple{field("a", x.a), field("b", x.b, opt().since(9))};
}
struct since_probe_root {
  int a = 0;
  std::vector<since_probe_leaf> leaves;
  std::optional<since_probe_leaf> maybe;
  std::string text;
  int beside = 0;
};
template <maybe_const<since_probe_root> X>
constexpr auto fields(X& x) {
  return std::tuple{field("a", x.a, opt().since(3)), field("leaves", x.leaves),
                    field("maybe", x.maybe), field("text", x.text),
                    field("beside", x.beside, opt().since(12).beside_record())};
}
struct since_probe_optional {
  std::optional<since_probe_leaf> maybe;
};
template <maybe_const<since_probe_optional> X>
constexpr auto fields(X& x) {
  return std::tuple{field("maybe", x.maybe)};
}

TEST(RecordCodec, FormatVersionIsTheNewestStoredSince) {
  EXPECT_EQ(newest_since<since_probe_leaf>(), 9);
  EXPECT_EQ(newest_since<since_probe_root>(), 9);
  EXPECT_EQ(newest_since<since_probe_optional>(), 9);
  EXPECT_EQ(newest_since<std::vector<since_probe_leaf>>(), 9);
  EXPECT_EQ(newest_since<std::string>(), 1);
  // turn_profile_record::source (since 7) is the newest field today; every record's newest is at
  // most the version, and the records' own walk finds the turns' fields inside a group's rollouts.
  EXPECT_EQ(trajectory_format_version, 7);
  EXPECT_EQ(newest_since<group_record>(), 6);
  EXPECT_EQ(newest_since<turn_profile_record>(), 7);
}

TEST(RecordCodec, GroupRoundTrips) {
  const auto g = rich_group();
  const auto bytes = encode(g);
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[0]), trajectory_format_version);
  auto back = decode_group(bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, g);
  EXPECT_EQ(encode(*back), bytes);
}

TEST(RecordCodec, EmptyRecordsRoundTrip) {
  EXPECT_EQ(*decode_group(encode(group_record{})), group_record{});
  EXPECT_EQ(*decode_step(encode(step_record{})), step_record{});
  EXPECT_EQ(*decode_run(encode(run_record{})), run_record{});
}

TEST(RecordCodec, StepAndRunRoundTrip) {
  const auto s = rich_step();
  auto step = decode_step(encode(s));
  ASSERT_TRUE(step.ok()) << step.err().message;
  EXPECT_EQ(*step, s);

  run_record r{"run-7", "gate:\n  policy: dcp\n", 1'700'000'000'000, run_status::interrupted};
  auto run = decode_run(encode(r));
  ASSERT_TRUE(run.ok()) << run.err().message;
  EXPECT_EQ(*run, r);
}

TEST(RecordCodec, DecodingWithoutTokensKeepsEverythingElse) {
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

using leap::testing::from_hex;
using leap::testing::to_hex;

// Each turn with the one segment a record older than format version 6 decodes as.
group_record with_one_segment(group_record g) {
  for (auto& r : g.rollouts) {
    for (auto& t : r.turns) {
      t.weight_segments = {{0, t.weight_version}};
    }
  }
  return g;
}

// Version 5's bytes of a group whose every turn has one segment: version 6's without the segments
// (a count and one segment per turn, at the end). Version 7 changed no group field (it added a
// profile's source), so the current bytes are version 6's but for the version byte.
std::string as_version_five(const std::string& v6, std::size_t turns) {
  EXPECT_EQ(static_cast<std::uint8_t>(v6[0]), trajectory_format_version);
  auto bytes = v6.substr(0, v6.size() - turns * (4 + 12));
  bytes[0] = 5;
  return bytes;
}

TEST(RecordCodec, VersionOneGroupBytesAreStillRead) {
  auto g = decode_group(from_hex(v1_group_hex));
  ASSERT_TRUE(g.ok()) << g.err().message;
  EXPECT_EQ(*g, with_one_segment(v1_group()));
}

TEST(RecordCodec, VersionTwoAddsTheGroupsWeightVersionAfterTheVersionOneFields) {
  // Version 2 writes version 1's fields unchanged, then the measured weight version (versions 3 to
  // 5 then four numbers per turn: the speedups and their noises against each baseline).
  auto v2 = v1_group();
  auto bytes = encode(v2);
  ASSERT_EQ(static_cast<std::uint8_t>(bytes[0]), trajectory_format_version);
  const auto v1 = from_hex(v1_group_hex);
  EXPECT_EQ(to_hex(bytes.substr(1, v1.size() - 1)), to_hex(v1.substr(1)));
  EXPECT_EQ(bytes.size(),
            v1.size() + 9 + std::size_t{4} * 8 + 4);  // version 6: no segments, a count of 0
  v2.split = split_kind::validation;
  v2.weight_version = 7;
  auto g = decode_group(encode(v2));
  ASSERT_TRUE(g.ok()) << g.err().message;
  EXPECT_EQ(g->weight_version, std::optional<std::uint64_t>{7});
  EXPECT_EQ(*g, v2);
}

// Version 3 appends each turn's speedup (rollout by rollout, turn by turn), version 4 then each
// turn's speedup noise; version 3 bytes (version 4's without the noise) read back with every noise
// -1 (not stated), version 2 bytes with every speedup 0 too.
TEST(RecordCodec, VersionsThreeAndFourAddEachTurnsSpeedupAndItsNoise) {
  auto g = with_one_segment(v1_group());
  g.rollouts[0].turns[0].speedup = 2.5;
  g.rollouts[0].turns[0].speedup_noise = 0.125;
  g.rollouts.push_back(g.rollouts[0]);
  g.rollouts[1].index = 2;
  g.rollouts[1].turns.push_back(g.rollouts[1].turns[0]);
  g.rollouts[1].turns[1].speedup = 0.75;
  g.rollouts[1].turns[1].speedup_noise = -1.0;
  g.weight_version = 9;
  constexpr std::size_t per_turn = 3 * sizeof(double);  // three turns
  // Version 4's bytes: version 5's without the compiled baseline's speedups and noises.
  const auto v5_bytes = as_version_five(encode(g), 3);
  auto bytes = v5_bytes.substr(0, v5_bytes.size() - 2 * per_turn);
  bytes[0] = 4;
  auto back = decode_group(bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(back->rollouts[0].turns[0].speedup, 2.5);
  EXPECT_EQ(back->rollouts[0].turns[0].speedup_noise, 0.125);
  EXPECT_EQ(back->rollouts[1].turns[1].speedup, 0.75);
  EXPECT_EQ(*back, g);

  auto v3_bytes = bytes.substr(0, bytes.size() - per_turn);
  v3_bytes[0] = 3;
  auto v3 = decode_group(v3_bytes);
  ASSERT_TRUE(v3.ok()) << v3.err().message;
  auto expected = g;
  for (auto& r : expected.rollouts) {
    for (auto& t : r.turns) {
      t.speedup_noise = -1.0;
    }
  }
  EXPECT_EQ(*v3, expected);

  auto v2_bytes = bytes.substr(0, bytes.size() - 2 * per_turn);
  v2_bytes[0] = 2;
  auto old = decode_group(v2_bytes);
  ASSERT_TRUE(old.ok()) << old.err().message;
  for (auto& r : expected.rollouts) {
    for (auto& t : r.turns) {
      t.speedup = 0.0;
    }
  }
  EXPECT_EQ(*old, expected);
  // A version 4 record without its noise is truncated, not silently read as version 3.
  EXPECT_FALSE(decode_group(bytes.substr(0, bytes.size() - per_turn)).ok());

  // A turn record: the speedup and its noise after the last field; older versions without them.
  const auto v5_turn = as_version_five(encode(g.rollouts[0].turns[0]), 1);
  auto turn_bytes = v5_turn.substr(0, v5_turn.size() - 16);
  turn_bytes[0] = 4;
  EXPECT_EQ(decode_turn(turn_bytes)->speedup, 2.5);
  EXPECT_EQ(decode_turn(turn_bytes)->speedup_noise, 0.125);
  auto v3_turn = turn_bytes.substr(0, turn_bytes.size() - 8);
  v3_turn[0] = 3;
  EXPECT_EQ(decode_turn(v3_turn)->speedup_noise, -1.0);
  EXPECT_EQ(decode_turn(v3_turn)->speedup, 2.5);
  auto v2_turn = turn_bytes.substr(0, turn_bytes.size() - 16);
  v2_turn[0] = 2;
  auto old_turn = decode_turn(v2_turn);
  ASSERT_TRUE(old_turn.ok()) << old_turn.err().message;
  EXPECT_EQ(old_turn->speedup, 0.0);
  EXPECT_EQ(old_turn->text, g.rollouts[0].turns[0].text);
}

// Version 5 appends each turn's speedup over the reference under torch.compile, then each noise;
// version 4 bytes read back with both not measured (0 and -1).
TEST(RecordCodec, VersionFiveAddsEachTurnsSpeedupOverTheCompiledReference) {
  auto g = with_one_segment(v1_group());
  g.rollouts[0].turns[0].speedup = 2.5;
  g.rollouts[0].turns[0].compiled_speedup = 1.25;
  g.rollouts[0].turns[0].compiled_speedup_noise = 0.0625;
  g.rollouts.push_back(g.rollouts[0]);
  g.rollouts[1].index = 2;
  g.rollouts[1].turns[0].compiled_speedup = 0.5;
  const auto bytes = as_version_five(encode(g), 2);
  auto back = decode_group(bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, g);
  EXPECT_EQ(back->rollouts[1].turns[0].compiled_speedup, 0.5);
  constexpr std::size_t per_turn = 2 * sizeof(double);  // two turns
  auto v4_bytes = bytes.substr(0, bytes.size() - 2 * per_turn);
  v4_bytes[0] = 4;
  auto v4 = decode_group(v4_bytes);
  ASSERT_TRUE(v4.ok()) << v4.err().message;
  for (const auto& r : v4->rollouts) {
    EXPECT_EQ(r.turns[0].compiled_speedup, 0.0);
    EXPECT_EQ(r.turns[0].compiled_speedup_noise, -1.0);
    EXPECT_EQ(r.turns[0].speedup, 2.5);
  }
  // A version 5 record without its compiled noises is truncated, not read as version 4.
  EXPECT_FALSE(decode_group(bytes.substr(0, bytes.size() - per_turn)).ok());

  const auto turn = decode_turn(encode(g.rollouts[0].turns[0]));
  ASSERT_TRUE(turn.ok()) << turn.err().message;
  EXPECT_EQ(*turn, g.rollouts[0].turns[0]);
}

// Version 6 appends each turn's weight segments (rollout by rollout, turn by turn; a count, then
// first and version of each); every older version reads one segment {0, weight_version}.
TEST(RecordCodec, VersionSixAddsEachTurnsWeightSegments) {
  auto g = v1_group();
  g.rollouts[0].turns[0].output_tokens = {8, 9, 10, 11, 12};
  g.rollouts[0].turns[0].output_logprobs = {-0.5F, -1.0F, -0.25F, -0.125F, -2.0F};
  g.rollouts[0].turns[0].weight_segments = {{0, 4}, {3, 5}};
  g.rollouts.push_back(g.rollouts[0]);
  g.rollouts[1].index = 2;
  g.rollouts[1].turns[0].weight_segments.clear();  // built without segments: stays so
  const auto bytes = encode(g);
  ASSERT_EQ(static_cast<std::uint8_t>(bytes[0]), trajectory_format_version);
  auto back = decode_group(bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, g);
  EXPECT_EQ(back->rollouts[0].turns[0].weight_segments,
            (std::vector<turn_weight_segment>{{0, 4}, {3, 5}}));
  EXPECT_TRUE(back->rollouts[1].turns[0].weight_segments.empty());
  // The tail: rollout 0's turn (count 2, two segments), then rollout 1's (count 0).
  EXPECT_EQ(to_hex(bytes.substr(bytes.size() - (4 + 2 * 12) - 4)),
            "02000000"
            "00000000"
            "0400000000000000"
            "03000000"
            "0500000000000000"
            "00000000");
  // Without its segments the record is truncated, not read as version 5.
  EXPECT_FALSE(decode_group(bytes.substr(0, bytes.size() - 4)).ok());

  auto v5 = bytes.substr(0, bytes.size() - (4 + 2 * 12) - 4);
  v5[0] = 5;
  auto old = decode_group(v5);
  ASSERT_TRUE(old.ok()) << old.err().message;
  for (const auto& r : old->rollouts) {
    EXPECT_EQ(r.turns[0].weight_segments, (std::vector<turn_weight_segment>{{0, 4}}));
  }

  const auto& turn = g.rollouts[0].turns[0];
  auto turn_back = decode_turn(encode(turn));
  ASSERT_TRUE(turn_back.ok()) << turn_back.err().message;
  EXPECT_EQ(*turn_back, turn);
  auto v5_turn = encode(turn);
  v5_turn = v5_turn.substr(0, v5_turn.size() - (4 + 2 * 12));
  v5_turn[0] = 5;
  auto old_turn = decode_turn(v5_turn);
  ASSERT_TRUE(old_turn.ok()) << old_turn.err().message;
  EXPECT_EQ(old_turn->weight_segments, (std::vector<turn_weight_segment>{{0, 4}}));
}

TEST(RecordCodec, TurnRecordsRoundTripAndRefuseOtherKinds) {
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

TEST(RecordCodec, EveryTruncationIsAnErrorNeverACrash) {
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

TEST(RecordCodec, CorruptionCases) {
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
      {"newer version", patched(0, "\x08"), "format version 8 is not readable"},
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
