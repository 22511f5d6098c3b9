#include "storage/export.hpp"

#include "common/lines.hpp"
#include "orchestrator/replay.hpp"
#include "tests/storage/csv_reader.hpp"
#include "tests/storage/test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace leap {
namespace {

using test::make_group;
using test::parse_csv;
using test::scratch_dir;

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class Export : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = trajectory_store::open(dir_ / "db", {.sync = false});
    ASSERT_TRUE(store.ok()) << store.err().message;
    store_ = std::move(store).value();
    // Two runs; the second group of r1 has awkward text for both formats.
    groups_.push_back(make_group("r1", 0, 0));
    auto awkward = make_group("r1", 0, 1, split_kind::validation, "", 2, 3);
    awkward.rollouts[0].turns[0].feedback = "line one, \"quoted\"\r\nline two";
    awkward.rollouts[0].turns[1].code_hash.reset();
    awkward.rollouts[1].reward = 1.0 / 3.0;
    awkward.rollouts[1].advantage = -2.5e-17;
    awkward.rollouts[1].turns[0].speedup = 1.75;            // a timed pass (issue 31)
    awkward.rollouts[1].turns[0].compiled_speedup = 0.875;  // and over torch.compile
    awkward.gate = gate_decision::closed_hopeless;
    awkward.probe = true;
    groups_.push_back(awkward);
    groups_.push_back(make_group("r1", 1, 0, split_kind::train, "", 1, 1));
    groups_.push_back(make_group("r2", 0, 0));
    for (const auto& g : groups_) {
      ASSERT_TRUE(store_->put_group(g).ok());
    }
  }

  scratch_dir dir_;
  std::unique_ptr<trajectory_store> store_;
  std::vector<group_record> groups_;
};

TEST_F(Export, JsonlHasOneGroupPerLineThatParsesBackToTheRecord) {
  std::ostringstream out;
  auto counts = export_jsonl(*store_, {}, out);
  ASSERT_TRUE(counts.ok()) << counts.err().message;
  EXPECT_EQ(counts->groups, 4U);
  EXPECT_EQ(counts->rows, 4U);
  const auto lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), groups_.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i));
    // Plain JSON for any reader ...
    const auto j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j.at("run_id"), groups_[i].run_id);
    EXPECT_EQ(j.at("rollouts").size(), groups_[i].rollouts.size());
    EXPECT_EQ(j.at("rollouts")[0].at("turns")[0].at("verdict"),
              to_string(groups_[i].rollouts[0].turns[0].verdict));
    // ... that holds every field.
    auto back = group_from_json(lines[i]);
    ASSERT_TRUE(back.ok()) << back.err().message;
    EXPECT_EQ(*back, groups_[i]);
  }
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("gate"), "closed_hopeless");
  EXPECT_TRUE(nlohmann::json::parse(lines[1])["rollouts"][0]["turns"][1]["code_hash"].is_null());
}

// A turn's speedup, stored in the real store, comes out as a number; an unmeasured one as null;
// a line written before speedups existed (no key) reads back as not measured.
TEST_F(Export, JsonlCarriesEachTurnsSpeedup) {
  std::ostringstream out;
  ASSERT_TRUE(export_jsonl(*store_, {.run_id = "r1"}, out).ok());
  const auto lines = split_lines(out.str());
  ASSERT_GE(lines.size(), 2U);
  auto j = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(j["rollouts"][1]["turns"][0]["speedup"], 1.75);
  EXPECT_TRUE(j["rollouts"][0]["turns"][0]["speedup"].is_null());
  j["rollouts"][1]["turns"][0].erase("speedup");
  auto old = group_from_json(j.dump());
  ASSERT_TRUE(old.ok()) << old.err().message;
  EXPECT_EQ(old->rollouts[1].turns[0].speedup, 0.0);
  EXPECT_EQ(old->rollouts[1].turns[0].compiled_speedup, 0.875);
  EXPECT_EQ(j["rollouts"][1]["turns"][0]["compiled_speedup"], 0.875);
  EXPECT_TRUE(j["rollouts"][0]["turns"][0]["compiled_speedup"].is_null());
  j["rollouts"][1]["turns"][0].erase("compiled_speedup");
  EXPECT_EQ(group_from_json(j.dump())->rollouts[1].turns[0].compiled_speedup, 0.0);
  j["rollouts"][1]["turns"][0]["speedup"] = "fast";
  auto bad = group_from_json(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("rollouts[1].turns[0].speedup"), std::string::npos)
      << bad.err().message;
}

