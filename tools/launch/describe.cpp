// What `leap run` prints about a run: the line once it has started, the line at its end and its
// exit status (launch.hpp). Kept beside the library so that the command only parses and prints.
#include "tools/launch/launch.hpp"

#include <string>

namespace leap::launch {

std::string describe_start(const run_preflight& checked, const std::string& endpoint) {
  const experiment_config& c = checked.config;
  return "run '" + c.experiment.name + "': " + std::to_string(c.experiment.steps) + " steps x " +
         std::to_string(c.data.batch_size) + " tasks x " + std::to_string(c.rollout.group_size) +
         " rollouts, up to " + std::to_string(c.rollout.max_turns) + " turns | gate " +
         to_string(c.gate.policy) + ", reward " + to_string(c.reward.kind) + ", schedule " +
         to_string(c.schedule.mode) + " | " + std::to_string(checked.tasks.train.size()) +
         " training tasks, " + std::to_string(checked.tasks.validation.size()) +
         " validation tasks | policy " + endpoint;
}

std::string describe_outcome(const run_outcome& outcome, const std::string& name,
                             const std::string& store_path) {
  const actors::run_summary& s = outcome.summary;
  return "run '" + name + "' " + to_string(outcome.status) + ": " +
         std::to_string(s.steps_completed) + " steps completed by this process, " +
         std::to_string(s.groups_completed) + " groups run, " + std::to_string(s.groups_resumed) +
         " read back from the store, " + std::to_string(s.turns_resumed) +
         " finished turns of unfinished groups taken from the store | trajectories in " +
         store_path;
}

int exit_status(run_status status) {
  switch (status) {
    case run_status::finished:
      return 0;
    case run_status::interrupted:
      return 130;
    case run_status::running:
    case run_status::failed:
      return 1;
  }
  return 1;
}

}  // namespace leap::launch
