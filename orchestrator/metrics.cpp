#include "orchestrator/metrics.hpp"

#include <algorithm>
#include <cmath>

namespace leap {
namespace {

double ratio(std::size_t numerator, std::size_t denominator) {
  return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
}

}  // namespace

std::vector<double> cumulative_accuracy(std::span<const group_summary> groups, int max_turns) {
  if (max_turns < 1) {
    return {};
  }
  // passed_by_turn[m-1] first counts passes exactly at turn m, then a running sum makes it <= m.
  std::vector<std::size_t> passed_by_turn(static_cast<std::size_t>(max_turns), 0);
  std::size_t rollouts = 0;
  for (const group_summary& group : groups) {
    rollouts += group.outcomes.size();
    for (const rollout_outcome& o : group.outcomes) {
      if (o.passed() && o.passed_at_turn <= max_turns) {
        ++passed_by_turn[static_cast<std::size_t>(o.passed_at_turn - 1)];
      }
    }
  }
  std::vector<double> accuracy(passed_by_turn.size(), 0.0);
  std::size_t running = 0;
  for (std::size_t m = 0; m < passed_by_turn.size(); ++m) {
    running += passed_by_turn[m];
    accuracy[m] = ratio(running, rollouts);
  }
  return accuracy;
}

double activated_group_fraction(std::span<const group_summary> groups) {
  const auto opened = std::count_if(groups.begin(), groups.end(),
                                    [](const group_summary& g) { return is_open(g.gate); });
  return ratio(static_cast<std::size_t>(opened), groups.size());
}

recovery_rates recovery(std::span<const group_summary> groups) {
  std::size_t opened = 0;
  std::size_t groups_recovered = 0;
  std::size_t first_turn_failures = 0;
  std::size_t recovered = 0;
  for (const group_summary& group : groups) {
    if (!is_open(group.gate)) {
      continue;
    }
    ++opened;
    std::size_t here = 0;
    for (const rollout_outcome& o : group.outcomes) {
      if (o.passed_at_turn == 1) {
        continue;
      }
      ++first_turn_failures;
      if (o.passed_at_turn >= 2) {
        ++here;
      }
    }
    recovered += here;
    groups_recovered += here > 0 ? 1 : 0;
  }
  return {ratio(recovered, first_turn_failures), ratio(groups_recovered, opened)};
}

double turns_per_pass(std::span<const group_summary> groups) {
  std::size_t turns = 0;
  std::size_t passed = 0;
  for (const group_summary& group : groups) {
    for (const rollout_outcome& o : group.outcomes) {
      turns += static_cast<std::size_t>(std::max(o.generated_turns, 0));
      passed += o.passed() ? 1 : 0;
    }
  }
  return ratio(turns, passed);
}

outcome_kind kind_of(const rollout_outcome& outcome) {
  if (outcome.passed_at_turn == 1) {
    return outcome_kind::first_turn_pass;
  }
  return outcome.passed() ? outcome_kind::debug_pass : outcome_kind::failure;
}

std::vector<composition_bucket> rollout_composition(std::span<const group_summary> groups,
                                                    std::size_t bucket_count) {
  std::vector<composition_bucket> buckets(bucket_count);
  for (std::size_t k = 0; k < bucket_count; ++k) {
    buckets[k].lo = static_cast<double>(k) / static_cast<double>(bucket_count);
    buckets[k].hi = static_cast<double>(k + 1) / static_cast<double>(bucket_count);
  }
  if (bucket_count == 0) {
    return buckets;
  }
  for (const group_summary& group : groups) {
    const std::size_t n = group.outcomes.size();
    if (n == 0 || group.advantages.size() != n) {
      continue;
    }
    const auto passed = static_cast<std::size_t>(
        std::count_if(group.outcomes.begin(), group.outcomes.end(),
                      [](const rollout_outcome& o) { return o.passed(); }));
    composition_bucket& bucket = buckets[std::min(passed * bucket_count / n, bucket_count - 1)];
    for (std::size_t i = 0; i < n; ++i) {
      const double a = group.advantages[i];
      if (a == 0.0 || std::isnan(a)) {  // NaN has no sign to count under
        continue;
      }
      ++bucket.counts[static_cast<std::size_t>(kind_of(group.outcomes[i]))][a > 0.0 ? 1 : 0];
    }
  }
  return buckets;
}

void speed_summary::add(const rollout_outcome& outcome, const pass_speed& speed) {
  ++rollouts_;
  if (!outcome.passed()) {
    return;
  }
  ++passes_;
  if (!measured_speedup(speed.speedup)) {
    return;
  }
  const double s = *speed.speedup;
  ++timed_;
  log_sum_ += std::log(s);
  for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
    faster_[i] += s > fast_p_thresholds[i] ? 1 : 0;
  }
}

void speed_summary::merge(const speed_summary& other) {
  rollouts_ += other.rollouts_;
  passes_ += other.passes_;
  timed_ += other.timed_;
  log_sum_ += other.log_sum_;
  for (std::size_t i = 0; i < faster_.size(); ++i) {
    faster_[i] += other.faster_[i];
  }
}

std::optional<double> speed_summary::fast_p(std::size_t index) const {
  if (timed_ == 0 || index >= faster_.size()) {
    return std::nullopt;
  }
  return ratio(faster_[index], rollouts_);
}

std::optional<double> speed_summary::geomean_speedup() const {
  if (timed_ == 0) {
    return std::nullopt;
  }
  return std::exp(log_sum_ / timed_);
}

std::string fast_p_name(std::size_t index) {
  static const std::array<const char*, fast_p_thresholds.size()> names = {
      "fast_0", "fast_1.0", "fast_1.2", "fast_1.5", "fast_2.0"};
  return index < names.size() ? names[index] : "fast_?";
}

}  // namespace leap
