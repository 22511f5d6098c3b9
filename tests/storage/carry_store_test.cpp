// Partial rollouts' carry decision in the store (issue 33): stored in the step's own write (both or
// neither), read back after closing and reopening, apart from other runs and from the other
// records of the default family, and absent (not an error) in stores written before it existed.
#include "storage/keys.hpp"
#include "storage/record_codec.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>

#include <string>

namespace leap {
namespace {

using test::open_ok;
using test::scratch_dir;

partial_carry_record make_carry(std::uint64_t step) {
  partial_carry_record c;
  c.step = step;
  c.groups = {{step, 0, 5, "python/two_sum", step, false},
              {step > 0 ? step - 1 : 0, 7, 1ULL << 40, "cpp/axpby", step + 3, true}};
  return c;
}

step_record make_step(const std::string& run, std::uint64_t step) {
  step_record s;
  s.run_id = run;
  s.step = step;
  s.weight_version = step + 1;
  s.metrics = {{"partial.carried", 2.0}, {"acc_at_1", 0.5}};
  return s;
}

TEST(CarryStore, StoredWithItsStepSurvivesCloseAndReopen) {
  scratch_dir dir;
  {
    auto store = open_ok(dir / "db");
    ASSERT_TRUE(store);
    for (std::uint64_t step : {2, 0, 1}) {
      auto s = store->put_step(make_step("run-a", step), make_carry(step));
      ASSERT_TRUE(s.ok()) << s.err().message;
    }
    ASSERT_TRUE(store->put_step(make_step("run-ab", 9), make_carry(9)).ok());
    // A step that carried nothing stores an empty decision: it is found, with no groups.
    ASSERT_TRUE(store->put_step(make_step("run-a", 3), partial_carry_record{3, {}}).ok());
    ASSERT_TRUE(store->close().ok());
  }
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  auto all = store->carry_steps("run-a");
  ASSERT_TRUE(all.ok()) << all.err().message;
  ASSERT_EQ(all->size(), 4U);  // run-ab's is not run-a's
  for (std::uint64_t step = 0; step < 3; ++step) {
    EXPECT_EQ((*all)[step], make_carry(step));
  }
  EXPECT_TRUE((*all)[3].groups.empty());
  auto one = store->get_carry("run-a", 1);
  ASSERT_TRUE(one.ok()) << one.err().message;
  ASSERT_TRUE(one->has_value());
  EXPECT_EQ(**one, make_carry(1));
  auto step = store->get_step("run-a", 1);
  ASSERT_TRUE(step.ok());
  ASSERT_TRUE(step->has_value());
  EXPECT_EQ((*step)->metrics.at("partial.carried"), 2.0);
  auto missing = store->get_carry("run-a", 5);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  // The in-progress turns and the retry buffers share the default family: no scan sees another's.
  auto turns = store->partial_turns("run-a");
  ASSERT_TRUE(turns.ok()) << turns.err().message;
  EXPECT_TRUE(turns->empty());
  auto retries = store->retry_steps("run-a");
  ASSERT_TRUE(retries.ok()) << retries.err().message;
  EXPECT_TRUE(retries->empty());
  // A rewritten step replaces its decision.
  auto changed = make_carry(1);
  changed.groups.pop_back();
  ASSERT_TRUE(store->put_step(make_step("run-a", 1), changed).ok());
  EXPECT_EQ(**store->get_carry("run-a", 1), changed);
}

// The step and its decision are one write: a decision that cannot be stored keeps the step out,
// so a step is never stored without the decision that goes with it.
TEST(CarryStore, AStepIsStoredWithItsDecisionOrNotAtAll) {
  scratch_dir dir;
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  auto wrong = store->put_step(make_step("run", 3), make_carry(4));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.err().message.find("carry decision of step 4"), std::string::npos)
      << wrong.err().message;
  EXPECT_FALSE(store->get_step("run", 3)->has_value());
  EXPECT_FALSE(store->get_carry("run", 4)->has_value());

