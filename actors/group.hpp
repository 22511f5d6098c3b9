// The group actor (the diagram's "gate (per group)" in DESIGN.md; the decision rule itself is
// orchestrator/gate.hpp): one actor per group. It owns the group's group_flow
// (orchestrator/group_flow.hpp) and carries out what the flow asks:
//   - at start, requests the G first turns from the generator; each answer goes to the verifier the
//     moment it arrives, and each verdict into the flow the moment it arrives;
//   - at the G-th first-turn verdict it asks its parent for the gate's decision (the experiment
//     driver holds the stateful dcp_adaptive gate) or decides locally when `local_gate` is set;
//   - for each failed rollout that the flow sends on (an opened group, or a probe), and each
//     passing one sent on for optimisation turns (gate.optimise), it spawns one debug-turn actor,
//     which reports every further turn back; the flow says whether it goes on;
//   - when the flow is finished: with profile summaries to pull (reward.structural), those of its
//     passing turns, waiting at most profile_wait; then scorer, then store (durable), then learner
//     (training groups), then group_done to the parent, and the actor ends. A closed group finishes
//     as soon as it is gated.
// Any infrastructure failure (verifier, store, learner, scorer, and a turn the generator could not
// answer: finish_reason::error after the policy client's retries) is reported with group_failed
// and ends the actor; the group is then redone by a later run. A turn with no answer is never
// scored: it says nothing about the model, and scoring it would train its group on it.
#pragma once

#include "actors/generator.hpp"
#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/scorer.hpp"
#include "actors/store.hpp"
#include "actors/verifier.hpp"
#include "orchestrator/gate.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace leap::telemetry {
struct run_telemetry;
}

namespace leap::actors {

// What a group actor needs of the actor that spawned it (the experiment driver, or a test harness).
// decide(key, n_fail, group_size): the gate decision and the thresholds in force.
// group_done(report): the group is scored, stored and (training) handed to the learner.
// group_failed(key, message): the group could not be finished; the message says why.
using group_parent_actor = caf::typed_actor<
    caf::replies_to<decide_atom, group_key, std::int32_t, std::int32_t>::with<gate_ruling>,
    caf::reacts_to<group_done_atom, group_report>,
    caf::reacts_to<group_failed_atom, group_key, std::string>>;

// The barrier schedule's proxy (actors/barrier.hpp): generator and verifier in one, holding each
// round of requests until the whole step is at the same point.
using barrier_actor =
    caf::typed_actor<caf::replies_to<generate_atom, generation_request>::with<generation_result>,
                     caf::replies_to<verify_atom, verification_request>::with<verification_result>,
                     caf::reacts_to<resolve_atom, std::uint32_t>>;

// turn(rollout, record, activities): a debug-turn actor reports the turn it just finished
//   (verified, unless it had no answer); the answer says whether that rollout goes on.
// group_failed(message): a debug-turn actor could not finish its turn (the verifier or the
//   generator failed); the group fails with the message.
using group_actor = caf::typed_actor<
    caf::replies_to<turn_atom, std::uint32_t, turn_record, std::vector<activity>>::with<bool>,
    caf::reacts_to<group_failed_atom, std::string>>;

struct group_task {
  std::string id;
  std::string prompt;
};

struct group_settings {
  std::string run_id;
  group_key key;
  group_task task;
  int group_size = 8;
  int max_turns = 3;
  sampling_section sampling;
  // Per-request seeds: sampling.seed + request_index_base + rollout * max_turns + turn, when
  // sampling.seed >= 0.
  std::uint64_t request_index_base = 0;
  // A closed group's failed rollouts still run debug turns, for measurement only.
  bool probe_if_closed = false;
  // Decide with this config's stateless gate instead of asking the parent (validation groups use
  // policy full, so that accuracy at every turn is measured).
  std::optional<gate_config> local_gate;
  // Optimisation turns for passing rollouts (gate.optimise; orchestrator/gate.hpp). Default: off
  optimise_config optimise;
  // Training group: handed to the learner after it is stored. Validation groups are not.
  bool train = true;
  // The weight version every turn of the group must be sampled with (validation groups: the
  // driver holds weight syncs back until the group is done), recorded in the group record. A turn
  // sampled with another version fails the group. None: any (training). Default: none
  std::optional<std::uint64_t> weight_version;
  // Live metrics (turn latencies, tokens, store waits); null: none. Default: null
  std::shared_ptr<telemetry::run_telemetry> telemetry;
  // Per-turn resume: finished turns of this group stored by an earlier process, per rollout turn 0,
  // 1, ... (tools/launch/resume.hpp's reusable_turns). Each is taken as that turn's result, neither
  // generated nor verified again, when the flow asks for it. Default: none
  std::vector<std::vector<turn_record>> resumed_turns;
};

struct group_services {
  generation_actor generator;
  verifier_actor verifier;
  // Null: no verdict's profile follows it (profiling inline or off); see experiment_services.
  profile_actor profiles;
  // Longest a turn waits for the profile of the turn before it (verifier.profile_wait_s), and a
  // finished group for its passes' profile summaries.
  std::chrono::milliseconds profile_wait{60'000};
  // The pool's profile summaries (profile_summaries_of), pulled for the passing turns of a finished
  // group and scored with (reward.structural); null: scored without (structural terms off).
  profile_summary_actor profile_summaries;
  scorer_actor scorer;
  store_actor store;
  learner_actor learner;  // may be null when settings.train is false
  group_parent_actor parent;
  // Set in the barrier schedule: generation and verification go through it, and the group actor
  // tells it how many rollouts ended after each round. Null: streaming.
  barrier_actor barrier;
};

// The resolved seed of one turn's request (see group_settings::request_index_base), or -1.
[[nodiscard]] std::int64_t turn_seed(const group_settings& settings, std::uint32_t rollout,
                                     int turn);

// Spawns the group actor; it starts the first turns at once. The caller keeps the handle until
// group_done or group_failed arrives (an actor no one references may be dropped).
[[nodiscard]] group_actor spawn_group(caf::actor_system& system, group_settings settings,
                                      group_services services);

}  // namespace leap::actors
