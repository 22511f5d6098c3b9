// The messages the actors exchange: plain structs, each with inspect() so that CAF can serialise
// it (to a verifier node, or through the binary serializer in tests), registered in the project's
// type-ID block `caf::id_block::leap`, plus the atoms that name the operations.
//
// The vocabulary of orchestrator/ (group_record, turn_record, group_key, group_report, ...)
// travels as is; its inspect() overloads live here, in namespace leap, so that the orchestrator
// stays free of CAF.
//
// A process that talks to a remote actor registers the block once:
//   cfg.add_message_types<caf::id_block::leap>();   (or actors::register_message_types(cfg))
// Local messages need no registration.
#pragma once

#include "orchestrator/config.hpp"
#include "orchestrator/group_report.hpp"
#include "orchestrator/partial_rollouts.hpp"
#include "orchestrator/retry.hpp"
#include "orchestrator/trajectory.hpp"
#include "orchestrator/turn_profile.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/none.hpp>
#include <caf/type_id.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace leap::actors {

// One chat message to be rendered into token ids (prompt or feedback).
struct chat_text {
  std::string role;  // "system", "user", "assistant"
  std::string content;

  friend bool operator==(const chat_text&, const chat_text&) = default;
};

// One turn to generate. The generator renders `append` after `history` (the prompt when history is
// empty, a feedback delta otherwise), then samples.
struct generation_request {
  // Unique per turn and stable across restarts: "<run>/<step>/<split>/<group>/<rollout>/<turn>".
  std::string request_id;
  std::vector<token_id> history;  // the conversation so far: every earlier input and output token
  std::vector<chat_text> append;
  sampling_section sampling;
  // The resolved per-request seed (sampling.seed + the request's index), or -1 for none.
  std::int64_t seed = -1;
  // The endpoint that served the conversation's previous turn (for its prefix cache), or -1.
  std::int32_t pinned_endpoint = -1;

  friend bool operator==(const generation_request&, const generation_request&) = default;
};

struct generation_result {
  std::vector<token_id> input_tokens;  // `append` rendered: the turn's input tokens (mask 0)
  std::vector<token_id> output_tokens;
  std::vector<float> output_logprobs;  // one per output token
  std::string text;
  // error: no answer (then `error` says why, and the turn holds no output tokens).
  finish_reason finish = finish_reason::stop;
  std::string error;
  std::int32_t endpoint_index = -1;
  std::string endpoint;
  std::uint64_t weight_version = 0;  // the weights the turn started sampling with
  // Which version sampled which output tokens (turn_record::weight_segments): filled by the pool
  // from the client's segments; empty when the client gave none (one version sampled them all).
  std::vector<turn_weight_segment> weight_segments;
  double generation_ms = 0.0;  // from handing the turn to the client to its answer
  double queue_ms = 0.0;       // waiting for a free request slot before that
  // clock_ms() when the answer was complete, stamped by the in-process pool (activities' time
  // base).
  double finished_ms = 0.0;

  friend bool operator==(const generation_result&, const generation_result&) = default;
};

// Whether a generated turn goes to verification: a turn with no answer (an error, or an empty
// text) does not; it ends its rollout with a format verdict. The barrier schedule counts
// verifications with the same rule.
[[nodiscard]] inline bool needs_verification(const generation_result& r) {
  return r.finish != finish_reason::error && !r.text.empty();
}

struct verification_request {
  std::string request_id;  // the turn's generation request id, for logs
  std::string task_id;  // the verifier resolves the task by id (remote nodes load the same suite)
  std::string answer;   // the model's whole answer text; the verifier extracts the code

  friend bool operator==(const verification_request&, const verification_request&) = default;
};

struct verification_result {
  verdict_category verdict = verdict_category::format;
  bool passed = false;
  std::string feedback;                  // for the model; empty on a pass
  std::optional<std::string> code_hash;  // SHA-256 of the extracted code; none when none was found
  double compile_ms = 0.0;
  double run_ms = 0.0;
  // Waiting to be compiled (the pool's and the sandbox's compile queue): wall time minus compile,
  // run and run_queue_ms.
  double queue_ms = 0.0;
  double run_queue_ms = 0.0;  // compiled, waiting for a run slot (a GPU for cuda work)
  bool cache_hit = false;
  // Reference median / candidate median of a timed pass (verifier.timing_reps > 0); 0 when not
  // measured (timing off, a failure, or the sandbox gave none).
  double speedup = 0.0;
  double speedup_noise = -1.0;  // its relative noise; < 0 when the sandbox stated none
  // The same over the reference under torch.compile (kernelbench); 0 and < 0 when not measured.
  double compiled_speedup = 0.0;
  double compiled_speedup_noise = -1.0;
  // clock_ms() when the verdict was complete, stamped by the in-process pool.
  double finished_ms = 0.0;
  // Non-empty: the verifier itself failed (no compiler, an unknown task, a broken reference). No
  // verdict about the candidate; the run stops with this message.
  std::string infrastructure_error;

