// Trajectories: what rollouts produced, turn by turn, as the records flow from the rollout actors
// to the store and the learner; and the step and run records around them.
//
// Plain structs, plus what every consumer of them needs: flattening a rollout into the learner's
// token arrays, a rollout's outcome from its turns, a group's summary for the metrics, and
// consistency checks. How the store writes them is storage/'s (storage/record_codec.hpp).
//
// All functions here are pure and thread-safe.
#pragma once

#include "common/enums/finish_reason.hpp"
#include "common/enums/run_status.hpp"
#include "common/enums/split_kind.hpp"
#include "common/field_list.hpp"
#include "common/result.hpp"
#include "orchestrator/advantage.hpp"  // not_generated
#include "orchestrator/gate.hpp"
#include "orchestrator/metrics.hpp"
#include "orchestrator/reward.hpp"  // pass_speed
#include "orchestrator/vocabulary.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace leap {

using token_id = std::int32_t;

// Wall-clock milliseconds one turn spent in each stage and in each stage's queue.
struct turn_timings {
  double generation_ms = 0.0;        // the policy request, from sending it to its last token
  double compile_ms = 0.0;           // 0 when nothing compiled (format failure, cache hit)
  double run_ms = 0.0;               // 0 when nothing ran
  double generation_queue_ms = 0.0;  // waiting for a free request slot of an endpoint
  double compile_queue_ms = 0.0;     // waiting in the compile queue
  double run_queue_ms = 0.0;         // waiting for a run slot

  friend bool operator==(const turn_timings&, const turn_timings&) = default;
};

// The output tokens of a turn sampled under one weight version: from `first` (an index into the
// turn's output_tokens) up to the next segment's first, or to the end. A turn has more than one
// when a weight update landed while it was being generated (policy.inflight_updates).
struct turn_weight_segment {
  std::uint32_t first = 0;
  std::uint64_t version = 0;

  friend bool operator==(const turn_weight_segment&, const turn_weight_segment&) = default;
};

// One generated turn of a rollout: the tokens fed to the policy before it, the tokens it sampled,
// and what verification said of them.
struct turn_record {
  // Tokens appended to the conversation before this turn: the prompt for turn 0, the environment's
  // feedback (and chat-template glue) after. Never trained on (mask 0).
  std::vector<token_id> input_tokens;
  // Tokens the policy sampled in this turn (mask 1), and the behaviour log-probability of each,
  // as the server reported it: output_logprobs.size() == output_tokens.size().
  std::vector<token_id> output_tokens;
  std::vector<float> output_logprobs;
  std::string text;                      // the model's answer as the server decoded it
  std::optional<std::string> code_hash;  // content hash of the extracted code; none if none found
  verdict_category verdict = verdict_category::format;
  bool passed = false;   // verdict == pass; kept apart so that a consumer need not know the enum
  std::string feedback;  // the feedback text the verifier wrote; empty for a pass
  turn_timings timings;
  std::uint64_t weight_version = 0;  // the policy weights the turn started sampling with
  // Which version sampled which output tokens, in token order with strictly increasing `first`,
  // the first from 0 with weight_version. Empty means one segment {0, weight_version} (records
  // built before format version 6 decode as that one segment); see weight_segments_of().
  std::vector<turn_weight_segment> weight_segments;
  finish_reason finish = finish_reason::stop;
  std::string endpoint;  // the server that generated the turn, e.g. "http://10.0.0.3:8000"
  // Reference median / candidate median of a timed pass (verifier.timing_reps > 0); 0 when not
  // measured (timing off, a failure, a record older than format version 3).
  double speedup = 0.0;
  // That speedup's relative noise as the sandbox stated it (sandbox::speedup_noise); < 0 when not
  // stated (too few repetitions, no speedup, a record older than format version 4).
  double speedup_noise = -1.0;
  // The same pass's speedup over the reference under torch.compile, and its noise (kernelbench,
  // format version 5); 0 and < 0 when not measured.
  double compiled_speedup = 0.0;
  double compiled_speedup_noise = -1.0;

  friend bool operator==(const turn_record&, const turn_record&) = default;
};

struct rollout_record {
  std::uint32_t index = 0;  // within its group, 0..G-1
  std::vector<turn_record> turns;
  rollout_outcome outcome;  // what training used; see group_record::probe
  int rank = 0;             // the tournament rank of the outcome (M - m + 1 for a pass at turn m)
  double reward = 0.0;
  double advantage = 0.0;  // the rollout-level advantage A_i (before the per-turn discount)
  bool truncated = false;  // some turn was cut off (finish_reason::length)

