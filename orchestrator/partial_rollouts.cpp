#include "orchestrator/partial_rollouts.hpp"

#include <algorithm>
#include <cstddef>
#include <tuple>

namespace leap {
namespace {

// Whether a group sampled with `sampled` may train on weights `version` under the bound. A group
// sampled with weights newer than the trainer's (never in a run) is within any bound.
bool within(const partial_settings& s, std::uint64_t sampled, std::uint64_t version) {
  return sampled >= version || version - sampled <= s.max_staleness;
}

}  // namespace

std::uint32_t partial_staleness_bound(int schedule_max_staleness) {
  return static_cast<std::uint32_t>(std::max(1, schedule_max_staleness));
}

std::uint32_t groups_to_start(const partial_settings& s, std::uint32_t carried) {
  const std::uint32_t in_flight = s.batch + s.over_provision;
  return carried >= in_flight ? 0 : in_flight - carried;
}

bool batch_ready(const partial_settings& s, std::span<const partial_group> groups,
                 std::uint64_t training_version) {
  if (s.batch == 0) {
    return false;
  }
  const auto ready = std::count_if(groups.begin(), groups.end(), [&](const partial_group& g) {
    return g.complete && within(s, g.sampled_version, training_version);
  });
  return static_cast<std::uint64_t>(ready) >= s.batch;
}

partial_split split_partial(const partial_settings& s, std::span<const partial_group> groups,
                            std::uint64_t training_version) {
  partial_split out;
  std::vector<const partial_group*> complete;
  std::vector<const partial_group*> unfinished;
  for (const auto& g : groups) {
    if (!within(s, g.sampled_version, training_version)) {
      out.dropped_stale.push_back(g.id);
    } else if (g.complete) {
      complete.push_back(&g);
    } else {
      unfinished.push_back(&g);
    }
  }
  std::sort(complete.begin(), complete.end(), [](const auto* a, const auto* b) {
    return std::tie(a->sampled_version, a->finished_ms, a->id) <
           std::tie(b->sampled_version, b->finished_ms, b->id);
  });
  const std::size_t taken = std::min<std::size_t>(s.batch, complete.size());
  for (std::size_t i = 0; i < taken; ++i) {
    out.batch.push_back(complete[i]->id);
  }
  // What is left, in carry preference: complete groups by finish time, then the most advanced.
  std::vector<const partial_group*> left(complete.begin() + static_cast<std::ptrdiff_t>(taken),
                                         complete.end());
  std::sort(left.begin(), left.end(), [](const auto* a, const auto* b) {
    return std::tie(a->finished_ms, a->id) < std::tie(b->finished_ms, b->id);
  });
  std::sort(unfinished.begin(), unfinished.end(), [](const auto* a, const auto* b) {
    return a->progress != b->progress ? a->progress > b->progress : a->id < b->id;
  });
  left.insert(left.end(), unfinished.begin(), unfinished.end());
  for (const auto* g : left) {
    if (!within(s, g->sampled_version, training_version + 1)) {
      out.dropped_stale.push_back(g->id);
    } else if (out.carry.size() < s.max_carry) {
      out.carry.push_back(g->id);
    } else {
      out.dropped_over_carry.push_back(g->id);
    }
  }
  return out;
}

}  // namespace leap
