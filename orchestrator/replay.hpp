// `leap replay`'s analysis: what the paper reports, recomputed from a run's stored groups and step
// records, and the what-if of re-scoring the same verdicts under another gate or reward. Pure
// functions over compact per-group summaries (no tokens, no text), so a long run fits in memory;
// storage/replay_data.hpp reads them from a store.
#pragma once

#include "common/result.hpp"
#include "orchestrator/advantage.hpp"
#include "orchestrator/gate.hpp"
#include "orchestrator/metrics.hpp"
#include "orchestrator/retry.hpp"
#include "orchestrator/reward.hpp"
#include "orchestrator/trajectory.hpp"
#include "orchestrator/turn_profile.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace leap {

// The turn record's fields marked opt().replay_mean() (and those of the records nested in it), in
// fields() order, named as the CSV export names their columns ("compile_queue_ms").
[[nodiscard]] const std::vector<std::string>& replay_turn_fields();

// A mean in the making: the sum and count of the values that were measured.
struct field_mean {
  double sum = 0.0;
  std::uint32_t count = 0;

  void add(const field_mean& other) {
    sum += other.sum;
    count += other.count;
  }
  [[nodiscard]] std::optional<double> mean() const {
    return count == 0 ? std::nullopt : std::optional<double>(sum / count);
  }
};

// One stored group, reduced to what the analysis needs.
struct replay_group {
  std::uint64_t step = 0;
  split_kind split = split_kind::train;
  std::uint32_t group = 0;
  gate_decision gate = gate_decision::closed_no_debug;
  bool probe = false;
  int max_turns = 1;
  std::vector<rollout_outcome> trained;   // the outcomes training used
  std::vector<rollout_outcome> measured;  // from the turns (a probe's debug turns count)
  std::vector<double> rewards;
  std::vector<double> advantages;
  // Per rollout, the speedup (and its stated noise) of turn 1 when it passed and was timed, and of
  // the turn `measured` passed at; empty when not measured.
  std::vector<pass_speed> first_speeds;
  std::vector<pass_speed> measured_speeds;
  // Per rollout, the speed of its kept turn (its last passing turn, when the first passed:
  // kept_speed_of), which gate.optimise.train pays for.
  std::vector<pass_speed> kept_speeds;
  // Per rollout, its kept turn (kept_turn, 0-based), -1 when its first turn did not pass.
  std::vector<int> kept_turns;
  // Per rollout, the trained outcome's speedup over the reference under torch.compile.
  std::vector<pass_speed> compiled_speeds;
  std::uint32_t turns = 0;          // generated turns
  std::uint32_t first_turns = 0;    // rollouts with at least one turn
  std::uint32_t verifier_jobs = 0;  // turns that were verified
  // Optimisation turns the group ran (turns after a first-turn pass; gate.optimise): the stored
  // trace of the optimisation decision, which opened the group when this is > 0.
  std::uint32_t optimise_turns = 0;
  // group_record::optimise: the optimisation decision the live run stored (none: gate.optimise
  // off, or a store made before decisions were stored).
  std::optional<optimise_decision> optimise;
  // group_record::weight_version: the version a validation group was measured with.
  std::optional<std::uint64_t> weight_version;
  // Per replay_turn_fields() entry, over the group's stored turns.
  std::vector<field_mean> turn_means;
};

[[nodiscard]] replay_group replay_group_of(const group_record& group);

// What was measured of rollout i's passing turn under `outcome` (the trained, the measured or a
// first-turn-only outcome of that rollout): its speedup, when that turn's was stored.
[[nodiscard]] pass_speed speed_in(const replay_group& group, std::size_t i,
                                  const rollout_outcome& outcome);