  friend bool operator==(const rollout_record& a, const rollout_record& b) {
    return a.index == b.index && a.turns == b.turns &&
           a.outcome.passed_at_turn == b.outcome.passed_at_turn &&
           a.outcome.generated_turns == b.outcome.generated_turns && a.rank == b.rank &&
           a.reward == b.reward && a.advantage == b.advantage && a.truncated == b.truncated;
  }
};

// A finished group: one task's G rollouts, gated, scored and ready for the learner. It is the unit
// the store writes atomically.
struct group_record {
  std::string run_id;  // non-empty, no NUL byte (it is part of the store's keys)
  std::uint64_t step = 0;
  split_kind split = split_kind::train;
  std::uint32_t group_index = 0;  // within the step and split
  std::string task_id;            // non-empty, no NUL byte
  int max_turns = 1;              // M in force for this group
  gate_decision gate = gate_decision::closed_no_debug;
  int n_fail = 0;         // first-turn failures the gate counted
  fail_range thresholds;  // the failure-count range in force when the gate decided
  // The gate closed this group, yet its failed rollouts ran debug turns for measurement only
  // (probe_fraction > 0). Turns after the first are never trained on: each rollout's outcome,
  // rank, reward and advantage are those of its first turn, and outcome_from_turns() gives what
  // the debug turns would have reached.
  bool probe = false;
  // The optimisation decision the live run took for this group when the gate decided
  // (gate.optimise, issue 31): kept so that replay reports it rather than recomputing it. None
  // with gate.optimise off (decision `off`), for validation groups, and in stores made before it
  // was stored. The store keeps it beside the group record (storage/), not inside its bytes.
  std::optional<optimise_decision> optimise;
  std::vector<rollout_record> rollouts;
  // Unix epoch milliseconds: the first request of the group sent, the gate decided, the group was
  // scored. 0 when not recorded.
  std::int64_t started_unix_ms = 0;
  std::int64_t gated_unix_ms = 0;
  std::int64_t finished_unix_ms = 0;
  // The policy weights the group was measured with: set for validation groups, whose turns are
  // all sampled with this one version (the weights after the step they validate; a validation
  // redone by a resumed run, the version it resumed with). None for training groups, whose turns
  // may span versions under schedule.max_staleness (each turn has its own), and for groups
  // stored before format version 2.
  std::optional<std::uint64_t> weight_version;

  friend bool operator==(const group_record&, const group_record&) = default;
};

// Where a step's wall time went, in milliseconds. The producer attributes each instant of the step
// to one activity (the learner when it runs, else the stage the pipeline waits on, else idle), so
// that generation + compile + run + learner + idle == wall.
struct step_timings {
  double wall_ms = 0.0;
  double generation_ms = 0.0;
  double compile_ms = 0.0;
  double run_ms = 0.0;
  double learner_ms = 0.0;
  double idle_ms = 0.0;

  friend bool operator==(const step_timings&, const step_timings&) = default;
};

struct step_counts {
  std::uint32_t groups = 0;            // training groups scored in the step
  std::uint32_t activated_groups = 0;  // of which the gate opened
  std::uint32_t probe_groups = 0;
  std::uint32_t rollouts = 0;
  std::uint32_t passed_rollouts = 0;
  std::uint32_t turns = 0;          // generated turns, all rollouts
  std::uint32_t verifier_jobs = 0;  // candidates sent to verification
  std::uint64_t generated_tokens = 0;

  friend bool operator==(const step_counts&, const step_counts&) = default;
};

// A completed training step: written once the learner has stepped, so its presence in the store
// marks the step done (see trajectory_store::last_completed_step).
struct step_record {
  std::string run_id;
  std::uint64_t step = 0;
  std::uint64_t weight_version = 0;  // the version the learner produced at the end of the step
  std::int64_t started_unix_ms = 0;
  std::int64_t finished_unix_ms = 0;
  step_timings timings;
  step_counts counts;
  std::map<std::string, double> metrics;  // metric name -> value at this step (names: no NUL)

  friend bool operator==(const step_record&, const step_record&) = default;
};

struct run_record {
  std::string id;           // non-empty, no NUL byte
  std::string config_yaml;  // the config the run was started with, as written
  std::int64_t created_unix_ms = 0;
  run_status status = run_status::running;

  friend bool operator==(const run_record&, const run_record&) = default;
};

