#include "tools/report/report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <set>

namespace leap::report {
namespace {

// Tableau's ten colours: distinct on screen and in grey print.
constexpr std::array<const char*, 10> palette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                 "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                                 "#bcbd22", "#17becf"};

using per_step = std::map<std::uint64_t, std::pair<double, double>>;

struct group_view {
  std::string name;
  std::string color;
  std::vector<const run_input*> runs;
  int max_turns = 1;  // the largest M among the runs
};

std::vector<group_view> group_runs(const std::vector<run_input>& runs) {
  std::vector<group_view> groups;
  for (const auto& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const group_view& g) { return g.name == r.group; });
    if (it == groups.end()) {
      groups.push_back({r.group, palette[groups.size() % palette.size()], {}, 1});
      it = groups.end() - 1;
    }
    it->runs.push_back(&r);
    it->max_turns = std::max(it->max_turns, r.replay.max_turns);
  }
  return groups;
}

// One line of a group: per run, the (x, y) of each step `pick` gives a value for.
template <class Pick>
line_series group_line(const group_view& g, const std::string& label, bool dashed, Pick pick) {
  std::vector<per_step> per_run;
  for (const auto* r : g.runs) {
    per_step values;
    pick(*r, values);
    if (!values.empty()) {
      per_run.push_back(std::move(values));
    }
  }
  line_series s;
  s.label = label;
  s.color = g.color;
  s.dashed = dashed;
  s.points = aggregate(per_run);
  s.band = per_run.size() > 1;
  return s;
}

// A group's line over steps: per run, (step + 1, v) for each step `value` gives a v for.
template <class Value>
line_series step_line(const group_view& g, const std::string& label, bool dashed, Value value) {
  return group_line(g, label, dashed, [&](const run_input& r, per_step& out) {
    for (const auto& s : r.replay.steps) {
      if (const std::optional<double> v = value(s)) {
        out[s.step] = {static_cast<double>(s.step + 1), *v};
      }
    }
  });
}

chart make_chart(std::string id, std::string title, std::string caption, std::string kind,
                 std::string x_label, std::string y_label) {
  chart c;
  c.id = std::move(id);
  c.title = std::move(title);
  c.caption = std::move(caption);
  c.kind = std::move(kind);
  c.x_label = std::move(x_label);
  c.y_label = std::move(y_label);
  return c;
}

// Keeps the chart when some line has a point; otherwise leaves a note saying why it is missing.
void add_line_chart(report_model& model, chart c, const std::string& why_empty) {
  std::erase_if(c.lines, [](const line_series& s) { return s.points.empty(); });
  if (c.lines.empty()) {
    model.notes.push_back(c.title + ": not drawn, " + why_empty + ".");
    return;
  }
  model.charts.push_back(std::move(c));
}

std::string band_words(const std::vector<group_view>& groups, band_kind band) {
  const bool any = std::any_of(groups.begin(), groups.end(),
                               [](const group_view& g) { return g.runs.size() > 1; });
  if (!any) {
    return "";
  }
  return band == band_kind::min_max
             ? " Groups of several runs: the line is their mean, the shaded band their min-max."
             : " Groups of several runs: the line is their mean, the shaded band +/- one "
               "standard deviation over the runs (sample, n - 1).";
}