struct replay_data {
  std::string run_id;
  int max_turns = 1;
  std::vector<replay_group> groups;  // key order: step, split (train first), group
  std::vector<step_record> steps;    // ascending
  // The retry buffer stored after each step (gate.retry, issue 35), ascending; empty without it.
  std::vector<retry_step_record> retries;
  // The stored profiles of the training turns (verifier.profile, issue 34), counted per step (the
  // step that started their group); empty without profiling and in stores made before it.
  std::map<std::uint64_t, profile_counts> profiles;
  // The stored profiles of the training turns themselves (their kernels' findings), for the
  // what-if's structural terms (reward.structural).
  std::vector<turn_profile_record> turn_profiles;
};

// A step's buffered retry: its retried groups, the settling's counts (recovered: the retries with a
// pass) and the groups left waiting after it.
struct replay_retry_columns {
  std::uint32_t retried = 0;
  retry_counts counts;
  std::uint32_t buffered = 0;
};

// A step's partial rollouts (schedule.partial, issue 33), from its step record's partial.*
// metrics: groups it started, took over from the previous step, trained of those started earlier,
// carried into the next step, and dropped (stale or over max_carry).
struct replay_partial_columns {
  std::uint32_t started = 0;
  std::uint32_t carried_in = 0;
  std::uint32_t trained_carried = 0;
  std::uint32_t carried = 0;
  std::uint32_t dropped = 0;
};

struct replay_step {
  std::uint64_t step = 0;
  std::uint32_t groups = 0;
  std::uint32_t activated = 0;
  double activated_fraction = 0.0;
  std::vector<double> accuracy;  // cumulative at turn 1..max_turns
  recovery_rates recovery;       // of the gated (opened) groups
  std::uint32_t probe_groups = 0;
  recovery_rates probe_recovery;  // what the probes' debug turns reached (0 without probes)
  double turns_per_pass = 0.0;
  std::uint32_t turns = 0;
  std::uint32_t verifier_jobs = 0;
  std::optional<step_timings> timings;  // none when the step has no record (it did not complete)
  // Milliseconds from the run's first step start to this step's end (elapsed_since_start); none
  // without a record or its clocks. Steps overlap under bounded staleness, so summing the steps'
  // wall_ms overstates the run's wall time; this does not.
  std::optional<double> elapsed_ms;
  speed_summary speed;           // fast_p and geomean speedup of the trained outcomes
  speed_summary compiled_speed;  // the same over the reference under torch.compile
  // Groups with a non-zero stored advantage: the step's training signal.
  std::uint32_t signal_groups = 0;
  // Buffered retry (gate.retry), when the run stored its buffer after this step. The total row
  // sums the counts and keeps the last step's waiting.
  std::optional<replay_retry_columns> retry;
  // Partial rollouts, when the step record has them; the total row sums them. With them the
  // step's groups above are those it started (stored under its key), not those it trained.
  std::optional<replay_partial_columns> partial;
  // The optimisation decisions the run stored with these groups (gate.optimise), counted by
  // decision (indexed by optimise_decision's value); all 0 when none was stored.
  std::array<std::uint32_t, 6> optimise_decisions{};
  // The profiles stored for the step's training turns: profiled turns, their kernels per
  // bottleneck class and the seconds spent profiling them (all 0 when none was stored).
  profile_counts profiles;
  // Per replay_turn_fields() entry, its mean over the stored turns of the step's training groups.
  std::vector<field_mean> turn_means;
};

struct replay_validation {
  std::uint64_t step = 0;
  std::uint32_t groups = 0;
  std::uint32_t rollouts = 0;
  std::vector<double> accuracy;
  // The weight versions its groups were measured with, ascending (one, unless a resumed run
  // redid part of it after its weights had moved on); empty for groups stored without one.
  std::vector<std::uint64_t> weight_versions;
  speed_summary speed;
  speed_summary compiled_speed;
};

struct replay_report {
  int max_turns = 1;
  std::vector<replay_step> steps;
  std::vector<replay_validation> validation;
  // Every training group of the run as one step (step unused); timings: the sum of the steps',
  // when every step completed.
  replay_step total;
  std::vector<composition_bucket> composition;  // all training groups
};

[[nodiscard]] replay_report build_replay_report(const replay_data& data, std::size_t buckets);