// A turn's weight segments come out as [{first, version}, ...] in JSON and "first:version ..." in
// CSV; a line written before segments existed (no key) reads back as one segment, as the store
// reads such records.
TEST_F(Export, JsonlAndCsvCarryEachTurnsWeightSegments) {
  auto g = make_group("r3", 4, 0, split_kind::train, "", 1, 1);
  g.rollouts[0].turns[0].weight_segments = {{0, 4}, {3, 5}};
  ASSERT_TRUE(store_->put_group(g).ok());
  std::ostringstream out;
  ASSERT_TRUE(export_jsonl(*store_, {.run_id = "r3"}, out).ok());
  const auto lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), 1U);
  auto j = nlohmann::json::parse(lines[0]);
  auto& turn = j["rollouts"][0]["turns"][0];
  EXPECT_EQ(turn["weight_segments"],
            nlohmann::json::parse(R"([{"first": 0, "version": 4}, {"first": 3, "version": 5}])"));
  EXPECT_EQ(*group_from_json(lines[0]), g);
  turn.erase("weight_segments");
  auto old = group_from_json(j.dump());
  ASSERT_TRUE(old.ok()) << old.err().message;
  EXPECT_EQ(old->rollouts[0].turns[0].weight_segments, (std::vector<turn_weight_segment>{{0, 4}}));
  turn["weight_segments"] = nlohmann::json::parse(R"([{"first": 0}])");
  auto bad = group_from_json(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("weight_segments[0].version"), std::string::npos)
      << bad.err().message;

  std::ostringstream csv;
  ASSERT_TRUE(export_csv(*store_, {.run_id = "r3"}, csv).ok());
  const auto rows = split_lines(csv.str());
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_NE(rows[1].find(",0:4 3:5,"), std::string::npos) << rows[1];
}

TEST_F(Export, RunFilter) {
  std::ostringstream out;
  auto counts = export_jsonl(*store_, {.run_id = "r2"}, out);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->groups, 1U);
  ASSERT_EQ(split_lines(out.str()).size(), 1U);
  EXPECT_EQ(*group_from_json(split_lines(out.str())[0]), groups_[3]);

  std::ostringstream none;
  EXPECT_EQ(export_csv(*store_, {.run_id = "r"}, none)->rows, 0U);
  EXPECT_EQ(none.str(), csv_header());
}

TEST_F(Export, CsvHasAHeaderAndOneRowPerRolloutTurn) {
  std::ostringstream out;
  auto counts = export_csv(*store_, {.run_id = "r1"}, out);
  ASSERT_TRUE(counts.ok()) << counts.err().message;
  // r1: 4 rollouts x 2 turns, 2 x 3, 1 x 1.
  EXPECT_EQ(counts->rows, 8U + 6U + 1U);
  EXPECT_EQ(counts->groups, 3U);
  const auto rows = parse_csv(out.str());
  ASSERT_EQ(rows.size(), 1 + counts->rows);
  EXPECT_EQ(rows[0], csv_columns());
  auto column = [&](const std::string& name) {
    const auto& cols = csv_columns();
    return static_cast<std::size_t>(std::find(cols.begin(), cols.end(), name) - cols.begin());
  };
  for (std::size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), csv_columns().size()) << "row " << i;
  }
  // Row 9 is the awkward group's first rollout, first turn.
  const auto& awkward = groups_[1];
  const auto& row = rows[9];
  EXPECT_EQ(row[column("group_index")], "1");
  EXPECT_EQ(row[column("split")], "validation");
  EXPECT_EQ(row[column("gate")], "closed_hopeless");
  EXPECT_EQ(row[column("probe")], "true");
  EXPECT_EQ(row[column("turn")], "0");
  EXPECT_EQ(row[column("feedback")], awkward.rollouts[0].turns[0].feedback);
  EXPECT_EQ(row[column("text")], awkward.rollouts[0].turns[0].text);
  EXPECT_EQ(row[column("input_tokens")], "16");
  EXPECT_EQ(row[column("output_tokens")], "24");
  EXPECT_EQ(row[column("verdict")], "wrong_answer");
  EXPECT_EQ(row[column("generation_ms")], "100");
  EXPECT_EQ(rows[10][column("code_hash")], "");  // the turn without extracted code
  // Numbers read back to the same double.
  const auto& second = rows[12];  // rollout 1, turn 0
  EXPECT_EQ(second[column("rollout_index")], "1");
  EXPECT_EQ(std::stod(second[column("reward")]), 1.0 / 3.0);
  EXPECT_EQ(std::stod(second[column("advantage")]), -2.5e-17);
  EXPECT_EQ(second[column("speedup")], "1.75");
  EXPECT_EQ(second[column("compiled_speedup")], "0.875");
  EXPECT_EQ(row[column("speedup")], "");  // not measured
}

