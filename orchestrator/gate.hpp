// Difficulty-Conditioned Pruning: which groups enter debug turns.
//
// A group of G first-turn verdicts with N_fail failures is opened for debug turns by the policy:
//   none          never (single-turn GRPO);
//   full          whenever N_fail >= 1 (GRPO-MT / Dr.Kernel style);
//   dcp           when tau_min <= N_fail <= tau_max (Sec. 3.1 of the paper);
//   dcp_adaptive  as dcp, with thresholds that follow the running distribution of failure counts.
// A group with no failure is never opened: there is nothing to debug.
//
// Decisions: closed_no_debug for policy none and for N_fail = 0 under every policy; otherwise
// closed_easy when N_fail < lo, closed_hopeless when N_fail > hi, open when lo <= N_fail <= hi
// (`full` uses lo = 1, hi = G, so it never says easy or hopeless).
//
// Optimisation turns (issue 31, off by default) are the same pruning applied to speed: a group
// whose first-turn passes are all timed and none is faster than gate.optimise.speedup over the
// reference is opened for turns that ask each passing rollout for a faster, still correct version
// (decide_optimise, continue_optimising, optimise_feedback). They never change the DCP decision.
//
// All functions here are pure (adaptive_gate aside, which owns its history) and thread-safe.
#pragma once

#include "common/enums/gate_policy.hpp"
#include "common/enums/optimise_decision.hpp"
#include "common/enums/threshold_unit.hpp"
#include "orchestrator/vocabulary.hpp"

#include <cstddef>
#include <deque>
#include <optional>
#include <span>
#include <string>

namespace leap {

// gate_policy, threshold_unit and optimise_decision, and their names, are common/enums'.

struct gate_config {
  gate_policy policy = gate_policy::dcp;           // Default: dcp
  threshold_unit unit = threshold_unit::fraction;  // Default: fraction
  // Default: 0.5 and 1.0 as fractions: the paper's best pruning range ("fail rate >= 50%").
  double tau_min = 0.5;
  double tau_max = 1.0;
  // dcp_adaptive: the thresholds are the quantiles `adaptive_low_quantile` and
  // `adaptive_high_quantile` of the failure fractions of the last `adaptive_window` groups, once at
  // least `adaptive_min_groups` groups were seen; before that the static tau_min/tau_max apply.
  //
  // Quantile: linear interpolation between order statistics (Hyndman & Fan type 7, numpy's default
  // `numpy.quantile(x, q)`): with the n fractions sorted ascending x[0..n-1], h = (n - 1) * q,
  // Q(q) = x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)]). The two quantiles are
  // fractions of G and become counts as static fractions do (ceil for lo, floor for hi), whatever
  // `unit` says: `unit` only concerns tau_min and tau_max.
  //
  // "Seen" counts the groups still in the window, so adaptive_min_groups > adaptive_window (or a
  // window of 0) keeps the static thresholds for ever; config validation should reject that.
  // Quantiles are clamped to [0, 1]; a NaN quantile keeps the static thresholds. An adaptive range
  // is never empty: when rounding puts lo above hi (both quantiles between the same two counts),
  // hi is raised to lo, so that adapting never switches debugging off altogether.
  double adaptive_low_quantile = 0.5;    // Default: 0.5
  double adaptive_high_quantile = 0.95;  // Default: 0.95
  std::size_t adaptive_window = 256;     // Default: 256
  std::size_t adaptive_min_groups = 32;  // Default: 32
  // A seeded sample of this fraction of the groups that the gate closed still run their debug
  // turns, for measurement only (never trained on): replay compares their recovery with the opened
  // groups'.
  double probe_fraction = 0.0;  // Default: 0
  // Optimisation turns: see optimise_config. Default: off
  struct optimise_config {
    // The speedup over the reference a group's passes must beat (speedup > this, as fast_p
    // counts) for the group to be left alone; 0 switches optimisation turns off. Default: 0 (off)
    double speedup = 0.0;
    // Most optimisation turns per passing rollout, within rollout.max_turns. Default: 1
    int max_turns = 1;
    // Train on optimisation turns (score_group, actors' training_sequences); needs speedup > 0
    // and a reward that pays for speed. Default: false (measured, not trained on)
    bool train = false;
  } optimise;
  // Buffered retry of all-failed training groups (issue 35, orchestrator/retry.hpp). Default: off
  struct retry_config {
    // Most groups waiting for a retry; when full the oldest is evicted (counted). 0: off
    std::size_t buffer = 0;
    // A group failed at step s is retried at step s + delay or later (>= 1). Default: 1
    int delay = 1;
    // Most retries of one task before it is given up (>= 1). Default: 1
    int attempts = 1;
    // A retried group runs rollout.group_size + extra_rollouts rollouts and rollout.max_turns +
    // extra_turns turns. Default: 0 and 0
    int extra_rollouts = 0;
    int extra_turns = 0;
  } retry;
};

using optimise_config = gate_config::optimise_config;
using retry_config = gate_config::retry_config;

// Failure-count thresholds resolved for a group of size G: open when lo <= N_fail <= hi.
// Always 1 <= lo and hi <= G (N_fail = 0 never opens); lo > hi is an empty range (never opens).
struct fail_range {
  int lo = 0;
  int hi = 0;

