// Buffered retry of all-failed training groups (issue 35, MusaCoder's "Buffered Dynamic Retry" as
// we read it). A training group none of whose rollouts passed, after its debug turns if the gate
// opened it, carries no training signal: every reward is equal, every advantage 0. With
// gate.retry.buffer > 0 its task enters a bounded FIFO buffer; from step s + gate.retry.delay on it
// is sampled again in place of a fresh task (oldest first, at most gate.retry.attempts times,
// with gate.retry.extra_rollouts more rollouts and gate.retry.extra_turns more turns), and a retry
// with a pass trains like any group.
//
// Batch size: a retried group takes one slot of the step's data.batch_size groups. The step's
// retries fill slots 0 .. r-1, the fresh tasks of step_batch(seed, step) fill the rest in order;
// the fresh tasks displaced (the last r of that list) are not seen in this epoch.
//
// Everything here is a pure function of the buffer and the step's outcomes, so that a resumed run
// that reads the buffer stored after step s-1 plans step s exactly as the run that stopped did.
#pragma once

#include "common/field_list.hpp"
#include "orchestrator/gate.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace leap {

// A task waiting for a retry.
struct retry_entry {
  std::uint64_t task = 0;         // index into the run's training tasks
  std::uint64_t first_step = 0;   // 0-based step of its first all-failed group
  std::uint64_t failed_step = 0;  // 0-based step of its latest all-failed group
  std::uint32_t attempts = 0;     // retries already run

  friend bool operator==(const retry_entry&, const retry_entry&) = default;
};

// What settling one step's groups did to the buffer.
struct retry_counts {
  std::uint32_t admitted = 0;   // fresh all-failed groups that entered the buffer
  std::uint32_t requeued = 0;   // retries that failed again and went back, attempts left
  std::uint32_t recovered = 0;  // retries with a pass (they train like any group)
  std::uint32_t exhausted = 0;  // retries that failed again with no attempt left: given up
  std::uint32_t evicted = 0;    // the oldest entries dropped because the buffer was full

  friend bool operator==(const retry_counts&, const retry_counts&) = default;
  retry_counts& operator+=(const retry_counts& o);
};

struct retry_buffer {
  std::vector<retry_entry> entries;  // oldest first
  retry_counts total;                // over the run so far

  friend bool operator==(const retry_buffer&, const retry_buffer&) = default;
};

// One step's batch: slot g runs tasks[g]; retries[g] is set when the slot is a retry.
struct retry_plan {
  std::vector<std::size_t> tasks;
  std::vector<std::optional<retry_entry>> retries;

  [[nodiscard]] std::size_t retried() const;
};

// Step `step`'s batch: the buffer's entries due at `step` (failed_step + delay <= step), oldest
// first and at most fresh.size() of them, are taken out of the buffer (their attempts counted) and
// fill the first slots; fresh[0 ..] fills the rest. Retry off (buffer 0) or nothing due: the fresh
// batch unchanged.
[[nodiscard]] retry_plan plan_step(retry_buffer& buffer, const retry_config& config,
                                   std::uint64_t step, const std::vector<std::size_t>& fresh);

// One group of a step, as settle() needs it.
struct retry_outcome {
  std::size_t task = 0;
  std::optional<retry_entry> retry;  // the plan's entry when the group was a retry
  bool all_failed = false;           // no rollout passed at any turn
};

// Applies a step's groups, in slot order, to the buffer: a fresh all-failed group is admitted
// (unless its task is already waiting), a retry with a pass is recovered, a failed retry goes back
// (failed_step = step) while attempts < config.attempts and is given up otherwise; past
// config.buffer entries the oldest are evicted. Adds the counts to buffer.total and returns them.
// Retry off: nothing happens.
retry_counts settle(retry_buffer& buffer, const retry_config& config, std::uint64_t step,
                    const std::vector<retry_outcome>& outcomes);

[[nodiscard]] inline bool retry_enabled(const retry_config& config) { return config.buffer > 0; }

// What the store keeps after a step's groups are settled: the buffer as the next step finds it and
// the step's own retries and counts (replay's per-step columns).
struct retry_step_record {
  static constexpr std::uint32_t format_version = 1;
  std::uint64_t step = 0;
  retry_buffer buffer;                 // after settling this step
  std::vector<std::uint32_t> retried;  // the step's retried slots (group indices)
  retry_counts counts;                 // settling this step

  friend bool operator==(const retry_step_record&, const retry_step_record&) = default;
};

// The fields of the retry records (common/field_list.hpp), in the order the store writes
// them.
template <maybe_const<retry_entry> X>
constexpr auto fields(X& x) {
  return std::tuple{field("task", x.task), field("first_step", x.first_step),
                    field("failed_step", x.failed_step), field("attempts", x.attempts)};
}

template <maybe_const<retry_counts> X>
constexpr auto fields(X& x) {
  return std::tuple{field("admitted", x.admitted), field("requeued", x.requeued),
                    field("recovered", x.recovered), field("exhausted", x.exhausted),
                    field("evicted", x.evicted)};
}

template <maybe_const<retry_buffer> X>
constexpr auto fields(X& x) {
  return std::tuple{field("total", x.total), field("entries", x.entries, opt().element("entry"))};
}

template <maybe_const<retry_step_record> X>
constexpr auto fields(X& x) {
  return std::tuple{field("step", x.step), field("counts", x.counts), field("retried", x.retried),
                    field("buffer", x.buffer)};
}

}  // namespace leap
