// `leap report`'s pure part: aggregation of runs into mean, standard deviation and min-max,
// grouping by experiment name, the charts a model holds (and the notes for those it cannot draw),
// the latency table, and the page: every run string escaped, the data one JSON object, Chart.js
// inlined.
#include "tools/report/report.hpp"

#include "tools/report/chartjs.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace leap::report {
namespace {

// A completed step: accuracy at turns 1..M, activated fraction, recovery, timings of wall_s.
replay_step step(std::uint64_t index, std::vector<double> accuracy, double activated,
                 double recovery = 0.0, double wall_s = 10.0) {
  replay_step s;
  s.step = index;
  s.groups = 4;
  s.activated = static_cast<std::uint32_t>(activated * 4);
  s.activated_fraction = activated;
  s.accuracy = std::move(accuracy);
  s.recovery.per_rollout = recovery;
  s.timings = step_timings{wall_s * 1000, wall_s * 500, wall_s * 200,
                           wall_s * 100,  wall_s * 150, wall_s * 50};
  return s;
}

run_input run(const std::string& group, std::vector<replay_step> steps, int max_turns = 2) {
  run_input r;
  r.run_dir = "runs/" + group;
  r.run_id = group;
  r.group = group;
  r.status = "finished";
  r.replay.max_turns = max_turns;
  for (const auto& s : steps) {
    r.minutes[s.step] = static_cast<double>(s.step + 1) * 0.5;
  }
  r.replay.steps = std::move(steps);
  r.stored_groups = r.replay.steps.size() * 4;
  composition_bucket b{0.0, 1.0, {}};
  b.counts[0][1] = 2;
  r.replay.composition = {b};
  return r;
}

const chart* find_chart(const report_model& m, const std::string& id) {
  for (const auto& c : m.charts) {
    if (c.id == id) {
      return &c;
    }
  }
  return nullptr;
}

// Buffered retry (issue 35): drawn only when a run stored its buffer; the signal line is drawn for
// every run (the one without retry too), the recovered line only for runs with retry.
TEST(ReportModel, RetryChartWhenARunRetried) {
  auto plain = step(0, {0.5, 0.6}, 0.5);
  plain.signal_groups = 1;
  EXPECT_EQ(find_chart(build_model({run("leap", {plain})}), "retry"), nullptr);
  auto retried = step(0, {0.5, 0.6}, 0.5);
  retried.signal_groups = 3;
  retried.retry = replay_retry_columns{2, {}, 1};
  retried.retry->counts.recovered = 1;
  auto with = run("leap_retry", {retried});
  with.replay.total.retry = retried.retry;
  const auto model = build_model({run("leap", {plain}), with});
  const chart* c = find_chart(model, "retry");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->lines.size(), 3u);  // leap's recovered line has no point and is dropped
  EXPECT_EQ(c->lines[0].label, "leap signal");
  EXPECT_DOUBLE_EQ(c->lines[0].points[0].y, 0.25);
  EXPECT_EQ(c->lines[1].label, "leap_retry signal");
  EXPECT_DOUBLE_EQ(c->lines[1].points[0].y, 0.75);
  EXPECT_EQ(c->lines[2].label, "leap_retry recovered");
  EXPECT_TRUE(c->lines[2].dashed);
  EXPECT_DOUBLE_EQ(c->lines[2].points[0].y, 0.25);
}