  friend bool operator==(const verification_result&, const verification_result&) = default;
};

// An operation's outcome: empty error = done.
struct ack {
  std::string error;

  [[nodiscard]] bool ok() const { return error.empty(); }
  friend bool operator==(const ack&, const ack&) = default;
};

// The gate's decision for one group, with the failure-count range that was in force.
struct gate_ruling {
  gate_decision decision = gate_decision::closed_no_debug;
  fail_range thresholds;

  friend bool operator==(const gate_ruling&, const gate_ruling&) = default;
};

// A new policy version for the generators: what the learner produced and where its weights are.
struct weight_update {
  std::uint64_t version = 0;
  std::string weights_path;  // empty: nothing to load (the record learner changes no weights)

  friend bool operator==(const weight_update&, const weight_update&) = default;
};

// What the learner did in one training step.
struct learner_step_result {
  std::uint64_t step = 0;
  std::uint64_t weight_version = 0;  // the version after the step
  double learner_ms = 0.0;
  std::uint32_t sequences = 0;  // training sequences (rollouts) in the step's batch
  std::string weights_path;     // empty when no new weights were written
  std::map<std::string, double> metrics;
  std::string error;  // non-empty: the step failed

  friend bool operator==(const learner_step_result&, const learner_step_result&) = default;
};

// The stored groups of one step and split (store_actor's load).
struct loaded_groups {
  std::vector<group_record> groups;
  std::string error;  // non-empty: the read failed

  friend bool operator==(const loaded_groups&, const loaded_groups&) = default;
};

// The retry buffer stored after a step (issue 35), as the store actor reads it back.
struct loaded_retry {
  bool found = false;  // false: none stored after that step (retry off, or an older store)
  retry_step_record record;
  std::string error;  // non-empty: the read failed

  friend bool operator==(const loaded_retry&, const loaded_retry&) = default;
};

// The carry decision stored with a step (schedule.partial, issue 33), as the store actor reads it
// back for a restarted run, with what the store holds of each carried group: the groups stored
// whole since, and the finished turns of the others.
struct loaded_carry {
  bool found = false;  // false: none stored with that step (partial off, or an older store)
  partial_carry_record record;
  // The carried groups stored whole (complete), under the keys of the steps that started them.
  std::vector<group_record> stored;
  // Per group of record.groups, in its order: for one not in `stored`, its in-progress turns per
  // rollout (index = rollout), turn 0, 1, ... as far as each is stored; empty otherwise.
  std::vector<std::vector<std::vector<turn_record>>> turns;
  std::string error;  // non-empty: the read failed

  friend bool operator==(const loaded_carry&, const loaded_carry&) = default;
};

// How a run ended, as the driver answers its `run` request.
struct run_summary {
  run_status status = run_status::running;
  std::uint64_t first_step = 0;        // the step the run (re)started at
  std::uint64_t steps_completed = 0;   // steps completed by this process
  std::uint64_t groups_completed = 0;  // training groups completed by this process
  std::uint64_t groups_resumed = 0;    // training groups read back from the store instead of redone
  // Finished turns of unfinished groups (both splits) taken from the store instead of redone.
  std::uint64_t turns_resumed = 0;
  std::string error;  // why, when status is failed

  friend bool operator==(const run_summary&, const run_summary&) = default;
};

}  // namespace leap::actors

// ---- inspect() ------------------------------------------------------------------------------
//
// std::optional has no inspector in CAF 0.17: it travels as a presence flag and a value, put back
// together by a load callback.

namespace leap {

namespace detail {
template <class Inspector, class T, class... Ts>
typename Inspector::result_type inspect_with_optional(Inspector& f, const char* name,
                                                      std::optional<T>& opt, Ts&&... fields) {
  bool present = opt.has_value();
  T value = opt.value_or(T{});
  return f(caf::meta::type_name(name), std::forward<Ts>(fields)..., present, value,
           caf::meta::load_callback([&]() -> caf::error {
             if (present) {
               opt = std::move(value);
             } else {
               opt.reset();
             }
             return caf::none;
           }));
}
// A struct with a field list (common/field_list.hpp) travels as its listed fields, every one of
// them, those the store keeps beside a record included. That covers every stored record and, by
// the same rule, the loss options (no message carries them today: the torch learner gets them in
// its config); a struct given a field list needs no inspect of its own.
template <class T>
struct optional_field {
  std::optional<T>* target;
  bool present;
  T value;
};

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, optional_field<T>& x) {
  return f(x.present, x.value, caf::meta::load_callback([&x]() -> caf::error {
             if (x.present) {
               *x.target = std::move(x.value);
             } else {
               x.target->reset();
             }
             return caf::none;
           }));
}

template <class T>
T& inspected(T& value) {
  return value;
}

template <class T>
optional_field<T> inspected(std::optional<T>& value) {
  return {&value, value.has_value(), value.value_or(T{})};
}
}  // namespace detail

