// What `leap replay` recomputes the paper's metrics from: a run's stored groups as the metrics'
// group_summary, step by step, beside the step records that hold timings and counts.
//
// Thread-safe: it only reads the store.
#pragma once

#include "common/result.hpp"
#include "orchestrator/metrics.hpp"
#include "orchestrator/trajectory.hpp"
#include "storage/trajectory_store.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

namespace leap {

struct step_replay {
  std::uint64_t step = 0;
  // summarize() of the training groups, in group order; probe groups included as trained (closed
  // gate, first-turn outcomes).
  std::vector<group_summary> train;
  std::vector<group_summary> validation;  // summarize() of the validation groups
  std::vector<group_summary> probes;      // probe_summary() of the probe groups among train
  std::uint32_t max_turns = 0;            // the largest max_turns among the step's groups
  // The step's record (timings, counts, metrics); empty when the step has groups but did not
  // complete (the run stopped during it).
  std::optional<step_record> record;
};

struct replay_query {
  std::uint64_t first_step = 0;                                         // Default: 0
  std::uint64_t last_step = std::numeric_limits<std::uint64_t>::max();  // inclusive. Default: all
};

// One entry per step that has a group or a step record, ascending. Token arrays are never decoded.
// Errors: the store's read errors. An unknown run gives an empty vector.
[[nodiscard]] result<std::vector<step_replay>> read_replay(const trajectory_store& store,
                                                           std::string_view run_id,
                                                           const replay_query& query = {});

}  // namespace leap