void accuracy_charts(report_model& model, const std::vector<group_view>& groups) {
  chart time =
      make_chart("accuracy_time", "Training accuracy vs wall-clock time",
                 "Cumulative pass rate of each step's training batch by turn 1 (dashed) and "
                 "by the last turn (solid), at the end of each completed step; x is minutes "
                 "since the run's first step started (the mean over a group's runs)." +
                     band_words(groups, model.band),
                 "line", "wall-clock (minutes)", "accuracy");
  time.y_min = 0.0;
  time.y_max = 1.0;
  chart steps = time;
  steps.id = "accuracy_step";
  steps.title = "Training accuracy vs step";
  steps.caption =
      "Cumulative pass rate of each step's training batch by turn 1 (dashed) and by the last turn "
      "(solid); steps counted from 1." +
      band_words(groups, model.band);
  steps.x_label = "step";
  for (const auto& g : groups) {
    auto pass_at = [](int turn) {
      // turn 0: the last turn of the run.
      return [turn](const replay_step& s) {
        return turn == 0 ? s.accuracy.back() : s.accuracy[static_cast<std::size_t>(turn - 1)];
      };
    };
    const std::vector<std::pair<int, std::string>> turns =
        g.max_turns > 1
            ? std::vector<std::pair<int, std::string>>{{1, "pass@1"},
                                                       {0, "pass@" + std::to_string(g.max_turns)}}
            : std::vector<std::pair<int, std::string>>{{1, "pass@1"}};
    for (const auto& [turn, name] : turns) {
      const auto value = pass_at(turn);
      time.lines.push_back(group_line(g, g.name + " " + name, turn == 1 && g.max_turns > 1,
                                      [&](const run_input& r, per_step& out) {
                                        for (const auto& s : r.replay.steps) {
                                          const auto m = r.minutes.find(s.step);
                                          if (s.groups == 0 || s.accuracy.empty() ||
                                              m == r.minutes.end()) {
                                            continue;
                                          }
                                          out[s.step] = {m->second, value(s)};
                                        }
                                      }));
      steps.lines.push_back(step_line(g, g.name + " " + name, turn == 1 && g.max_turns > 1,
                                      [&](const auto& s) -> std::optional<double> {
                                        if (s.groups == 0 || s.accuracy.empty()) {
                                          return std::nullopt;
                                        }
                                        return value(s);
                                      }));
    }
  }
  chart validation = steps;  // the same axes; copied before `steps` is handed over
  add_line_chart(model, std::move(time), "no step has completed yet (no step record)");
  add_line_chart(model, std::move(steps), "no training group is stored");

  validation.id = "validation";
  validation.title = "Validation accuracy vs step";
  validation.caption =
      "Cumulative pass rate of the validation groups (validation sampling, every failure "
      "debugged) by turn 1 (dashed) and by the last turn (solid), after the step shown." +
      band_words(groups, model.band);
  validation.lines.clear();
  for (const auto& g : groups) {
    for (int turn : g.max_turns > 1 ? std::vector<int>{1, 0} : std::vector<int>{1}) {
      const std::string name = turn == 1 ? "pass@1" : "pass@" + std::to_string(g.max_turns);
      validation.lines.push_back(group_line(g, g.name + " " + name, turn == 1 && g.max_turns > 1,
                                            [&](const run_input& r, per_step& out) {
                                              for (const auto& v : r.replay.validation) {
                                                if (v.accuracy.empty()) {
                                                  continue;
                                                }
                                                out[v.step] = {static_cast<double>(v.step + 1),
                                                               turn == 0 ? v.accuracy.back()
                                                                         : v.accuracy.front()};
                                              }
                                            }));
    }
  }
  add_line_chart(model, std::move(validation),
                 "no validation group is stored (rollout.validation.every is 0, or no validation "
                 "step has run yet)");
}

void gate_charts(report_model& model, const std::vector<group_view>& groups) {
  chart activated = make_chart("activated", "Activated fraction vs step",
                               "Fraction of each step's training groups that the gate opened for "
                               "debug turns." +
                                   band_words(groups, model.band),
                               "line", "step", "fraction of groups");
  activated.y_min = 0.0;
  activated.y_max = 1.0;
  for (const auto& g : groups) {
    activated.lines.push_back(
        step_line(g, g.name, false, [](const auto& s) -> std::optional<double> {
          return s.groups > 0 ? std::optional<double>(s.activated_fraction) : std::nullopt;
        }));
  }
  chart recovery = activated;  // the same axes; copied before `activated` is handed over
  add_line_chart(model, std::move(activated), "no training group is stored");

  recovery.id = "recovery";
  recovery.title = "Recovery and probe recovery vs step";
  recovery.caption =
      "Per rollout: the fraction of first-turn failures that a debug turn fixed, in the groups "
      "the gate opened (solid), and in the probes, closed groups debugged for measurement only "
      "(dashed; gate.probe_fraction). A step without opened groups (or probes) has no point." +
      band_words(groups, model.band);
  recovery.y_label = "recovered fraction of failures";
  recovery.lines.clear();
  for (const auto& g : groups) {
    recovery.lines.push_back(
        step_line(g, g.name + " recovery", false, [](const auto& s) -> std::optional<double> {
          return s.activated > 0 ? std::optional<double>(s.recovery.per_rollout) : std::nullopt;
        }));
    recovery.lines.push_back(
        step_line(g, g.name + " probe recovery", true, [](const auto& s) -> std::optional<double> {
          return s.probe_groups > 0 ? std::optional<double>(s.probe_recovery.per_rollout)
                                    : std::nullopt;
        }));
  }
  add_line_chart(model, std::move(recovery),
                 "no step has an opened group or a probe (the gate never opened, and "
                 "gate.probe_fraction is 0)");
}

