#include "orchestrator/run_telemetry.hpp"

#include <cstdio>
#include <set>

namespace leap::telemetry {
namespace {

const char* const depth_help =
    "Items waiting per pipeline stage: generation (turns waiting for a policy request slot), "
    "compile (candidates in the sandbox's compile queue), run (compiled candidates waiting for a "
    "run slot), store (group puts not yet durable), learner (steps whose groups are all in, not "
    "yet trained)";
const char* const wait_help =
    "Seconds waited per stage before service: generation (for a policy request slot), compile "
    "(in the sandbox's compile and run queues), store (a group's put until durable)";
const char* const busy_help =
    "Sandbox workers busy now: compile (compiling), run (run slots in use)";
const char* const turns_help = "Turns generated (first turns and debug turns)";
const char* const passed_help = "Turns whose candidate passed verification";
const char* const fast_p_help =
    "Share of the last completed step's training rollouts that passed with a speedup over the "
    "reference above p (KernelBench's fast_p); NaN when the step timed nothing";

}  // namespace

run_telemetry::run_telemetry(registry& r)
    : generation_queue(r.add_gauge("leap_queue_depth", depth_help, {{"stage", "generation"}})),
      compile_queue(r.add_gauge("leap_queue_depth", depth_help, {{"stage", "compile"}})),
      run_queue(r.add_gauge("leap_queue_depth", depth_help, {{"stage", "run"}})),
      store_queue(r.add_gauge("leap_queue_depth", depth_help, {{"stage", "store"}})),
      learner_queue(r.add_gauge("leap_queue_depth", depth_help, {{"stage", "learner"}})),
      generation_wait(r.add_histogram("leap_queue_wait_seconds", wait_help, short_wait_buckets(),
                                      {{"stage", "generation"}})),
      compile_wait(r.add_histogram("leap_queue_wait_seconds", wait_help, short_wait_buckets(),
                                   {{"stage", "compile"}})),
      store_wait(r.add_histogram("leap_queue_wait_seconds", wait_help, short_wait_buckets(),
                                 {{"stage", "store"}})),
      compiling(r.add_gauge("leap_workers_busy", busy_help, {{"stage", "compile"}})),
      running(r.add_gauge("leap_workers_busy", busy_help, {{"stage", "run"}})),
      policy_in_flight(r.add_gauge("leap_policy_requests_in_flight",
                                   "Generation requests on the wire to the policy servers now")),
      generation_seconds(
          r.add_histogram("leap_generation_seconds",
                          "Seconds from handing a turn to the policy client to its complete answer",
                          latency_buckets())),
      compile_seconds(
          r.add_histogram("leap_compile_seconds",
                          "Seconds compiling one verified candidate (0 for a compile-cache hit)",
                          latency_buckets())),
      run_seconds(r.add_histogram("leap_run_seconds",
                                  "Seconds running one compiled candidate against its reference "
                                  "(0 when it did not compile)",
                                  latency_buckets())),
      learner_seconds(r.add_histogram("leap_learner_step_seconds",
                                      "Seconds the learner took for one training step",
                                      latency_buckets())),
      generated_tokens(r.add_counter("leap_generated_tokens_total",
                                     "Tokens sampled by the policy (all turns, training and "
                                     "validation)")),
      tokens_per_second(r.add_gauge(
          "leap_generated_tokens_per_second",
          "Generated tokens per second over the interval since the previous metrics write")),
      first_turns(r.add_counter("leap_turns_total", turns_help, {{"turn", "first"}})),
      debug_turns(r.add_counter("leap_turns_total", turns_help, {{"turn", "debug"}})),
      first_turns_passed(
          r.add_counter("leap_turns_passed_total", passed_help, {{"turn", "first"}})),
      debug_turns_passed(
          r.add_counter("leap_turns_passed_total", passed_help, {{"turn", "debug"}})),
      groups(r.add_counter("leap_groups_total",
                           "Training groups finished (scored, stored, handed to the learner) by "
                           "this process")),
      groups_activated(r.add_counter("leap_groups_activated_total",
                                     "Finished training groups the gate opened for debug turns")),
      steps(r.add_counter("leap_steps_completed_total",
                          "Training steps completed (step record stored) by this process")),
      groups_in_flight(r.add_gauge("leap_groups_in_flight",
                                   "Groups (training and validation) started and not finished")),
      first_turn_pass_rate(r.add_gauge(
          "leap_first_turn_pass_rate",
          "Fraction of the last completed step's rollouts that passed at turn 1 (acc@1)")),
      final_pass_rate(r.add_gauge(
          "leap_final_pass_rate",
          "Fraction of the last completed step's rollouts that passed at any turn (acc@M)")),
      activated_fraction(r.add_gauge(
          "leap_activated_group_fraction",
          "Fraction of the last completed step's groups the gate opened for debug turns")),
      weight_version(r.add_gauge("leap_weight_version",
                                 "Weight version the policy serves (one per completed step)")),
      staleness(r.add_histogram("leap_staleness_versions",
                                "Per trained sequence: weight versions between the oldest weights "
                                "its turns were sampled from and the weights the learner updated",
                                version_buckets())),
      fast_p{&r.add_gauge("leap_fast_p", fast_p_help, {{"p", "0"}}),
             &r.add_gauge("leap_fast_p", fast_p_help, {{"p", "1.0"}}),
             &r.add_gauge("leap_fast_p", fast_p_help, {{"p", "1.2"}}),
             &r.add_gauge("leap_fast_p", fast_p_help, {{"p", "1.5"}}),
             &r.add_gauge("leap_fast_p", fast_p_help, {{"p", "2.0"}})},
      speedup_geomean(r.add_gauge("leap_speedup_geomean",
                                  "Geometric-mean speedup over the reference of the last completed "
                                  "step's timed passes; NaN when the step timed nothing")),
      source(r) {}

std::vector<std::string> metric_names() {
  registry r;
  const run_telemetry t(r);
  std::vector<std::string> out;
  for (const auto& f : r.take().families) {
    out.push_back(f.name);
  }
  return out;
}

namespace {

bool has_prefixed(const step_record& r, const std::string& prefix) {
  auto it = r.metrics.lower_bound(prefix);
  return it != r.metrics.end() && it->first.rfind(prefix, 0) == 0;
}

bool has_telemetry(const step_record& r) { return has_prefixed(r, "telemetry."); }

double value_of(const step_record& r, const std::string& name) {
  auto it = r.metrics.find("telemetry." + name);
  return it != r.metrics.end() ? it->second : 0.0;
}

}  // namespace

std::string format_telemetry_table(const std::vector<step_record>& steps) {
  struct column {
    const char* title;
    std::string name;  // a telemetry value, or "" for the computed turns column
    const char* format;
  };
  const std::vector<column> columns = {
      {"turns", "", "%.0f"},
      {"tokens", "generated_tokens_total", "%.0f"},
      {"tok/s", "generated_tokens_per_second", "%.1f"},
      {"gen p50 s", "generation_seconds.p50", "%.3f"},
      {"compile p50 s", "compile_seconds.p50", "%.3f"},
      {"run p50 s", "run_seconds.p50", "%.3f"},
      {"wait gen p50 s", "queue_wait_seconds.generation.p50", "%.3f"},
      {"wait compile p50 s", "queue_wait_seconds.compile.p50", "%.3f"},
      {"learner p50 s", "learner_step_seconds.p50", "%.3f"},
      {"staleness mean", "staleness_versions.mean", "%.2f"},
  };
  std::string out;
  char cell[64];
  for (const auto& r : steps) {
    if (!has_telemetry(r)) {
      continue;
    }
    if (out.empty()) {
      out = "live metrics at each step's end (cumulative since the run process started)\n  step";
      for (const auto& c : columns) {
        out += std::string(" | ") + c.title;
      }
      out += "\n";
    }
    std::snprintf(cell, sizeof cell, "%6llu", static_cast<unsigned long long>(r.step) + 1);
    out += cell;
    for (const auto& c : columns) {
      const double v = c.name.empty()
                           ? value_of(r, "turns_total.first") + value_of(r, "turns_total.debug")
                           : value_of(r, c.name);
      std::snprintf(cell, sizeof cell, c.format, v);
      std::string text = cell;
      const std::size_t width = std::string(c.title).size();
      if (text.size() < width) {
        text.insert(0, width - text.size(), ' ');
      }
      out += " | " + text;
    }
    out += "\n";
  }
  return out;
}

std::string format_learner_table(const std::vector<step_record>& steps) {
  const std::pair<const char*, const char*> columns[] = {
      {"loss", "%.4f"},
      {"clip_fraction", "%.3f"},
      {"behaviour_kl", "%.2e"},
      {"entropy", "%.3f"},
      {"grad_norm", "%.3f"},
      {"lr", "%.2e"},
      {"trained_tokens", "%.0f"},
      {"update_seconds", "%.2f"},
      // learner.offpolicy: what the filter removed, and the spread of the sequences' ratios
      {"offpolicy_dropped_sequences", "%.0f"},
      {"offpolicy_masked_tokens", "%.0f"},
      {"ratio_p5", "%.3f"},
      {"ratio_p50", "%.3f"},
      {"ratio_p95", "%.3f"},
  };
  std::string out;
  char cell[64];
  for (const auto& r : steps) {
    if (!has_prefixed(r, "learner.")) {
      continue;
    }
    if (out.empty()) {
      out = "learner, per step\n  step";
      for (const auto& [name, format] : columns) {
        out += std::string(" | ") + name;
      }
      out += "\n";
    }
    std::snprintf(cell, sizeof cell, "%6llu", static_cast<unsigned long long>(r.step) + 1);
    out += cell;
    for (const auto& [name, format] : columns) {
      auto it = r.metrics.find(std::string("learner.") + name);
      if (it == r.metrics.end()) {
        out += " | -";
        continue;
      }
      std::snprintf(cell, sizeof cell, format, it->second);
      out += std::string(" | ") + cell;
    }
    out += "\n";
  }
  return out;
}

std::string telemetry_csv(const std::vector<step_record>& steps) {
  return prefixed_metrics_csv(steps, "telemetry.");
}

std::string prefixed_metrics_csv(const std::vector<step_record>& steps, const std::string& prefix) {
  std::set<std::string> names;
  for (const auto& r : steps) {
    for (const auto& [name, value] : r.metrics) {
      if (name.rfind(prefix, 0) == 0) {
        names.insert(name);
      }
    }
  }
  std::string out = "step";
  for (const auto& n : names) {
    out += "," + n;
  }
  out += "\n";
  if (names.empty()) {
    return out;
  }
  char cell[64];
  for (const auto& r : steps) {
    if (!has_prefixed(r, prefix)) {
      continue;
    }
    out += std::to_string(r.step);
    for (const auto& n : names) {
      out += ",";
      auto it = r.metrics.find(n);
      if (it == r.metrics.end()) {
        continue;
      }
      std::snprintf(cell, sizeof cell, "%.17g", it->second);
      out += cell;
    }
    out += "\n";
  }
  return out;
}

}  // namespace leap::telemetry
