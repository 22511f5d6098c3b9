// What a restarted run continues from: the store's completed steps and groups, turned into the
// experiment driver's resume_plan. No CAF.
#pragma once

#include "actors/experiment.hpp"
#include "common/result.hpp"
#include "orchestrator/config.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace leap {
class trajectory_store;
struct stored_turn;
}  // namespace leap

namespace leap::launch {

// first_step: one past the last step with a step record; weight_version: that record's.
// train_done: the training groups stored for the steps that may have been in flight (first_step
// up to first_step + schedule.max_staleness). validation_pending: completed steps whose validation
// was due (validation_due()) but has fewer than `validation_tasks` groups stored.
// gate_history (gate policy dcp_adaptive only, else empty): the n_fail and size of the last
// gate.adaptive_window stored training groups, in (step, group) order.
// partial_turns: the stored finished turns of the groups this plan redoes (training groups of the
// steps in flight not in train_done, validation groups of validation_pending not stored), as
// reusable_turns() keeps them for plan.weight_version; none in the barrier schedule.
// Errors: the store's read errors. An unknown run gives the plan of a new run.
[[nodiscard]] result<actors::resume_plan> plan_resume(const trajectory_store& store,
                                                      const std::string& run_id,
                                                      const experiment_config& config,
                                                      std::size_t validation_tasks);

// The turns of one group that a restarted run may take instead of sampling them again: per rollout
// (0 .. group_size-1), turns 0, 1, ... as long as each is stored and was sampled with `version`
// (the version the restarted group samples with), at most max_turns. A turn after one that is not
// reused is dropped too: its input was rendered after the earlier turn's tokens. A rollout's list
// ends at a passed turn (nothing follows a pass). `turns` are one group's, in any order; those of
// rollouts outside the group are ignored. Pure.
[[nodiscard]] std::vector<std::vector<turn_record>> reusable_turns(std::vector<stored_turn> turns,
                                                                   std::uint64_t version,
                                                                   int group_size, int max_turns);

// The line `leap run` prints for a plan (the e2e tests pin its text), without a newline; "" for a
// new run's plan. Every step stored: "run 'NAME': all N steps are stored already" and, with
// validation_pending, " (finishing the validation of K of them)". Otherwise "resuming run 'NAME'
// at step S/N (G groups of the steps in progress stored)", S 1-based. Pure.
[[nodiscard]] std::string describe_resume(const actors::resume_plan& plan,
                                          const experiment_config& config);

}  // namespace leap::launch
