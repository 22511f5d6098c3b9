#include "sandbox/verdict.hpp"

#include <algorithm>
#include <cmath>

namespace leap::sandbox {
namespace {

// The p-quantile of sorted, non-empty `v`, interpolated linearly between neighbours.
double quantile(const std::vector<double>& v, double p) {
  const double pos = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace

timing_stats timing_stats_of(std::vector<double> ms) {
  timing_stats s;
  if (ms.empty()) {
    return s;
  }
  std::sort(ms.begin(), ms.end());
  s.reps = static_cast<int>(ms.size());
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  s.median_ms = quantile(ms, 0.5);
  s.q1_ms = quantile(ms, 0.25);
  s.q3_ms = quantile(ms, 0.75);
  return s;
}

std::optional<double> speedup_noise(const timing_stats& candidate, const timing_stats& reference) {
  constexpr int k_min_reps = 5;
  if (candidate.reps < k_min_reps || reference.reps < k_min_reps || !(candidate.median_ms > 0) ||
      !(reference.median_ms > 0)) {
    return std::nullopt;
  }
  auto half_spread = [](const timing_stats& s) { return 0.5 * (s.q3_ms - s.q1_ms) / s.median_ms; };
  return half_spread(candidate) + half_spread(reference);
}

}  // namespace leap::sandbox
