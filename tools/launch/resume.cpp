#include "tools/launch/resume.hpp"

#include "orchestrator/schedule.hpp"
#include "storage/trajectory_store.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace leap::launch {
namespace {

// The last `window` training groups stored up to `last_step`, oldest first, read one step at a
// time from the newest back, so that a long run reads only the steps the window reaches. Only
// training groups: validation groups decide locally with policy full, never through the
// experiment's gate. n_fail is what the gate counted and sent for the decision (group_record's).
//
// Order: (step, group). Live, the gate records a step's groups in the order their verdicts
// arrived, which the store does not keep. The window's quantiles do not depend on order; only
// which groups fall off the window's edge can differ, and only within the oldest step in it.
result<std::vector<actors::gate_observation>> stored_gate_history(const trajectory_store& store,
                                                                  const std::string& run_id,
                                                                  std::uint64_t last_step,
                                                                  std::size_t window) {
  std::vector<std::vector<actors::gate_observation>> newest_first;
  std::size_t count = 0;
  for (std::uint64_t s = last_step + 1; s-- > 0 && count < window;) {
    group_query query;
    query.run_id = run_id;
    query.first_step = s;
    query.last_step = s;
    query.split = split_kind::train;
    query.decode.tokens = false;
    std::vector<actors::gate_observation> step;
    auto scanned = store.for_each_group(query, [&](group_record&& g) -> status {
      step.push_back({g.n_fail, static_cast<int>(g.rollouts.size())});
      return ok_status();
    });
    if (!scanned) {
      return scanned.err();
    }
    count += step.size();
    newest_first.push_back(std::move(step));
  }
  std::vector<actors::gate_observation> history;
  for (auto it = newest_first.rbegin(); it != newest_first.rend(); ++it) {
    history.insert(history.end(), it->begin(), it->end());
  }
  if (history.size() > window) {
    history.erase(history.begin(), history.end() - static_cast<std::ptrdiff_t>(window));
  }
  return history;
}

std::uint64_t steps_of(const experiment_config& config) {
  return static_cast<std::uint64_t>(std::max(0, config.experiment.steps));
}

// The stored turns of the groups the plan redoes, grouped and filtered by reusable_turns().
result<std::map<group_key, std::vector<std::vector<turn_record>>>> partial_turns_of(
    const trajectory_store& store, const std::string& run_id, const experiment_config& config,
    const actors::resume_plan& plan) {
  std::map<group_key, std::vector<std::vector<turn_record>>> out;
  if (config.schedule.mode == schedule_mode::barrier) {
    return out;
  }
  auto turns = store.partial_turns(run_id);
  if (!turns) {
    return turns.err();
  }
  const auto staleness = static_cast<std::uint64_t>(std::max(0, config.schedule.max_staleness));
  auto redone = [&](const group_ref& g) {
    const auto& done = g.split == split_kind::train ? plan.train_done : plan.validation_pending;
    if (g.split == split_kind::train &&
        (g.step < plan.first_step || g.step > plan.first_step + staleness ||
         g.step >= steps_of(config))) {
      return false;
    }
    auto it = done.find(g.step);
    if (g.split == split_kind::validation && it == done.end()) {
      return false;
    }
    return it == done.end() ||
           std::find(it->second.begin(), it->second.end(), g.group_index) == it->second.end();
  };
  std::map<group_key, std::vector<stored_turn>> by_group;
  for (auto& t : *turns) {
    if (!redone(t.group)) {
      continue;
    }
    by_group[group_key{t.group.step, t.group.split, t.group.group_index}].push_back(std::move(t));
  }
  for (auto& [key, group_turns] : by_group) {
    const int size =
        key.split == split_kind::train ? config.rollout.group_size : config.rollout.validation.n;
    auto kept =
        reusable_turns(std::move(group_turns), plan.weight_version, size, config.rollout.max_turns);
    const bool any =
        std::any_of(kept.begin(), kept.end(), [](const auto& r) { return !r.empty(); });
    if (any) {
      out.emplace(key, std::move(kept));
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<turn_record>> reusable_turns(std::vector<stored_turn> turns,
                                                     std::uint64_t version, int group_size,
                                                     int max_turns) {
  std::vector<std::vector<turn_record>> out(static_cast<std::size_t>(std::max(0, group_size)));
  std::sort(turns.begin(), turns.end(), [](const stored_turn& a, const stored_turn& b) {
    return std::pair{a.rollout, a.turn} < std::pair{b.rollout, b.turn};
  });
  for (auto& t : turns) {
    if (t.rollout >= out.size()) {
      continue;
    }
    auto& kept = out[t.rollout];
    const bool next = t.turn == kept.size() && t.turn < static_cast<std::uint32_t>(max_turns);
    const bool after_pass = !kept.empty() && kept.back().passed;
    if (!next || after_pass || t.record.weight_version != version) {
      continue;
    }
    kept.push_back(std::move(t.record));
  }
  return out;
}

result<actors::resume_plan> plan_resume(const trajectory_store& store, const std::string& run_id,
                                        const experiment_config& config,
                                        std::size_t validation_tasks) {
  actors::resume_plan plan;
  auto last = store.last_completed_step(run_id);
  if (!last) {
    return last.err();
  }
  if (*last) {
    plan.first_step = **last + 1;
    auto record = store.get_step(run_id, **last);
    if (!record) {
      return record.err();
    }
    if (*record) {
      plan.weight_version = (*record)->weight_version;
    }
  }
  const auto steps = static_cast<std::uint64_t>(std::max(0, config.experiment.steps));
  const auto staleness = static_cast<std::uint64_t>(std::max(0, config.schedule.max_staleness));
  for (std::uint64_t s = plan.first_step; s <= plan.first_step + staleness && s < steps; ++s) {
    auto done = store.completed_groups(run_id, s, split_kind::train);
    if (!done) {
      return done.err();
    }
    if (!done->empty()) {
      plan.train_done[s] = std::move(*done);
    }
  }
  // Groups of the steps in flight count too: the gate recorded them when it decided them.
  if (config.gate.policy == gate_policy::dcp_adaptive && steps > 0 &&
      config.gate.adaptive_window > 0) {
    const std::uint64_t last = std::min(plan.first_step + staleness, steps - 1);
    auto history = stored_gate_history(store, run_id, last, config.gate.adaptive_window);
    if (!history) {
      return history.err();
    }
    plan.gate_history = std::move(*history);
  }
  if (validation_tasks > 0) {
    for (std::uint64_t s = 0; s < plan.first_step && s < steps; ++s) {
      if (!validation_due(s, steps, config.rollout.validation.every)) {
        continue;
      }
      auto done = store.completed_groups(run_id, s, split_kind::validation);
      if (!done) {
        return done.err();
      }
      if (done->size() < validation_tasks) {
        plan.validation_pending[s] = std::move(*done);
      }
    }
  }
  auto partial = partial_turns_of(store, run_id, config, plan);
  if (!partial) {
    return partial.err();
  }
  plan.partial_turns = std::move(*partial);
  return plan;
}

std::string describe_resume(const actors::resume_plan& plan, const experiment_config& config) {
  const std::string run = "run '" + config.experiment.name + "'";
  const int steps = config.experiment.steps;
  if (plan.first_step > 0 && plan.first_step >= static_cast<std::uint64_t>(std::max(0, steps))) {
    const std::string finishing = plan.validation_pending.empty()
                                      ? ""
                                      : " (finishing the validation of " +
                                            std::to_string(plan.validation_pending.size()) +
                                            " of them)";
    return run + ": all " + std::to_string(steps) + " steps are stored already" + finishing;
  }
  if (plan.first_step == 0 && plan.train_done.empty()) {
    return "";
  }
  std::size_t stored_groups = 0;
  for (const auto& [step, groups] : plan.train_done) {
    stored_groups += groups.size();
  }
  return "resuming " + run + " at step " + std::to_string(plan.first_step + 1) + "/" +
         std::to_string(steps) + " (" + std::to_string(stored_groups) +
         " groups of the steps in progress stored)";
}

}  // namespace leap::launch
