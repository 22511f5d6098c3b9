#include "actors/resume.hpp"

#include "actors/schedule.hpp"
#include "storage/trajectory_store.hpp"

#include <algorithm>

namespace leap::actors {

result<resume_plan> plan_resume(const trajectory_store& store, const std::string& run_id,
                                const experiment_config& config, std::size_t validation_tasks) {
  resume_plan plan;
  auto last = store.last_completed_step(run_id);
  if (!last) return last.err();
  if (*last) {
    plan.first_step = **last + 1;
    auto record = store.get_step(run_id, **last);
    if (!record) return record.err();
    if (*record) plan.weight_version = (*record)->weight_version;
  }
  const auto steps = static_cast<std::uint64_t>(std::max(0, config.experiment.steps));
  const auto staleness = static_cast<std::uint64_t>(std::max(0, config.schedule.max_staleness));
  for (std::uint64_t s = plan.first_step; s <= plan.first_step + staleness && s < steps; ++s) {
    auto done = store.completed_groups(run_id, s, split_kind::train);
    if (!done) return done.err();
    if (!done->empty()) plan.train_done[s] = std::move(*done);
  }
  if (validation_tasks > 0) {
    for (std::uint64_t s = 0; s < plan.first_step && s < steps; ++s) {
      if (!validation_due(s, steps, config.rollout.validation.every)) continue;
      auto done = store.completed_groups(run_id, s, split_kind::validation);
      if (!done) return done.err();
      if (done->size() < validation_tasks) plan.validation_pending[s] = std::move(*done);
    }
  }
  return plan;
}

}  // namespace leap::actors