TEST(ExportRows, RolloutWithoutTurnsGetsOneRowWithEmptyTurnColumns) {
  auto g = make_group("r", 0, 0, split_kind::train, "t", 2, 1);
  g.rollouts[1].turns.clear();
  std::string out;
  EXPECT_EQ(append_csv_rows(g, out), 2U);
  const auto rows = parse_csv(out);
  ASSERT_EQ(rows.size(), 2U);
  ASSERT_EQ(rows[1].size(), csv_columns().size());
  auto cell = [&](const std::string& name) {
    const auto& cols = csv_columns();
    const auto at = std::find(cols.begin(), cols.end(), name);
    return at == cols.end() ? std::string("no column ") + name : rows[1][at - cols.begin()];
  };
  EXPECT_EQ(cell("rollout_index"), "1");
  EXPECT_EQ(cell("turn"), "");
  EXPECT_EQ(cell("verdict"), "");
  EXPECT_EQ(cell("group_weight_version"), "");  // none for a training group
  EXPECT_EQ(cell("task_id"), "t");
}

// The columns are the records' fields: every column an earlier export wrote keeps its name (a
// reader's script selects by name), and no name is used twice.
TEST(ExportRows, CsvKeepsEveryEarlierColumnAndNamesEachOnce) {
  const std::vector<std::string> earlier = {"run_id",
                                            "step",
                                            "split",
                                            "group_index",
                                            "task_id",
                                            "max_turns",
                                            "gate",
                                            "n_fail",
                                            "threshold_lo",
                                            "threshold_hi",
                                            "probe",
                                            "group_started_unix_ms",
                                            "group_gated_unix_ms",
                                            "group_finished_unix_ms",
                                            "group_weight_version",
                                            "rollout_index",
                                            "passed_at_turn",
                                            "generated_turns",
                                            "rank",
                                            "reward",
                                            "advantage",
                                            "truncated",
                                            "turn",
                                            "input_tokens",
                                            "output_tokens",
                                            "verdict",
                                            "passed",
                                            "finish_reason",
                                            "weight_version",
                                            "weight_segments",
                                            "endpoint",
                                            "generation_ms",
                                            "compile_ms",
                                            "run_ms",
                                            "generation_queue_ms",
                                            "compile_queue_ms",
                                            "run_queue_ms",
                                            "speedup",
                                            "compiled_speedup",
                                            "code_hash",
                                            "profile_seconds",
                                            "profile_note",
                                            "profile_kernels",
                                            "profile_duration_ns",
                                            "profile_bottlenecks",
                                            "profile_findings",
                                            "profile_source",
                                            "feedback",
                                            "text"};
  const auto& cols = csv_columns();
  for (const auto& name : earlier) {
    EXPECT_EQ(std::count(cols.begin(), cols.end(), name), 1) << name;
  }
  std::vector<std::string> sorted = cols;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  // The group's identifying columns lead.
  ASSERT_GE(cols.size(), 5U);
  EXPECT_EQ(std::vector<std::string>(cols.begin(), cols.begin() + 5),
            (std::vector<std::string>{"run_id", "step", "split", "group_index", "task_id"}));
  EXPECT_EQ(csv_header(), [&] {
    std::string line;
    for (const auto& c : cols) {
      line += (line.empty() ? "" : ",") + c;
    }
    return line + "\n";
  }());
}

