// The tasks of a run: the training suite and the held-out validation tasks, as the config's data
// section names them. No CAF.
#pragma once

#include "common/result.hpp"
#include "orchestrator/config.hpp"
#include "sandbox/task.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace leap::actors {

struct run_tasks {
  std::vector<std::shared_ptr<const sandbox::task>> train;
  std::vector<std::shared_ptr<const sandbox::task>> validation;
};

// Tasks from a path: a suite folder (<kind>/<name>/task.json), a .jsonl dataset, or a KernelBench
// folder (level folders of <n>_<name>.py). Errors: the loader's, naming the file; a missing path.
[[nodiscard]] result<std::vector<sandbox::task>> load_task_source(const std::string& path);

// data.train (filtered by data.task_kinds), and data.validation or a seeded validation_fraction of
// the training tasks (actors::split_tasks). Errors: data.train empty or holding no task of the
// kinds asked for ("data.train: ..."), loader errors, an unknown kind in data.task_kinds.
[[nodiscard]] result<run_tasks> load_run_tasks(const data_section& data, std::uint64_t seed);

}  // namespace leap::actors