// Buffered retry (issue 35), drawn when some run stored a retry buffer: per step, the share of
// the training groups with a non-zero advantage (every run, so that runs without retry compare)
// and the share that were retries that passed (recovered; runs with retry).
void retry_chart(report_model& model, const std::vector<group_view>& groups) {
  const bool any = std::any_of(groups.begin(), groups.end(), [](const group_view& g) {
    return std::any_of(g.runs.begin(), g.runs.end(),
                       [](const run_input* r) { return r->replay.total.retry.has_value(); });
  });
  if (!any) {
    return;
  }
  chart c = make_chart("retry", "Training signal and recovered retries vs step",
                       "Solid: the fraction of each step's training groups with a non-zero "
                       "advantage (a group whose rollouts all failed, or all passed alike, has "
                       "none). Dashed: the fraction that were retries of all-failed groups "
                       "(gate.retry) and passed." +
                           band_words(groups, model.band),
                       "line", "step", "fraction of groups");
  c.y_min = 0.0;
  c.y_max = 1.0;
  for (const auto& g : groups) {
    c.lines.push_back(
        step_line(g, g.name + " signal", false, [](const auto& s) -> std::optional<double> {
          if (s.groups == 0) {
            return std::nullopt;
          }
          return static_cast<double>(s.signal_groups) / s.groups;
        }));
    c.lines.push_back(
        step_line(g, g.name + " recovered", true, [](const auto& s) -> std::optional<double> {
          if (s.groups == 0 || !s.retry) {
            return std::nullopt;
          }
          return static_cast<double>(s.retry->counts.recovered) / s.groups;
        }));
  }
  add_line_chart(model, std::move(c), "no step has a training group");
}

// Speed: fast_p and the geometric-mean speedup per step, from the speedups stored with the passing
// turns of a timed run (verifier.timing_reps > 0), over the reference as written (eager) and, for
// KernelBench tasks, over the reference under torch.compile. A step that timed nothing has no point
// (never a 0).
void speed_charts(report_model& model, const std::vector<group_view>& groups) {
  struct baseline {
    std::string id;     // suffix of the chart ids
    std::string title;  // suffix of the titles
    std::string words;  // what the speedup is over
    std::string untimed;
    const speed_summary replay_step::*summary;
  };
  const std::vector<baseline> baselines{
      {"", "", "the reference as written (eager)",
       "no step timed a passing candidate (verifier.timing_reps is 0, or nothing passed)",
       &replay_step::speed},
      {"_compiled", " over torch.compile", "the reference under torch.compile (inductor)",
       "no step timed a passing candidate against torch.compile (KernelBench tasks with "
       "verifier.timing_reps above 0 only)",
       &replay_step::compiled_speed},
  };
  for (const auto& b : baselines) {
    const auto summary = b.summary;
    chart fast = make_chart(
        "fast_p" + b.id, "Fast_p" + b.title + " vs step",
        "Share of each step's training rollouts that passed with a speedup over " + b.words +
            " above 1.0 (solid) and above 2.0 (dashed): KernelBench's fast_p, over all "
            "rollouts. A step without a timed pass has no point." +
            band_words(groups, model.band),
        "line", "step", "fraction of rollouts");
    fast.y_min = 0.0;
    fast.y_max = 1.0;
    for (const auto& g : groups) {
      for (const std::size_t index : {std::size_t{1}, std::size_t{4}}) {
        fast.lines.push_back(
            step_line(g, g.name + " " + fast_p_name(index), index == 4,
                      [index, summary](const auto& s) { return (s.*summary).fast_p(index); }));
      }
    }
    add_line_chart(model, std::move(fast), b.untimed);

    chart speedup =
        make_chart("speedup" + b.id, "Geometric-mean speedup" + b.title + " vs step",
                   "Geometric mean of the speedups over " + b.words +
                       " of each step's timed passing rollouts; 1 is the baseline's speed." +
                       band_words(groups, model.band),
                   "line", "step", "speedup (x)");
    for (const auto& g : groups) {
      speedup.lines.push_back(step_line(
          g, g.name, false, [summary](const auto& s) { return (s.*summary).geomean_speedup(); }));
    }
    add_line_chart(model, std::move(speedup), b.untimed);
  }
}

