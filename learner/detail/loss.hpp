// The policy-gradient loss on tensors (see learner/loss.hpp for the formulas). Internal to
// learner/.
#pragma once

#include "learner/loss.hpp"

#include <ATen/ATen.h>

namespace leap::learner::detail {

struct loss_terms {
  at::Tensor loss;     // scalar sum_t w_t * l_t, differentiable in logprobs
  at::Tensor pg_loss;  // scalar sum_t w_t * pg_t (no gradient)
  // Token sums (no gradient), for metrics:
  at::Tensor kl_sum;            // k3 KL to the reference; 0 without one
  at::Tensor behaviour_kl_sum;  // k3 KL(behaviour || current)
  at::Tensor clipped_count;     // tokens where the clipped term is active
};

// All inputs are [N] over the trained tokens, in one float dtype. `reference` may be undefined when
// options.kl_coef == 0. `weights` holds w_t (sequence_token_weights spread over the tokens, times
// the off-policy filter's keep). `pg_scale` multiplies pg_t (truncate_token); undefined = 1.
// Log-ratios are clamped to [-20, 20] before exponentiating so that one wild token cannot make the
// loss infinite.
[[nodiscard]] loss_terms policy_loss(const at::Tensor& logprobs, const at::Tensor& behaviour,
                                     const at::Tensor& advantages, const at::Tensor& reference,
                                     const at::Tensor& weights, const at::Tensor& pg_scale,
                                     const loss_options& options);

}  // namespace leap::learner::detail