template <class Inspector, field_listed T>
typename Inspector::result_type inspect(Inspector& f, T& x) {
  return std::apply([&f](auto&&... field) { return f(detail::inspected(field.value)...); },
                    fields(x));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_section& x) {
  return f(caf::meta::type_name("sampling_section"), x.temperature, x.top_k, x.top_p, x.max_tokens,
           x.seed, x.stop, x.stop_token_ids);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rollout_outcome& x) {
  return f(caf::meta::type_name("rollout_outcome"), x.passed_at_turn, x.generated_turns);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_key& x) {
  return f(caf::meta::type_name("group_key"), x.step, x.split, x.group);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, activity& x) {
  return f(caf::meta::type_name("activity"), x.kind, x.start_ms, x.end_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_report& x) {
  return f(caf::meta::type_name("group_report"), x.key, x.task_id, x.gate, x.n_fail, x.probe,
           x.outcomes, x.measured, x.advantages, x.speedups, x.compiled_speedups, x.turns,
           x.verifier_jobs, x.generated_tokens, x.activities);
}

}  // namespace leap

namespace leap::actors {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_text& x) {
  return f(caf::meta::type_name("chat_text"), x.role, x.content);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generation_request& x) {
  return f(caf::meta::type_name("generation_request"), x.request_id, x.history, x.append,
           x.sampling, x.seed, x.pinned_endpoint);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generation_result& x) {
  return f(caf::meta::type_name("generation_result"), x.input_tokens, x.output_tokens,
           x.output_logprobs, x.text, x.finish, x.error, x.endpoint_index, x.endpoint,
           x.weight_version, x.weight_segments, x.generation_ms, x.queue_ms, x.finished_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verification_request& x) {
  return f(caf::meta::type_name("verification_request"), x.request_id, x.task_id, x.answer);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verification_result& x) {
  return leap::detail::inspect_with_optional(
      f, "verification_result", x.code_hash, x.verdict, x.passed, x.feedback, x.compile_ms,
      x.run_ms, x.queue_ms, x.run_queue_ms, x.cache_hit, x.speedup, x.speedup_noise,
      x.compiled_speedup, x.compiled_speedup_noise, x.finished_ms, x.infrastructure_error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ack& x) {
  return f(caf::meta::type_name("ack"), x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gate_ruling& x) {
  return f(caf::meta::type_name("gate_ruling"), x.decision, x.thresholds);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, weight_update& x) {
  return f(caf::meta::type_name("weight_update"), x.version, x.weights_path);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, learner_step_result& x) {
  return f(caf::meta::type_name("learner_step_result"), x.step, x.weight_version, x.learner_ms,
           x.sequences, x.weights_path, x.metrics, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loaded_groups& x) {
  return f(caf::meta::type_name("loaded_groups"), x.groups, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loaded_retry& x) {
  return f(caf::meta::type_name("loaded_retry"), x.found, x.record, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loaded_carry& x) {
  return f(caf::meta::type_name("loaded_carry"), x.found, x.record, x.stored, x.turns, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_summary& x) {
  return f(caf::meta::type_name("run_summary"), x.status, x.first_step, x.steps_completed,
           x.groups_completed, x.groups_resumed, x.turns_resumed, x.error);
}

}  // namespace leap::actors

// ---- The project's type-ID block --------------------------------------------------------------

CAF_BEGIN_TYPE_ID_BLOCK(leap, caf::first_custom_type_id)

CAF_ADD_TYPE_ID(leap, (leap::group_record))
CAF_ADD_TYPE_ID(leap, (leap::step_record))
CAF_ADD_TYPE_ID(leap, (leap::run_record))
CAF_ADD_TYPE_ID(leap, (leap::turn_record))
CAF_ADD_TYPE_ID(leap, (leap::rollout_record))
CAF_ADD_TYPE_ID(leap, (leap::sampling_section))
CAF_ADD_TYPE_ID(leap, (leap::group_key))
CAF_ADD_TYPE_ID(leap, (leap::actors::chat_text))
CAF_ADD_TYPE_ID(leap, (leap::actors::generation_request))
CAF_ADD_TYPE_ID(leap, (leap::actors::generation_result))
CAF_ADD_TYPE_ID(leap, (leap::actors::verification_request))
CAF_ADD_TYPE_ID(leap, (leap::actors::verification_result))
CAF_ADD_TYPE_ID(leap, (leap::actors::ack))
CAF_ADD_TYPE_ID(leap, (leap::actors::gate_ruling))
CAF_ADD_TYPE_ID(leap, (leap::actors::weight_update))
CAF_ADD_TYPE_ID(leap, (leap::actors::learner_step_result))
CAF_ADD_TYPE_ID(leap, (leap::activity))
CAF_ADD_TYPE_ID(leap, (leap::group_report))
CAF_ADD_TYPE_ID(leap, (leap::actors::loaded_groups))
CAF_ADD_TYPE_ID(leap, (leap::actors::run_summary))
CAF_ADD_TYPE_ID(leap, (std::vector<leap::group_record>))

// Atoms: at most 10 characters, none of CAF's own names.
CAF_ADD_ATOM(leap, leap::actors, generate_atom, "generate")
CAF_ADD_ATOM(leap, leap::actors, verify_atom, "verify")
CAF_ADD_ATOM(leap, leap::actors, weights_atom, "weights")
CAF_ADD_ATOM(leap, leap::actors, completed_atom, "completed")
CAF_ADD_ATOM(leap, leap::actors, score_atom, "score")
CAF_ADD_ATOM(leap, leap::actors, put_group_atom, "put_group")
CAF_ADD_ATOM(leap, leap::actors, put_step_atom, "put_step")
CAF_ADD_ATOM(leap, leap::actors, put_run_atom, "put_run")
CAF_ADD_ATOM(leap, leap::actors, load_atom, "load_grps")
CAF_ADD_ATOM(leap, leap::actors, commit_atom, "commit")
CAF_ADD_ATOM(leap, leap::actors, add_group_atom, "add_group")
CAF_ADD_ATOM(leap, leap::actors, train_atom, "train")
CAF_ADD_ATOM(leap, leap::actors, decide_atom, "decide")
CAF_ADD_ATOM(leap, leap::actors, group_done_atom, "grp_done")
CAF_ADD_ATOM(leap, leap::actors, group_failed_atom, "grp_failed")
CAF_ADD_ATOM(leap, leap::actors, turn_atom, "turn_rep")
CAF_ADD_ATOM(leap, leap::actors, run_atom, "run_exp")
CAF_ADD_ATOM(leap, leap::actors, stop_atom, "stop_run")
CAF_ADD_ATOM(leap, leap::actors, resolve_atom, "resolve")
CAF_ADD_ATOM(leap, leap::actors, release_atom, "release")
CAF_ADD_ATOM(leap, leap::actors, start_atom, "start_grp")
CAF_ADD_ATOM(leap, leap::actors, put_turn_atom, "put_turn")
// Buffered retry (issue 35): after every earlier id, so that none of theirs moves.
CAF_ADD_TYPE_ID(leap, (leap::retry_step_record))
CAF_ADD_TYPE_ID(leap, (leap::actors::loaded_retry))
CAF_ADD_ATOM(leap, leap::actors, put_retry_atom, "put_retry")
CAF_ADD_ATOM(leap, leap::actors, get_retry_atom, "get_retry")
// Partial rollouts' carry decision (issue 33): after every earlier id.
CAF_ADD_TYPE_ID(leap, (leap::partial_carry_record))
CAF_ADD_TYPE_ID(leap, (leap::actors::loaded_carry))
CAF_ADD_ATOM(leap, leap::actors, get_carry_atom, "get_carry")
// Profiles made off the verdict's path (issue 34): after every earlier id.
CAF_ADD_ATOM(leap, leap::actors, profile_atom, "profile")
CAF_ADD_ATOM(leap, leap::actors, profiled_atom, "profiled")
// Profiles stored with their turns (issue 34): after every earlier id.
CAF_ADD_TYPE_ID(leap, (leap::turn_profile_record))
CAF_ADD_TYPE_ID(leap, (std::vector<leap::turn_profile_record>))
CAF_ADD_ATOM(leap, leap::actors, put_profile_atom, "put_prof")
// Profiles made on verifier nodes, handed to the local pool's shelves (issue 34).
CAF_ADD_ATOM(leap, leap::actors, profile_due_atom, "prof_due")

CAF_END_TYPE_ID_BLOCK(leap)

namespace leap::actors {

// Registers the block with a config: needed by both sides of a remote connection.
void register_message_types(caf::actor_system_config& config);

// Milliseconds on the process's steady clock, the time base of `activity`. Thread-safe.
[[nodiscard]] double clock_ms();

// Unix epoch milliseconds now. Thread-safe.
[[nodiscard]] std::int64_t unix_ms();

}  // namespace leap::actors