// Profiles (verifier.profile, issue 34), drawn when some run stored one: per step, the share of the
// profiled kernels in each bottleneck class (one colour per class, the group in the label), and the
// seconds spent profiling. A step without a profiled kernel has no point.
void profile_charts(report_model& model, const std::vector<group_view>& groups) {
  const bool any = std::any_of(groups.begin(), groups.end(), [](const group_view& g) {
    return std::any_of(g.runs.begin(), g.runs.end(),
                       [](const run_input* r) { return r->replay.total.profiles.profiles > 0; });
  });
  if (!any) {
    return;
  }
  // Memory, compute, latency, launch, unknown (bottleneck_class_names' order).
  constexpr std::array<const char*, bottleneck_class_names.size()> class_colors = {
      "#1f77b4", "#d62728", "#ff7f0e", "#9467bd", "#7f7f7f"};
  chart classes = make_chart(
      "bottlenecks", "Bottleneck classes vs step",
      "Share of the kernels profiled in each step's training turns (Nsight Compute, "
      "verifier.profile) that the roofline classifier found memory-, compute-, latency- or "
      "launch-bound, or could not classify; one colour per class. A step without a profiled "
      "kernel has no point." +
          band_words(groups, model.band),
      "line", "step", "fraction of profiled kernels");
  classes.y_min = 0.0;
  classes.y_max = 1.0;
  for (const auto& g : groups) {
    for (std::size_t c = 0; c < bottleneck_class_names.size(); ++c) {
      auto line = step_line(g, g.name + " " + std::string(bottleneck_class_names[c]), false,
                            [c](const auto& s) -> std::optional<double> {
                              const auto& k = s.profiles.kernels;
                              const auto total = std::accumulate(k.begin(), k.end(), 0U);
                              if (total == 0) {
                                return std::nullopt;
                              }
                              return static_cast<double>(k[c]) / total;
                            });
      line.color = class_colors[c];
      classes.lines.push_back(std::move(line));
    }
  }
  add_line_chart(model, std::move(classes), "no stored profile has a kernel");

  chart seconds = make_chart("profile_seconds", "Profiling time vs step",
                             "Wall-clock seconds of the profiling runs of each step's training "
                             "turns, summed (they run in their own pool, after the verdict)." +
                                 band_words(groups, model.band),
                             "line", "step", "seconds");
  seconds.y_min = 0.0;
  for (const auto& g : groups) {
    seconds.lines.push_back(step_line(g, g.name, false, [](const auto& s) -> std::optional<double> {
      return s.profiles.profiles > 0 ? std::optional<double>(s.profiles.seconds) : std::nullopt;
    }));
  }
  add_line_chart(model, std::move(seconds), "no step has a stored profile");
}

void composition_chart(report_model& model, const std::vector<group_view>& groups) {
  // Every run's replay report is built with the same bucket count; take the widest.
  std::vector<composition_bucket> shape;
  for (const auto& g : groups) {
    for (const auto* r : g.runs) {
      if (r->replay.composition.size() > shape.size()) {
        shape = r->replay.composition;
      }
    }
  }
  if (shape.empty()) {
    model.notes.push_back("Rollout composition: not drawn, no training group is stored.");
    return;
  }
  chart c =
      make_chart("composition", "Rollout composition by group pass rate",
                 "Rollouts with a non-zero advantage over all training steps, by their "
                 "group's final pass rate and by kind (pass at turn 1, pass in a debug turn, "
                 "failure) and sign of the advantage (the paper's Figure 4)." +
                     std::string(groups.size() > 1 ? " One stacked bar per group; several runs "
                                                     "of a group: the mean count per run."
                                                   : ""),
                 "bar", "group pass rate", "rollouts");
  c.stacked = true;
  char range[64];
  for (const auto& b : shape) {
    std::snprintf(range, sizeof range, "[%.2f, %.2f%s", b.lo, b.hi, b.hi >= 1.0 ? "]" : ")");
    c.categories.emplace_back(range);
  }
  // Kind and sign, each with its colour: green passes, blue debug passes, red failures; the
  // negative advantages lighter.
  struct category {
    outcome_kind kind;
    int sign;
    const char* name;
    const char* color;
  };
  const std::array<category, 6> categories = {{
      {outcome_kind::first_turn_pass, 1, "turn-1 pass, A>0", "#2ca02c"},
      {outcome_kind::first_turn_pass, 0, "turn-1 pass, A<0", "#98df8a"},
      {outcome_kind::debug_pass, 1, "debug pass, A>0", "#1f77b4"},
      {outcome_kind::debug_pass, 0, "debug pass, A<0", "#aec7e8"},
      {outcome_kind::failure, 1, "failure, A>0", "#d62728"},
      {outcome_kind::failure, 0, "failure, A<0", "#ff9896"},
  }};
  for (const auto& g : groups) {
    for (const auto& cat : categories) {
      bar_dataset d;
      d.label = groups.size() > 1 ? g.name + ": " + cat.name : cat.name;
      d.color = cat.color;
      d.stack = g.name;
      d.values.assign(shape.size(), 0.0);
      for (const auto* r : g.runs) {
        for (std::size_t b = 0; b < r->replay.composition.size() && b < shape.size(); ++b) {
          d.values[b] += static_cast<double>(
              r->replay.composition[b]
                  .counts[static_cast<std::size_t>(cat.kind)][static_cast<std::size_t>(cat.sign)]);
        }
      }
      for (auto& v : d.values) {
        v /= static_cast<double>(g.runs.size());
      }
      c.bars.push_back(std::move(d));
    }
  }
  model.charts.push_back(std::move(c));
}

