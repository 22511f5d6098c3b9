// The paper's training metrics, computed from finished groups.
#pragma once

#include "orchestrator/vocabulary.hpp"

#include <array>
#include <cstddef>
#include <span>
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
// turn <= m. Index m-1. Empty input gives zeros.
[[nodiscard]] std::vector<double> cumulative_accuracy(std::span<const group_summary> groups,
                                                      int max_turns);

// Fraction of groups whose gate opened.
[[nodiscard]] double activated_group_fraction(std::span<const group_summary> groups);

// Among opened groups: the fraction of first-turn failures that passed at a later turn
// (per-rollout recovery), and the fraction of opened groups with at least one such recovery
// (per-group recovery). 0 when no group opened.
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
enum class outcome_kind : std::uint8_t { first_turn_pass, debug_pass, failure };
struct composition_bucket {
  double lo = 0.0;
  double hi = 0.0;
  // counts[kind][sign]: sign 0 = negative advantage, 1 = positive advantage.
  std::array<std::array<std::size_t, 2>, 3> counts{};
};
[[nodiscard]] std::vector<composition_bucket> rollout_composition(
    std::span<const group_summary> groups, std::size_t bucket_count);

}  // namespace leap
