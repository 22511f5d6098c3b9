// LEAP's policy-gradient loss, on plain vectors (no LibTorch in this header).
//
// Per trained token t of sequence i, with r = exp(logp - behaviour_logp) and advantage A:
//   pg_t = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)     (DAPO's clip-higher)
//   kl_t = exp(ref - logp) - (ref - logp) - 1                          (k3 estimator, >= 0)
//   l_t  = pg_t + kl_coef * kl_t
// and the batch loss is sum_t w_t * l_t, where w_t depends on the aggregation:
//   token_mean            w_t = 1 / (trained tokens in the batch)
//   seq_mean_token_mean   w_t = 1 / (S * trained tokens of t's sequence)   ("sample-level", the
//   paper's) seq_mean_token_sum    w_t = 1 / S
// S counts the sequences with at least one trained token; sequences without any contribute nothing.
// Because the weights are fixed per batch, splitting a batch into micro-batches and summing their
// losses gives exactly the batch's loss and gradient.
//
// The trainer computes this on tensors (learner/detail/loss.hpp); compute_loss() below runs that
// very code on host vectors, so tests and tools can check the arithmetic without LibTorch headers.
#pragma once

#include "common/enums/loss_aggregation.hpp"
#include "common/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace leap::learner {

// loss_aggregation and its config names come from the shared vocabulary (common/enums).

struct loss_options {
  double clip_low = 0.2;    // the ratio is floored at 1 - clip_low. Default: 0.2
  double clip_high = 0.28;  // the ratio is capped at 1 + clip_high (DAPO). Default: 0.28
  double kl_coef = 0.0;     // weight of the k3 KL to the reference; 0 = no reference. Default: 0
  loss_aggregation aggregation =
      loss_aggregation::seq_mean_token_mean;  // Default: seq_mean_token_mean
};

// Checks the ranges: clip_low in [0, 1), clip_high >= 0, kl_coef >= 0 (all finite).
[[nodiscard]] status validate(const loss_options& options);

// The token weights w_t of the aggregation, for sequences with `trained_tokens[i]` trained tokens:
// one weight per sequence (every trained token of sequence i gets weights[i]); 0 for sequences with
// no trained token.
[[nodiscard]] std::vector<double> sequence_token_weights(
    loss_aggregation aggregation, const std::vector<std::int64_t>& trained_tokens);

// One sequence's trained tokens for compute_loss(): parallel vectors of equal length.
struct loss_tokens {
  std::vector<double> logprobs;            // under the current policy
  std::vector<double> behaviour_logprobs;  // under the policy that sampled them
  std::vector<double> advantages;
  std::vector<double> reference_logprobs;  // empty unless kl_coef > 0
};

struct loss_value {
  double loss = 0;           // the aggregated loss
  double pg_loss = 0;        // its policy-gradient part
  double kl = 0;             // token mean of the k3 KL to the reference (0 without one)
  double clip_fraction = 0;  // token fraction where the clipped term is the active one
  // d loss / d logprobs, per sequence and token (same shape as the input).
  std::vector<std::vector<double>> grad_logprobs;
};

// The loss of `sequences` in double precision, through the trainer's tensor code.
// Errors: vectors of one sequence differing in length, reference_logprobs missing while
// kl_coef > 0, invalid options.
[[nodiscard]] result<loss_value> compute_loss(const std::vector<loss_tokens>& sequences,
                                              const loss_options& options);

}  // namespace leap::learner