void step_time_chart(report_model& model, const std::vector<group_view>& groups) {
  chart c =
      make_chart("step_time", "Step time by stage",
                 "Mean wall time of a completed step, split by the activity each instant was "
                 "attributed to (the learner while it runs, else the stage the pipeline waits "
                 "on, else idle); over all completed steps of a group's runs.",
                 "bar", "seconds per step", "");
  c.stacked = true;
  c.horizontal = true;
  struct stage {
    const char* name;
    double step_timings::*field;
    const char* color;
  };
  const std::array<stage, 5> stages = {{{"generation", &step_timings::generation_ms, "#1f77b4"},
                                        {"compile", &step_timings::compile_ms, "#ff7f0e"},
                                        {"run", &step_timings::run_ms, "#2ca02c"},
                                        {"learner", &step_timings::learner_ms, "#9467bd"},
                                        {"idle", &step_timings::idle_ms, "#c7c7c7"}}};
  std::vector<const group_view*> timed;
  std::vector<std::array<double, 5>> means;
  for (const auto& g : groups) {
    std::array<double, 5> sum{};
    std::size_t n = 0;
    for (const auto* r : g.runs) {
      for (const auto& s : r->replay.steps) {
        if (!s.timings) {
          continue;
        }
        for (std::size_t i = 0; i < stages.size(); ++i) {
          sum[i] += (*s.timings).*stages[i].field;
        }
        ++n;
      }
    }
    if (n == 0) {
      continue;
    }
    for (auto& v : sum) {
      v /= static_cast<double>(n) * 1000.0;
    }
    timed.push_back(&g);
    means.push_back(sum);
  }
  if (timed.empty()) {
    model.notes.push_back(c.title + ": not drawn, no step has completed yet (no step record).");
    return;
  }
  for (const auto* g : timed) {
    c.categories.push_back(g->name);
  }
  for (std::size_t i = 0; i < stages.size(); ++i) {
    bar_dataset d{stages[i].name, stages[i].color, "time", {}};
    for (const auto& m : means) {
      d.values.push_back(m[i]);
    }
    c.bars.push_back(std::move(d));
  }
  model.charts.push_back(std::move(c));
}

// Log-spaced latency bins (ms): 1-2-5 per decade, from under 1 ms to 50 s and more.
constexpr std::array<double, 15> bin_edges = {1,   2,    5,    10,   20,    50,    100,  200,
                                              500, 1000, 2000, 5000, 10000, 20000, 50000};

std::string ms_text(double ms) {
  char buffer[32];
  if (ms >= 1000.0) {
    std::snprintf(buffer, sizeof buffer, "%g s", ms / 1000.0);
  } else {
    std::snprintf(buffer, sizeof buffer, "%g ms", ms);
  }
  return buffer;
}

std::vector<double> positive(const std::vector<const run_input*>& runs,
                             std::vector<double> run_input::*field) {
  std::vector<double> out;
  for (const auto* r : runs) {
    for (double v : r->*field) {
      if (v > 0.0) {
        out.push_back(v);
      }
    }
  }
  return out;
}

std::vector<double> histogram(const std::vector<double>& values) {
  std::vector<double> counts(bin_edges.size() + 1, 0.0);
  for (double v : values) {
    const auto bin = static_cast<std::size_t>(
        std::upper_bound(bin_edges.begin(), bin_edges.end(), v) - bin_edges.begin());
    counts[bin] += 1.0;
  }
  if (!values.empty()) {
    for (auto& c : counts) {
      c /= static_cast<double>(values.size());
    }
  }
  return counts;
}

void latency_chart(report_model& model, const std::vector<group_view>& groups) {
  chart c = make_chart("verifier_latency", "Verifier latency distribution",
                       "Compile and run time of each verified candidate turn (from the stored "
                       "turns; queue time excluded; cache hits and candidates that never ran have "
                       "no time and are left out), as the fraction of a group's timed turns per "
                       "log-spaced bin.",
                       "bar", "latency", "fraction of turns");
  std::vector<std::vector<double>> histograms;
  for (const auto& g : groups) {
    const auto compile = positive(g.runs, &run_input::compile_ms);
    const auto run = positive(g.runs, &run_input::run_ms);
    latency_row row;
    row.group = g.name;
    row.compiled = compile.size();
    row.compile_p50 = quantile(compile, 0.5);
    row.compile_p90 = quantile(compile, 0.9);
    row.compile_p99 = quantile(compile, 0.99);
    row.compile_max = quantile(compile, 1.0);
    row.ran = run.size();
    row.run_p50 = quantile(run, 0.5);
    row.run_p90 = quantile(run, 0.9);
    row.run_p99 = quantile(run, 0.99);
    row.run_max = quantile(run, 1.0);
    model.latency.push_back(row);
    const std::string prefix = groups.size() > 1 ? g.name + " " : "";
    if (!compile.empty()) {
      c.bars.push_back({prefix + "compile", g.color, "", histogram(compile)});
    }
    if (!run.empty()) {
      // The run bars of a group: its colour, lighter (8-bit alpha appended to #rrggbb).
      c.bars.push_back({prefix + "run", g.color + "80", "", histogram(run)});
    }
  }
  if (c.bars.empty()) {
    model.notes.push_back(c.title + ": not drawn, no stored turn has a compile or run time.");
    return;
  }
  // Only the bins from the first to the last non-empty one.
  std::size_t first = bin_edges.size() + 1;
  std::size_t last = 0;
  for (const auto& d : c.bars) {
    for (std::size_t i = 0; i < d.values.size(); ++i) {
      if (d.values[i] > 0.0) {
        first = std::min(first, i);
        last = std::max(last, i);
      }
    }
  }
  for (std::size_t i = first; i <= last; ++i) {
    if (i == 0) {
      c.categories.push_back("< " + ms_text(bin_edges[0]));
    } else if (i == bin_edges.size()) {
      c.categories.push_back(">= " + ms_text(bin_edges.back()));
    } else {
      c.categories.push_back(ms_text(bin_edges[i - 1]) + " - " + ms_text(bin_edges[i]));
    }
  }
  for (auto& d : c.bars) {
    d.values = std::vector<double>(d.values.begin() + static_cast<std::ptrdiff_t>(first),
                                   d.values.begin() + static_cast<std::ptrdiff_t>(last + 1));
  }
  model.charts.push_back(std::move(c));
}