// Completed step -> milliseconds from the run's start to the step's end by the step records' unix
// clocks (a resumed run's pause between processes included). The start is the earliest recorded
// step start, else `fallback_start_unix_ms` (the run record's creation; 0: none); steps without an
// end, or any step when there is no start, are left out.
[[nodiscard]] std::map<std::uint64_t, double> elapsed_since_start(
    const std::vector<step_record>& steps, std::int64_t fallback_start_unix_ms);

// ---- what-if ------------------------------------------------------------------------------------

struct scoring_config {
  gate_config gate;
  reward_config reward;
  advantage_config advantage;
};

// Per step, how the stored training groups would have been gated and scored under `alternative`.
// Optimisation turns are measured, not trained on, unless the alternative's gate.optimise.train:
// then a group the alternative opens for them and that ran them pays each first-turn pass for its
// kept turn's speed, as score_group does (a group that ran none is scored on its first turns and
// counted in unobserved_optimise); otherwise rewards and advantages use a first-turn pass's first
// turn, and only the optimisation columns and turns_after follow gate.optimise.
// A group the alternative opens uses its stored debug turns when it has them (it was opened, or
// probed); one that was closed without a probe has none: it is counted in `unobserved_opens` and
// scored on its first turns. A group the alternative closes is scored on its first turns.
// With the alternative's reward.structural on, each pass gains its structural term from the stored
// profile of the turn it is paid for (data.turn_profiles; none stored: 0), as score_group adds it.
struct whatif_step {
  std::uint64_t step = 0;  // for the total row: unused
  std::uint32_t groups = 0;
  double activated_before = 0.0;  // fractions of the groups
  double activated_after = 0.0;
  std::uint32_t changed_decisions = 0;
  std::uint32_t unobserved_opens = 0;
  double mean_reward_before = 0.0;
  double mean_reward_after = 0.0;
  double mean_abs_advantage_before = 0.0;
  double mean_abs_advantage_after = 0.0;
  double nonzero_advantage_before = 0.0;  // fraction of rollouts with a non-zero advantage
  double nonzero_advantage_after = 0.0;
  std::uint32_t sign_flips = 0;    // rollouts whose advantage changed sign
  std::uint32_t turns_before = 0;  // generated (and mostly verified) turns
  std::uint32_t turns_after = 0;
  // Optimisation turns (gate.optimise): fractions of the groups the run opened for them (its
  // stored decision; for groups stored without one, those that ran optimisation turns) and that the
  // alternative's gate.optimise opens (decide_optimise on the stored first-turn speedups), and the
  // groups it opens that ran none (their optimisation turns are not in turns_after).
  double optimised_before = 0.0;
  double optimised_after = 0.0;
  std::uint32_t unobserved_optimise = 0;
};

struct whatif_report {
  std::vector<whatif_step> steps;
  whatif_step total;
};

[[nodiscard]] whatif_report what_if(const replay_data& data, const scoring_config& alternative);

// ---- output -------------------------------------------------------------------------------------

[[nodiscard]] std::string format_replay_tables(const replay_report& report);
[[nodiscard]] std::string format_whatif_table(const whatif_report& report,
                                              const std::string& description);

// CSV texts (header line, then one line per row; numbers in shortest round-trip form).
[[nodiscard]] std::string steps_csv(const replay_report& report);
[[nodiscard]] std::string validation_csv(const replay_report& report);
[[nodiscard]] std::string composition_csv(const replay_report& report);
[[nodiscard]] std::string whatif_csv(const whatif_report& report);
// The retry table and CSV (step, groups, signal_groups, retried, recovered, admitted, requeued,
// exhausted, evicted, buffered); empty when no step has retry columns.
[[nodiscard]] std::string format_retry_table(const replay_report& report);
[[nodiscard]] std::string retry_csv(const replay_report& report);
// The profile table and CSV (step, profiled, one column per bottleneck class counting kernels,
// seconds); empty when no step has a stored profile.
[[nodiscard]] std::string format_profile_table(const replay_report& report);
[[nodiscard]] std::string profile_csv(const replay_report& report);

}  // namespace leap
