// The metrics of `leap run`: one place that names every series, its type, labels, buckets and help
// text, registered once in a telemetry::registry (orchestrator/telemetry.hpp). The actors receive a
// shared pointer to this set through their settings and update the series directly (lock-free);
// a null pointer turns telemetry off (tests, tools that do not want it).
//
// Every metric is listed with its meaning in README.md's "Metrics" section; `metric_names()` is
// what a test compares that section with.
#pragma once

#include "orchestrator/telemetry.hpp"
#include "orchestrator/trajectory.hpp"

#include <array>
#include <string>
#include <vector>

namespace leap::telemetry {

struct run_telemetry {
  // Registers every series in `r`, which must outlive this object.
  explicit run_telemetry(registry& r);

  // Queue depths per stage (leap_queue_depth{stage}): turns waiting for a policy request slot;
  // candidates waiting in the sandbox's compile queue; compiled candidates waiting for a run slot;
  // store puts not yet durable; learner steps whose groups are all in and not yet trained.
  gauge& generation_queue;
  gauge& compile_queue;
  gauge& run_queue;
  gauge& store_queue;
  gauge& learner_queue;
  // Time spent waiting per stage (leap_queue_wait_seconds{stage}).
  histogram& generation_wait;  // for a request slot (pool and client)
  histogram& compile_wait;     // in the sandbox's compile and run queues together
  histogram& store_wait;       // from a group's put to its durable answer (batching included)
  // Busy workers (leap_workers_busy{stage}): compiling now, running now.
  gauge& compiling;
  gauge& running;
  gauge& policy_in_flight;  // leap_policy_requests_in_flight
  histogram& generation_seconds;
  histogram& compile_seconds;
  histogram& run_seconds;
  histogram& learner_seconds;
  counter& generated_tokens;
  gauge& tokens_per_second;
  counter& first_turns;  // leap_turns_total{turn="first"}
  counter& debug_turns;  // leap_turns_total{turn="debug"}
  counter& first_turns_passed;
  counter& debug_turns_passed;
  counter& groups;
  counter& groups_activated;
  counter& steps;
  gauge& groups_in_flight;
  gauge& first_turn_pass_rate;
  gauge& final_pass_rate;
  gauge& activated_fraction;
  gauge& weight_version;
  histogram& staleness;
  // The last completed step's speed (issue 31): leap_fast_p{p} for fast_p_thresholds and the
  // geometric-mean speedup of its timed passes; NaN when the step timed nothing.
  std::array<gauge*, fast_p_thresholds.size()> fast_p;
  gauge& speedup_geomean;
  // The registry the series live in, for snapshots (a step record's telemetry values).
  const registry& source;
};

// Every metric (family) name of run_telemetry, in registration order.
[[nodiscard]] std::vector<std::string> metric_names();

// `leap replay`'s view of what the live metrics said at each step's end (the step records'
// "telemetry.*" values, cumulative since the run's process started): a small table of turns,
// tokens, tokens per second, median generation, compile and run seconds, median queue waits,
// median learner step seconds and mean staleness. Steps without telemetry values are left out;
// none at all gives "".
[[nodiscard]] std::string format_telemetry_table(const std::vector<step_record>& steps);
// Every "telemetry.*" value of every step as CSV: step, then one column per name (sorted); empty
// cells where a step lacks a value. Only a header ("step") when no step has any.
[[nodiscard]] std::string telemetry_csv(const std::vector<step_record>& steps);
// The same for any metric prefix, e.g. "learner." (the LibTorch learner's per-step metrics).
[[nodiscard]] std::string prefixed_metrics_csv(const std::vector<step_record>& steps,
                                               const std::string& prefix);
// `leap replay`'s table of the learner's metrics per step (loss, clip fraction, behaviour KL,
// entropy, grad norm, lr, trained tokens, update seconds); "" when no step has any.
[[nodiscard]] std::string format_learner_table(const std::vector<step_record>& steps);

}  // namespace leap::telemetry