nlohmann::json to_json(const point& p, band_kind band) {
  const auto [lo, hi] = band_edges(p, band);
  return {p.x, p.y, lo, hi, p.runs};
}

nlohmann::json to_json(const chart& c, band_kind band) {
  nlohmann::json j = {{"id", c.id},
                      {"title", c.title},
                      {"kind", c.kind},
                      {"x_label", c.x_label},
                      {"y_label", c.y_label},
                      {"stacked", c.stacked},
                      {"horizontal", c.horizontal},
                      {"categories", c.categories}};
  // Steps are whole numbers: no 1.5 tick.
  j["integer_x"] = c.x_label == "step";
  if (c.y_min) {
    j["y_min"] = *c.y_min;
  }
  if (c.y_max) {
    j["y_max"] = *c.y_max;
  }
  j["lines"] = nlohmann::json::array();
  for (const auto& s : c.lines) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& p : s.points) {
      points.push_back(to_json(p, band));
    }
    j["lines"].push_back({{"label", s.label},
                          {"color", s.color},
                          {"dashed", s.dashed},
                          {"band", s.band},
                          {"points", points}});
  }
  j["bars"] = nlohmann::json::array();
  for (const auto& d : c.bars) {
    j["bars"].push_back(
        {{"label", d.label}, {"color", d.color}, {"stack", d.stack}, {"values", d.values}});
  }
  return j;
}

std::string fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

// The drawing script: one Chart.js chart per model chart. It runs after Chart.js; the error
// recorder (in <head>) runs before, so that an error in either lands in the DOM.
constexpr std::string_view draw_script = R"JS(
(function () {
  var model = JSON.parse(document.getElementById('leap-data').textContent);
  // Each canvas says that it drew, and drew data ("empty" when no dataset has a value), and how
  // many groups' bands it drew: the headless test (and a curious user) can check it.
  Chart.register({id: 'leapDrawn', afterRender: function (chart) {
    var some = chart.data.datasets.some(function (d) { return d.data.length > 0; });
    chart.canvas.setAttribute('data-drawn', some ? '1' : 'empty');
    var bands = chart.data.datasets.filter(function (d, i) {
      return d.leapBand === 'high' && d.data.length > 0 && chart.isDatasetVisible(i); }).length;
    chart.canvas.setAttribute('data-bands', String(bands));
  }});
  function notBand(item, data) { return !data.datasets[item.datasetIndex].leapBand; }
  function axis(title, extra) {
    var a = {title: {display: !!title, text: title}};
    for (var k in extra) a[k] = extra[k];
    return a;
  }
  function fade(color) { return color.length === 7 ? color + '33' : color; }
  function lineConfig(c) {
    var datasets = [];
    c.lines.forEach(function (s) {
      if (s.band) {
        datasets.push({label: s.label + ' (band low)', leapBand: 'low',
          data: s.points.map(function (p) { return {x: p[0], y: p[2]}; }), borderWidth: 0, pointRadius: 0, fill: false,
          borderColor: 'rgba(0,0,0,0)'});
        datasets.push({label: s.label + ' (band high)', leapBand: 'high',
          data: s.points.map(function (p) { return {x: p[0], y: p[3]}; }), borderWidth: 0, pointRadius: 0, fill: '-1',
          borderColor: 'rgba(0,0,0,0)', backgroundColor: fade(s.color)});
      }
      datasets.push({label: s.label, data: s.points.map(function (p) { return {x: p[0], y: p[1]}; }),
        borderColor: s.color, backgroundColor: s.color, borderDash: s.dashed ? [6, 4] : [],
        pointRadius: 2, fill: false, tension: 0});
    });
    return {type: 'line', data: {datasets: datasets}, options: {
      animation: false, responsive: true, maintainAspectRatio: false,
      scales: {x: axis(c.x_label, {type: 'linear', ticks: c.integer_x ? {precision: 0} : {}}),
               y: axis(c.y_label, {min: c.y_min, max: c.y_max})},
      plugins: {legend: {labels: {filter: notBand}},
                tooltip: {filter: function (item) { return !item.dataset.leapBand; }}}}};
  }
  function barConfig(c) {
    var datasets = c.bars.map(function (b) {
      var d = {label: b.label, data: b.values, backgroundColor: b.color, borderColor: b.color};
      if (b.stack) d.stack = b.stack;
      return d;
    });
    return {type: 'bar', data: {labels: c.categories, datasets: datasets}, options: {
      animation: false, responsive: true, maintainAspectRatio: false,
      indexAxis: c.horizontal ? 'y' : 'x',
      scales: {x: axis(c.x_label, {stacked: c.stacked}), y: axis(c.y_label, {stacked: c.stacked})}}};
  }
  model.charts.forEach(function (c) {
    try {
      var canvas = document.getElementById('chart-' + c.id);
      if (c.kind !== 'line' && c.kind !== 'bar') throw new Error('unknown chart kind ' + c.kind);
      new Chart(canvas, c.kind === 'line' ? lineConfig(c) : barConfig(c));
    } catch (e) {
      window.leapRecordError('chart ' + c.id + ': ' + e);
    }
  });
})();
)JS";

