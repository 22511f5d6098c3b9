// The tasks of a run: the training suite and the held-out validation tasks, as the config's data
// section names them. No CAF.
#pragma once

#include "common/result.hpp"
#include "orchestrator/config.hpp"
#include "policy/server/server.hpp"
#include "sandbox/task.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace leap::launch {

struct run_tasks {
  std::vector<std::shared_ptr<const sandbox::task>> train;
  std::vector<std::shared_ptr<const sandbox::task>> validation;
};

// Tasks from a path: a suite folder (<kind>/<name>/task.json), a .jsonl dataset, or a KernelBench
// folder (level folders of <n>_<name>.py). Errors: the loader's, naming the file; a missing path.
[[nodiscard]] result<std::vector<sandbox::task>> load_task_source(const std::string& path);

// data.train (filtered by data.task_kinds), and data.validation or a seeded validation_fraction of
// the training tasks (orchestrator/schedule.hpp's split_tasks). Errors: data.train empty or
// holding no task of the kinds asked for ("data.train: ..."), loader errors, an unknown kind in
// data.task_kinds.
[[nodiscard]] result<run_tasks> load_run_tasks(const data_section& data, std::uint64_t seed);

// The scripted policy's view of a task: id, prompt, the fence of its kind (sandbox/kinds.hpp),
// solution, wrong candidates, difficulty clamped to 1..3 (the backend's pass-rate table; a
// KernelBench level 4 counts as 3). Pure function.
[[nodiscard]] policy::scripted_task scripted_task_of(const sandbox::task& t);

// A suite folder (<kind>/<name>/task.json) as `leap serve-policy --suite` serves it, in id order,
// every kind included. Read with the sandbox's suite reader (the one reader of the format),
// checking task.json's own fields only: serving answers needs no reference or tests. Each task
// needs a prompt and a solution. Errors: "<root>: not a directory", no task.json, the reader's
// (naming the task.json and key), "<task.json>: 'prompt' is required ...", "<dir>: no solution.cu".
// Reads files only; thread-safe.
[[nodiscard]] result<std::vector<policy::scripted_task>> load_scripted_suite(
    const std::string& root);

}  // namespace leap::launch