// Profiles (issue 34): drawn only when a run stored one; per step the share of the profiled
// kernels in each bottleneck class, one colour per class, and the profiling seconds.
TEST(ReportModel, BottleneckChartWhenARunProfiled) {
  auto plain = step(0, {0.5, 0.6}, 0.5);
  EXPECT_EQ(find_chart(build_model({run("leap", {plain})}), "bottlenecks"), nullptr);
  EXPECT_EQ(find_chart(build_model({run("leap", {plain})}), "profile_seconds"), nullptr);
  auto first = step(0, {0.5, 0.6}, 0.5);
  first.profiles.profiles = 2;
  first.profiles.kernels[bottleneck_class_index("memory-bound")] = 3;
  first.profiles.kernels[bottleneck_class_index("launch-bound")] = 1;
  first.profiles.seconds = 12.5;
  auto second = step(1, {0.5, 0.6}, 0.5);
  second.profiles.profiles = 1;  // profiling failed: a note, no kernel
  second.profiles.seconds = 0.5;
  auto profiled = run("profiled", {first, second});
  profiled.replay.total.profiles.add(first.profiles);
  profiled.replay.total.profiles.add(second.profiles);
  const auto model = build_model({run("leap", {plain}), profiled});
  const chart* c = find_chart(model, "bottlenecks");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->lines.size(), bottleneck_class_names.size());  // leap's lines have no point
  EXPECT_EQ(c->lines[0].label, "profiled memory-bound");
  ASSERT_EQ(c->lines[0].points.size(), 1U);  // step 2 profiled no kernel
  EXPECT_DOUBLE_EQ(c->lines[0].points[0].x, 1.0);
  EXPECT_DOUBLE_EQ(c->lines[0].points[0].y, 0.75);
  EXPECT_DOUBLE_EQ(c->lines[3].points[0].y, 0.25);  // launch-bound
  EXPECT_DOUBLE_EQ(c->lines[1].points[0].y, 0.0);   // compute-bound
  EXPECT_NE(c->lines[0].color, c->lines[1].color);
  const chart* seconds = find_chart(model, "profile_seconds");
  ASSERT_NE(seconds, nullptr);
  ASSERT_EQ(seconds->lines.size(), 1U);
  ASSERT_EQ(seconds->lines[0].points.size(), 2U);
  EXPECT_DOUBLE_EQ(seconds->lines[0].points[0].y, 12.5);
  EXPECT_DOUBLE_EQ(seconds->lines[0].points[1].y, 0.5);
}

TEST(ReportAggregate, MeanAndMinMaxPerStepOverTheRunsThatHaveIt) {
  struct row {
    std::string name;
    std::vector<std::map<std::uint64_t, std::pair<double, double>>> runs;
    std::vector<point> expected;
  };
  const std::vector<row> rows = {
      {"one run", {{{0, {1, 0.5}}, {1, {2, 0.7}}}}, {{1, 0.5, 0.5, 0.5, 1}, {2, 0.7, 0.7, 0.7, 1}}},
      {"two runs", {{{0, {1, 0.2}}}, {{0, {3, 0.6}}}}, {{2, 0.4, 0.2, 0.6, 2}}},
      {"a step only one run reached",
       {{{0, {1, 0.2}}, {1, {2, 0.4}}}, {{0, {1, 0.4}}}},
       {{1, 0.3, 0.2, 0.4, 2}, {2, 0.4, 0.4, 0.4, 1}}},
      {"x order, not step order, when mean times cross",
       {{{0, {5, 0.1}}, {1, {4, 0.2}}}},
       {{4, 0.2, 0.2, 0.2, 1}, {5, 0.1, 0.1, 0.1, 1}}},
      {"nothing", {}, {}},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    const auto got = aggregate(r.runs);
    ASSERT_EQ(got.size(), r.expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_DOUBLE_EQ(got[i].x, r.expected[i].x);
      EXPECT_DOUBLE_EQ(got[i].y, r.expected[i].y);
      EXPECT_DOUBLE_EQ(got[i].lo, r.expected[i].lo);
      EXPECT_DOUBLE_EQ(got[i].hi, r.expected[i].hi);
      EXPECT_EQ(got[i].runs, r.expected[i].runs);
    }
  }
}

