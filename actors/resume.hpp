// What a restarted run continues from: the store's completed steps and groups, turned into the
// experiment driver's resume_plan. No CAF.
#pragma once

#include "actors/experiment.hpp"
#include "common/result.hpp"
#include "orchestrator/config.hpp"

#include <cstddef>
#include <string>

namespace leap {
class trajectory_store;
}

namespace leap::actors {

// first_step: one past the last step with a step record; weight_version: that record's.
// train_done: the training groups stored for the steps that may have been in flight (first_step
// up to first_step + schedule.max_staleness). validation_pending: completed steps whose validation
// was due (validation_due()) but has fewer than `validation_tasks` groups stored.
// gate_history (gate policy dcp_adaptive only, else empty): the n_fail and size of the last
// gate.adaptive_window stored training groups, in (step, group) order.
// Errors: the store's read errors. An unknown run gives the plan of a new run.
[[nodiscard]] result<resume_plan> plan_resume(const trajectory_store& store,
                                              const std::string& run_id,
                                              const experiment_config& config,
                                              std::size_t validation_tasks);

}  // namespace leap::actors
