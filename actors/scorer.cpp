#include "actors/scorer.hpp"

#include "orchestrator/group_flow.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace leap::actors {
namespace {

scorer_actor::behavior_type scorer(scorer_actor::pointer, const reward_config& reward,
                                   const advantage_config& advantage, bool train_optimisation) {
  return {
      [=](score_atom, group_record& group) -> group_record {
        score_group(group, reward, advantage, train_optimisation);
        return std::move(group);
      },
      [=](score_atom, group_record& group,
          const std::vector<turn_profile_record>& profiles) -> group_record {
        score_group(group, reward, advantage, train_optimisation, profiles);
        return std::move(group);
      },
  };
}

}  // namespace

scorer_actor spawn_scorer(caf::actor_system& system, reward_config reward,
                          advantage_config advantage, bool train_optimisation) {
  return system.spawn(scorer, std::move(reward), advantage, train_optimisation);
}

}  // namespace leap::actors