// A group of seeds: mean and sample standard deviation (n - 1) per step, over the runs that reached
// the step; a step one run lacks counts the others only, and a step one run has has no spread.
TEST(ReportAggregate, SampleStandardDeviationPerStepOverTheRunsThatHaveIt) {
  const std::vector<std::map<std::uint64_t, std::pair<double, double>>> runs = {
      {{0, {1, 0.1}}, {1, {2, 0.5}}, {2, {3, 0.9}}},
      {{0, {1, 0.2}}, {1, {2, 0.7}}},
      {{0, {1, 0.6}}},
  };
  const auto got = aggregate(runs);
  ASSERT_EQ(got.size(), 3u);
  // Step 0: 0.1, 0.2, 0.6: mean 0.3, squared deviations 0.04 + 0.01 + 0.09 over n - 1 = 2.
  EXPECT_NEAR(got[0].y, 0.3, 1e-12);
  EXPECT_NEAR(got[0].sd, std::sqrt(0.07), 1e-12);
  EXPECT_EQ(got[0].runs, 3);
  // Step 1: 0.5, 0.7 (the third run stopped before it): mean 0.6, sd sqrt(0.02).
  EXPECT_NEAR(got[1].y, 0.6, 1e-12);
  EXPECT_NEAR(got[1].sd, std::sqrt(0.02), 1e-12);
  EXPECT_EQ(got[1].runs, 2);
  // Step 2: one run: its value, no spread.
  EXPECT_NEAR(got[2].y, 0.9, 1e-12);
  EXPECT_EQ(got[2].sd, 0.0);
  EXPECT_EQ(got[2].runs, 1);
  // Runs that agree have no spread (two passes: no cancellation in the sum of squares).
  const auto same = aggregate({{{0, {1, 0.123}}}, {{0, {1, 0.123}}}, {{0, {1, 0.123}}}});
  ASSERT_EQ(same.size(), 1u);
  EXPECT_NEAR(same[0].sd, 0.0, 1e-15);

  // The band's edges: mean +/- sd, or min and max.
  const auto [lo, hi] = band_edges(got[0], band_kind::std_dev);
  EXPECT_NEAR(lo, 0.3 - std::sqrt(0.07), 1e-12);
  EXPECT_NEAR(hi, 0.3 + std::sqrt(0.07), 1e-12);
  const auto [min, max] = band_edges(got[0], band_kind::min_max);
  EXPECT_NEAR(min, 0.1, 1e-12);
  EXPECT_NEAR(max, 0.6, 1e-12);
}

// The page's data carries the band the options ask for, and the captions say which it is.
TEST(ReportModel, TheBandIsOneStandardDeviationUnlessMinMaxIsAsked) {
  const std::vector<run_input> runs = {
      run("leap", {step(0, {0.2, 0.4}, 0.5)}),
      run("leap", {step(0, {0.4, 0.8}, 0.5)}),
      run("leap", {step(0, {0.9, 0.9}, 0.5)}),
  };
  // pass@1 at step 1: 0.2, 0.4, 0.9: mean 0.5, sample variance (0.09 + 0.01 + 0.16) / 2 = 0.13.
  const double sd = std::sqrt(0.13);
  for (const auto band : {band_kind::std_dev, band_kind::min_max}) {
    SCOPED_TRACE(band == band_kind::std_dev ? "std" : "min-max");
    report_options options;
    options.band = band;
    const auto model = build_model(runs, options);
    const chart* acc = find_chart(model, "accuracy_step");
    ASSERT_NE(acc, nullptr);
    EXPECT_TRUE(acc->lines[0].band);
    EXPECT_NE(acc->caption.find(band == band_kind::std_dev ? "standard deviation" : "min-max"),
              std::string::npos)
        << acc->caption;
    const auto j = nlohmann::json::parse(model_json(model));
    EXPECT_EQ(j["band"], band == band_kind::std_dev ? "std" : "min-max");
    const nlohmann::json* line = nullptr;
    for (const auto& c : j["charts"]) {
      if (c["id"] == "accuracy_step") {
        line = &c["lines"][0];
      }
    }
    ASSERT_NE(line, nullptr);
    ASSERT_EQ((*line)["label"], "leap pass@1");
    const auto& p = (*line)["points"][0];
    EXPECT_NEAR(p[1].get<double>(), 0.5, 1e-12);
    EXPECT_NEAR(p[2].get<double>(), band == band_kind::std_dev ? 0.5 - sd : 0.2, 1e-12);
    EXPECT_NEAR(p[3].get<double>(), band == band_kind::std_dev ? 0.5 + sd : 0.9, 1e-12);
    EXPECT_EQ(p[4].get<int>(), 3);
  }
}

