// The keys of the gate section (which groups get debug, optimisation and retry turns) and the
// rules that tie them to the rollout and the verifier.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <cmath>
#include <optional>
#include <string>

namespace leap::config_detail {
namespace {

bool opens_debug_turns(gate_policy p) { return p != gate_policy::none; }

std::optional<std::string> check_threshold(const experiment_config& c, double tau) {
  if (c.gate.unit == threshold_unit::fraction) {
    if (tau < 0.0 || tau > 1.0) {
      return "must be a fraction in [0, 1] when gate.unit is fraction, got " + show(tau);
    }
    return std::nullopt;
  }
  if (tau != std::floor(tau)) {
    return "must be a whole number of failures when gate.unit is count, got " + show(tau) +
           " (or set gate.unit: fraction)";
  }
  if (tau < 0.0) {
    return "must be >= 0, got " + show(tau);
  }
  if (tau > c.rollout.group_size) {
    return "must be <= rollout.group_size (" + show(c.rollout.group_size) +
           ") when gate.unit is count, got " + show(tau);
  }
  return std::nullopt;
}

}  // namespace

void add_gate_fields(std::vector<field_spec>& f) {
  f.push_back(
      choice_field("gate.policy", LEAP_FIELD(gate.policy), "Which groups enter debug turns"));
  f.push_back(choice_field(
      "gate.unit", LEAP_FIELD(gate.unit),
      "Whether gate.tau_min and gate.tau_max count failures or give them as a fraction "
      "of rollout.group_size."));
  f.push_back(
      real_field("gate.tau_min", LEAP_FIELD(gate.tau_min), anything(),
                 "Fewest failures for a group to open (fraction in [0, 1], or whole count <= "
                 "group_size); 0.5: the paper's best range, fail rate >= 50%."));
  f.push_back(
      real_field("gate.tau_max", LEAP_FIELD(gate.tau_max), anything(),
                 "Most failures for a group to open, >= gate.tau_min; same unit as gate.tau_min."));
  f.push_back(
      real_field("gate.adaptive_low_quantile", LEAP_FIELD(gate.adaptive_low_quantile), closed(0, 1),
                 "dcp_adaptive: tau_min follows this quantile of recent groups' failure fractions, "
                 "in [0, 1]."));
  f.push_back(real_field(
      "gate.adaptive_high_quantile", LEAP_FIELD(gate.adaptive_high_quantile), closed(0, 1),
      "dcp_adaptive: tau_max follows this quantile, in [adaptive_low_quantile, 1]."));
  f.push_back(
      integer_field("gate.adaptive_window", LEAP_FIELD(gate.adaptive_window), at_least(1),
                    "dcp_adaptive: the quantiles are over the last this many groups; >= 1."));
  f.push_back(
      integer_field("gate.adaptive_min_groups", LEAP_FIELD(gate.adaptive_min_groups), at_least(0),
                    "dcp_adaptive: static thresholds apply until this many groups were seen; <= "
                    "adaptive_window."));
  f.push_back(real_field(
      "gate.probe_fraction", LEAP_FIELD(gate.probe_fraction), closed(0, 1),
      "Fraction of the groups the gate closed that still run debug turns for measurement only "
      "(never trained on; replay reports their recovery beside the opened groups'), in [0, 1]."));
  f.push_back(real_field(
      "gate.optimise.speedup", LEAP_FIELD(gate.optimise.speedup), closed(0, 1000),
      "Optimisation turns: a training group whose first-turn passes are all timed and none has a "
      "speedup over the reference above this gets turns asking each pass for a faster, still "
      "correct version (measured; trained on only with gate.optimise.train); 0 disables, e.g. 1.2; "
      "needs "
      "verifier.timing_reps > 0."));
  f.push_back(integer_field(
      "gate.optimise.max_turns", LEAP_FIELD(gate.optimise.max_turns), at_least(1),
      "Optimisation turns: most per passing rollout, within rollout.max_turns; one follows "
      "another while the last passed without beating gate.optimise.speedup; >= 1."));
  f.push_back(bool_field(
      "gate.optimise.train", LEAP_FIELD(gate.optimise.train),
      "Train on optimisation turns: a first-turn pass is paid for the speed of its last passing "
      "turn (rank unchanged) and trains on its turns up to it, discounted per turn; a turn that "
      "broke the kernel trains alone with a failure's advantage. Needs gate.optimise.speedup > 0 "
      "and a reward that pays for speed (reward.kind rank_speed or reward.speed_bonus.weight > "
      "0)."));
  f.push_back(integer_field(
      "gate.retry.buffer", LEAP_FIELD(gate.retry.buffer), at_least(0),
      "Buffered retry: most all-failed training groups (no pass after their debug turns) waiting "
      "to be sampled again; the oldest is evicted (counted) when full; 0 disables."));
  f.push_back(integer_field(
      "gate.retry.delay", LEAP_FIELD(gate.retry.delay), at_least(1),
      "Buffered retry: a group that failed at step s is retried, in place of a fresh task, at step "
      "s + delay or later; >= 1."));
  f.push_back(integer_field("gate.retry.attempts", LEAP_FIELD(gate.retry.attempts), at_least(1),
                            "Buffered retry: most retries of one task before it is given up "
                            "(counted as exhausted); >= 1."));
  f.push_back(integer_field(
      "gate.retry.extra_rollouts", LEAP_FIELD(gate.retry.extra_rollouts), at_least(0),
      "Buffered retry: a retried group runs rollout.group_size plus this many rollouts; >= 0."));
  f.push_back(integer_field(
      "gate.retry.extra_turns", LEAP_FIELD(gate.retry.extra_turns), at_least(0),
      "Buffered retry: a retried group runs rollout.max_turns plus this many turns; >= 0."));
}

void add_gate_checks(std::vector<cross_check>& checks) {
  checks.push_back({{"gate.tau_min", "gate.unit", "rollout.group_size"},
                    [](const experiment_config& c) { return check_threshold(c, c.gate.tau_min); }});
  checks.push_back({{"gate.tau_max", "gate.unit", "rollout.group_size"},
                    [](const experiment_config& c) { return check_threshold(c, c.gate.tau_max); }});
  checks.push_back({{"gate.tau_min", "gate.tau_max"}, [](const experiment_config& c) {
                      return at_most_key(c.gate.tau_min, "gate.tau_max", c.gate.tau_max,
                                         "no group could open");
                    }});
  checks.push_back({{"gate.adaptive_high_quantile", "gate.adaptive_low_quantile"},
                    [](const experiment_config& c) {
                      return at_least_key(c.gate.adaptive_high_quantile,
                                          "gate.adaptive_low_quantile",
                                          c.gate.adaptive_low_quantile);
                    }});
  checks.push_back(
      {{"gate.adaptive_min_groups", "gate.adaptive_window"}, [](const experiment_config& c) {
         return at_most_key(c.gate.adaptive_min_groups, "gate.adaptive_window",
                            c.gate.adaptive_window,
                            "the window never holds more groups, so the adaptive "
                            "thresholds would never apply");
       }});
  checks.push_back(
      {{"gate.optimise.speedup", "verifier.timing_reps", "rollout.max_turns"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.gate.optimise.speedup <= 0) {
           return std::nullopt;
         }
         if (c.verifier.timing_reps == 0) {
           return "opens groups whose passes were all timed, but verifier.timing_reps is 0 and "
                  "no speedup is ever measured; set verifier.timing_reps (e.g. 20)";
         }
         if (c.rollout.max_turns < 2) {
           return "opens groups for optimisation turns, but rollout.max_turns is 1 and leaves "
                  "none; raise rollout.max_turns or set gate.optimise.speedup to 0";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"gate.optimise.train", "gate.optimise.speedup", "reward.kind", "reward.speed_bonus.weight"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (!c.gate.optimise.train) {
           return std::nullopt;
         }
         if (c.gate.optimise.speedup <= 0) {
           return "trains on optimisation turns, but gate.optimise.speedup is 0 and opens none; "
                  "set gate.optimise.speedup (e.g. 1.2)";
         }
         // Without a reward for speed an optimisation turn can only keep or lower a first-turn
         // pass's reward: training on it would teach nothing about speed.
         if (!pays_for_speed(c.reward)) {
           return "trains on optimisation turns, but reward.kind " + to_string(c.reward.kind) +
                  " pays nothing for speed; use reward.kind rank_speed or a "
                  "reward.speed_bonus.weight > 0 (reward.kind static or binary)";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"gate.policy", "rollout.max_turns"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (opens_debug_turns(c.gate.policy) && c.rollout.max_turns < 2) {
           return "'" + to_string(c.gate.policy) +
                  "' opens groups for debug turns, but rollout.max_turns is 1 and leaves none; "
                  "use gate.policy: none or raise rollout.max_turns";
         }
         return std::nullopt;
       }});
}

}  // namespace leap::config_detail