// ---- Fields ----------------------------------------------------------------------------------
//
// Each record's fields, once, in the order the store writes them (common/field_list.hpp
// says how the codec, the exports and CAF use them). A field added to a record goes into its
// struct and here, with the format version that added it when the store keeps it. The CSV export
// writes a group's, a rollout's and a turn's fields side by side in one row: csv_name and
// csv_prefix name the columns of those whose own names would clash or say too little there.

template <maybe_const<turn_timings> X>
constexpr auto fields(X& x) {
  return std::tuple{field("generation_ms", x.generation_ms, opt().replay_mean()),
                    field("compile_ms", x.compile_ms, opt().replay_mean()),
                    field("run_ms", x.run_ms, opt().replay_mean()),
                    field("generation_queue_ms", x.generation_queue_ms, opt().replay_mean()),
                    field("compile_queue_ms", x.compile_queue_ms, opt().replay_mean()),
                    field("run_queue_ms", x.run_queue_ms, opt().replay_mean())};
}

template <maybe_const<turn_weight_segment> X>
constexpr auto fields(X& x) {
  return std::tuple{field("first", x.first), field("version", x.version)};
}

template <maybe_const<turn_record> X>
constexpr auto fields(X& x) {
  return std::tuple{
      field("input_tokens", x.input_tokens, opt().tokens()),
      field("output_tokens", x.output_tokens, opt().tokens()),
      field("output_logprobs", x.output_logprobs, opt().tokens()), field("text", x.text),
      field("code_hash", x.code_hash), field("verdict", x.verdict), field("passed", x.passed),
      field("feedback", x.feedback), field("timings", x.timings),
      field("weight_version", x.weight_version),
      // `other` is never stored: the generator records it as `stop` (actors/generator.cpp).
      field("finish_reason", x.finish, opt().enum_max(finish_reason::error)),
      field("endpoint", x.endpoint),
      field("speedup", x.speedup, opt().since(3).null_unless_positive()),
      field("speedup_noise", x.speedup_noise,
            opt().since(4).null_unless_non_negative().replay_mean()),
      field("compiled_speedup", x.compiled_speedup, opt().since(5).null_unless_positive()),
      field("compiled_speedup_noise", x.compiled_speedup_noise,
            opt().since(5).null_unless_non_negative()),
      // Before in-flight updates one version sampled the whole turn.
      field("weight_segments", x.weight_segments, opt().since(6).element("turn.weight_segment"),
            [&x] {
              return std::vector<turn_weight_segment>{{0, x.weight_version}};
            })};
}

// The outcome's two numbers are the rollout's own fields in the store and the export.
template <maybe_const<rollout_record> X>
constexpr auto fields(X& x) {
  return std::tuple{field("index", x.index, opt().csv_name("rollout_index")),
                    field("passed_at_turn", x.outcome.passed_at_turn),
                    field("generated_turns", x.outcome.generated_turns),
                    field("rank", x.rank),
                    field("reward", x.reward),
                    field("advantage", x.advantage),
                    field("truncated", x.truncated),
                    field("turns", x.turns, opt().element("turn"))};
}

template <maybe_const<fail_range> X>
constexpr auto fields(X& x) {
  return std::tuple{field("lo", x.lo), field("hi", x.hi)};
}

template <maybe_const<group_record> X>
constexpr auto fields(X& x) {
  return std::tuple{
      field("run_id", x.run_id),
      field("step", x.step),
      field("split", x.split),
      field("group_index", x.group_index),
      field("task_id", x.task_id),
      field("max_turns", x.max_turns),
      field("gate", x.gate),
      field("n_fail", x.n_fail),
      field("thresholds", x.thresholds, opt().csv_prefix("threshold_")),
      field("probe", x.probe),
      field("started_unix_ms", x.started_unix_ms, opt().csv_name("group_started_unix_ms")),
      field("gated_unix_ms", x.gated_unix_ms, opt().csv_name("group_gated_unix_ms")),
      field("finished_unix_ms", x.finished_unix_ms, opt().csv_name("group_finished_unix_ms")),
      field("rollouts", x.rollouts, opt().element("rollout")),
      field("weight_version", x.weight_version,
            opt().since(2).padded().csv_name("group_weight_version")),
      field("optimise", x.optimise, opt().beside_record())};
}

