#include "orchestrator/schedule.hpp"

#include "common/splitmix.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

namespace leap {
namespace {

std::vector<std::size_t> permutation(std::uint64_t key, std::size_t n) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::uint64_t state = splitmix64(key);
  for (std::size_t i = n; i > 1; --i) {
    state = splitmix64(state);
    const std::size_t j = static_cast<std::size_t>(state % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

double unit_interval(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

std::vector<std::size_t> step_batch(std::uint64_t seed, std::uint64_t step, std::size_t task_count,
                                    std::size_t batch_size) {
  std::vector<std::size_t> batch;
  if (task_count == 0 || batch_size == 0) {
    return batch;
  }
  batch.reserve(batch_size);
  std::uint64_t epoch = ~std::uint64_t{0};
  std::vector<std::size_t> order;
  for (std::size_t j = 0; j < batch_size; ++j) {
    const std::uint64_t position = step * batch_size + j;
    const std::uint64_t e = position / task_count;
    if (e != epoch) {
      epoch = e;
      order = permutation(splitmix64(seed) ^ splitmix64(e + 0x5eed), task_count);
    }
    batch.push_back(order[position % task_count]);
  }
  return batch;
}

task_split split_tasks(std::uint64_t seed, std::size_t task_count, double fraction) {
  task_split split;
  std::size_t held_out = 0;
  if (fraction > 0.0 && task_count >= 2) {
    held_out = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(task_count)));
    held_out = std::clamp<std::size_t>(held_out, 1, task_count - 1);
  }
  const auto order = permutation(splitmix64(seed) ^ 0x7a11da7e, task_count);
  split.validation.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(held_out));
  split.train.assign(order.begin() + static_cast<std::ptrdiff_t>(held_out), order.end());
  std::sort(split.validation.begin(), split.validation.end());
  std::sort(split.train.begin(), split.train.end());
  return split;
}

bool probe_group(std::uint64_t seed, std::uint64_t step, std::uint32_t group,
                 double probe_fraction) {
  if (!(probe_fraction > 0.0)) {
    return false;
  }
  const std::uint64_t bits =
      splitmix64(splitmix64(seed ^ 0x9806e) ^ splitmix64(step) ^ (std::uint64_t{group} << 1));
  return unit_interval(bits) < probe_fraction;
}

bool validation_due(std::uint64_t step, std::uint64_t steps, int every) {
  if (every <= 0) {
    return false;
  }
  return (step + 1) % static_cast<std::uint64_t>(every) == 0 || step + 1 == steps;
}

step_timings attribute_step_time(std::span<const activity> activities, double start_ms,
                                 double end_ms) {
  step_timings t;
  if (!(end_ms > start_ms)) {
    return t;
  }
  t.wall_ms = end_ms - start_ms;

  struct event {
    double at;
    int delta;
    activity_kind kind;
  };
  std::vector<event> events;
  events.reserve(activities.size() * 2);
  for (const auto& a : activities) {
    const double s = std::max(a.start_ms, start_ms);
    const double e = std::min(a.end_ms, end_ms);
    if (!(e > s)) {
      continue;
    }
    events.push_back({s, +1, a.kind});
    events.push_back({e, -1, a.kind});
  }
  std::sort(events.begin(), events.end(),
            [](const event& a, const event& b) { return a.at < b.at; });

  std::array<int, 4> active{};  // indexed by activity_kind
  auto charge = [&](double span) {
    if (span <= 0.0) {
      return;
    }
    if (active[static_cast<int>(activity_kind::learner)] > 0) {
      t.learner_ms += span;
    } else if (active[static_cast<int>(activity_kind::generation)] > 0) {
      t.generation_ms += span;
    } else if (active[static_cast<int>(activity_kind::compile)] > 0) {
      t.compile_ms += span;
    } else if (active[static_cast<int>(activity_kind::run)] > 0) {
      t.run_ms += span;
    } else {
      t.idle_ms += span;
    }
  };
  double now = start_ms;
  for (const auto& e : events) {
    charge(e.at - now);
    now = e.at;
    active[static_cast<int>(e.kind)] += e.delta;
  }
  charge(end_ms - now);
  // Rounding of the sums must not break generation + compile + run + learner + idle == wall.
  t.idle_ms = std::max(0.0, t.wall_ms - t.generation_ms - t.compile_ms - t.run_ms - t.learner_ms);
  return t;
}

group_report report_of(const group_record& group) {
  group_report r;
  r.key = {group.step, group.split, group.group_index};
  r.task_id = group.task_id;
  r.gate = group.gate;
  r.n_fail = group.n_fail;
  r.probe = group.probe;
  for (const auto& rollout : group.rollouts) {
    r.outcomes.push_back(rollout.outcome);
    r.measured.push_back(outcome_from_turns(rollout));
    r.advantages.push_back(rollout.advantage);
    r.speedups.push_back(speed_of(rollout, rollout.outcome).speedup.value_or(0.0));
    r.compiled_speedups.push_back(
        compiled_speed_of(rollout, rollout.outcome).speedup.value_or(0.0));
    for (const auto& turn : rollout.turns) {
      ++r.turns;
      if (turn.finish != finish_reason::error) {
        ++r.verifier_jobs;
      }
      r.generated_tokens += turn.output_tokens.size();
    }
  }
  return r;
}

group_summary summary_of(const group_report& report) {
  return {report.gate, report.outcomes, report.advantages};
}

group_summary probe_summary_of(const group_report& report) {
  return {gate_decision::open, report.measured, report.advantages};
}

}  // namespace leap
