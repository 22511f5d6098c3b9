#include "actors/resume.hpp"

#include "actors/schedule.hpp"
#include "storage/trajectory_store.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace leap::actors {
namespace {

// The last `window` training groups stored up to `last_step`, oldest first, read one step at a
// time from the newest back, so that a long run reads only the steps the window reaches. Only
// training groups: validation groups decide locally with policy full, never through the
// experiment's gate. n_fail is what the gate counted and sent for the decision (group_record's).
//
// Order: (step, group). Live, the gate records a step's groups in the order their verdicts
// arrived, which the store does not keep. The window's quantiles do not depend on order; only
// which groups fall off the window's edge can differ, and only within the oldest step in it.
result<std::vector<gate_observation>> stored_gate_history(const trajectory_store& store,
                                                          const std::string& run_id,
                                                          std::uint64_t last_step,
                                                          std::size_t window) {
  std::vector<std::vector<gate_observation>> newest_first;
  std::size_t count = 0;
  for (std::uint64_t s = last_step + 1; s-- > 0 && count < window;) {
    group_query query;
    query.run_id = run_id;
    query.first_step = s;
    query.last_step = s;
    query.split = split_kind::train;
    query.decode.tokens = false;
    std::vector<gate_observation> step;
    auto scanned = store.for_each_group(query, [&](group_record&& g) -> status {
      step.push_back({g.n_fail, static_cast<int>(g.rollouts.size())});
      return ok_status();
    });
    if (!scanned) return scanned.err();
    count += step.size();
    newest_first.push_back(std::move(step));
  }
  std::vector<gate_observation> history;
  for (auto it = newest_first.rbegin(); it != newest_first.rend(); ++it) {
    history.insert(history.end(), it->begin(), it->end());
  }
  if (history.size() > window) {
    history.erase(history.begin(), history.end() - static_cast<std::ptrdiff_t>(window));
  }
  return history;
}

}  // namespace

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
  // Groups of the steps in flight count too: the gate recorded them when it decided them.
  if (config.gate.policy == gate_policy::dcp_adaptive && steps > 0 &&
      config.gate.adaptive_window > 0) {
    const std::uint64_t last = std::min(plan.first_step + staleness, steps - 1);
    auto history = stored_gate_history(store, run_id, last, config.gate.adaptive_window);
    if (!history) return history.err();
    plan.gate_history = std::move(*history);
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