template <maybe_const<step_timings> X>
constexpr auto fields(X& x) {
  return std::tuple{field("wall_ms", x.wall_ms),       field("generation_ms", x.generation_ms),
                    field("compile_ms", x.compile_ms), field("run_ms", x.run_ms),
                    field("learner_ms", x.learner_ms), field("idle_ms", x.idle_ms)};
}

template <maybe_const<step_counts> X>
constexpr auto fields(X& x) {
  return std::tuple{field("groups", x.groups),
                    field("activated_groups", x.activated_groups),
                    field("probe_groups", x.probe_groups),
                    field("rollouts", x.rollouts),
                    field("passed_rollouts", x.passed_rollouts),
                    field("turns", x.turns),
                    field("verifier_jobs", x.verifier_jobs),
                    field("generated_tokens", x.generated_tokens)};
}

template <maybe_const<step_record> X>
constexpr auto fields(X& x) {
  return std::tuple{field("run_id", x.run_id),
                    field("step", x.step),
                    field("weight_version", x.weight_version),
                    field("started_unix_ms", x.started_unix_ms),
                    field("finished_unix_ms", x.finished_unix_ms),
                    field("timings", x.timings),
                    field("counts", x.counts),
                    field("metrics", x.metrics)};
}

template <maybe_const<run_record> X>
constexpr auto fields(X& x) {
  return std::tuple{field("id", x.id), field("config_yaml", x.config_yaml),
                    field("created_unix_ms", x.created_unix_ms), field("status", x.status)};
}

// ---- Helpers ---------------------------------------------------------------------------------

// A rollout as one token sequence, the form the learner and leap::token_advantages take: turn t
// contributes its input tokens (mask 0, token_turn not_generated, log-prob 0) then its output
// tokens (mask 1, token_turn t, the behaviour log-prob). All four vectors have the same length.
// Note: token_advantages takes T_i as 1 + the largest turn index present, so a last turn with no
// output token (finish_reason::error) does not count there.
struct flat_rollout {
  std::vector<token_id> tokens;
  std::vector<std::uint8_t> mask;
  std::vector<int> token_turn;
  std::vector<float> behaviour_logprobs;
};

// Errors: a turn whose log-prob count differs from its output token count (naming the rollout and
// the turn).
[[nodiscard]] result<flat_rollout> flatten(const rollout_record& rollout);

// What the turns themselves say: passed_at_turn is 1 + the first turn whose `passed` is set (0 if
// none), generated_turns the number of turns (at least 1, as rollout_outcome requires).
[[nodiscard]] rollout_outcome outcome_from_turns(const rollout_record& rollout);

// What the verifier measured of the turn `outcome` passed at (outcome.passed_at_turn, 1-based):
// its speedup when one was measured (> 0 and finite); nothing for a failure or an untimed pass.
// and its relative noise when the verdict stated one.
[[nodiscard]] pass_speed speed_of(const rollout_record& rollout, const rollout_outcome& outcome);
// The same against the second baseline, the reference under torch.compile.
[[nodiscard]] pass_speed compiled_speed_of(const rollout_record& rollout,
                                           const rollout_outcome& outcome);

// The metrics' view of a group: its gate decision, and per rollout (in stored order) the outcome
// and advantage that training used. For a probe group, use probe_summary() to measure recovery.
[[nodiscard]] group_summary summarize(const group_record& group);

// A probe group as if the gate had opened it: gate open, outcomes from outcome_from_turns(), so
// that leap::recovery() measures what the debug turns of a closed group reached.
[[nodiscard]] group_summary probe_summary(const group_record& group);

// A turn's segments, never empty: its weight_segments, or {0, weight_version} when it has none.
[[nodiscard]] std::vector<turn_weight_segment> weight_segments_of(const turn_record& turn);

// The version that sampled each of a turn's output tokens (output_tokens.size() entries), from
// weight_segments_of(turn).
[[nodiscard]] std::vector<std::uint64_t> output_token_versions(const turn_record& turn);

// The oldest version that sampled any of a turn's tokens (its segments' minimum).
[[nodiscard]] std::uint64_t oldest_weight_version(const turn_record& turn);

// Consistency checks the store runs before it writes. Errors name the record and the field:
// an empty or NUL-containing id; duplicate rollout indices; a turn whose log-prob count differs
// from its output token count, or whose `passed` disagrees with its verdict; a metric name that
// is empty or contains NUL.
[[nodiscard]] status validate(const group_record& group);
[[nodiscard]] status validate(const step_record& step);
[[nodiscard]] status validate(const run_record& run);

}  // namespace leap
