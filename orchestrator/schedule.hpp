// The experiment driver's pure decisions, apart from any actor so they are tested directly:
// which tasks a step trains on, which are held out, which closed groups are probed, when to
// validate, and where a step's wall time went. All functions are pure and thread-safe.
#pragma once

#include "orchestrator/group_report.hpp"
#include "orchestrator/metrics.hpp"
#include "orchestrator/trajectory.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace leap {

// The task indices (into a list of `task_count` tasks) of training step `step`: the tasks are
// shuffled once per epoch with a generator seeded by (seed, epoch) and consumed batch_size at a
// time, so every task is seen once per epoch and the batch of a step is a function of
// (seed, step) alone: a resumed run redoes exactly the same groups. A batch that crosses an epoch
// boundary takes the rest from the next epoch's order. Empty when task_count or batch_size is 0.
[[nodiscard]] std::vector<std::size_t> step_batch(std::uint64_t seed, std::uint64_t step,
                                                  std::size_t task_count, std::size_t batch_size);

// A seeded split of `task_count` tasks: round(fraction * task_count) of them (at least 1 when the
// fraction is > 0 and there are at least 2 tasks; never all) are held out for validation.
// Both lists ascending.
struct task_split {
  std::vector<std::size_t> train;
  std::vector<std::size_t> validation;
};
[[nodiscard]] task_split split_tasks(std::uint64_t seed, std::size_t task_count, double fraction);

// Whether a group that the gate closes runs debug turns for measurement (a probe): a seeded coin
// with probability `probe_fraction`, a function of (seed, step, group).
[[nodiscard]] bool probe_group(std::uint64_t seed, std::uint64_t step, std::uint32_t group,
                               double probe_fraction);

// Whether validation runs after training step `step` (0-based) of `steps`: every `every` steps and
// after the last; never when every is 0.
[[nodiscard]] bool validation_due(std::uint64_t step, std::uint64_t steps, int every);

// Where a step's wall time [start_ms, end_ms] went. Each instant goes to one activity: the learner
// when it runs, else generation when a turn is generating, else compile, else run, else idle
// (generation first because the other stages overlap it: a verifier busy while the policy
// generates is not what the step waits on). Activities are clipped to the step; the parts sum to
// wall_ms = end_ms - start_ms (0 when end <= start).
[[nodiscard]] step_timings attribute_step_time(std::span<const activity> activities,
                                               double start_ms, double end_ms);

// The report of a group read back from the store (a resumed run's finished groups): everything
// but activities.
[[nodiscard]] group_report report_of(const group_record& group);

// The metrics' view of a report: summarize() for the training outcome, probe_summary() for what a
// probe's debug turns reached.
[[nodiscard]] group_summary summary_of(const group_report& report);
[[nodiscard]] group_summary probe_summary_of(const group_report& report);

}  // namespace leap
