// The paper's training metrics, computed from finished groups.
//
// Every rollout and every group weighs the same (micro averages over rollouts, not averages of
// per-group rates), as in the paper's tables. A group with no outcomes counts as a group (for
// activated_group_fraction) but adds no rollout. All functions are pure and thread-safe.
#pragma once

#include "common/enums/outcome_kind.hpp"
#include "orchestrator/reward.hpp"  // pass_speed
#include "orchestrator/vocabulary.hpp"

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace leap {

// What metrics need of a finished group: its gate decision and, per rollout, the outcome and the
// rollout-level advantage.
struct group_summary {
  gate_decision gate = gate_decision::closed_no_debug;
  std::vector<rollout_outcome> outcomes;
  std::vector<double> advantages;  // same length as outcomes; may be empty (composition then skips)
};

// Cumulative accuracy at each turn m = 1..max_turns: the fraction of rollouts that passed at a
// turn <= m. Index m-1. Empty input (or no rollout at all) gives zeros; max_turns < 1 gives an
// empty vector. A pass recorded after max_turns counts at no m.
[[nodiscard]] std::vector<double> cumulative_accuracy(std::span<const group_summary> groups,
                                                      int max_turns);

// Fraction of groups whose gate opened. 0 for no groups.
[[nodiscard]] double activated_group_fraction(std::span<const group_summary> groups);

// Among opened groups: the fraction of first-turn failures that passed at a later turn
// (per-rollout recovery), and the fraction of opened groups with at least one such recovery
// (per-group recovery). 0 when no group opened (per_rollout also 0 when the opened groups hold no
// first-turn failure). A first-turn failure is a rollout with passed_at_turn != 1; a recovery one
// with passed_at_turn >= 2.
struct recovery_rates {
  double per_rollout = 0.0;
  double per_group = 0.0;
};
[[nodiscard]] recovery_rates recovery(std::span<const group_summary> groups);

// Total generated turns of all rollouts divided by the number of rollouts that passed (Table 2 of
// the paper). 0 when nothing passed.
[[nodiscard]] double turns_per_pass(std::span<const group_summary> groups);

// Rollout composition by pass-rate bucket (Figure 4 of the paper): groups are bucketed by their
// observed final pass rate into `bucket_count` equal-width buckets over [0, 1] (a pass rate of 1
// falls in the last); each rollout with a non-zero advantage is counted by its kind and the sign
// of its advantage.
// Bucket k covers [k / bucket_count, (k + 1) / bucket_count); a group with p passes out of n
// rollouts falls in bucket floor(p * bucket_count / n), computed in integers so that no rounding
// moves a group across a boundary. Groups with no outcomes, or whose advantages are empty or not
// as long as the outcomes, are skipped. bucket_count 0 gives an empty vector.
struct composition_bucket {
  double lo = 0.0;
  double hi = 0.0;
  // counts[kind][sign]: sign 0 = negative advantage, 1 = positive advantage.
  std::array<std::array<std::size_t, 2>, 3> counts{};
};
[[nodiscard]] std::vector<composition_bucket> rollout_composition(
    std::span<const group_summary> groups, std::size_t bucket_count);

// ---- speed (issue 31) -------------------------------------------------------------------------
//
// fast_p as KernelBench defines it: the share of attempted rollouts that passed AND whose passing
// candidate's speedup over the reference (eager, as the sandbox times it today) is > p. The
// denominator is every rollout counted, timed or not, passed or not. A pass without a measured
// speedup counts as correct but not fast (not even fast_0). The geometric-mean speedup is over
// the timed passes only. Both are undefined (nullopt) when nothing counted was timed, so that a
// run without timing shows "n/a", never 0.

inline constexpr std::array<double, 5> fast_p_thresholds = {0.0, 1.0, 1.2, 1.5, 2.0};

class speed_summary {
 public:
  // One attempted rollout: its outcome and what was measured of its passing turn.
  void add(const rollout_outcome& outcome, const pass_speed& speed);
  void merge(const speed_summary& other);

  [[nodiscard]] std::uint32_t rollouts() const { return rollouts_; }
  [[nodiscard]] std::uint32_t passes() const { return passes_; }
  [[nodiscard]] std::uint32_t timed_passes() const { return timed_; }
  // fast_p for fast_p_thresholds[index]; nullopt when no pass was timed (or index is out of range).
  [[nodiscard]] std::optional<double> fast_p(std::size_t index) const;
  // exp(mean(ln speedup)) over the timed passes; nullopt when none.
  [[nodiscard]] std::optional<double> geomean_speedup() const;

 private:
  std::uint32_t rollouts_ = 0;
  std::uint32_t passes_ = 0;
  std::uint32_t timed_ = 0;
  double log_sum_ = 0.0;
  std::array<std::uint32_t, fast_p_thresholds.size()> faster_{};
};

// "fast_0", "fast_1.0", "fast_1.2", "fast_1.5", "fast_2.0": the names of fast_p_thresholds in
// tables, CSV and JSON.
[[nodiscard]] std::string fast_p_name(std::size_t index);

// first_turn_pass for a pass at turn 1, debug_pass for a pass at a later turn, failure otherwise.
[[nodiscard]] outcome_kind kind_of(const rollout_outcome& outcome);

}  // namespace leap
