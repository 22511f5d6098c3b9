#include "orchestrator/gate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace leap {
namespace {

// Absorbs binary floating point in fraction * G (0.3 * 10 == 3.0000000000000004), which would
// otherwise move a threshold by a whole failure.
constexpr double rounding_tolerance = 1e-9;

// The smallest integer count >= x, within [1, group_size + 1]; NaN never opens.
int lower_count(double x, int group_size) {
  if (std::isnan(x)) {
    return group_size + 1;
  }
  const double c = std::ceil(x - rounding_tolerance);
  return static_cast<int>(std::clamp(c, 1.0, static_cast<double>(group_size) + 1.0));
}

// The largest integer count <= x, within [0, group_size]; NaN never opens.
int upper_count(double x, int group_size) {
  if (std::isnan(x)) {
    return 0;
  }
  const double f = std::floor(x + rounding_tolerance);
  return static_cast<int>(std::clamp(f, 0.0, static_cast<double>(group_size)));
}

gate_decision classify(fail_range range, int n_fail) {
  if (n_fail < range.lo) {
    return gate_decision::closed_easy;
  }
  if (n_fail > range.hi) {
    return gate_decision::closed_hopeless;
  }
  return gate_decision::open;
}

}  // namespace

fail_range resolve_thresholds(const gate_config& config, int group_size) {
  if (group_size < 1) {
    return {1, 0};
  }
  const double scale = config.unit == threshold_unit::fraction ? group_size : 1.0;
  return {lower_count(config.tau_min * scale, group_size),
          upper_count(config.tau_max * scale, group_size)};
}

gate_decision decide(const gate_config& config, int n_fail, int group_size) {
  if (group_size < 1 || config.policy == gate_policy::none) {
    return gate_decision::closed_no_debug;
  }
  n_fail = std::clamp(n_fail, 0, group_size);
  if (n_fail == 0) {
    return gate_decision::closed_no_debug;
  }
  if (config.policy == gate_policy::full) {
    return gate_decision::open;
  }
  return classify(resolve_thresholds(config, group_size), n_fail);
}

namespace {

bool measured(double speedup) { return std::isfinite(speedup) && speedup > 0.0; }

}  // namespace

optimise_decision decide_optimise(const optimise_config& config,
                                  std::span<const double> pass_speedups, int turns_left) {
  if (!(config.speedup > 0.0)) {
    return optimise_decision::off;
  }
  if (pass_speedups.empty()) {
    return optimise_decision::closed_no_pass;
  }
  if (!std::all_of(pass_speedups.begin(), pass_speedups.end(), measured)) {
    return optimise_decision::closed_untimed;
  }
  if (std::any_of(pass_speedups.begin(), pass_speedups.end(),
                  [&](double s) { return s > config.speedup; })) {
    return optimise_decision::closed_fast;
  }
  if (turns_left < 1 || config.max_turns < 1) {
    return optimise_decision::closed_budget;
  }
  return optimise_decision::open;
}

bool continue_optimising(const optimise_config& config, bool passed, double speedup,
                         int optimise_turns, int turns_left) {
  return config.speedup > 0.0 && passed && measured(speedup) && speedup <= config.speedup &&
         optimise_turns < config.max_turns && turns_left >= 1;
}

std::string optimise_feedback(double speedup, double factor) {
  const auto times = [](double x) {
    std::array<char, 32> buffer{};
    std::snprintf(buffer.data(), buffer.size(), "%.2fx", x);
    return std::string(buffer.data());
  };
  return "Your solution is correct. Its measured speedup over the reference implementation is " +
         times(speedup) + "; the goal is a speedup above " + times(factor) +
         ". Write a faster version that still produces correct results.";
}

double quantile_linear(std::span<const double> values, double q) {
  if (values.empty() || std::isnan(q)) {
    return std::nan("");
  }
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const double h = static_cast<double>(sorted.size() - 1) * std::clamp(q, 0.0, 1.0);
  const auto below = static_cast<std::size_t>(std::floor(h));
  if (below + 1 >= sorted.size()) {
    return sorted.back();
  }
  return sorted[below] + (h - static_cast<double>(below)) * (sorted[below + 1] - sorted[below]);
}

adaptive_gate::adaptive_gate(gate_config config) : config_(config) {}

fail_range adaptive_gate::current_range(int group_size) const {
  const fail_range fixed = resolve_thresholds(config_, group_size);
  const std::size_t needed = std::max<std::size_t>(1, config_.adaptive_min_groups);
  if (config_.policy != gate_policy::dcp_adaptive || group_size < 1 || history_.size() < needed ||
      std::isnan(config_.adaptive_low_quantile) || std::isnan(config_.adaptive_high_quantile)) {
    return fixed;
  }
  const std::vector<double> window(history_.begin(), history_.end());
  const double g = group_size;
  const double low = quantile_linear(window, config_.adaptive_low_quantile);
  const double high = quantile_linear(window, config_.adaptive_high_quantile);
  const int lo = lower_count(low * g, group_size);
  const int hi = upper_count(high * g, group_size);
  return {lo, std::max(lo, hi)};
}

fail_range adaptive_gate::ruling_range(int group_size) const {
  switch (config_.policy) {
    case gate_policy::none:
      return {1, 0};
    case gate_policy::full:
      return {1, group_size};
    case gate_policy::dcp:
    case gate_policy::dcp_adaptive:
      return current_range(group_size);
  }
  return current_range(group_size);  // not reached: every policy is a case above
}

gate_decision adaptive_gate::decide_and_record(int n_fail, int group_size) {
  if (group_size < 1) {
    return gate_decision::closed_no_debug;
  }
  n_fail = std::clamp(n_fail, 0, group_size);
  gate_decision decision = decide(config_, n_fail, group_size);
  if (config_.policy == gate_policy::dcp_adaptive && n_fail > 0) {
    decision = classify(current_range(group_size), n_fail);
  }
  record(n_fail, group_size);
  return decision;
}

void adaptive_gate::record(int n_fail, int group_size) {
  if (group_size < 1 || config_.adaptive_window == 0) {
    return;
  }
  n_fail = std::clamp(n_fail, 0, group_size);
  history_.push_back(static_cast<double>(n_fail) / group_size);
  while (history_.size() > config_.adaptive_window) {
    history_.pop_front();
  }
}

}  // namespace leap
