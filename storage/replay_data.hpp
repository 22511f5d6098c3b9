// What `leap replay` analyses (orchestrator/replay.hpp), read from the store: a run's groups,
// decoded without their token arrays and reduced by replay_group_of, and its step records.
//
// Thread-safe: it only reads the store.
#pragma once

#include "common/result.hpp"
#include "orchestrator/replay.hpp"
#include "storage/trajectory_store.hpp"

#include <cstdint>
#include <map>
#include <string>

namespace leap {

// Groups in key order (step, split with train first, group), step records ascending; max_turns the
// largest among the groups (1 when there are none). An unknown run, or an empty id (which would
// select every run), gives empty data. Errors: the store's read errors.
[[nodiscard]] result<replay_data> load_replay_data(const trajectory_store& store,
                                                   const std::string& run_id);

// The stored profiles of a run's training turns counted per step (replay_data::profiles), for
// readers that gather the rest themselves (`leap report`). Errors: the store's read errors.
[[nodiscard]] result<std::map<std::uint64_t, profile_counts>> load_step_profiles(
    const trajectory_store& store, const std::string& run_id);

}  // namespace leap