TEST(ReportQuantile, LinearInterpolationAsNumpy) {
  struct row {
    std::vector<double> values;
    double q;
    double expected;
  };
  const std::vector<row> rows = {
      {{}, 0.5, 0.0},
      {{7}, 0.9, 7.0},
      {{1, 2, 3, 4}, 0.5, 2.5},
      {{4, 1, 3, 2}, 1.0, 4.0},
      {{1, 2, 3, 4, 5}, 0.9, 4.6},
      {{10, 20}, 0.0, 10.0},
  };
  for (const auto& r : rows) {
    EXPECT_NEAR(quantile(r.values, r.q), r.expected, 1e-12);
  }
}

TEST(ReportModel, RunsOfOneGroupAreOverlaidAsMeanWithBand) {
  const std::vector<run_input> runs = {
      run("leap", {step(0, {0.2, 0.4}, 0.5, 0.25), step(1, {0.4, 0.6}, 0.25, 0.5)}),
      run("leap", {step(0, {0.4, 0.8}, 0.75, 0.75), step(1, {0.6, 0.8}, 0.5, 1.0)}),
      run("grpo", {step(0, {0.1}, 0.0)}, 1),
  };
  const auto model = build_model(runs);
  ASSERT_EQ(model.runs.size(), 3u);
  EXPECT_EQ(model.runs[0].group, "leap");
  EXPECT_EQ(model.runs[2].group, "grpo");
  EXPECT_NE(model.runs[0].color, model.runs[2].color);
  EXPECT_EQ(model.runs[0].color, model.runs[1].color);
  EXPECT_EQ(model.runs[0].completed_steps, 2u);

  const chart* acc = find_chart(model, "accuracy_step");
  ASSERT_NE(acc, nullptr);
  // leap: pass@1 and pass@2; grpo (M = 1): pass@1 only.
  ASSERT_EQ(acc->lines.size(), 3u);
  EXPECT_EQ(acc->lines[0].label, "leap pass@1");
  EXPECT_TRUE(acc->lines[0].dashed);
  EXPECT_TRUE(acc->lines[0].band);
  EXPECT_EQ(acc->lines[1].label, "leap pass@2");
  EXPECT_FALSE(acc->lines[1].dashed);
  EXPECT_EQ(acc->lines[2].label, "grpo pass@1");
  EXPECT_FALSE(acc->lines[2].band);
  ASSERT_EQ(acc->lines[1].points.size(), 2u);
  EXPECT_DOUBLE_EQ(acc->lines[1].points[0].x, 1.0);  // steps counted from 1
  EXPECT_DOUBLE_EQ(acc->lines[1].points[0].y, 0.6);
  EXPECT_DOUBLE_EQ(acc->lines[1].points[0].lo, 0.4);
  EXPECT_DOUBLE_EQ(acc->lines[1].points[0].hi, 0.8);

  const chart* time = find_chart(model, "accuracy_time");
  ASSERT_NE(time, nullptr);
  EXPECT_DOUBLE_EQ(time->lines[0].points[1].x, 1.0);  // minutes at the end of step 1
  EXPECT_DOUBLE_EQ(time->lines[0].points[1].y, 0.5);

  const chart* activated = find_chart(model, "activated");
  ASSERT_NE(activated, nullptr);
  EXPECT_DOUBLE_EQ(activated->lines[0].points[0].y, 0.625);

  // Recovery only where a group was opened: grpo opened none, so it has no recovery line; no run
  // has probes.
  const chart* recovery = find_chart(model, "recovery");
  ASSERT_NE(recovery, nullptr);
  EXPECT_EQ(recovery->kind, "line");
  EXPECT_EQ(recovery->x_label, "step");
  ASSERT_EQ(recovery->lines.size(), 1u);
  EXPECT_EQ(recovery->lines[0].label, "leap recovery");
  EXPECT_DOUBLE_EQ(recovery->lines[0].points[1].y, 0.75);

  const chart* composition = find_chart(model, "composition");
  ASSERT_NE(composition, nullptr);
  EXPECT_EQ(composition->categories, std::vector<std::string>{"[0.00, 1.00]"});
  ASSERT_EQ(composition->bars.size(), 12u);  // 6 kinds x 2 groups
  EXPECT_EQ(composition->bars[0].label, "leap: turn-1 pass, A>0");
  EXPECT_EQ(composition->bars[0].stack, "leap");
  EXPECT_DOUBLE_EQ(composition->bars[0].values[0], 2.0);  // the mean over the group's runs

  const chart* time_by_stage = find_chart(model, "step_time");
  ASSERT_NE(time_by_stage, nullptr);
  EXPECT_EQ(time_by_stage->categories, (std::vector<std::string>{"leap", "grpo"}));
  ASSERT_EQ(time_by_stage->bars.size(), 5u);
  EXPECT_EQ(time_by_stage->bars[0].label, "generation");
  EXPECT_DOUBLE_EQ(time_by_stage->bars[0].values[0], 5.0);  // seconds

  // No validation and no stored turn times: notes, not empty charts.
  EXPECT_EQ(find_chart(model, "validation"), nullptr);
  EXPECT_EQ(find_chart(model, "verifier_latency"), nullptr);
  // No timed pass either: the two speed charts are notes too.
  EXPECT_EQ(find_chart(model, "fast_p"), nullptr);
  EXPECT_EQ(find_chart(model, "fast_p_compiled"), nullptr);
  ASSERT_EQ(model.notes.size(), 6u);
  EXPECT_NE(model.notes[0].find("Validation accuracy vs step: not drawn"), std::string::npos);
  EXPECT_NE(model.notes[1].find("Fast_p vs step: not drawn, no step timed"), std::string::npos);
  EXPECT_NE(model.notes[2].find("Geometric-mean speedup vs step: not drawn"), std::string::npos);
  EXPECT_NE(model.notes[3].find("Fast_p over torch.compile vs step: not drawn, no step timed a "
                                "passing candidate against torch.compile"),
            std::string::npos);
  EXPECT_NE(model.notes[4].find("Geometric-mean speedup over torch.compile vs step: not drawn"),
            std::string::npos);
  EXPECT_NE(model.notes[5].find("Verifier latency distribution: not drawn"), std::string::npos);
}

