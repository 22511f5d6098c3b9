// The debug-turn actor: one per failed rollout of an opened (or probe) group, and one per passing
// rollout sent on for optimisation turns. It appends the last verdict's feedback (for a pass, the
// request for a faster version: turn_feedback) to its rollout's conversation, asks the generator
// for the next turn, sends the answer to the verifier, and reports the verified turn to its gate,
// whose group_flow says whether another turn follows (up to M turns in all). It ends when told to
// stop; the gate holds the rollout's record, so the final outcome is the gate's last report.
#pragma once

#include "actors/group.hpp"
#include "actors/messages.hpp"
#include "orchestrator/group_flow.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace leap::actors {

// No requests of its own: it works on its own once spawned and ends when done.
using debug_turn_actor = caf::typed_actor<caf::reacts_to<stop_atom>>;

struct debug_turn_settings {
  group_settings group;  // run, key, task, sampling, seeds
  std::uint32_t rollout = 0;
  int turn = 1;                   // the 0-based index of the first turn this actor generates
  std::vector<token_id> history;  // every input and output token of the earlier turns
  // The turn before `turn`: its feedback (turn_feedback) is what the next turn reads, completed
  // by its profile when one was made after its verdict (group_services::profiles).
  turn_record last;
  std::int32_t pinned_endpoint = -1;
  // The rollout's turns from an earlier process, by turn index (group_settings::resumed_turns):
  // a turn found here is reported as it is, neither generated nor verified.
  std::vector<turn_record> resumed;
};

// Why a generated turn may not join its group: it was sampled with another weight version than
// the group is measured with (group_settings::weight_version). Empty when it may.
[[nodiscard]] std::string version_mismatch(const group_settings& group,
                                           const generation_result& generated);

// The feedback message a debug turn appends: the verifier's text as a user message.
[[nodiscard]] std::vector<chat_text> feedback_messages(const std::string& feedback);

// The feedback the turn after `last` reads: an optimisation turn's request for a faster version
// (optimise_feedback with the pass's speedup and gate.optimise.speedup) when `last` passed, then
// the profiler's diagnosis when there is one; the verifier's feedback otherwise. `profiled`, when
// not empty, is the verdict's feedback completed by its profile (profile_actor's reply) and
// stands for last.feedback.
[[nodiscard]] std::string turn_feedback(const group_settings& group, const turn_record& last,
                                        const std::string& profiled = {});

// Builds the turn record of a generated (and, when it had an answer, verified) turn. A turn with no
// answer gets verdict format and the generation error as feedback.
[[nodiscard]] turn_record make_turn_record(generation_result generated,
                                           const verification_result* verified);

// The flow's view of a recorded turn: a turn whose answer was cut off or missing ends its rollout.
[[nodiscard]] turn_result flow_result(const turn_record& turn);

// Appends the wall-clock activities of one turn: its generation, then (when it was verified) the
// verifier's queue and compilation (as compile) and its run.
void add_turn_activities(std::vector<activity>& out, const generation_result& generated,
                         const verification_result* verified);

// Records one finished turn in the live metrics (when `settings.telemetry` is set): turn and pass
// counts (first or debug turn), generated tokens, generation time and its queue wait, and (when it
// was verified) compile and run time and the verifier's queue wait.
void observe_turn(const group_settings& settings, int turn, const generation_result& generated,
                  const verification_result* verified);

// Spawns the actor, which starts its first turn at once.
[[nodiscard]] debug_turn_actor spawn_debug_turn(caf::actor_system& system,
                                                debug_turn_settings settings,
                                                group_services services, group_actor gate);

}  // namespace leap::actors
