// Reads what `leap report` draws from a run folder's store: per run, replay's analysis
// (orchestrator/replay.hpp, the same numbers `leap replay` prints), the step records' wall-clock
// times, and the compile and run time of every verified turn. Read-only (works beside a live run).
#pragma once

#include "common/result.hpp"
#include "tools/report/report.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace leap::report {

struct run_source {
  std::string run_dir;
  // The group the folder's runs are drawn in; "": each run's config experiment.name.
  std::string label;
};

// Every run stored in the folder, in run-id order; each replay report is built with `buckets`
// pass-rate buckets. A run with no stored group and no step record comes back with
// stored_groups == 0 and no steps (the caller says it is empty). `progress` (may be empty) gets one
// line per run read.
// Errors: "RUN_DIR: not a run folder (no store at RUN_DIR/trajectories)"; the store's open and read
// errors (they name the path); a stored config that does not parse.
[[nodiscard]] result<std::vector<run_input>> load_runs(
    const run_source& source, std::size_t buckets,
    const std::function<void(const std::string&)>& progress = {});

}  // namespace leap::report