// A field added to the turn record's fields() is a CSV column with no edit to the export: every
// listed field is there under its name (a nested record's fields under theirs), except the
// log-probs, which have no column.
TEST(ExportRows, EveryTurnFieldIsAColumn) {
  const auto& cols = csv_columns();
  const auto has = [&](std::string_view name) {
    return std::find(cols.begin(), cols.end(), name) != cols.end();
  };
  const turn_record turn{};
  for_each_field(turn, [&](const auto& f) {
    using V = std::remove_cvref_t<decltype(f.value)>;
    if constexpr (field_listed<V>) {
      for_each_field(f.value,
                     [&](const auto& inner) { EXPECT_TRUE(has(inner.name)) << inner.name; });
    } else if (f.name == "output_logprobs") {
      EXPECT_FALSE(has(f.name));
    } else {
      EXPECT_TRUE(has(f.name)) << f.name;
    }
  });
}

// Replay's per-step turn means are named as the export names the fields' columns (steps.csv's
// turn_mean_NAME beside the turns' NAME), nested records' prefixes included.
TEST(ExportRows, ReplaysTurnMeansAreNamedByTheirColumns) {
  const auto& cols = csv_columns();
  ASSERT_FALSE(replay_turn_fields().empty());
  for (const auto& name : replay_turn_fields()) {
    EXPECT_NE(std::find(cols.begin(), cols.end(), name), cols.end()) << name;
  }
}

// The noise columns, which earlier exports left out: a stated noise is its number, an unstated
// one (< 0) an empty cell, as JSON writes null.
TEST(ExportRows, SpeedupNoiseIsAColumnEmptyWhenNotStated) {
  auto g = make_group("r", 0, 0, split_kind::train, "t", 1, 2);
  auto& timed = g.rollouts[0].turns[1];
  timed.speedup = 1.5;
  timed.speedup_noise = 0.04;
  timed.compiled_speedup = 0.75;
  timed.compiled_speedup_noise = 0.0;  // stated: no noise at all
  std::string out;
  ASSERT_EQ(append_csv_rows(g, out), 2U);
  const auto rows = parse_csv(csv_header() + out);
  ASSERT_EQ(rows.size(), 3U);
  auto cell = [&](std::size_t row, const std::string& name) {
    const auto& cols = csv_columns();
    const auto at = std::find(cols.begin(), cols.end(), name);
    return at == cols.end() ? std::string("no column ") + name : rows[row][at - cols.begin()];
  };
  EXPECT_EQ(cell(2, "speedup"), "1.5");
  EXPECT_EQ(cell(2, "speedup_noise"), "0.04");
  EXPECT_EQ(cell(2, "compiled_speedup"), "0.75");
  EXPECT_EQ(cell(2, "compiled_speedup_noise"), "0");
  for (const char* name :
       {"speedup", "speedup_noise", "compiled_speedup", "compiled_speedup_noise"}) {
    EXPECT_EQ(cell(1, name), "") << name;  // the untimed first turn
  }
  // The JSON export says the same of the same turns.
  const auto j = nlohmann::json::parse(to_json_line(g));
  EXPECT_TRUE(j["rollouts"][0]["turns"][0]["speedup_noise"].is_null());
  EXPECT_EQ(j["rollouts"][0]["turns"][1]["speedup_noise"], 0.04);
}

// Each profile_* cell holds one entry per kernel, so that the n-th entries of the cells describe
// one kernel; a kernel without a name (nothing to read it from) must not merge its neighbours.
TEST(ExportRows, ProfileCellsKeepAKernelWithoutANameInItsPlace) {
  const auto g = make_group("r", 0, 0, split_kind::train, "t", 1, 1);
  turn_profile_record p;
  p.kernels.push_back({"", 10, "compute-bound", {}});
  p.kernels.push_back({"reduce", 20, "memory-bound", {"dram"}});
  std::string out;
  ASSERT_EQ(append_csv_rows(g, out, {{{0, 0}, p}}), 1U);
  const auto rows = parse_csv(csv_header() + out);
  ASSERT_EQ(rows.size(), 2U);
  auto cell = [&](const std::string& name) {
    const auto& cols = csv_columns();
    const auto at = std::find(cols.begin(), cols.end(), name);
    return at == cols.end() ? std::string("no column ") + name : rows[1][at - cols.begin()];
  };
  EXPECT_EQ(cell("profile_kernels"), " reduce");
  EXPECT_EQ(cell("profile_duration_ns"), "10 20");
  EXPECT_EQ(cell("profile_bottlenecks"), "compute-bound memory-bound");
  EXPECT_EQ(cell("profile_findings"), "- dram");
}