// Speed per step from the replay's speed summaries: a point only where something was timed.
TEST(ReportModel, SpeedChartsOnlyWhereTimed) {
  auto timed = step(0, {0.5, 0.75}, 0.5);
  timed.speed.add({1, 1}, {2.5, std::nullopt});
  timed.speed.add({1, 1}, {1.1, std::nullopt});
  timed.speed.add({0, 1}, {});
  timed.speed.add({1, 1}, {});
  auto untimed = step(1, {0.5, 0.75}, 0.5);
  untimed.speed.add({1, 1}, {});
  const auto model = build_model({run("leap", {timed, untimed})});
  const chart* fast = find_chart(model, "fast_p");
  ASSERT_NE(fast, nullptr);
  ASSERT_EQ(fast->lines.size(), 2u);
  EXPECT_EQ(fast->lines[0].label, "leap fast_1.0");
  EXPECT_FALSE(fast->lines[0].dashed);
  EXPECT_EQ(fast->lines[1].label, "leap fast_2.0");
  EXPECT_TRUE(fast->lines[1].dashed);
  ASSERT_EQ(fast->lines[0].points.size(), 1u);  // step 2 timed nothing: no point, not 0
  EXPECT_DOUBLE_EQ(fast->lines[0].points[0].x, 1.0);
  EXPECT_DOUBLE_EQ(fast->lines[0].points[0].y, 0.5);   // 2 of 4 rollouts above 1.0
  EXPECT_DOUBLE_EQ(fast->lines[1].points[0].y, 0.25);  // 1 of 4 above 2.0
  const chart* speedup = find_chart(model, "speedup");
  ASSERT_NE(speedup, nullptr);
  ASSERT_EQ(speedup->lines[0].points.size(), 1u);
  EXPECT_NEAR(speedup->lines[0].points[0].y, std::sqrt(2.5 * 1.1), 1e-12);
  // Nothing was timed against torch.compile: those two are notes.
  EXPECT_EQ(find_chart(model, "fast_p_compiled"), nullptr);
  EXPECT_EQ(find_chart(model, "speedup_compiled"), nullptr);
}