constexpr std::string_view error_script = R"JS(
window.leapRecordError = function (message) {
  var list = document.getElementById('leap-errors');
  if (!list) { document.documentElement.setAttribute('data-script-error', String(message)); return; }
  var item = document.createElement('li');
  item.className = 'script-error';
  item.textContent = String(message);
  list.appendChild(item);
  list.parentNode.hidden = false;
};
window.onerror = function (message, source, line) {
  window.leapRecordError(message + ' (line ' + line + ')');
};
)JS";

constexpr std::string_view style = R"CSS(
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.caption { color: #555; font-size: 0.9em; max-width: 60em; }
.chart { position: relative; height: 380px; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: middle; }
#errors { color: #b00; }
)CSS";

}  // namespace

std::vector<point> aggregate(const std::vector<per_step>& runs) {
  std::set<std::uint64_t> steps;
  for (const auto& r : runs) {
    for (const auto& [step, xy] : r) {
      steps.insert(step);
    }
  }
  std::vector<point> points;
  for (auto step : steps) {
    point p;
    double sx = 0.0;
    double sy = 0.0;
    std::vector<double> ys;
    for (const auto& r : runs) {
      const auto it = r.find(step);
      if (it == r.end()) {
        continue;
      }
      const auto [x, y] = it->second;
      sx += x;
      sy += y;
      p.lo = ys.empty() ? y : std::min(p.lo, y);
      p.hi = ys.empty() ? y : std::max(p.hi, y);
      ys.push_back(y);
    }
    const auto n = static_cast<double>(ys.size());
    p.x = sx / n;
    p.y = sy / n;
    p.runs = static_cast<int>(ys.size());
    // Two passes around the mean: no cancellation when the runs agree closely.
    double ss = 0.0;
    for (const double y : ys) {
      ss += (y - p.y) * (y - p.y);
    }
    p.sd = ys.size() > 1 ? std::sqrt(ss / (n - 1.0)) : 0.0;
    points.push_back(p);
  }
  // Wall-clock x values are means, so they may leave step order; a line is drawn in x order.
  std::stable_sort(points.begin(), points.end(),
                   [](const point& a, const point& b) { return a.x < b.x; });
  return points;
}

std::pair<double, double> band_edges(const point& p, band_kind band) {
  if (band == band_kind::min_max) {
    return {p.lo, p.hi};
  }
  return {p.y - p.sd, p.y + p.sd};
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) {
    return 0.0;
  }
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(pos));
  const auto above = std::min(below + 1, values.size() - 1);
  return values[below] + (values[above] - values[below]) * (pos - static_cast<double>(below));
}

