// `leap report`'s pure part: runs' data (what `leap replay` computes from a store, plus the stored
// per-turn verifier timings) -> a report model (charts as series of points, runs overlaid by group
// with mean and a +/- one standard deviation or min-max band) -> one self-contained HTML page (the
// model as one JSON object, the embedded Chart.js, one small script that draws every chart).
//
// No I/O, no CAF; every function is pure and thread-safe.
#pragma once

#include "orchestrator/replay.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::report {

// One stored run, as the report reads it (see report_data.hpp for where each field comes from).
struct run_input {
  std::string run_dir;  // as the user named it
  std::string run_id;
  // Runs with the same group are overlaid as one line (mean) with a band (report_options::band):
  // the --label the user gave the run dir, else the config's experiment.name (the seeds of one
  // `leap run --seeds` launch keep the name, so they form a group).
  std::string group;
  std::string status;  // run_status as text
  std::uint64_t seed = 0;
  std::size_t stored_groups = 0;  // training and validation groups in the store
  // build_replay_report() of the run: accuracy per turn, validation, activated fraction, recovery,
  // probe recovery, step timings, composition by pass-rate bucket.
  replay_report replay;
  // Completed step -> minutes from the run's first step start to this step's end (step records'
  // unix times; a resumed run's pause between processes is included).
  std::map<std::uint64_t, double> minutes;
  // Verified turns (a candidate that reached the verifier): their compile and run times in ms.
  // Zero entries (a cache hit, a compile failure that never ran) are kept: the model skips them.
  std::vector<double> compile_ms;
  std::vector<double> run_ms;
};

// One point of a line: x, the mean y over the group's runs that have it, their min and max, and
// their sample standard deviation (n - 1 in the denominator; 0 when one run has the step).
struct point {
  double x = 0.0;
  double y = 0.0;
  double lo = 0.0;
  double hi = 0.0;
  int runs = 1;
  double sd = 0.0;
};

// What the shaded band around a group's mean line spans: mean +/- one standard deviation (the
// default), or the runs' min to max.
enum class band_kind : std::uint8_t { std_dev, min_max };

struct line_series {
  std::string label;
  std::string color;  // "#rrggbb"
  bool dashed = false;
  bool band = false;  // draw the band (report_model::band; the group has several runs)
  std::vector<point> points;
};

struct bar_dataset {
  std::string label;
  std::string color;
  std::string stack;  // datasets with the same stack pile up; "" when the chart is not stacked
  std::vector<double> values;
};

struct chart {
  std::string id;  // the canvas id, "chart-" + id
  std::string title;
  std::string caption;  // one sentence under the chart: what it shows, how it aggregates
  std::string kind;     // "line" or "bar"
  std::string x_label;
  std::string y_label;
  std::optional<double> y_min;
  std::optional<double> y_max;
  std::vector<line_series> lines;       // kind line
  std::vector<std::string> categories;  // kind bar: the category axis
  std::vector<bar_dataset> bars;
  bool stacked = false;
  bool horizontal = false;
};

// A row of the runs table.
struct run_row {
  std::string group;
  std::string run_dir;
  std::string run_id;
  std::string status;
  std::uint64_t seed = 0;
  std::size_t completed_steps = 0;
  std::size_t stored_groups = 0;
  std::string color;
};

// A row of the verifier latency table, one per group (its runs' turns pooled).
struct latency_row {
  std::string group;
  std::size_t compiled = 0;  // turns with a compile time > 0
  double compile_p50 = 0, compile_p90 = 0, compile_p99 = 0, compile_max = 0;
  std::size_t ran = 0;  // turns with a run time > 0
  double run_p50 = 0, run_p90 = 0, run_p99 = 0, run_max = 0;
};

struct report_model {
  std::string title;
  std::vector<run_row> runs;
  std::vector<chart> charts;
  std::vector<latency_row> latency;
  std::vector<std::string> notes;  // what could not be drawn and why
  band_kind band = band_kind::std_dev;
};

struct report_options {
  std::string title = "LEAP report";    // Default: "LEAP report"
  band_kind band = band_kind::std_dev;  // Default: mean +/- one standard deviation
};

// The groups in order of first appearance, their series and tables. Runs must be non-empty.
[[nodiscard]] report_model build_model(const std::vector<run_input>& runs,
                                       const report_options& options = {});

// Mean, min-max and sample standard deviation over runs of values keyed by step: for each step that
// any run has, over the runs that have it (a run that lacks a step does not count there), x is the
// mean of the runs' x and y the mean of their y. Input: per run, step -> (x, y).
[[nodiscard]] std::vector<point> aggregate(
    const std::vector<std::map<std::uint64_t, std::pair<double, double>>>& runs);

// The q-quantile (0..1) of `values` by linear interpolation (numpy's default); 0 when empty.
[[nodiscard]] double quantile(std::vector<double> values, double q);

// The band's edges at a point: (y - sd, y + sd) or (lo, hi).
[[nodiscard]] std::pair<double, double> band_edges(const point& p, band_kind band);

// The model as the JSON text embedded in the page; a line's point is [x, y, band low, band high,
// runs]; '<', '>' and '&' are written as \u escapes, so
// the text can sit inside a <script> element whatever the run's strings hold.
[[nodiscard]] std::string model_json(const report_model& model);

// The page: the model's tables (every string HTML-escaped), a canvas per chart, the model JSON, the
// Chart.js source and the drawing script. A "</script" inside chart_js is escaped.
[[nodiscard]] std::string render_html(const report_model& model, std::string_view chart_js);

// &, <, >, " and ' as entities.
[[nodiscard]] std::string html_escape(std::string_view text);

}  // namespace leap::report
