// The barrier schedule: a proxy in front of the generator and the verifier that makes one step run
// in lockstep rounds, as a synchronous trainer does:
//   round t: generate turn t of every active rollout, wait for all of them; verify all of them,
//   wait for all; then the gates process the verdicts together (turn 1: every group is gated) and
//   the rollouts that go on make up round t + 1.
// Generation answers are held until the round's last one is in, verdicts likewise. A rollout is
// active in round t + 1 when its actor sends a generation request; the gates report the rollouts
// that end with resolve(n). Round t + 1 starts once every rollout of round t is accounted for.
// Gates and debug-turn actors use the proxy through the generator and verifier interfaces, so the
// schedule is invisible to them but for the resolve messages.
#pragma once

#include "actors/generator.hpp"
#include "actors/group.hpp"
#include "actors/verifier.hpp"

#include <cstdint>

namespace leap::actors {

// `rollouts`: the rollouts of the step's first round (groups x G). The proxy ends once a round has
// no rollout left.
[[nodiscard]] barrier_actor spawn_barrier(caf::actor_system& system, generation_actor generator,
                                          verifier_actor verifier, std::uint32_t rollouts);

}  // namespace leap::actors
