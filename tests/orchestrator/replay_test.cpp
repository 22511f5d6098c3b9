// `leap replay`'s analysis on hand-made runs: the report's numbers, the what-if under another gate
// and reward (storage/replay_data_test.cpp reads the same data from a real store).
#include "orchestrator/replay.hpp"

#include "orchestrator/group_flow.hpp"
#include "tests/storage/csv_reader.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace leap {
namespace {

// A stored group: per rollout, the 1-based turn it passed at (0: never) and how many turns it
// generated; scored as the scorer would.
group_record make_group(std::uint64_t step, std::uint32_t index, gate_decision gate, bool probe,
                        const std::vector<std::pair<int, int>>& rollouts,
                        split_kind split = split_kind::train) {
  group_record g;
  g.run_id = "run";
  g.step = step;
  g.split = split;
  g.group_index = index;
  g.task_id = "t" + std::to_string(index);
  g.max_turns = 3;
  g.gate = gate;
  g.probe = probe;
  for (std::uint32_t i = 0; i < rollouts.size(); ++i) {
    rollout_record r;
    r.index = i;
    const auto [passed_at, turns] = rollouts[i];
    for (int t = 1; t <= turns; ++t) {
      turn_record turn;
      turn.text = "answer";
      turn.passed = passed_at == t;
      turn.verdict = turn.passed ? verdict_category::pass : verdict_category::wrong_answer;
      r.turns.push_back(turn);
    }
    g.rollouts.push_back(r);
  }
  for (const auto& r : g.rollouts) {
    g.n_fail += r.turns.front().passed ? 0 : 1;
  }
  score_group(g, reward_config{}, advantage_config{});
  return g;
}

replay_data sample_run() {
  replay_data d;
  d.run_id = "run";
  d.max_turns = 3;
  // Step 0: an opened group (two failures, one recovered at turn 2) and an easy closed one.
  d.groups.push_back(replay_group_of(
      make_group(0, 0, gate_decision::open, false, {{1, 1}, {1, 1}, {2, 2}, {0, 3}})));
  d.groups.push_back(replay_group_of(
      make_group(0, 1, gate_decision::closed_easy, false, {{1, 1}, {1, 1}, {1, 1}, {0, 1}})));
  // Step 1: a hopeless group that was probed (one recovery at turn 3) and one that was not.
  d.groups.push_back(replay_group_of(
      make_group(1, 0, gate_decision::closed_hopeless, true, {{0, 3}, {0, 3}, {3, 3}, {0, 3}})));
  d.groups.push_back(replay_group_of(
      make_group(1, 1, gate_decision::closed_hopeless, false, {{0, 1}, {0, 1}, {0, 1}, {0, 1}})));
  // Validation after step 1.
  d.groups.push_back(replay_group_of(
      make_group(1, 0, gate_decision::open, false, {{2, 2}, {0, 3}}, split_kind::validation)));
  step_record s;
  s.run_id = "run";
  s.step = 0;
  s.timings = {100, 60, 20, 10, 5, 5};
  d.steps.push_back(s);
  return d;
}

TEST(ReplayReportTest, RecomputesThePapersNumbers) {
  const auto report = build_replay_report(sample_run(), 2);
  ASSERT_EQ(report.steps.size(), 2u);
  const auto& s0 = report.steps[0];
  EXPECT_EQ(s0.groups, 2u);
  EXPECT_DOUBLE_EQ(s0.activated_fraction, 0.5);
  // 8 rollouts: 5 pass at turn 1, one more at turn 2.
  ASSERT_EQ(s0.accuracy.size(), 3u);
  EXPECT_DOUBLE_EQ(s0.accuracy[0], 5.0 / 8);
  EXPECT_DOUBLE_EQ(s0.accuracy[1], 6.0 / 8);
  EXPECT_DOUBLE_EQ(s0.accuracy[2], 6.0 / 8);
  // The opened group: 2 first-turn failures, 1 recovered.
  EXPECT_DOUBLE_EQ(s0.recovery.per_rollout, 0.5);
  EXPECT_DOUBLE_EQ(s0.recovery.per_group, 1.0);
  ASSERT_TRUE(s0.timings.has_value());
  EXPECT_DOUBLE_EQ(s0.timings->wall_ms, 100);
  // Step 1 has no record: it did not complete. Its probe recovered 1 of 4 failures.
  const auto& s1 = report.steps[1];
  EXPECT_FALSE(s1.timings.has_value());
  EXPECT_EQ(s1.probe_groups, 1u);
  EXPECT_DOUBLE_EQ(s1.probe_recovery.per_rollout, 0.25);
  EXPECT_DOUBLE_EQ(s1.probe_recovery.per_group, 1.0);
  EXPECT_DOUBLE_EQ(s1.accuracy[2], 0.0);  // training sees probes' first turns only
  EXPECT_EQ(s1.turns, 16u);
  ASSERT_EQ(report.validation.size(), 1u);
  EXPECT_EQ(report.validation[0].rollouts, 2u);
  EXPECT_DOUBLE_EQ(report.validation[0].accuracy[1], 0.5);
  EXPECT_EQ(report.total.groups, 4u);
  EXPECT_FALSE(report.total.timings.has_value());  // one step has no record
  ASSERT_EQ(report.composition.size(), 2u);

  const auto csv = steps_csv(report);
  EXPECT_EQ(csv.rfind("step,groups,activated,activated_fraction,acc_at_1,acc_at_2,acc_at_3,", 0),
            0u);
  EXPECT_NE(csv.find("\n0,2,1,0.5,0.625,0.75,0.75,"), std::string::npos) << csv;
  EXPECT_NE(format_replay_tables(report).find("did not complete"), std::string::npos);
}

// Buffered retry (issue 35): the per-step columns come from the stored buffers, the training
// signal from the stored advantages; a run without buffers has no retry table.
TEST(ReplayReportTest, RetryColumnsFromTheStoredBuffers) {
  auto data = sample_run();
  EXPECT_TRUE(format_retry_table(build_replay_report(data, 2)).empty());
  retry_step_record r0;
  r0.step = 0;
  r0.counts.admitted = 1;
  r0.buffer.entries = {{5, 0, 0, 0}};
  retry_step_record r1;
  r1.step = 1;
  r1.retried = {1};
  r1.counts.exhausted = 1;
  r1.counts.admitted = 1;
  r1.counts.evicted = 2;
  r1.buffer.entries = {{6, 1, 1, 0}, {7, 1, 1, 0}};
  data.retries = {r0, r1};
  const auto report = build_replay_report(data, 2);
  ASSERT_TRUE(report.steps[1].retry.has_value());
  EXPECT_EQ(report.steps[1].retry->retried, 1U);
  EXPECT_EQ(report.steps[1].retry->buffered, 2U);
  ASSERT_TRUE(report.total.retry.has_value());
  EXPECT_EQ(report.total.retry->counts.admitted, 2U);
  EXPECT_EQ(report.total.retry->counts.evicted, 2U);
  EXPECT_EQ(report.total.retry->buffered, 2U);
  // Step 0's opened group has mixed outcomes (signal); its easy group too (3 of 4 pass). Step 1:
  // the probed hopeless group trained on all-failed first turns, the other failed all: none.
  EXPECT_EQ(report.steps[0].signal_groups, 2U);
  EXPECT_EQ(report.steps[1].signal_groups, 0U);
  const auto csv = retry_csv(report);
  EXPECT_NE(csv.find("\n1,2,0,1,0,1,0,1,2,2\n"), std::string::npos) << csv;
  EXPECT_NE(format_retry_table(report).find("evicted"), std::string::npos);
}

// schedule.partial (issue 33): the step records' partial.* metrics become a table per step and a
// summed total; a run without them prints none.
TEST(ReplayReportTest, PartialRolloutColumnsFromTheStepRecords) {
  auto data = sample_run();
  EXPECT_EQ(format_replay_tables(build_replay_report(data, 2)).find("partial rollouts"),
            std::string::npos);
  data.steps[0].metrics = {{"partial.started", 3},         {"partial.carried_in", 0},
                           {"partial.trained_carried", 0}, {"partial.carried", 1},
                           {"partial.dropped", 0},         {"partial.dropped_stale", 0}};
  step_record second = data.steps[0];
  second.step = 1;
  second.metrics = {{"partial.started", 2},
                    {"partial.carried_in", 1},
                    {"partial.trained_carried", 1},
                    {"partial.carried", 0},
                    {"partial.dropped", 1}};
  data.steps.push_back(second);
  const auto report = build_replay_report(data, 2);
  ASSERT_TRUE(report.steps[1].partial.has_value());
  EXPECT_EQ(report.steps[1].partial->trained_carried, 1U);
  ASSERT_TRUE(report.total.partial.has_value());
  EXPECT_EQ(report.total.partial->started, 5U);
  EXPECT_EQ(report.total.partial->carried, 1U);
  EXPECT_EQ(report.total.partial->dropped, 1U);
  const auto table = format_replay_tables(report);
  EXPECT_NE(table.find("partial rollouts, per step"), std::string::npos) << table;
  EXPECT_NE(table.find("     2        2          1               1        0        1\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("   all        5          1               1        1        1\n"),
            std::string::npos)
      << table;
}

// The cells of a CSV's column, one per row after the header.
std::vector<std::string> csv_column(const std::string& csv, const std::string& name) {
  const std::vector<std::vector<std::string>> rows = leap::test::parse_csv(csv);
  std::vector<std::string> out;
  if (rows.empty()) {
    return out;
  }
  const auto at = std::find(rows[0].begin(), rows[0].end(), name);
  if (at == rows[0].end()) {
    return out;
  }
  const auto i = static_cast<std::size_t>(at - rows[0].begin());
  for (std::size_t r = 1; r < rows.size(); ++r) {
    out.push_back(i < rows[r].size() ? rows[r][i] : "?");
  }
  return out;
}

// The turn fields marked replay_mean are averaged per step over the turns that measured them: the
// timings over every turn, the speedup's noise only over turns that stated one (< 0: none). The
// list comes from the fields' marks alone, so a new marked field needs no edit in replay.
TEST(ReplayReportTest, TurnFieldsMarkedForReplayAreAveragedPerStep) {
  EXPECT_EQ(
      replay_turn_fields(),
      (std::vector<std::string>{"generation_ms", "compile_ms", "run_ms", "generation_queue_ms",
                                "compile_queue_ms", "run_queue_ms", "speedup_noise"}));
  auto g0 = make_group(0, 0, gate_decision::open, false, {{1, 1}, {2, 2}});
  g0.rollouts[0].turns[0].timings.compile_queue_ms = 10;
  g0.rollouts[0].turns[0].speedup_noise = 0.02;
  g0.rollouts[1].turns[0].timings.compile_queue_ms = 20;
  g0.rollouts[1].turns[1].timings.compile_queue_ms = 60;
  auto g1 = make_group(1, 0, gate_decision::closed_easy, false, {{1, 1}});
  g1.rollouts[0].turns[0].timings.compile_queue_ms = 7;
  g1.rollouts[0].turns[0].speedup_noise = 0.04;
  // A validation group's turns are not training turns.
  auto v = make_group(1, 0, gate_decision::open, false, {{1, 1}}, split_kind::validation);
  v.rollouts[0].turns[0].timings.compile_queue_ms = 1000;
  replay_data data;
  data.run_id = "run";
  data.max_turns = 3;
  for (const auto& g : {g0, g1, v}) {
    data.groups.push_back(replay_group_of(g));
  }
  const auto report = build_replay_report(data, 2);
  ASSERT_EQ(report.steps.size(), 2U);
  const auto at = [](const std::vector<std::string>& names, const std::string& name) {
    return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  const auto queue = at(replay_turn_fields(), "compile_queue_ms");
  const auto noise = at(replay_turn_fields(), "speedup_noise");
  ASSERT_EQ(report.steps[0].turn_means.size(), replay_turn_fields().size());
  EXPECT_NEAR(*report.steps[0].turn_means[queue].mean(), 30.0, 1e-9);   // (10 + 20 + 60) / 3
  EXPECT_NEAR(*report.steps[0].turn_means[noise].mean(), 0.02, 1e-12);  // one turn stated it
  EXPECT_NEAR(*report.total.turn_means[queue].mean(), 97.0 / 4, 1e-9);
  EXPECT_EQ(report.steps[0].turn_means[noise].count, 1U);
  EXPECT_EQ(report.total.turn_means[noise].count, 2U);

  const auto csv = steps_csv(report);
  EXPECT_EQ(csv_column(csv, "turn_mean_compile_queue_ms"), (std::vector<std::string>{"30", "7"}))
      << csv;
  EXPECT_EQ(csv_column(csv, "turn_mean_speedup_noise"), (std::vector<std::string>{"0.02", "0.04"}))
      << csv;
  const auto table = format_replay_tables(report);
  EXPECT_NE(table.find("each turn field's mean"), std::string::npos) << table;
  EXPECT_NE(table.find("compile_queue_ms"), std::string::npos) << table;

  // No turn stated a noise: no mean, an empty cell, "-" in the table.
  data.groups.clear();
  data.groups.push_back(replay_group_of(make_group(0, 0, gate_decision::open, false, {{1, 1}})));
  const auto untimed = build_replay_report(data, 2);
  EXPECT_FALSE(untimed.steps[0].turn_means[noise].mean().has_value());
  EXPECT_EQ(csv_column(steps_csv(untimed), "turn_mean_speedup_noise"),
            (std::vector<std::string>{""}));
}

// Under bounded staleness the next step starts before this one ends, so the steps' wall times
// overlap and their sum overstates the run's time: the elapsed time runs from the earliest step
// start on the step records' clocks.
TEST(ReplayReportTest, ElapsedTimeFromTheRunsFirstStepStartNotTheSumOfSteps) {
  auto data = sample_run();
  data.steps[0].started_unix_ms = 10'000;
  data.steps[0].finished_unix_ms = 14'000;
  data.steps[0].timings.wall_ms = 4'000;
  step_record second = data.steps[0];
  second.step = 1;
  second.started_unix_ms = 12'000;  // while step 0 trains
  second.finished_unix_ms = 17'500;
  second.timings.wall_ms = 5'500;
  data.steps.push_back(second);
  const auto report = build_replay_report(data, 2);
  ASSERT_EQ(report.steps.size(), 2U);
  ASSERT_TRUE(report.steps[0].elapsed_ms.has_value());
  ASSERT_TRUE(report.steps[1].elapsed_ms.has_value());
  EXPECT_NEAR(*report.steps[0].elapsed_ms, 4'000, 1e-9);
  EXPECT_NEAR(*report.steps[1].elapsed_ms, 7'500, 1e-9);
  ASSERT_TRUE(report.total.timings.has_value());
  EXPECT_NEAR(report.total.timings->wall_ms, 9'500, 1e-9);  // the overlap counted twice
  EXPECT_EQ(csv_column(steps_csv(report), "elapsed_ms"), (std::vector<std::string>{"4000", "7500"}))
      << steps_csv(report);

  // A step without a record has no end: an empty cell, never 0.
  data.steps.pop_back();
  EXPECT_EQ(csv_column(steps_csv(build_replay_report(data, 2)), "elapsed_ms"),
            (std::vector<std::string>{"4000", ""}));

  // Records without step starts (older stores) count from the run's creation when given.
  std::vector<step_record> unstarted = {data.steps[0]};
  unstarted[0].started_unix_ms = 0;
  EXPECT_TRUE(elapsed_since_start(unstarted, 0).empty());
  const auto from_creation = elapsed_since_start(unstarted, 9'000);
  ASSERT_EQ(from_creation.count(0), 1U);
  EXPECT_NEAR(from_creation.at(0), 5'000, 1e-9);
}

TEST(WhatIfTest, RegatesAndRescoresTheStoredVerdicts) {
  const auto data = sample_run();
  struct row {
    const char* name;
    gate_policy policy;
    double tau_max;
    reward_kind reward;
    double activated_after;
    std::uint32_t changed;
    std::uint32_t unobserved;
    std::uint32_t turns_after;
  };
  // Stored: 7 + 4 + 12 + 4 = 27 turns; the four groups' first turns alone are 16.
  const std::vector<row> rows = {
      {"the run's own gate (dcp [0.5, 0.75]) changes nothing", gate_policy::dcp, 0.75,
       reward_kind::rank, 0.25, 0, 0, 7 + 4 + 4 + 4},
      {"none closes everything: first turns only", gate_policy::none, 1.0, reward_kind::rank, 0.0,
       4, 0, 16},
      {"full opens every failing group; the unprobed ones are unobserved", gate_policy::full, 1.0,
       reward_kind::binary, 1.0, 3, 2, 7 + 4 + 12 + 4},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    scoring_config alt;
    alt.gate.policy = r.policy;
    alt.gate.tau_max = r.tau_max;
    alt.reward.kind = r.reward;
    const auto w = what_if(data, alt);
    ASSERT_EQ(w.steps.size(), 2u);
    EXPECT_EQ(w.total.groups, 4u);
    EXPECT_DOUBLE_EQ(w.total.activated_before, 0.25);
    EXPECT_DOUBLE_EQ(w.total.activated_after, r.activated_after);
    EXPECT_EQ(w.total.changed_decisions, r.changed);
    EXPECT_EQ(w.total.unobserved_opens, r.unobserved);
    EXPECT_EQ(w.total.turns_before, 27u);
    EXPECT_EQ(w.total.turns_after, r.turns_after);
  }
  // Under the run's own scoring the rewards and advantages are exactly the stored ones.
  scoring_config same;
  same.gate.tau_max = 0.75;
  const auto w = what_if(data, same);
  EXPECT_EQ(w.total.sign_flips, 0u);
  EXPECT_DOUBLE_EQ(w.total.mean_abs_advantage_before, w.total.mean_abs_advantage_after);
  EXPECT_FALSE(whatif_csv(w).empty());
}

// Speedups stored in the turns reach the per-step speed metrics (of the trained outcomes: a
// probe's debug pass does not count) and the what-if's rank_speed; a run without timing prints
// no speed table and leaves the CSV cells empty.
TEST(ReplayReportTest, SpeedPerStepFromTheStoredTurns) {
  auto timed_group = [](std::uint64_t step, std::uint32_t index, bool probe,
                        const std::vector<std::pair<int, int>>& rollouts,
                        const std::vector<double>& speedups) {
    auto g = make_group(step, index, probe ? gate_decision::closed_hopeless : gate_decision::open,
                        probe, rollouts);
    for (std::size_t i = 0; i < g.rollouts.size(); ++i) {
      for (auto& t : g.rollouts[i].turns) {
        t.speedup = t.passed ? speedups[i] : 0.0;
      }
    }
    score_group(g, reward_config{}, advantage_config{});
    return g;
  };
  replay_data d;
  d.run_id = "run";
  d.max_turns = 3;
  // Step 0: passes at 2.5x (turn 1), 1.1x (turn 2), an untimed pass and a failure.
  d.groups.push_back(replay_group_of(
      timed_group(0, 0, false, {{1, 1}, {2, 2}, {1, 1}, {0, 3}}, {2.5, 1.1, 0, 0})));
  // Step 1: a probe whose only pass is a debug turn at 3x: training saw failures only.
  d.groups.push_back(replay_group_of(timed_group(1, 0, true, {{0, 3}, {3, 3}}, {0, 3.0})));
  // Step 2: nothing timed.
  d.groups.push_back(
      replay_group_of(make_group(2, 0, gate_decision::open, false, {{1, 1}, {0, 3}})));
  const auto report = build_replay_report(d, 2);
  ASSERT_EQ(report.steps.size(), 3u);
  const auto& s0 = report.steps[0].speed;
  EXPECT_EQ(s0.rollouts(), 4u);
  EXPECT_EQ(s0.timed_passes(), 2u);
  EXPECT_DOUBLE_EQ(*s0.fast_p(0), 0.5);
  EXPECT_DOUBLE_EQ(*s0.fast_p(1), 0.5);
  EXPECT_DOUBLE_EQ(*s0.fast_p(2), 0.25);
  EXPECT_DOUBLE_EQ(*s0.fast_p(4), 0.25);
  EXPECT_NEAR(*s0.geomean_speedup(), std::sqrt(2.5 * 1.1), 1e-12);
  EXPECT_FALSE(report.steps[1].speed.fast_p(0).has_value());
  EXPECT_FALSE(report.steps[2].speed.geomean_speedup().has_value());
  EXPECT_EQ(report.total.speed.rollouts(), 8u);
  EXPECT_DOUBLE_EQ(*report.total.speed.fast_p(0), 2.0 / 8);

  const auto table = format_replay_tables(report);
  EXPECT_NE(table.find("fast_1.2"), std::string::npos) << table;
  EXPECT_NE(table.find("n/a"), std::string::npos) << table;
  // Nothing was timed against torch.compile: no second table.
  EXPECT_EQ(table.find("under torch.compile"), std::string::npos) << table;
  EXPECT_EQ(report.total.compiled_speed.timed_passes(), 0u);

  // The second baseline: the trained passes' speedups over the reference under torch.compile.
  auto compiled = timed_group(0, 0, false, {{1, 1}, {2, 2}, {1, 1}, {0, 3}}, {2.5, 1.1, 0, 0});
  compiled.rollouts[0].turns[0].compiled_speedup = 0.8;
  compiled.rollouts[1].turns[1].compiled_speedup = 1.6;
  replay_data dc;
  dc.run_id = "run";
  dc.max_turns = 3;
  dc.groups.push_back(replay_group_of(compiled));
  const auto with_compiled = build_replay_report(dc, 2);
  const auto& c0 = with_compiled.steps[0].compiled_speed;
  EXPECT_EQ(c0.timed_passes(), 2u);
  EXPECT_DOUBLE_EQ(*c0.fast_p(1), 0.25);  // only the 1.6x pass beats torch.compile
  EXPECT_NEAR(*c0.geomean_speedup(), std::sqrt(0.8 * 1.6), 1e-12);
  EXPECT_NEAR(*with_compiled.steps[0].speed.geomean_speedup(), std::sqrt(2.5 * 1.1), 1e-12);
  const auto compiled_table = format_replay_tables(with_compiled);
  EXPECT_NE(compiled_table.find("under torch.compile"), std::string::npos) << compiled_table;
  const auto csv = steps_csv(report);
  EXPECT_NE(csv.find(",passes,timed_passes,fast_0,fast_1.0,fast_1.2,fast_1.5,fast_2.0,"
                     "geomean_speedup\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(",3,2,0.5,0.5,0.25,0.25,0.25,1.65"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1,0,,,,,,\n"), std::string::npos) << csv;  // step 2: untimed

  // rank_speed in the what-if reads the stored speedups: two turn-1 passes at 2x and 1x tie
  // under rank (advantage 0) and are told apart under rank_speed.
  replay_data two;
  two.run_id = "run";
  two.max_turns = 3;
  two.groups.push_back(replay_group_of(timed_group(0, 0, false, {{1, 1}, {1, 1}}, {2.0, 1.0})));
  scoring_config alt;
  alt.reward.kind = reward_kind::rank_speed;
  const auto w = what_if(two, alt);
  EXPECT_DOUBLE_EQ(w.total.nonzero_advantage_before, 0.0);
  EXPECT_DOUBLE_EQ(w.total.nonzero_advantage_after, 1.0);
  EXPECT_EQ(speed_in(two.groups[0], 0, {1, 1}).speedup, std::optional<double>{2.0});
  EXPECT_FALSE(speed_in(two.groups[0], 0, {2, 2}).speedup.has_value());

  // Without any timing, no speed table at all.
  const auto plain = format_replay_tables(build_replay_report(sample_run(), 2));
  EXPECT_EQ(plain.find("fast_"), std::string::npos);
}

// Optimisation turns (issue 31): the what-if re-decides gate.optimise from the stored first-turn
// speedups, against the groups that ran optimisation turns; scoring never reads those turns.
TEST(WhatIfTest, RedecidesOptimisationTurnsWithAnotherFactor) {
  // Per rollout: first-turn speedup (0: failed or untimed) and optimisation turns run after it.
  auto group = [](std::uint32_t index, const std::vector<std::pair<double, int>>& rollouts) {
    group_record g;
    g.run_id = "run";
    g.task_id = "t" + std::to_string(index);
    g.group_index = index;
    g.max_turns = 3;
    g.gate = gate_decision::closed_no_debug;
    for (std::uint32_t i = 0; i < rollouts.size(); ++i) {
      rollout_record r;
      r.index = i;
      const auto [speedup, optimise_turns] = rollouts[i];
      turn_record first;
      first.text = "answer";
      first.passed = speedup > 0;
      first.verdict = first.passed ? verdict_category::pass : verdict_category::wrong_answer;
      first.speedup = speedup;
      r.turns.push_back(first);
      for (int t = 0; t < optimise_turns; ++t) {
        turn_record faster = first;
        faster.speedup = 3.0;  // never read: optimisation turns are measurement
        r.turns.push_back(faster);
      }
      g.rollouts.push_back(r);
    }
    score_group(g, reward_config{}, advantage_config{});
    return replay_group_of(g);
  };
  replay_data d;
  d.run_id = "run";
  d.max_turns = 3;
  d.groups.push_back(group(0, {{0.8, 1}, {1.0, 1}}));  // ran optimisation turns
  d.groups.push_back(group(1, {{2.0, 0}, {0.9, 0}}));  // one pass beats 1.2 already
  d.groups.push_back(group(2, {{0.9, 0}, {1.1, 0}}));  // slow, but the run ran none
  EXPECT_EQ(d.groups[0].optimise_turns, 2u);

  struct row {
    const char* name;
    double factor;
    double after;
    std::uint32_t unobserved;
    std::uint32_t turns_after;
  };
  const std::vector<row> rows = {
      {"off: first turns only", 0.0, 0.0, 0, 6},
      {"1.2 opens groups 0 and 2; group 2's turns never ran", 1.2, 2.0 / 3, 1, 6 + 2},
      {"0.85 opens none: each group has a pass above it", 0.85, 0.0, 0, 6},
      {"2.5 opens all three", 2.5, 1.0, 2, 6 + 2},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    scoring_config alt;
    alt.gate.policy = gate_policy::none;
    alt.gate.optimise.speedup = r.factor;
    const auto w = what_if(d, alt);
    EXPECT_NEAR(w.total.optimised_before, 1.0 / 3, 1e-12);
    EXPECT_NEAR(w.total.optimised_after, r.after, 1e-12);
    EXPECT_EQ(w.total.unobserved_optimise, r.unobserved);
    EXPECT_EQ(w.total.turns_before, 8u);
    EXPECT_EQ(w.total.turns_after, r.turns_after);
    // Scoring reads the first turns only, whatever gate.optimise says.
    EXPECT_EQ(w.total.sign_flips, 0u);
    EXPECT_DOUBLE_EQ(w.total.mean_abs_advantage_before, w.total.mean_abs_advantage_after);
  }
  scoring_config alt;
  alt.gate.optimise.speedup = 1.2;
  const auto w = what_if(d, alt);
  EXPECT_NE(whatif_csv(w).find(",optimised_before,optimised_after,unobserved_optimise\n"),
            std::string::npos);
  EXPECT_NE(
      format_whatif_table(w, "x").find("groups opened 0.333 -> 0.667, 1 opened that ran none"),
      std::string::npos)
      << format_whatif_table(w, "x");
  // A run without optimisation turns and an alternative without them: no extra line.
  EXPECT_EQ(format_whatif_table(what_if(sample_run(), scoring_config{}), "x").find("optimisation"),
            std::string::npos);
}

}  // namespace
}  // namespace leap

namespace leap {
namespace {

// A training group of two timed first-turn passes (0.8x and 0.9x), `optimise_turns` optimisation
// turns after rollout 0's, stored with `decision`.
replay_group stored_optimise_group(std::uint32_t index, std::optional<optimise_decision> decision,
                                   int optimise_turns) {
  group_record g;
  g.run_id = "run";
  g.task_id = "t" + std::to_string(index);
  g.group_index = index;
  g.step = index / 2;
  g.max_turns = 3;
  g.gate = gate_decision::closed_no_debug;
  g.optimise = decision;
  for (std::uint32_t i = 0; i < 2; ++i) {
    rollout_record r;
    r.index = i;
    turn_record first;
    first.text = "answer";
    first.passed = true;
    first.verdict = verdict_category::pass;
    first.speedup = i == 0 ? 0.8 : 0.9;
    r.turns.push_back(first);
    for (int t = 0; i == 0 && t < optimise_turns; ++t) {
      r.turns.push_back(first);
    }
    g.rollouts.push_back(r);
  }
  score_group(g, reward_config{}, advantage_config{});
  return replay_group_of(g);
}

// Issue 31: replay reports the optimisation decision the live run stored with each group, not one
// recomputed from the turns; groups stored without one (older stores) fall back to the trace of
// the optimisation turns they ran.
TEST(ReplayOptimiseTest, ReportsTheStoredDecisionsNotARecomputation) {
  replay_data d;
  d.run_id = "run";
  d.max_turns = 3;
  d.groups.push_back(stored_optimise_group(0, optimise_decision::open, 1));
  // Opened, yet no optimisation turn was stored (its generation ended the rollout): the stored
  // decision says what the run decided, the turns alone would say it was never opened.
  d.groups.push_back(stored_optimise_group(1, optimise_decision::open, 0));
  d.groups.push_back(stored_optimise_group(2, optimise_decision::closed_budget, 0));
  d.groups.push_back(stored_optimise_group(3, std::nullopt, 1));  // an older store's group
  EXPECT_EQ(d.groups[1].optimise, optimise_decision::open);
  EXPECT_FALSE(d.groups[3].optimise.has_value());

  const auto report = build_replay_report(d, 2);
  const auto& total = report.total.optimise_decisions;
  EXPECT_EQ(total[static_cast<std::size_t>(optimise_decision::open)], 2u);
  EXPECT_EQ(total[static_cast<std::size_t>(optimise_decision::closed_budget)], 1u);
  EXPECT_EQ(total[static_cast<std::size_t>(optimise_decision::closed_fast)], 0u);
  ASSERT_EQ(report.steps.size(), 2u);
  EXPECT_EQ(report.steps[0].optimise_decisions[static_cast<std::size_t>(optimise_decision::open)],
            2u);
  EXPECT_EQ(report.steps[1]
                .optimise_decisions[static_cast<std::size_t>(optimise_decision::closed_budget)],
            1u);
  const auto text = format_replay_tables(report);
  EXPECT_NE(text.find("optimisation decisions stored by the run"), std::string::npos) << text;
  EXPECT_NE(text.find("closed_budget"), std::string::npos) << text;

  // What-if "before": groups 0 and 1 (stored open) and 3 (no decision, ran turns): 3 of 4. The
  // alternative at 1.2 re-decides all four open from the stored first-turn speedups.
  scoring_config alt;
  alt.gate.policy = gate_policy::none;
  alt.gate.optimise.speedup = 1.2;
  const auto w = what_if(d, alt);
  EXPECT_NEAR(w.total.optimised_before, 3.0 / 4, 1e-12);
  EXPECT_NEAR(w.total.optimised_after, 1.0, 1e-12);

  // A run that stored no decision prints no table.
  EXPECT_EQ(
      format_replay_tables(build_replay_report(sample_run(), 2)).find("optimisation decisions"),
      std::string::npos);
}

}  // namespace
}  // namespace leap

namespace leap {
namespace {

// gate.optimise.train in the what-if: a group of two first-turn passes, rollout 0 at 0.8x that
// sped up to 3.0x in its optimisation turn, rollout 1 at 1.0x that ran none; stored as a run
// scored them with rank_speed without training on optimisation turns (rollout 1 ranked above).
replay_group sped_up_group() {
  group_record g;
  g.run_id = "run";
  g.task_id = "t";
  g.max_turns = 3;
  g.gate = gate_decision::closed_no_debug;
  g.optimise = optimise_decision::open;
  for (std::uint32_t i = 0; i < 2; ++i) {
    rollout_record r;
    r.index = i;
    turn_record first;
    first.text = "answer";
    first.passed = true;
    first.verdict = verdict_category::pass;
    first.speedup = i == 0 ? 0.8 : 1.0;
    r.turns.push_back(first);
    if (i == 0) {
      turn_record faster = first;
      faster.speedup = 3.0;
      r.turns.push_back(faster);
    }
    g.rollouts.push_back(r);
  }
  reward_config speed;
  speed.kind = reward_kind::rank_speed;
  score_group(g, speed, advantage_config{});
  EXPECT_LT(g.rollouts[0].advantage, 0.0);
  EXPECT_GT(g.rollouts[1].advantage, 0.0);
  return replay_group_of(g);
}

TEST(WhatIfTest, TrainingOnOptimisationTurnsPaysTheKeptTurnsSpeed) {
  replay_data d;
  d.run_id = "run";
  d.max_turns = 3;
  d.groups.push_back(sped_up_group());
  EXPECT_EQ(d.groups[0].kept_speeds[0].speedup, std::optional<double>(3.0));
  EXPECT_EQ(d.groups[0].kept_speeds[1].speedup, std::optional<double>(1.0));
  scoring_config alt;
  alt.gate.policy = gate_policy::none;
  alt.reward.kind = reward_kind::rank_speed;
  alt.gate.optimise.speedup = 1.2;
  // Measured only: the first turns' speeds rank as the run did.
  EXPECT_EQ(what_if(d, alt).total.sign_flips, 0u);
  // Trained on: rollout 0 is paid for its 3.0x kernel and now ranks above rollout 1.
  alt.gate.optimise.train = true;
  EXPECT_EQ(what_if(d, alt).total.sign_flips, 2u);
  // A factor that does not open the group leaves its optimisation turns unpaid.
  alt.gate.optimise.speedup = 0.9;
  EXPECT_EQ(what_if(d, alt).total.sign_flips, 0u);
}

}  // namespace
}  // namespace leap

namespace leap {
namespace {

turn_profile_record replay_struct_profile(std::uint32_t rollout, std::uint32_t turn) {
  turn_profile_record p;
  p.turn = {"run", 0, split_kind::train, 0, rollout, turn};
  p.kernels = {{"k", 100, "memory-bound", {}}};
  return p;
}

// A run scored live with structural terms (rank, G = 4: rewards 2/3, 2/3, -1/3, -1; the clean
// profiles of rollout 0's turn 1 and rollout 2's turn 2 add 0.04 each, so the stored mean reward
// is 0.08 / 4 = 0.02). The what-if under the run's own config adds the same terms from the stored
// profiles; with the terms off it pays the kind's rewards alone.
TEST(WhatIfTest, StructuralTermsComeFromTheStoredProfiles) {
  group_record g = make_group(0, 0, gate_decision::open, false, {{1, 1}, {1, 1}, {2, 2}, {0, 3}});
  reward_config reward;
  reward.structural.weights = {0.04, 0, 0, 0, 0};
  const std::vector<turn_profile_record> profiles = {replay_struct_profile(0, 0),
                                                     replay_struct_profile(2, 1)};
  score_group(g, reward, advantage_config{}, false, profiles);
  replay_data d;
  d.run_id = "run";
  d.max_turns = 3;
  d.groups.push_back(replay_group_of(g));
  d.turn_profiles = profiles;
  scoring_config same;
  same.gate.tau_max = 1.0;
  same.reward = reward;
  auto w = what_if(d, same);
  EXPECT_NEAR(w.total.mean_reward_before, 0.02, 1e-12);
  EXPECT_NEAR(w.total.mean_reward_after, 0.02, 1e-12);
  EXPECT_NEAR(w.total.mean_abs_advantage_after, w.total.mean_abs_advantage_before, 1e-12);
  scoring_config off = same;
  off.reward.structural = {};
  w = what_if(d, off);
  EXPECT_NEAR(w.total.mean_reward_after, 0.0, 1e-12);
  // Without stored profiles the terms are 0 too.
  d.turn_profiles.clear();
  EXPECT_NEAR(what_if(d, same).total.mean_reward_after, 0.0, 1e-12);
}

}  // namespace
}  // namespace leap
