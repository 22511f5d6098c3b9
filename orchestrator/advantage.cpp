#include "orchestrator/advantage.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace leap {

std::vector<double> compute_advantages(const advantage_config& config,
                                       std::span<const double> rewards) {
  std::vector<double> advantages(rewards.begin(), rewards.end());
  if (config.kind == advantage_kind::none || rewards.empty()) {
    return advantages;
  }
  const auto [lowest, highest] = std::minmax_element(rewards.begin(), rewards.end());
  if (*lowest == *highest) {
    // R_i - mean need not be exactly 0 in floating point (3 * 0.1 / 3 != 0.1), and grpo would blow
    // that residue up by 1 / epsilon.
    std::fill(advantages.begin(), advantages.end(), 0.0);
    return advantages;
  }
  const auto g = static_cast<double>(rewards.size());
  double sum = 0.0;
  for (const double r : rewards) {
    sum += r;
  }
  const double mean = sum / g;
  for (double& a : advantages) {
    a -= mean;
  }
  if (config.kind == advantage_kind::mean_only) {
    return advantages;
  }
  double squares = 0.0;
  for (const double a : advantages) {
    squares += a * a;
  }
  const double scale = std::sqrt(squares / g) + config.epsilon;
  for (double& a : advantages) {
    a /= scale;
  }
  return advantages;
}

std::vector<float> token_advantages(std::span<const int> token_turn, double rollout_advantage,
                                    double gamma) {
  std::vector<float> out(token_turn.size(), 0.0F);
  int last_turn = not_generated;
  for (const int t : token_turn) {
    last_turn = std::max(last_turn, t);
  }
  if (last_turn < 0) {
    return out;
  }
  const double beta = rollout_advantage >= 0.0 ? gamma : 1.0;
  // One power per turn, not per token: a trajectory has a handful of turns and thousands of tokens.
  std::vector<double> per_turn(static_cast<std::size_t>(last_turn) + 1);
  for (int t = 0; t <= last_turn; ++t) {
    per_turn[static_cast<std::size_t>(t)] = std::pow(beta, last_turn - t) * rollout_advantage;
  }
  for (std::size_t k = 0; k < token_turn.size(); ++k) {
    if (token_turn[k] >= 0) {
      out[k] = static_cast<float>(per_turn[static_cast<std::size_t>(token_turn[k])]);
    }
  }
  return out;
}

}  // namespace leap
