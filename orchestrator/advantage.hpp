// Advantages: group normalisation of rewards, then the discounted per-turn token assignment.
//
//   grpo       A_i = (R_i - mean(R)) / (std(R) + epsilon)     (population std over the group)
//   mean_only  A_i = R_i - mean(R)                            (Dr.GRPO)
//   none       A_i = R_i
// std is the population standard deviation, sqrt(sum_i (R_i - mean)^2 / G), not the sample one
// (divisor G - 1): the group is the whole population the baseline is taken over, and G = 1 then
// gives std 0 instead of a division by zero.
// A group whose rewards are all equal carries no signal: grpo and mean_only give exactly 0 to
// every rollout (not a rounding residue of R_i - mean divided by epsilon).
// Per-turn assignment (Sec. 3.3): a rollout with T_i generated turns gives every token of generated
// turn t (0-based) the advantage beta_i^(T_i - t - 1) * A_i, beta_i = gamma if A_i >= 0 else 1.
// Prompt and environment-feedback tokens get 0.
// All functions are pure and thread-safe.
#pragma once

#include "common/enums/advantage_kind.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace leap {

struct advantage_config {
  advantage_kind kind = advantage_kind::grpo;  // Default: grpo
  double epsilon = 1e-6;                       // Default: 1e-6
  // Discount of earlier turns for non-negative advantages, in (0, 1]. The paper does not state its
  // value. Default: 0.9
  double gamma = 0.9;
};

// One advantage per reward, in the same order; empty input gives an empty vector.
[[nodiscard]] std::vector<double> compute_advantages(const advantage_config& config,
                                                     std::span<const double> rewards);

// Marks a token that no generated turn owns (prompt, feedback, padding).
inline constexpr int not_generated = -1;

// Token advantages for one rollout: token_turn[k] is the 0-based generated turn that token k
// belongs to, or not_generated. T_i is the number of generated turns, 1 + the largest turn index
// present. Returns one value per token, 0 for not_generated (any negative index is treated the
// same); no generated token at all gives all zeros. Computed in double, returned as float for the
// learner.
[[nodiscard]] std::vector<float> token_advantages(std::span<const int> token_turn,
                                                  double rollout_advantage, double gamma);

}  // namespace leap