  friend bool operator==(const fail_range&, const fail_range&) = default;
};

// Resolves static thresholds to counts for a group of `group_size` rollouts. Fractions are turned
// into counts with ceil for tau_min and floor for tau_max, so that a fraction never opens a group
// whose failure fraction lies outside [tau_min, tau_max]. Counts get the same treatment (tau_min =
// 2.5 means N_fail >= 3). A rounding tolerance of 1e-9 absorbs binary floating point, so 0.3 of
// G = 10 is 3 failures, not 4. Then lo is raised to at least 1 and hi lowered to at most G; a NaN
// threshold gives an empty range. group_size < 1 gives the empty range {1, 0}.
[[nodiscard]] fail_range resolve_thresholds(const gate_config& config, int group_size);

// The gate decision of a stateless policy (none, full, dcp) for N_fail failures out of group_size.
// dcp_adaptive needs history: use adaptive_gate; given here it decides as dcp with the static
// thresholds (what adaptive_gate does before it has seen adaptive_min_groups groups).
// Out-of-contract input has a defined answer: n_fail is clamped to [0, group_size], and
// group_size < 1 gives closed_no_debug.
[[nodiscard]] gate_decision decide(const gate_config& config, int n_fail, int group_size);

// The optimisation decision for a group. `pass_speedups` holds one entry per rollout that passed
// the gated turn: its measured speedup over the reference (0, negative or non-finite: not
// measured). `turns_left` is how many turns rollout.max_turns still allows after that turn.
// Order of the checks: off, no pass, untimed, fast, budget; the first that applies is the answer.
[[nodiscard]] optimise_decision decide_optimise(const optimise_config& config,
                                                std::span<const double> pass_speedups,
                                                int turns_left);

// Whether a rollout in optimisation turns gets another one after a turn with this result: it
// passed with a measured speedup that does not beat the factor, it has had fewer than
// config.max_turns optimisation turns (`optimise_turns`, the one just finished included) and
// rollout.max_turns allows one more (`turns_left`). A failed optimisation turn ends the rollout:
// its earlier correct version stands.
[[nodiscard]] bool continue_optimising(const optimise_config& config, bool passed, double speedup,
                                       int optimise_turns, int turns_left);

// The feedback an optimisation turn reads: the candidate is correct, its measured speedup over
// the reference as written (eager) and the factor wanted, and a request for a faster version that
// stays correct. Speedups are printed with two decimals ("0.85x").
[[nodiscard]] std::string optimise_feedback(double speedup, double factor);

// The dcp_adaptive policy's state. Not thread-safe: one per experiment, driven by one actor.
// It accepts every policy, so an experiment can always hold one: for none, full and dcp it decides
// as decide() does (and still records the history).
class adaptive_gate {
 public:
  explicit adaptive_gate(gate_config config);

  // Decides for a group with the thresholds in force now, then records its failure fraction
  // (n_fail clamped to [0, group_size]; a group_size < 1 is decided closed_no_debug and not
  // recorded).
  gate_decision decide_and_record(int n_fail, int group_size);

  // Records a group's failure fraction as decide_and_record does, without deciding: how a resumed
  // run puts back the history of the groups decided before it (same clamping, same window).
  void record(int n_fail, int group_size);

  // The dcp / dcp_adaptive thresholds that would apply now to a group of `group_size` rollouts:
  // the quantile rule once groups_seen() >= max(1, adaptive_min_groups), resolve_thresholds()
  // before. For policy dcp it is always resolve_thresholds().
  [[nodiscard]] fail_range current_range(int group_size) const;

  // The range a group is ruled with, as recorded beside its decision: {1, 0} for policy none (no
  // count opens), {1, group_size} for full (every failure opens), current_range() for dcp and
  // dcp_adaptive. A switch on the policy without default:, so a new policy must say its range.
  [[nodiscard]] fail_range ruling_range(int group_size) const;

  // Groups in the window (at most adaptive_window).
  [[nodiscard]] std::size_t groups_seen() const { return history_.size(); }

  [[nodiscard]] const gate_config& config() const { return config_; }

 private:
  gate_config config_;
  std::deque<double> history_;  // failure fractions of the last adaptive_window groups
};

// The quantile of gate_config's comment (type 7, linear interpolation) of `values`, which need not
// be sorted. q is clamped to [0, 1]. Empty input or a NaN q gives NaN.
[[nodiscard]] double quantile_linear(std::span<const double> values, double q);

}  // namespace leap
