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
// Off-policy filtering (loss_options::offpolicy) changes w_t and pg_t per token before the sum.
// With log r_t = logp - behaviour_logp (detached: the filter carries no gradient of its own) and a
// sequence's ratio R = exp(mean_t log r_t) over its trained tokens (the geometric mean):
//   drop_sequence   sequences with R outside [low, high] get w_t = 0 and leave the normaliser (S,
//                   or the token count of token_mean): the kept sequences are weighed as if the
//                   dropped ones had never been in the batch (MirrorPop's filter, as we read it).
//   truncate_token  pg_t *= min(1, high / r_t): LEAP's surrogate already holds r_t (its anchor is
//                   the behaviour policy, verl's "bypass mode"), so this caps the token's effective
//                   importance weight at `high` (verl's truncated IS, rollout_is: token).
//   mask_token      tokens with r_t outside [low, high] get w_t = 0; the normaliser is unchanged
//                   (AReaL's behaviour-weight cap; verl's rollout_rs: token with a fixed
//                   denominator).
//   max_staleness   in every mode (off too): tokens sampled by weights more than max_staleness
//                   versions behind the learner's get w_t = 0, normaliser unchanged.
// A sequence dropped or a token masked contributes neither its surrogate nor its KL term.
//
// The trainer computes this on tensors (learner/detail/loss.hpp); compute_loss() below runs that
// very code on host vectors, so tests and tools can check the arithmetic without LibTorch headers.
#pragma once

#include "common/loss_options.hpp"
#include "common/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace leap::learner {

// loss_options and offpolicy_options (with their defaults and validate()) are the config's learner
// section too: common/loss_options.hpp holds them, so that the orchestrator's config and this
// module share the one type. loss_aggregation and offpolicy_mode come from common/enums.
using leap::loss_options;
using leap::offpolicy_options;

// The token weights w_t of the aggregation, for sequences with `trained_tokens[i]` trained tokens:
// one weight per sequence (every trained token of sequence i gets weights[i]); 0 for sequences with
// no trained token.
[[nodiscard]] std::vector<double> sequence_token_weights(
    loss_aggregation aggregation, const std::vector<std::int64_t>& trained_tokens);

// Dropped sequences leave the normaliser: the factor that turns the kept sequences' weights over
// all of them (`all_sequences` with trained tokens, `all_tokens` in all) into their weights over
// the kept ones alone (`kept_sequences`, `kept_tokens`): S / S_kept, or T / T_kept for token_mean.
// Each aggregation has one normaliser, so one factor serves every kept sequence, and the loss is
// linear in the weights: the trainer scales what it accumulated instead of a second pass. Beside
// sequence_token_weights so that a new aggregation's -Wswitch names both. 0 when nothing was kept.
[[nodiscard]] double kept_weight_factor(loss_aggregation aggregation, std::int64_t all_sequences,
                                        std::int64_t all_tokens, std::int64_t kept_sequences,
                                        std::int64_t kept_tokens);

// What the off-policy filter decides for one sequence's trained tokens.
struct offpolicy_decision {
  double ratio = 1;      // the sequence's geometric-mean ratio R (1 without trained tokens)
  bool dropped = false;  // drop_sequence: R outside [low, high]
  // Per token: 1 = trained, 0 = masked (by the band or by staleness; all 0 when dropped).
  std::vector<double> keep;
  // Per token: the factor on the surrogate pg_t (truncate_token's min(1, high / r_t), else 1).
  std::vector<double> pg_scale;
  std::int64_t masked = 0;  // tokens masked by the band or staleness (not counting a drop)
  std::int64_t stale = 0;   // of those, masked for staleness
};

// The filter for one sequence: `log_ratios` = logp - behaviour_logp per trained token (clamped to
// [-20, 20] as in the loss), `staleness` = versions behind the learner per token (empty: all 0).
[[nodiscard]] offpolicy_decision filter_offpolicy(const offpolicy_options& options,
                                                  const std::vector<double>& log_ratios,
                                                  const std::vector<std::int64_t>& staleness);

// The p-quantile (p in [0, 1]) of `values` by linear interpolation between order statistics; 0 for
// no values.
[[nodiscard]] double quantile(std::vector<double> values, double p);

// One sequence's trained tokens for compute_loss(): parallel vectors of equal length.
struct loss_tokens {
  std::vector<double> logprobs;            // under the current policy
  std::vector<double> behaviour_logprobs;  // under the policy that sampled them
  std::vector<double> advantages;
  std::vector<double> reference_logprobs;  // empty unless kl_coef > 0
  std::vector<std::int64_t> staleness;     // versions behind the learner; empty = all 0
};

struct loss_value {
  double loss = 0;                      // the aggregated loss
  double pg_loss = 0;                   // its policy-gradient part
  double kl = 0;                        // token mean of the k3 KL to the reference (0 without one)
  double clip_fraction = 0;             // token fraction where the clipped term is the active one
  std::int64_t dropped_sequences = 0;   // by drop_sequence
  std::int64_t masked_tokens = 0;       // by mask_token or staleness, outside dropped sequences
  std::vector<double> sequence_ratios;  // each sequence's geometric-mean ratio R
  // d loss / d logprobs, per sequence and token (same shape as the input).
  std::vector<std::vector<double>> grad_logprobs;
};

// The loss of `sequences` in double precision, through the trainer's tensor code.
// Errors: vectors of one sequence differing in length (staleness may be empty), reference_logprobs
// missing while kl_coef > 0, invalid options.
[[nodiscard]] result<loss_value> compute_loss(const std::vector<loss_tokens>& sequences,
                                              const loss_options& options);

}  // namespace leap::learner