TEST(ExportJson, InvalidUtf8IsReplacedNotFatal) {
  auto g = make_group("r", 0, 0, split_kind::train, "t", 1, 1);
  g.rollouts[0].turns[0].text = "half a character: \xe2\x82";
  const auto line = to_json_line(g);
  auto back = group_from_json(line);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(back->rollouts[0].turns[0].text, "half a character: \xef\xbf\xbd");
}

TEST(ExportJson, ParseErrorsNameTheField) {
  const auto good =
      nlohmann::json::parse(to_json_line(make_group("r", 0, 0, split_kind::train, "t", 1, 1)));
  struct test_case {
    std::string name;
    std::string line;
    std::string error;
  };
  auto edited = [&](auto edit) {
    auto j = good;
    edit(j);
    return j.dump();
  };
  const std::vector<test_case> cases = {
      {"not json", "{", "not a JSON value"},
      {"not an object", "[1]", "the line is not an object"},
      {"missing step", edited([](auto& j) { j.erase("step"); }), "step is missing"},
      {"negative step", edited([](auto& j) { j["step"] = -1; }), "step is out of range"},
      {"string group index", edited([](auto& j) { j["group_index"] = "1"; }),
       "group_index is not an integer"},
      {"unknown gate", edited([](auto& j) { j["gate"] = "ajar"; }),
       "gate: unknown gate decision 'ajar'"},
      {"unknown verdict", edited([](auto& j) { j["rollouts"][0]["turns"][0]["verdict"] = "ok"; }),
       "rollouts[0].turns[0].verdict: unknown verdict 'ok'"},
      {"token out of range",
       edited([](auto& j) { j["rollouts"][0]["turns"][0]["input_tokens"][3] = 1LL << 40; }),
       "rollouts[0].turns[0].input_tokens[3] is out of range"},
      {"timings not an object",
       edited([](auto& j) { j["rollouts"][0]["turns"][0]["timings"] = 3; }),
       "rollouts[0].turns[0].timings is not an object"},
      {"rollouts not an array", edited([](auto& j) { j["rollouts"] = nullptr; }),
       "rollouts is not an array"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = group_from_json(c.line);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.err().message.find(c.error), std::string::npos) << g.err().message;
  }
}

// The optimisation decision stored beside a group (issue 31) is exported by name and read back; a
// group without one exports null, and a line without the key (older exports) reads as none.
TEST_F(Export, JsonlCarriesTheStoredOptimisationDecision) {
  auto opened = make_group("r3", 0, 0);
  opened.optimise = optimise_decision::closed_budget;
  ASSERT_TRUE(store_->put_group(opened).ok());
  std::ostringstream out;
  ASSERT_TRUE(export_jsonl(*store_, {.run_id = "r3"}, out).ok());
  const auto lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), 1U);
  auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j.at("optimise"), "closed_budget");
  auto back = group_from_json(lines[0]);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, opened);
  std::ostringstream plain;
  ASSERT_TRUE(export_jsonl(*store_, {.run_id = "r2"}, plain).ok());
  EXPECT_TRUE(nlohmann::json::parse(split_lines(plain.str()).at(0)).at("optimise").is_null());
  j.erase("optimise");
  auto old = group_from_json(j.dump());
  ASSERT_TRUE(old.ok()) << old.err().message;
  EXPECT_FALSE(old->optimise.has_value());
  j["optimise"] = "ajar";
  auto bad = group_from_json(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("optimise"), std::string::npos) << bad.err().message;
}

