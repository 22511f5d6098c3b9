// Partial rollouts (APRIL, arXiv 2509.18521; issue 33): a step starts more groups than its batch,
// takes the batch as soon as enough of them are complete, and carries the unfinished ones into
// the next step instead of waiting for the slowest. These are the pure decisions (which groups
// make the batch, which carry, which drop), apart from any actor so they are tested directly.
// All functions are pure and thread-safe.
#pragma once

#include "common/field_list.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace leap {

struct partial_settings {
  std::uint32_t batch = 0;           // groups a step trains on (data.batch_size)
  std::uint32_t over_provision = 0;  // groups kept in flight beyond the batch
  std::uint32_t max_carry = 0;       // most groups carried into the next step
  // How many versions a group's first turn may lag the weights that train it. A carried group is
  // trained one step later at the earliest, so it is at least 1 behind: the bound is
  // max(1, schedule.max_staleness) (see partial_staleness_bound).
  std::uint32_t max_staleness = 1;
};

// The staleness bound of carried groups under schedule.max_staleness k: max(1, k). With the
// streaming schedule (k = 0) only the carried groups are 1 behind; the others stay on-policy.
[[nodiscard]] std::uint32_t partial_staleness_bound(int schedule_max_staleness);

// How many new groups a step starts when `carried` groups come in from the previous step: enough
// for batch + over_provision in flight, never fewer than 0.
[[nodiscard]] std::uint32_t groups_to_start(const partial_settings& s, std::uint32_t carried);

// A group in flight or complete, as a step's end sees it.
struct partial_group {
  std::uint64_t id = 0;               // the caller's handle
  std::uint64_t sampled_version = 0;  // the weights its first turn was sampled with
  bool complete = false;
  double finished_ms = 0.0;  // when it completed (complete groups)
  double progress = 0.0;     // the share of its work done, in [0, 1] (unfinished groups)
};

// Whether the step may take its batch: `batch` complete groups within the staleness bound of
// weights `training_version` (0 batch: never).
[[nodiscard]] bool batch_ready(const partial_settings& s, std::span<const partial_group> groups,
                               std::uint64_t training_version);

// Where each group goes when the step trains on weights `training_version`; every group is in
// exactly one list, each list in the order of its rule.
struct partial_split {
  // Trained now: the first `batch` complete groups within the bound, oldest sampled version
  // first (a carried group trains before it grows staler), then earliest finished, then id.
  std::vector<std::uint64_t> batch;
  // Into the next step (trained there on training_version + 1 at the earliest): complete groups
  // left over first (earliest finished), then unfinished ones, most advanced first, at most
  // max_carry in all.
  std::vector<std::uint64_t> carry;
  // More than max_staleness behind training_version + 1 (the earliest weights that could train
  // them next step), or already beyond it now: their turns are discarded and the task is not
  // trained in this epoch (dropping keeps the batch's staleness bounded; restarting would only
  // redo the same task on a later step's budget).
  std::vector<std::uint64_t> dropped_stale;
  // Within the bound but beyond max_carry (least advanced first out).
  std::vector<std::uint64_t> dropped_over_carry;
};
[[nodiscard]] partial_split split_partial(const partial_settings& s,
                                          std::span<const partial_group> groups,
                                          std::uint64_t training_version);

// One group a step's batch carried into the next step, as the store keeps it: what a restarted
// run needs to put it back into the pool of that step and finish it (its finished turns, each
// with the weight version that sampled it, lie in the store under the key of the step that
// started it: as a whole group once complete, as in-progress turns before).
struct carried_group {
  std::uint64_t origin_step = 0;      // the step that started it: its key in the store
  std::uint32_t group = 0;            // its index in that step
  std::uint64_t task = 0;             // its task's index in the run's training tasks
  std::string task_id;                // that task's id, so that a changed task list is noticed
  std::uint64_t sampled_version = 0;  // partial_group::sampled_version
  bool complete = false;              // complete when the decision was taken

  friend bool operator==(const carried_group&, const carried_group&) = default;
};

// The carry decision of one step (issue 33), stored atomically with the step's record: the groups
// its batch carried into step + 1, in the pool's start order. Dropped groups are not listed (they
// train nowhere; the step record counts them). A step that carried nothing stores an empty list;
// a step without a record (stores made before it) carried nothing that a restart could resume.
struct partial_carry_record {
  std::uint64_t step = 0;
  std::vector<carried_group> groups;

  friend bool operator==(const partial_carry_record&, const partial_carry_record&) = default;
};

// The fields of the carry records (common/field_list.hpp).
template <maybe_const<carried_group> X>
constexpr auto fields(X& x) {
  return std::tuple{field("origin_step", x.origin_step),
                    field("group", x.group),
                    field("task", x.task),
                    field("task_id", x.task_id),
                    field("sampled_version", x.sampled_version),
                    field("complete", x.complete)};
}

template <maybe_const<partial_carry_record> X>
constexpr auto fields(X& x) {
  return std::tuple{field("step", x.step), field("groups", x.groups, opt().element("group"))};
}

}  // namespace leap
