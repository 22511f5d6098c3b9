// Frozen bytes of one fully populated record of every kind, and one group's JSON line and CSV rows,
// as the codec and the export wrote them before the records' fields were described once (issue
// 32). Any change of the encoding or of the export's names fails here: stored bytes never change
// meaning (a new field needs a new format version, see record_codec.hpp), and exports stay
// readable by what read them before. The CSV's columns are compared by name: they follow the
// records' fields, whose order is the store's, and new fields add columns.
#include "storage/export.hpp"
#include "storage/record_codec.hpp"
#include "tests/storage/csv_reader.hpp"
#include "tests/storage/hex_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace leap {
namespace {

using leap::testing::from_hex;
using leap::testing::to_hex;
using test::parse_csv;

// Every field set to a value of its own, every optional both ways, every enum off its default.
turn_record golden_turn(int salt) {
  turn_record t;
  t.input_tokens = {11 + salt, 12, 151'000};
  t.output_tokens = {21, 22 + salt, 23, 24};
  t.output_logprobs = {-0.5F, -0.25F, -1.5F, -0.125F};
  t.text = "answer " + std::to_string(salt);
  if (salt == 0) {
    t.code_hash = "sha-" + std::to_string(salt);
  }
  t.verdict = salt == 0 ? verdict_category::compile : verdict_category::pass;
  t.passed = salt != 0;
  t.feedback = salt == 0 ? "error: x" : "";
  t.timings = {1.5, 2.5, 3.5, 4.5, 5.5, 6.5 + salt};
  t.weight_version = 40 + salt;
  t.weight_segments = {{0, 40U + salt}, {2, 41U + salt}};
  t.finish = salt == 0 ? finish_reason::length : finish_reason::error;
  t.endpoint = "http://127.0.0.1:800" + std::to_string(salt);
  t.speedup = 1.75 + salt;
  t.speedup_noise = 0.0625;
  t.compiled_speedup = 0.875;
  t.compiled_speedup_noise = 0.03125 * (salt + 1);
  return t;
}

group_record golden_group() {
  group_record g;
  g.run_id = "run-golden";
  g.step = 0x0102030405060708ULL;
  g.split = split_kind::validation;
  g.group_index = 7;
  g.task_id = "cpp/vector_add";
  g.max_turns = 3;
  g.gate = gate_decision::open;
  g.n_fail = -2;
  g.thresholds = {1, 5};
  g.probe = true;
  g.optimise = optimise_decision::closed_fast;
  g.started_unix_ms = 1'700'000'000'001;
  g.gated_unix_ms = -3;
  g.finished_unix_ms = 1'700'000'000'999;
  g.weight_version = 42;
  for (std::uint32_t i = 0; i < 2; ++i) {
    rollout_record r;
    r.index = 5 - i;
    r.outcome = {static_cast<int>(i) + 1, 2};
    r.rank = 3 - static_cast<int>(i);
    r.reward = 0.5 + i;
    r.advantage = -0.75 * (i + 1);
    r.truncated = i == 1;
    r.turns.push_back(golden_turn(0));
    if (i == 0) {
      r.turns.push_back(golden_turn(1));
    }
    g.rollouts.push_back(r);
  }
  return g;
}

step_record golden_step() {
  step_record s;
  s.run_id = "run-golden";
  s.step = 9;
  s.weight_version = 10;
  s.started_unix_ms = 1'700'000'000'100;
  s.finished_unix_ms = 1'700'000'000'200;
  s.timings = {100.5, 10.25, 20.125, 30.0625, 40.5, -0.5};
  s.counts = {1, 2, 3, 4, 5, 6, 7, 0x1'0000'0001ULL};
  s.metrics = {{"pass@1", 0.5}, {"reward.mean", -1.25}};
  return s;
}

run_record golden_run() {
  return {"run-golden", "gate:\n  policy: dcp\n", -17, run_status::failed};
}

retry_step_record golden_retry() {
  retry_step_record r;
  r.step = 12;
  r.buffer.entries = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  r.buffer.total = {9, 10, 11, 12, 13};
  r.retried = {3, 1};
  r.counts = {14, 15, 16, 17, 18};
  return r;
}

partial_carry_record golden_carry() {
  partial_carry_record c;
  c.step = 21;
  c.groups = {{19, 2, 33, "cpp/a", 18, true}, {20, 0, 34, "cuda/b", 19, false}};
  return c;
}

turn_profile_record golden_profile() {
  turn_profile_record p;
  p.kernels = {{"copy_strided", 1234.5, "memory-bound", {"uncoalesced_global", "low_occupancy"}},
               {"reduce", 0, "unknown", {}}};
  p.note = "partial: 1 launch not profiled";
  p.seconds = 7.25;
  return p;
}

// Generated once by main's codec (before the field visitors), never edited by hand.
constexpr std::string_view golden_group_hex =
    "06010a00000072756e2d676f6c64656e080706050403020101070000000e0000006370702f766563746f725f"
    "6164640300000003feffffff0100000005000000010168e5cf8b010000fdffffffffffffffe76be5cf8b0100"
    "000200000005000000010000000200000003000000000000000000e03f000000000000e8bf00020000000300"
    "00000b0000000c000000d84d0200040000001500000016000000170000001800000004000000000000bf0000"
    "80be0000c0bf000000be08000000616e73776572203001050000007368612d300200080000006572726f723a"
    "2078000000000000f83f00000000000004400000000000000c40000000000000124000000000000016400000"
    "000000001a4028000000000000000115000000687474703a2f2f3132372e302e302e313a3830303003000000"
    "0c0000000c000000d84d0200040000001500000017000000170000001800000004000000000000bf000080be"
    "0000c0bf000000be08000000616e73776572203100000100000000000000000000f83f000000000000044000"
    "00000000000c40000000000000124000000000000016400000000000001e4029000000000000000315000000"
    "687474703a2f2f3132372e302e302e313a3830303104000000020000000200000002000000000000000000f8"
    "3f000000000000f8bf0101000000030000000b0000000c000000d84d02000400000015000000160000001700"
    "00001800000004000000000000bf000080be0000c0bf000000be08000000616e737765722030010500000073"
    "68612d300200080000006572726f723a2078000000000000f83f00000000000004400000000000000c400000"
    "00000000124000000000000016400000000000001a4028000000000000000115000000687474703a2f2f3132"
    "372e302e302e313a38303030012a00000000000000000000000000fc3f0000000000000640000000000000fc"
    "3f000000000000b03f000000000000b03f000000000000b03f000000000000ec3f000000000000ec3f000000"
    "000000ec3f000000000000a03f000000000000b03f000000000000a03f020000000000000028000000000000"
    "0002000000290000000000000002000000000000002900000000000000020000002a00000000000000020000"
    "00000000002800000000000000020000002900000000000000";
constexpr std::string_view golden_turn_hex =
    "0604030000000c0000000c000000d84d02000400000015000000170000001700000018000000040000000000"
    "00bf000080be0000c0bf000000be08000000616e73776572203100000100000000000000000000f83f000000"
    "00000004400000000000000c40000000000000124000000000000016400000000000001e4029000000000000"
    "000315000000687474703a2f2f3132372e302e302e313a383030310000000000000640000000000000b03f00"
    "0000000000ec3f000000000000b03f02000000000000002900000000000000020000002a00000000000000";
constexpr std::string_view golden_step_hex =
    "06020a00000072756e2d676f6c64656e09000000000000000a000000000000006468e5cf8b010000c868e5cf"
    "8b0100000000000000205940000000000080244000000000002034400000000000103e400000000000404440"
    "000000000000e0bf010000000200000003000000040000000500000006000000070000000100000001000000"
    "0200000006000000706173734031000000000000e03f0b0000007265776172642e6d65616e000000000000f4"
    "bf";
constexpr std::string_view golden_run_hex =
    "06030a00000072756e2d676f6c64656e14000000676174653a0a2020706f6c6963793a206463700aefffffff"
    "ffffffff02";
constexpr std::string_view golden_retry_hex =
    "06050c000000000000000e0000000f0000001000000011000000120000000200000003000000010000000900"
    "00000a0000000b0000000c0000000d0000000200000001000000000000000200000000000000030000000000"
    "00000400000005000000000000000600000000000000070000000000000008000000";
constexpr std::string_view golden_carry_hex =
    "06061500000000000000020000001300000000000000020000002100000000000000050000006370702f6112"
    "0000000000000001140000000000000000000000220000000000000006000000637564612f62130000000000"
    "000000";
constexpr std::string_view golden_optimise_hex = "060704";
constexpr std::string_view golden_profile_hex =
    "0608020000000c000000636f70795f7374726964656400000000004a93400c0000006d656d6f72792d626f75"
    "6e640200000012000000756e636f616c65736365645f676c6f62616c0d0000006c6f775f6f63637570616e63"
    "7906000000726564756365000000000000000007000000756e6b6e6f776e000000001e000000706172746961"
    "6c3a2031206c61756e6368206e6f742070726f66696c65640000000000001d40";
constexpr std::string_view golden_json_line =
    R"json({"finished_unix_ms":1700000000999,"gate":"open","gated_unix_ms":-3,"group_index":7,"max_turns":3,"n_fail":-2,"optimise":"closed_fast","probe":true,"rollouts":[{"advantage":-0.75,"generated_turns":2,"index":5,"passed_at_turn":1,"rank":3,"reward":0.5,"truncated":false,"turns":[{"code_hash":"sha-0","compiled_speedup":0.875,"compiled_speedup_noise":0.03125,"endpoint":"http://127.0.0.1:8000","feedback":"error: x","finish_reason":"length","input_tokens":[11,12,151000],"output_logprobs":[-0.5,-0.25,-1.5,-0.125],"output_tokens":[21,22,23,24],"passed":false,"profile":null,"speedup":1.75,"speedup_noise":0.0625,"text":"answer 0","timings":{"compile_ms":2.5,"compile_queue_ms":5.5,"generation_ms":1.5,"generation_queue_ms":4.5,"run_ms":3.5,"run_queue_ms":6.5},"verdict":"compile","weight_segments":[{"first":0,"version":40},{"first":2,"version":41}],"weight_version":40},{"code_hash":null,"compiled_speedup":0.875,"compiled_speedup_noise":0.0625,"endpoint":"http://127.0.0.1:8001","feedback":"","finish_reason":"error","input_tokens":[12,12,151000],"output_logprobs":[-0.5,-0.25,-1.5,-0.125],"output_tokens":[21,23,23,24],"passed":true,"profile":{"kernels":[{"bottleneck":"memory-bound","duration_ns":1234.5,"findings":["uncoalesced_global","low_occupancy"],"name":"copy_strided"},{"bottleneck":"unknown","duration_ns":0.0,"findings":[],"name":"reduce"}],"note":"partial: 1 launch not profiled","seconds":7.25,"source":"ncu"},"speedup":2.75,"speedup_noise":0.0625,"text":"answer 1","timings":{"compile_ms":2.5,"compile_queue_ms":5.5,"generation_ms":1.5,"generation_queue_ms":4.5,"run_ms":3.5,"run_queue_ms":7.5},"verdict":"pass","weight_segments":[{"first":0,"version":41},{"first":2,"version":42}],"weight_version":41}]},{"advantage":-1.5,"generated_turns":2,"index":4,"passed_at_turn":2,"rank":2,"reward":1.5,"truncated":true,"turns":[{"code_hash":"sha-0","compiled_speedup":0.875,"compiled_speedup_noise":0.03125,"endpoint":"http://127.0.0.1:8000","feedback":"error: x","finish_reason":"length","input_tokens":[11,12,151000],"output_logprobs":[-0.5,-0.25,-1.5,-0.125],"output_tokens":[21,22,23,24],"passed":false,"profile":null,"speedup":1.75,"speedup_noise":0.0625,"text":"answer 0","timings":{"compile_ms":2.5,"compile_queue_ms":5.5,"generation_ms":1.5,"generation_queue_ms":4.5,"run_ms":3.5,"run_queue_ms":6.5},"verdict":"compile","weight_segments":[{"first":0,"version":40},{"first":2,"version":41}],"weight_version":40}]}],"run_id":"run-golden","split":"validation","started_unix_ms":1700000000001,"step":72623859790382856,"task_id":"cpp/vector_add","thresholds":{"hi":5,"lo":1},"weight_version":42})json";
constexpr std::string_view golden_csv =
    R"csv(run_id,step,split,group_index,task_id,max_turns,gate,n_fail,threshold_lo,threshold_hi,probe,group_started_unix_ms,group_gated_unix_ms,group_finished_unix_ms,group_weight_version,rollout_index,passed_at_turn,generated_turns,rank,reward,advantage,truncated,turn,input_tokens,output_tokens,verdict,passed,finish_reason,weight_version,weight_segments,endpoint,generation_ms,compile_ms,run_ms,generation_queue_ms,compile_queue_ms,run_queue_ms,speedup,compiled_speedup,code_hash,profile_seconds,profile_note,profile_kernels,profile_duration_ns,profile_bottlenecks,profile_findings,profile_source,feedback,text
run-golden,72623859790382856,validation,7,cpp/vector_add,3,open,-2,1,5,true,1700000000001,-3,1700000000999,42,5,1,2,3,0.5,-0.75,false,0,3,4,compile,false,length,40,0:40 2:41,http://127.0.0.1:8000,1.5,2.5,3.5,4.5,5.5,6.5,1.75,0.875,sha-0,,,,,,,,error: x,answer 0
run-golden,72623859790382856,validation,7,cpp/vector_add,3,open,-2,1,5,true,1700000000001,-3,1700000000999,42,5,1,2,3,0.5,-0.75,false,1,3,4,pass,true,error,41,0:41 2:42,http://127.0.0.1:8001,1.5,2.5,3.5,4.5,5.5,7.5,2.75,0.875,,7.25,partial: 1 launch not profiled,copy_strided reduce,1234.5 0,memory-bound unknown,uncoalesced_global+low_occupancy -,ncu,,answer 1
run-golden,72623859790382856,validation,7,cpp/vector_add,3,open,-2,1,5,true,1700000000001,-3,1700000000999,42,4,2,2,2,1.5,-1.5,true,0,3,4,compile,false,length,40,0:40 2:41,http://127.0.0.1:8000,1.5,2.5,3.5,4.5,5.5,6.5,1.75,0.875,sha-0,,,,,,,,error: x,answer 0
)csv";

group_profiles golden_group_profiles() {
  auto p = golden_profile();
  p.turn = {"run-golden", 0x0102030405060708ULL, split_kind::validation, 7, 5, 1};
  return {{{5, 1}, p}};
}

// The frozen bytes above are format version 6's. Version 7 added a profile's source after its last
// field and changed no other record: their bytes now differ in the version byte only.
std::string as_version_seven(std::string_view v6_hex) {
  EXPECT_EQ(v6_hex.substr(0, 2), "06");
  return "07" + std::string(v6_hex.substr(2));
}

TEST(RecordGolden, EveryRecordKindEncodesToItsFrozenBytes) {
  EXPECT_EQ(to_hex(encode(golden_group())), as_version_seven(golden_group_hex));
  EXPECT_EQ(to_hex(encode(golden_turn(1))), as_version_seven(golden_turn_hex));
  EXPECT_EQ(to_hex(encode(golden_step())), as_version_seven(golden_step_hex));
  EXPECT_EQ(to_hex(encode(golden_run())), as_version_seven(golden_run_hex));
  EXPECT_EQ(to_hex(encode(golden_retry())), as_version_seven(golden_retry_hex));
  EXPECT_EQ(to_hex(encode(golden_carry())), as_version_seven(golden_carry_hex));
  EXPECT_EQ(to_hex(encode_optimise(optimise_decision::closed_budget)),
            as_version_seven(golden_optimise_hex));
  // The source: a u32 length and "ncu".
  EXPECT_EQ(to_hex(encode(golden_profile())),
            as_version_seven(golden_profile_hex) + "030000006e6375");
}

TEST(RecordGolden, EveryRecordKindRoundTrips) {
  auto group = golden_group();
  auto g = decode_group(encode(group));
  ASSERT_TRUE(g.ok()) << g.err().message;
  group.optimise.reset();  // kept beside the group's bytes, not in them
  EXPECT_EQ(*g, group);
  auto t = decode_turn(encode(golden_turn(0)));
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(*t, golden_turn(0));
  auto s = decode_step(encode(golden_step()));
  ASSERT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(*s, golden_step());
  auto r = decode_run(encode(golden_run()));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(*r, golden_run());
  auto retry = decode_retry(encode(golden_retry()));
  ASSERT_TRUE(retry.ok()) << retry.err().message;
  EXPECT_EQ(*retry, golden_retry());
  auto carry = decode_carry(encode(golden_carry()));
  ASSERT_TRUE(carry.ok()) << carry.err().message;
  EXPECT_EQ(*carry, golden_carry());
  auto optimise = decode_optimise(encode_optimise(optimise_decision::closed_budget));
  ASSERT_TRUE(optimise.ok()) << optimise.err().message;
  EXPECT_EQ(*optimise, optimise_decision::closed_budget);
  auto profile = decode_profile(encode(golden_profile()));
  ASSERT_TRUE(profile.ok()) << profile.err().message;
  EXPECT_EQ(*profile, golden_profile());
}

TEST(RecordGolden, FrozenBytesDecodeToTheRecords) {
  auto group = golden_group();
  group.optimise.reset();
  auto g = decode_group(from_hex(golden_group_hex));
  ASSERT_TRUE(g.ok()) << g.err().message;
  EXPECT_EQ(*g, group);
  auto t = decode_turn(from_hex(golden_turn_hex));
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(*t, golden_turn(1));
  EXPECT_EQ(*decode_step(from_hex(golden_step_hex)), golden_step());
  EXPECT_EQ(*decode_run(from_hex(golden_run_hex)), golden_run());
  EXPECT_EQ(*decode_retry(from_hex(golden_retry_hex)), golden_retry());
  EXPECT_EQ(*decode_carry(from_hex(golden_carry_hex)), golden_carry());
  EXPECT_EQ(*decode_optimise(from_hex(golden_optimise_hex)), optimise_decision::closed_budget);
  EXPECT_EQ(*decode_profile(from_hex(golden_profile_hex)), golden_profile());
}

// The CSV `csv` (a header and rows) has every column of the frozen `golden` under its name, with
// the same cell in each row, and the same rows; cell() reads csv's other columns.
class frozen_csv_columns {
 public:
  frozen_csv_columns(const std::string& golden, const std::string& csv) : rows_(parse_csv(csv)) {
    const auto frozen = parse_csv(golden);
    EXPECT_FALSE(frozen.empty());
    EXPECT_EQ(rows_.size(), frozen.size());
    if (frozen.empty() || rows_.size() != frozen.size()) {
      return;
    }
    for (std::size_t c = 0; c < frozen[0].size(); ++c) {
      const auto& name = frozen[0][c];
      for (std::size_t r = 1; r < frozen.size(); ++r) {
        EXPECT_EQ(cell(r - 1, name), frozen[r][c]) << "row " << r - 1 << ", column " << name;
      }
    }
  }