// A turn's profile (issue 34), stored on its own after its group, comes out with that turn in both
// formats; turns without one have null / empty cells, and a profile of a group never stored (a
// dropped group) is not exported. The JSON line still reads back to the group record.
TEST_F(Export, JsonlAndCsvCarryEachTurnsProfile) {
  auto g = make_group("r4", 2, 1, split_kind::train, "", 2, 2);
  ASSERT_TRUE(store_->put_group(g).ok());
  turn_profile_record p;
  p.turn = turn_ref{"r4", 2, split_kind::train, 1, 1, 0};
  p.kernels.push_back({"copy_strided", 1500.5, "memory-bound", {"uncoalesced_global", "dram"}});
  p.kernels.push_back({"tiny", 900, "launch-bound", {}});
  p.note = "one kernel, of two launches, \"profiled\"";
  p.seconds = 2.5;
  ASSERT_TRUE(store_->put_profile(p).ok());
  turn_profile_record dropped;
  dropped.turn = turn_ref{"r4", 2, split_kind::train, 7, 0, 0};
  dropped.note = "dropped";
  ASSERT_TRUE(store_->put_profile(dropped).ok());

  std::ostringstream out;
  auto counts = export_jsonl(*store_, {.run_id = "r4"}, out);
  ASSERT_TRUE(counts.ok()) << counts.err().message;
  EXPECT_EQ(counts->groups, 1U);
  const auto lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), 1U);
  const auto j = nlohmann::json::parse(lines[0]);
  const auto& profile = j["rollouts"][1]["turns"][0]["profile"];
  ASSERT_TRUE(profile.is_object()) << lines[0];
  EXPECT_EQ(profile["seconds"], 2.5);
  EXPECT_EQ(profile["note"], p.note);
  ASSERT_EQ(profile["kernels"].size(), 2U);
  EXPECT_EQ(profile["kernels"][0]["name"], "copy_strided");
  EXPECT_EQ(profile["kernels"][0]["duration_ns"], 1500.5);
  EXPECT_EQ(profile["kernels"][0]["bottleneck"], "memory-bound");
  EXPECT_EQ(profile["kernels"][0]["findings"],
            nlohmann::json::parse(R"(["uncoalesced_global", "dram"])"));
  EXPECT_EQ(profile["kernels"][1]["bottleneck"], "launch-bound");
  EXPECT_TRUE(j["rollouts"][1]["turns"][1]["profile"].is_null());
  EXPECT_TRUE(j["rollouts"][0]["turns"][0]["profile"].is_null());
  auto back = group_from_json(lines[0]);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(*back, g);

  std::ostringstream csv;
  ASSERT_TRUE(export_csv(*store_, {.run_id = "r4"}, csv).ok());
  const auto rows = parse_csv(csv.str());
  ASSERT_EQ(rows.size(), 1U + 4U);
  auto column = [&](const std::string& name) {
    const auto& cols = csv_columns();
    return static_cast<std::size_t>(std::find(cols.begin(), cols.end(), name) - cols.begin());
  };
  const auto& row = rows[3];  // rollout 1, turn 0
  ASSERT_EQ(row.size(), csv_columns().size());
  EXPECT_EQ(row[column("rollout_index")], "1");
  EXPECT_EQ(row[column("turn")], "0");
  EXPECT_EQ(row[column("profile_seconds")], "2.5");
  EXPECT_EQ(row[column("profile_note")], p.note);
  EXPECT_EQ(row[column("profile_kernels")], "copy_strided tiny");
  EXPECT_EQ(row[column("profile_duration_ns")], "1500.5 900");
  EXPECT_EQ(row[column("profile_bottlenecks")], "memory-bound launch-bound");
  EXPECT_EQ(row[column("profile_findings")], "uncoalesced_global+dram -");
  EXPECT_EQ(row[column("text")], g.rollouts[1].turns[0].text);
  for (const auto* unprofiled : {&rows[1], &rows[4]}) {
    EXPECT_EQ((*unprofiled)[column("profile_seconds")], "");
    EXPECT_EQ((*unprofiled)[column("profile_bottlenecks")], "");
  }
}

TEST_F(Export, AFailingStreamIsAnError) {
  std::ostringstream out;
  out.setstate(std::ios::badbit);
  auto counts = export_jsonl(*store_, {}, out);
  ASSERT_FALSE(counts.ok());
  EXPECT_NE(counts.err().message.find("write failed after 0 groups"), std::string::npos)
      << counts.err().message;
}

}  // namespace
}  // namespace leap