// The speedups over torch.compile (KernelBench's second baseline) are charts of their own, from
// the replay's compiled speed summaries, beside those over eager.
TEST(ReportModel, SpeedOverTorchCompileIsChartedApart) {
  auto timed = step(0, {0.5, 0.75}, 0.5);
  timed.speed.add({1, 1}, {3.0, std::nullopt});
  timed.speed.add({1, 1}, {1.5, std::nullopt});
  timed.compiled_speed.add({1, 1}, {0.8, std::nullopt});
  timed.compiled_speed.add({1, 1}, {1.25, std::nullopt});
  const auto model = build_model({run("kb", {timed})});
  const chart* fast = find_chart(model, "fast_p_compiled");
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(fast->title, "Fast_p over torch.compile vs step");
  ASSERT_EQ(fast->lines.size(), 2u);
  ASSERT_EQ(fast->lines[0].points.size(), 1u);
  EXPECT_DOUBLE_EQ(fast->lines[0].points[0].y, 0.5);  // 1 of 2 above 1.0 over compile
  EXPECT_DOUBLE_EQ(fast->lines[1].points[0].y, 0.0);  // none above 2.0
  const chart* speedup = find_chart(model, "speedup_compiled");
  ASSERT_NE(speedup, nullptr);
  EXPECT_NEAR(speedup->lines[0].points[0].y, std::sqrt(0.8 * 1.25), 1e-12);
  // Over eager, from the same step: its own numbers.
  const chart* eager = find_chart(model, "speedup");
  ASSERT_NE(eager, nullptr);
  EXPECT_NEAR(eager->lines[0].points[0].y, std::sqrt(3.0 * 1.5), 1e-12);
}

TEST(ReportModel, ValidationAndLatency) {
  auto r = run("leap", {step(0, {0.5, 0.75}, 0.5)});
  replay_validation v;
  v.step = 0;
  v.groups = 1;
  v.rollouts = 4;
  v.accuracy = {0.25, 0.5};
  r.replay.validation = {v};
  // 0 ms entries (cache hits, never ran) are left out.
  r.compile_ms = {0, 300, 400, 1500};
  r.run_ms = {0, 0, 3, 4};
  const auto model = build_model({r});
  const chart* validation = find_chart(model, "validation");
  ASSERT_NE(validation, nullptr);
  EXPECT_EQ(validation->kind, "line");
  EXPECT_EQ(validation->x_label, "step");
  EXPECT_EQ(validation->y_label, "accuracy");
  ASSERT_EQ(validation->lines.size(), 2u);
  EXPECT_DOUBLE_EQ(validation->lines[1].points[0].y, 0.5);

  const chart* latency = find_chart(model, "verifier_latency");
  ASSERT_NE(latency, nullptr);
  // From the bin of the 3 ms run to that of the 1.5 s compile: 2-5 ms ... 1-2 s.
  EXPECT_EQ(latency->categories.front(), "2 ms - 5 ms");
  EXPECT_EQ(latency->categories.back(), "1 s - 2 s");
  ASSERT_EQ(latency->bars.size(), 2u);
  EXPECT_EQ(latency->bars[0].label, "compile");
  double sum = 0;
  for (double f : latency->bars[0].values) {
    sum += f;
  }
  EXPECT_DOUBLE_EQ(sum, 1.0);
  EXPECT_DOUBLE_EQ(latency->bars[1].values.front(), 1.0);  // both runs in 2-5 ms
  ASSERT_EQ(model.latency.size(), 1u);
  EXPECT_EQ(model.latency[0].compiled, 3u);
  EXPECT_DOUBLE_EQ(model.latency[0].compile_p50, 400.0);
  EXPECT_DOUBLE_EQ(model.latency[0].compile_max, 1500.0);
  EXPECT_EQ(model.latency[0].ran, 2u);
  EXPECT_DOUBLE_EQ(model.latency[0].run_p50, 3.5);
  ASSERT_EQ(model.notes.size(), 4u);  // nothing timed: the speed charts only (eager, compile)
  EXPECT_NE(model.notes[0].find("Fast_p vs step"), std::string::npos);
}