  [[nodiscard]] std::string cell(std::size_t row, const std::string& name) const {
    const auto& header = rows_.at(0);
    const auto at = std::find(header.begin(), header.end(), name);
    if (at == header.end()) {
      return "no column " + name;
    }
    return rows_.at(row + 1).at(static_cast<std::size_t>(at - header.begin()));
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

TEST(RecordGolden, ExportWritesItsFrozenJsonLineAndCsvRowsAndReadsTheLineBack) {
  const auto group = golden_group();
  EXPECT_EQ(to_json_line(group, golden_group_profiles()), golden_json_line);
  std::string csv = csv_header();
  append_csv_rows(group, csv, golden_group_profiles());
  const frozen_csv_columns columns(std::string(golden_csv), csv);
  // The columns the frozen rows lack.
  EXPECT_EQ(columns.cell(0, "optimise"), "closed_fast");
  EXPECT_EQ(columns.cell(0, "speedup_noise"), "0.0625");
  EXPECT_EQ(columns.cell(0, "compiled_speedup_noise"), "0.03125");
  EXPECT_EQ(columns.cell(1, "compiled_speedup_noise"), "0.0625");
  auto back = group_from_json(golden_json_line);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, group);
}

// The cells the full group above never leaves empty or writes specially, as main wrote them before
// the CSV's columns were listed once (issue 32): a training group (no weight version), a rollout
// without turns (its turn cells empty), a turn with nothing measured, no code and no segments
// (one segment from its weight version), a profile without kernels from the events fall-back,
// numbers that are not finite, and cells that need quoting.
group_record sparse_golden_group() {
  group_record g;
  g.run_id = "run-sparse";
  g.step = 3;
  g.task_id = "python/sum, \"quoted\"";
  g.max_turns = 2;
  rollout_record without_turns;
  without_turns.index = 1;
  without_turns.reward = std::numeric_limits<double>::quiet_NaN();
  without_turns.advantage = -std::numeric_limits<double>::infinity();
  g.rollouts.push_back(without_turns);
  rollout_record one_turn;
  turn_record t;
  t.input_tokens = {1, 2};
  t.text = "line one\nline two";
  t.feedback = "a,b";
  t.weight_version = 9;
  one_turn.turns.push_back(t);
  g.rollouts.push_back(one_turn);
  return g;
}

group_profiles sparse_golden_profiles() {
  turn_profile_record p;
  p.turn = {"run-sparse", 3, split_kind::train, 0, 0, 0};
  p.note = "no kernel of the candidate's own";
  p.seconds = 0.5;
  p.source = "events";
  return {{{0, 0}, p}};
}

constexpr std::string_view sparse_golden_rows =
    R"csv(run-sparse,3,train,0,"python/sum, ""quoted""",2,closed_no_debug,0,0,0,false,0,0,0,,1,0,1,0,nan,-inf,false,,,,,,,,,,,,,,,,,,,,,,,,,,,
run-sparse,3,train,0,"python/sum, ""quoted""",2,closed_no_debug,0,0,0,false,0,0,0,,0,0,1,0,0,0,false,0,2,0,format,false,stop,9,0:9,,0,0,0,0,0,0,,,,0.5,no kernel of the candidate's own,,,,,events,"a,b","line one
line two"
)csv";

TEST(RecordGolden, ExportWritesItsFrozenCsvRowsOfASparseGroup) {
  std::string rows;
  EXPECT_EQ(append_csv_rows(sparse_golden_group(), rows, sparse_golden_profiles()), 2U);
  // The frozen rows' header: the one golden_csv starts with.
  const auto frozen_header = std::string(golden_csv.substr(0, golden_csv.find('\n') + 1));
  const frozen_csv_columns columns(frozen_header + std::string(sparse_golden_rows),
                                   csv_header() + rows);
  for (std::size_t row = 0; row < 2; ++row) {
    for (const char* name : {"optimise", "speedup_noise", "compiled_speedup_noise"}) {
      EXPECT_EQ(columns.cell(row, name), "") << "row " << row << ", column " << name;
    }
  }
}

}  // namespace
}  // namespace leap
