// The scorer: turns a finished group into a scored one (outcomes, ranks, rewards, advantages) with
// orchestrator's score_group(). Stateless; one per run is plenty (scoring a group takes
// microseconds).
#pragma once

#include "actors/messages.hpp"
#include "orchestrator/advantage.hpp"
#include "orchestrator/reward.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace leap::actors {

// score: answers the group with every rollout's outcome, rank, reward and advantage filled in;
// with profiles, the passes also gain their structural terms (reward.structural, score_group).
using scorer_actor =
    caf::typed_actor<caf::replies_to<score_atom, group_record>::with<group_record>,
                     caf::replies_to<score_atom, group_record,
                                     std::vector<turn_profile_record>>::with<group_record>>;

// `train_optimisation`: gate.optimise.train, passed on to score_group. Default: off
[[nodiscard]] scorer_actor spawn_scorer(caf::actor_system& system, reward_config reward,
                                        advantage_config advantage,
                                        bool train_optimisation = false);

}  // namespace leap::actors
