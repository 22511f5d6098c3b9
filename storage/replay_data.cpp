#include "storage/replay_data.hpp"

#include <algorithm>

namespace leap {

result<replay_data> load_replay_data(const trajectory_store& store, const std::string& run_id) {
  replay_data data;
  data.run_id = run_id;
  if (run_id.empty()) {
    return data;
  }
  group_query query;
  query.run_id = run_id;
  query.decode.tokens = false;
  const status scanned = store.for_each_group(query, [&](group_record&& g) -> status {
    data.max_turns = std::max(data.max_turns, g.max_turns);
    data.groups.push_back(replay_group_of(g));
    return ok_status();
  });
  if (!scanned) {
    return scanned.err();
  }
  auto steps = store.steps(run_id);
  if (!steps) {
    return steps.err();
  }
  data.steps = std::move(*steps);
  auto retries = store.retry_steps(run_id);
  if (!retries) {
    return retries.err();
  }
  data.retries = std::move(*retries);
  auto profiles = store.profiles(run_id);
  if (!profiles) {
    return profiles.err();
  }
  for (auto& p : *profiles) {
    if (p.turn.split == split_kind::train) {
      data.profiles[p.turn.step].add(p);
      data.turn_profiles.push_back(std::move(p));
    }
  }
  return data;
}

result<std::map<std::uint64_t, profile_counts>> load_step_profiles(const trajectory_store& store,
                                                                   const std::string& run_id) {
  std::map<std::uint64_t, profile_counts> out;
  auto profiles = store.profiles(run_id);
  if (!profiles) {
    return profiles.err();
  }
  for (const auto& p : *profiles) {
    if (p.turn.split == split_kind::train) {
      out[p.turn.step].add(p);
    }
  }
  return out;
}

}  // namespace leap