  // In a batch: the step's put succeeds, the decision's fails (no run id), the commit then holds
  // only what was put; the store actor puts both in one call and answers the call's failure.
  auto batch = store->batch();
  ASSERT_TRUE(batch.put_step(make_step("run", 5)).ok());
  EXPECT_FALSE(batch.put_carry("", make_carry(5)).ok());
  EXPECT_EQ(batch.records(), 1U);
  ASSERT_TRUE(batch.put_carry("run", make_carry(5)).ok());
  ASSERT_TRUE(store->write(batch).ok());
  EXPECT_TRUE(store->get_step("run", 5)->has_value());
  EXPECT_EQ(**store->get_carry("run", 5), make_carry(5));
}

// Every store made before the carry decision was stored holds runs, steps (put without a
// decision, the same bytes as before), groups, in-progress turns and retry buffers: it opens, and
// reads as having no decision, which a resumed run takes as "nothing carried".
TEST(CarryStore, AStoreMadeBeforeTheDecisionOpensAndHasNone) {
  scratch_dir dir;
  {
    auto store = open_ok(dir / "db");
    ASSERT_TRUE(store);
    run_record run;
    run.id = "run";
    run.config_yaml = "experiment: {name: run}";
    ASSERT_TRUE(store->put_run(run).ok());
    ASSERT_TRUE(store->put_group(test::make_group("run", 0, 0)).ok());
    ASSERT_TRUE(store->put_step(make_step("run", 0)).ok());
    auto g = test::make_group("run", 1, 2);
    ASSERT_TRUE(
        store->put_turn({"run", 1, split_kind::train, 2}, 0, 0, g.rollouts[0].turns[0]).ok());
    ASSERT_TRUE(store->close().ok());
  }
  auto store = open_ok(dir / "db");
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->get_step("run", 0)->has_value());
  auto all = store->carry_steps("run");
  ASSERT_TRUE(all.ok()) << all.err().message;
  EXPECT_TRUE(all->empty());
  auto one = store->get_carry("run", 0);
  ASSERT_TRUE(one.ok()) << one.err().message;
  EXPECT_FALSE(one->has_value());
  EXPECT_EQ(store->partial_turns("run")->size(), 1U);
}

TEST(CarryStore, RecordRoundTripsAndATruncatedOneNamesTheField) {
  const auto bytes = encode(make_carry(4));
  auto back = decode_carry(bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, make_carry(4));
  auto cut = decode_carry(std::string_view(bytes).substr(0, bytes.size() - 3));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.err().message.find("group."), std::string::npos) << cut.err().message;
  EXPECT_FALSE(decode_retry(bytes).ok());  // another kind
  EXPECT_FALSE(decode_carry(encode(retry_step_record{})).ok());
}

// The layout is frozen: these bytes (format version 5, kind 6) must read the same in every later
// build.
TEST(CarryStore, FrozenBytesStillDecode) {
  const std::string frozen(
      "\x05\x06"                          // version 5, kind carry
      "\x03\x00\x00\x00\x00\x00\x00\x00"  // step 3
      "\x01\x00\x00\x00"                  // 1 group
      "\x02\x00\x00\x00\x00\x00\x00\x00"  // origin step 2
      "\x04\x00\x00\x00"                  // group 4
      "\x09\x00\x00\x00\x00\x00\x00\x00"  // task 9
      "\x02\x00\x00\x00"
      "t9"                                // task id
      "\x01\x00\x00\x00\x00\x00\x00\x00"  // sampled version 1
      "\x01",                             // complete
      2 + 8 + 4 + 8 + 4 + 8 + 4 + 2 + 8 + 1);
  auto back = decode_carry(frozen);
  ASSERT_TRUE(back.ok()) << back.err().message;
  partial_carry_record expected;
  expected.step = 3;
  expected.groups = {{2, 4, 9, "t9", 1, true}};
  EXPECT_EQ(*back, expected);
}

TEST(CarryStore, KeysParseBackAndStayWithinTheirRun) {
  const auto key = keys::carry("run-a", 7);
  auto parsed = keys::parse_carry(key);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->first, "run-a");
  EXPECT_EQ(parsed->second, 7U);
  EXPECT_TRUE(key.starts_with(keys::carries_of_run("run-a")));
  EXPECT_FALSE(keys::carry("run-ab", 0).starts_with(keys::carries_of_run("run-a")));
  EXPECT_FALSE(keys::parse_carry(keys::retry("run-a", 7)).has_value());
  EXPECT_FALSE(keys::parse_retry(key).has_value());
  EXPECT_LT(keys::carry("run-a", 2), keys::carry("run-a", 10));  // numeric order
}

}  // namespace
}  // namespace leap
