// Difficulty-Conditioned Pruning: which groups enter debug turns.
//
// A group of G first-turn verdicts with N_fail failures is opened for debug turns by the policy:
//   none          never (single-turn GRPO);
//   full          whenever N_fail >= 1 (GRPO-MT / Dr.Kernel style);
//   dcp           when tau_min <= N_fail <= tau_max (Sec. 3.1 of the paper);
//   dcp_adaptive  as dcp, with thresholds that follow the running distribution of failure counts.
// A group with no failure is never opened: there is nothing to debug.
#pragma once

#include "orchestrator/vocabulary.hpp"

#include <cstddef>
#include <deque>
#include <optional>
#include <string>

namespace leap {

enum class gate_policy : std::uint8_t { none, full, dcp, dcp_adaptive };

// Whether tau_min and tau_max count failures or give them as a fraction of G.
enum class threshold_unit : std::uint8_t { count, fraction };

struct gate_config {
  gate_policy policy = gate_policy::dcp;                 // Default: dcp
  threshold_unit unit = threshold_unit::fraction;        // Default: fraction
  // Default: 0.5 and 1.0 as fractions: the paper's best pruning range ("fail rate >= 50%").
  double tau_min = 0.5;
  double tau_max = 1.0;
  // dcp_adaptive: the thresholds are the quantiles `adaptive_low_quantile` and
  // `adaptive_high_quantile` of the failure fractions of the last `adaptive_window` groups, once at
  // least `adaptive_min_groups` groups were seen; before that the static tau_min/tau_max apply.
  double adaptive_low_quantile = 0.5;   // Default: 0.5
  double adaptive_high_quantile = 0.95; // Default: 0.95
  std::size_t adaptive_window = 256;    // Default: 256
  std::size_t adaptive_min_groups = 32; // Default: 32
};

// Failure-count thresholds resolved for a group of size G: open when lo <= N_fail <= hi.
struct fail_range {
  int lo = 0;
  int hi = 0;
};

// Resolves static thresholds to counts for a group of `group_size` rollouts. Fractions are turned
// into counts with ceil for tau_min and floor for tau_max, so that a fraction never opens a group
// whose failure fraction lies outside [tau_min, tau_max].
[[nodiscard]] fail_range resolve_thresholds(const gate_config& config, int group_size);

// The gate decision of a stateless policy (none, full, dcp) for N_fail failures out of group_size.
// dcp_adaptive needs history: use adaptive_gate.
[[nodiscard]] gate_decision decide(const gate_config& config, int n_fail, int group_size);

// The dcp_adaptive policy's state. Not thread-safe: one per experiment, driven by one actor.
class adaptive_gate {
 public:
  explicit adaptive_gate(gate_config config);

  // Decides for a group with the thresholds in force now, then records its failure fraction.
  gate_decision decide_and_record(int n_fail, int group_size);

  // The thresholds that would apply now to a group of `group_size` rollouts.
  [[nodiscard]] fail_range current_range(int group_size) const;

  [[nodiscard]] std::size_t groups_seen() const { return history_.size(); }

 private:
  gate_config config_;
  std::deque<double> history_;  // failure fractions of the last adaptive_window groups
};

[[nodiscard]] std::string to_string(gate_policy p);
[[nodiscard]] std::optional<gate_policy> parse_gate_policy(const std::string& name);
[[nodiscard]] std::string to_string(gate_decision d);

}  // namespace leap