report_model build_model(const std::vector<run_input>& runs, const report_options& options) {
  report_model model;
  model.title = options.title;
  model.band = options.band;
  const auto groups = group_runs(runs);
  for (const auto& g : groups) {
    for (const auto* r : g.runs) {
      run_row row{g.name, r->run_dir, r->run_id, r->status, r->seed, 0, r->stored_groups, g.color};
      for (const auto& s : r->replay.steps) {
        row.completed_steps += s.timings ? 1 : 0;
      }
      model.runs.push_back(std::move(row));
    }
  }
  accuracy_charts(model, groups);
  gate_charts(model, groups);
  retry_chart(model, groups);
  speed_charts(model, groups);
  profile_charts(model, groups);
  composition_chart(model, groups);
  step_time_chart(model, groups);
  latency_chart(model, groups);
  return model;
}

std::string model_json(const report_model& model) {
  nlohmann::json j = {{"title", model.title},
                      {"band", model.band == band_kind::min_max ? "min-max" : "std"},
                      {"charts", nlohmann::json::array()}};
  for (const auto& c : model.charts) {
    j["charts"].push_back(to_json(c, model.band));
  }
  // Run strings may hold bytes that are not UTF-8: replaced (U+FFFD) rather than refused.
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string render_html(const report_model& model, std::string_view chart_js) {
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>";
  html += html_escape(model.title);
  html += "</title>\n<style>";
  html += style;
  html += "</style>\n<script>";
  html += error_script;
  html += "</script>\n</head>\n<body>\n<h1>";
  html += html_escape(model.title);
  html +=
      "</h1>\n<section hidden><h2 id=\"errors\">Script errors</h2><ul id=\"leap-errors\"></ul>"
      "</section>\n";

  html +=
      "<h2>Runs</h2>\n<table id=\"runs\">\n<tr><th>group</th><th>run folder</th><th>run id"
      "</th><th>status</th><th>seed</th><th>completed steps</th><th>stored groups</th></tr>\n";
  for (const auto& r : model.runs) {
    html += "<tr><td><span class=\"swatch\" style=\"background:" + html_escape(r.color) +
            "\"></span> " + html_escape(r.group) + "</td><td>" + html_escape(r.run_dir) +
            "</td><td>" + html_escape(r.run_id) + "</td><td>" + html_escape(r.status) +
            "</td><td class=\"num\">" + std::to_string(r.seed) + "</td><td class=\"num\">" +
            std::to_string(r.completed_steps) + "</td><td class=\"num\">" +
            std::to_string(r.stored_groups) + "</td></tr>\n";
  }
  html += "</table>\n";

  for (const auto& c : model.charts) {
    html += "<section>\n<h2>" + html_escape(c.title) + "</h2>\n<p class=\"caption\">" +
            html_escape(c.caption) + "</p>\n<div class=\"chart\"><canvas id=\"chart-" +
            html_escape(c.id) + "\" class=\"leap-chart\"></canvas></div>\n";
    if (c.id == "verifier_latency" && !model.latency.empty()) {
      html +=
          "<table id=\"latency\">\n<tr><th>group</th><th>compiled turns</th><th>compile p50"
          "</th><th>p90</th><th>p99</th><th>max</th><th>run turns</th><th>run p50</th>"
          "<th>p90</th><th>p99</th><th>max</th></tr>\n";
      for (const auto& l : model.latency) {
        html += "<tr><td>" + html_escape(l.group) + "</td>";
        html += "<td class=\"num\">" + std::to_string(l.compiled) + "</td>";
        for (double v : {l.compile_p50, l.compile_p90, l.compile_p99, l.compile_max}) {
          html += "<td class=\"num\">" + fixed(v, 1) + " ms</td>";
        }
        html += "<td class=\"num\">" + std::to_string(l.ran) + "</td>";
        for (double v : {l.run_p50, l.run_p90, l.run_p99, l.run_max}) {
          html += "<td class=\"num\">" + fixed(v, 1) + " ms</td>";
        }
        html += "</tr>\n";
      }
      html += "</table>\n";
    }
    html += "</section>\n";
  }
  if (!model.notes.empty()) {
    html += "<h2>Not drawn</h2>\n<ul id=\"notes\">\n";
    for (const auto& n : model.notes) {
      html += "<li>" + html_escape(n) + "</li>\n";
    }
    html += "</ul>\n";
  }

  html += "<script type=\"application/json\" id=\"leap-data\">";
  html += model_json(model);
  html += "</script>\n<script>\n";
  // "</script" would end the element early; "<\/script" means the same inside JavaScript strings
  // and regular expressions (the bundle has none today).
  std::string js(chart_js);
  for (std::size_t at = 0; at + 8 <= js.size(); ++at) {
    if (js[at] == '<' && js[at + 1] == '/') {
      std::string word = js.substr(at + 2, 6);
      std::transform(word.begin(), word.end(), word.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      if (word == "script") {
        js.insert(at + 1, "\\");
      }
    }
  }
  html += js;
  html += "\n</script>\n<script>";
  html += draw_script;
  html += "</script>\n</body>\n</html>\n";
  return html;
}

}  // namespace leap::report