TEST(ReportHtml, EscapesEveryRunString) {
  struct row {
    std::string text;
    std::string escaped;
  };
  const std::vector<row> rows = {{"plain", "plain"},
                                 {"<b>&\"'", "&lt;b&gt;&amp;&quot;&#39;"},
                                 {"</script><script>alert(1)</script>",
                                  "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"}};
  for (const auto& r : rows) {
    EXPECT_EQ(html_escape(r.text), r.escaped);
  }

  auto hostile = run("x</script><img src=x onerror=alert(1)>", {step(0, {0.5, 0.5}, 0.5)});
  hostile.run_dir = "runs/<i>dir</i>";
  hostile.run_id = "id&\"quoted\"";
  const auto model = build_model({hostile});
  const auto html = render_html(model, "var chartjs = 1;");
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<i>dir"), std::string::npos);
  EXPECT_NE(html.find("runs/&lt;i&gt;dir&lt;/i&gt;"), std::string::npos);
  EXPECT_NE(html.find("id&amp;&quot;quoted&quot;"), std::string::npos);
  // The JSON has no raw <, > or & at all, so it cannot end its <script> element.
  const auto json = model_json(model);
  EXPECT_EQ(json.find_first_of("<>&"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(json)["charts"][0]["lines"][0]["label"].get<std::string>(),
            "x</script><img src=x onerror=alert(1)> pass@1");
  // Exactly the page's own script elements: error recorder, data, Chart.js, drawing.
  std::size_t scripts = 0;
  for (auto at = html.find("</script>"); at != std::string::npos;
       at = html.find("</script>", at + 1)) {
    ++scripts;
  }
  EXPECT_EQ(scripts, 4u);
}

TEST(ReportHtml, OneCanvasPerChartAndTheLibraryInline) {
  auto r = run("leap", {step(0, {0.5, 0.75}, 0.5, 0.5)});
  r.compile_ms = {100};
  r.run_ms = {10};
  const auto model = build_model({r});
  const auto html = render_html(model, "/* lib */ var s = '</SCRIPT>';");
  for (const auto& c : model.charts) {
    EXPECT_NE(html.find("<canvas id=\"chart-" + c.id + "\""), std::string::npos) << c.id;
    EXPECT_TRUE(c.kind == "line" || c.kind == "bar") << c.id;
    EXPECT_FALSE(c.title.empty()) << c.id;
  }
  EXPECT_NE(html.find("var s = '<\\/SCRIPT>';"), std::string::npos);
  EXPECT_NE(html.find("id=\"leap-data\""), std::string::npos);
  EXPECT_NE(html.find("data-drawn"), std::string::npos);
  EXPECT_NE(html.find("window.onerror"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
}

TEST(ReportChartjs, TheEmbeddedBundleIsChartJs3) {
  const auto js = chartjs_source();
  EXPECT_GT(js.size(), 100000u);
  EXPECT_NE(js.find("Chart.js v3."), std::string_view::npos);
}

}  // namespace
}  // namespace leap::report
