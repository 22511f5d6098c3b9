#include "storage/replay_data.hpp"

#include <algorithm>
#include <map>

namespace leap {

result<std::vector<step_replay>> read_replay(const trajectory_store& store, std::string_view run_id,
                                             const replay_query& query) {
  std::vector<step_replay> out;
  if (run_id.empty() || query.first_step > query.last_step) {
    return out;  // an empty id would select every run; no run has it
  }
  std::map<std::uint64_t, step_replay> by_step;
  auto at = [&](std::uint64_t step) -> step_replay& {
    auto& entry = by_step[step];
    entry.step = step;
    return entry;
  };

  group_query q;
  q.run_id = std::string(run_id);
  q.first_step = query.first_step;
  q.last_step = query.last_step;
  q.decode.tokens = false;
  auto s = store.for_each_group(q, [&](group_record&& g) -> status {
    auto& entry = at(g.step);
    entry.max_turns =
        std::max(entry.max_turns, static_cast<std::uint32_t>(std::max(0, g.max_turns)));
    if (g.split == split_kind::validation) {
      entry.validation.push_back(summarize(g));
      return ok_status();
    }
    entry.train.push_back(summarize(g));
    if (g.probe) {
      entry.probes.push_back(probe_summary(g));
    }
    return ok_status();
  });
  if (!s) {
    return s.err();
  }

  auto steps = store.steps(run_id, query.first_step, query.last_step);
  if (!steps) {
    return steps.err();
  }
  for (auto& record : *steps) {
    at(record.step).record = std::move(record);
  }

  out.reserve(by_step.size());
  for (auto& [step, entry] : by_step) {
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace leap
