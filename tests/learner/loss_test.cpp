#include "learner/loss.hpp"

#include "learner/trainer.hpp"
#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;

// Two sequences with ratio 1 everywhere, so each token's surrogate is -A and d/dlogp is -A * w_t:
//   A: advantages {1, 3}   B: advantage {-2}
TEST(Loss, AggregationModesMatchHandComputedValues) {
  const std::vector<loss_tokens> seqs = {
      {.logprobs = {-1.0, -2.0}, .behaviour_logprobs = {-1.0, -2.0}, .advantages = {1.0, 3.0}},
      {.logprobs = {-0.5}, .behaviour_logprobs = {-0.5}, .advantages = {-2.0}},
  };
  struct test_case {
    loss_aggregation aggregation;
    double loss;
    std::vector<std::vector<double>> grad;
  };
  const std::vector<test_case> cases = {
      // (-1 - 3 + 2) / 3 tokens
      {loss_aggregation::token_mean, -2.0 / 3.0, {{-1.0 / 3, -1.0}, {2.0 / 3}}},
      // ((-1 - 3) / 2 + 2 / 1) / 2 sequences
      {loss_aggregation::seq_mean_token_mean, 0.0, {{-0.25, -0.75}, {1.0}}},
      // ((-1 - 3) + 2) / 2 sequences
      {loss_aggregation::seq_mean_token_sum, -1.0, {{-0.5, -1.5}, {1.0}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(to_string(c.aggregation));
    auto v = compute_loss(seqs, {.aggregation = c.aggregation});
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_NEAR(v->loss, c.loss, 1e-12);
    EXPECT_NEAR(v->pg_loss, c.loss, 1e-12);
    EXPECT_EQ(v->clip_fraction, 0.0);
    ASSERT_EQ(v->grad_logprobs.size(), 2U);
    for (std::size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(v->grad_logprobs[i].size(), c.grad[i].size());
      for (std::size_t t = 0; t < c.grad[i].size(); ++t) {
        EXPECT_NEAR(v->grad_logprobs[i][t], c.grad[i][t], 1e-12) << i << "," << t;
      }
    }
  }
}

TEST(Loss, SequencesWithoutTrainedTokensDoNotCount) {
  EXPECT_EQ(sequence_token_weights(loss_aggregation::seq_mean_token_mean, {2, 0, 1}),
            (std::vector<double>{0.25, 0.0, 0.5}));
  EXPECT_EQ(sequence_token_weights(loss_aggregation::token_mean, {2, 0, 2}),
            (std::vector<double>{0.25, 0.0, 0.25}));
  EXPECT_EQ(sequence_token_weights(loss_aggregation::seq_mean_token_sum, {5, 0, 1, 0}),
            (std::vector<double>{0.5, 0.0, 0.5, 0.0}));
  EXPECT_EQ(sequence_token_weights(loss_aggregation::token_mean, {0, 0}),
            (std::vector<double>{0.0, 0.0}));
}

// For every aggregation (its name table walked, so a new one is checked with no edit here): the
// kept sequences' weights over all sequences, times kept_weight_factor, are their weights over the
// kept ones alone, as if the dropped sequences had never been in the batch.
TEST(Loss, KeptWeightFactorRenormalisesEveryAggregation) {
  const std::vector<std::int64_t> all = {3, 0, 5, 2, 7};
  const std::vector<bool> dropped = {false, false, true, false, true};
  std::vector<std::int64_t> kept_only = all;
  std::int64_t all_sequences = 0;
  std::int64_t all_tokens = 0;
  std::int64_t kept_sequences = 0;
  std::int64_t kept_tokens = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    all_sequences += all[i] > 0 ? 1 : 0;
    all_tokens += all[i];
    if (dropped[i]) {
      kept_only[i] = 0;
    } else {
      kept_sequences += all[i] > 0 ? 1 : 0;
      kept_tokens += all[i];
    }
  }
  for (const loss_aggregation a : enum_names::values<loss_aggregation>()) {
    SCOPED_TRACE(to_string(a));
    const auto before = sequence_token_weights(a, all);
    const auto alone = sequence_token_weights(a, kept_only);
    const double factor =
        kept_weight_factor(a, all_sequences, all_tokens, kept_sequences, kept_tokens);
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!dropped[i] && all[i] > 0) {
        EXPECT_NEAR(before[i] * factor, alone[i], 1e-12) << i;
      }
    }
  }
  EXPECT_EQ(kept_weight_factor(loss_aggregation::token_mean, 2, 5, 0, 0), 0.0);
  EXPECT_EQ(kept_weight_factor(loss_aggregation::seq_mean_token_mean, 2, 5, 0, 0), 0.0);
}

// One token at a time, clip_low 0.2 and clip_high 0.28 (DAPO), token_mean.
TEST(Loss, ClippedSurrogateWithSeparateLowAndHighClip) {
  struct test_case {
    double ratio;
    double advantage;
    double loss;
    double grad;  // d loss / d logp
    double clipped;
  };
  const std::vector<test_case> cases = {
      {1.5, 1.0, -1.28, 0.0, 1.0},     // A > 0 above 1 + clip_high: clipped, no gradient
      {1.25, 1.0, -1.25, -1.25, 0.0},  // inside clip-higher's wider range (0.2 would clip it)
      {1.1, 1.0, -1.1, -1.1, 0.0},
      {0.5, 1.0, -0.5, -0.5, 0.0},  // A > 0 below 1 - clip_low: min keeps the unclipped term
      {0.5, -1.0, 0.8, 0.0, 1.0},   // A < 0 below 1 - clip_low: clipped
      {0.9, -1.0, 0.9, 0.9, 0.0},
      {1.5, -1.0, 1.5, 1.5, 0.0},  // A < 0 above the cap: the pessimistic unclipped term stays
      {1.3, 0.0, 0.0, 0.0, 0.0},   // no advantage, no loss, not counted as clipped
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "ratio " << c.ratio << " advantage " << c.advantage);
    const double behaviour = -2.0;
    const std::vector<loss_tokens> seqs = {{.logprobs = {behaviour + std::log(c.ratio)},
                                            .behaviour_logprobs = {behaviour},
                                            .advantages = {c.advantage}}};
    auto v = compute_loss(
        seqs, {.clip_low = 0.2, .clip_high = 0.28, .aggregation = loss_aggregation::token_mean});
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_NEAR(v->loss, c.loss, 1e-12);
    EXPECT_NEAR(v->grad_logprobs[0][0], c.grad, 1e-12);
    EXPECT_EQ(v->clip_fraction, c.clipped);
  }
}

TEST(Loss, K3KlToTheReference) {
  // d = ref - logp = -0.5: k3 = e^d - d - 1; d k3 / d logp = 1 - e^d.
  const std::vector<loss_tokens> seqs = {{.logprobs = {-1.0, -2.0},
                                          .behaviour_logprobs = {-1.0, -2.0},
                                          .advantages = {0.0, 0.0},
                                          .reference_logprobs = {-1.5, -2.0}}};
  auto v = compute_loss(seqs, {.kl_coef = 0.1, .aggregation = loss_aggregation::token_mean});
  ASSERT_TRUE(v.ok()) << v.err().message;
  const double k3 = std::exp(-0.5) + 0.5 - 1.0;
  EXPECT_NEAR(v->kl, k3 / 2, 1e-12);
  EXPECT_NEAR(v->loss, 0.1 * k3 / 2, 1e-12);
  EXPECT_NEAR(v->pg_loss, 0.0, 1e-12);
  EXPECT_NEAR(v->grad_logprobs[0][0], 0.1 * (1 - std::exp(-0.5)) / 2, 1e-12);
  EXPECT_NEAR(v->grad_logprobs[0][1], 0.0, 1e-12) << "no gradient where current == reference";
}

TEST(Loss, InvalidInputsAndOptions) {
  struct test_case {
    std::vector<loss_tokens> seqs;
    loss_options options;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {{{.logprobs = {1.0}, .behaviour_logprobs = {}, .advantages = {1.0}}},
       {},
       "differ in length"},
      {{{.logprobs = {1.0}, .behaviour_logprobs = {1.0}, .advantages = {1.0}}},
       {.kl_coef = 0.1},
       "reference_logprobs"},
      {{}, {.clip_low = 1.0}, "'clip_low' must be in [0, 1)"},
      {{}, {.clip_high = -0.1}, "'clip_high' must be >= 0"},
      {{}, {.kl_coef = -1}, "'kl_coef' must be >= 0"},
  };
  for (const auto& c : cases) {
    auto v = compute_loss(c.seqs, c.options);
    ASSERT_FALSE(v.ok());
    EXPECT_THAT(v.err().message, HasSubstr(c.expected));
  }
}

// ---- Off-policy filtering (loss_options::offpolicy), closed form ----

void expect_grads_near(const loss_value& v, const std::vector<std::vector<double>>& expected) {
  ASSERT_EQ(v.grad_logprobs.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(v.grad_logprobs[i].size(), expected[i].size());
    for (std::size_t t = 0; t < expected[i].size(); ++t) {
      EXPECT_NEAR(v.grad_logprobs[i][t], expected[i][t], 1e-12) << i << "," << t;
    }
  }
}

// Sequence B's ratio is 3 (one token, behaviour = logp - ln 3), outside the band [0.5, 2]; A and C
// are on-policy, so every surviving surrogate is -A and d/dlogp = -A * w_t.
TEST(OffPolicy, DropSequenceRemovesItFromLossAndNormaliser) {
  const std::vector<loss_tokens> seqs = {
      {.logprobs = {-1.0, -1.0}, .behaviour_logprobs = {-1.0, -1.0}, .advantages = {1.0, 3.0}},
      {.logprobs = {-0.5}, .behaviour_logprobs = {-0.5 - std::log(3.0)}, .advantages = {-2.0}},
      {.logprobs = {-2.0}, .behaviour_logprobs = {-2.0}, .advantages = {2.0}},
  };
  const offpolicy_options drop{.mode = offpolicy_mode::drop_sequence, .low = 0.5, .high = 2.0};
  {
    // Off: B's A < 0 above the cap keeps the unclipped -3 * -2 = 6; S = 3.
    auto v = compute_loss(seqs, {});
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_NEAR(v->loss, (-2.0 + 6.0 - 2.0) / 3.0, 1e-12);
    EXPECT_EQ(v->dropped_sequences, 0);
  }
  {
    // seq_mean_token_mean over A and C only: ((-1 - 3) / 2 - 2) / 2.
    auto v = compute_loss(seqs, {.offpolicy = drop});
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_NEAR(v->loss, -2.0, 1e-12);
    EXPECT_NEAR(v->pg_loss, -2.0, 1e-12);
    EXPECT_EQ(v->dropped_sequences, 1);
    EXPECT_EQ(v->masked_tokens, 0);
    ASSERT_EQ(v->sequence_ratios.size(), 3U);
    EXPECT_NEAR(v->sequence_ratios[0], 1.0, 1e-12);
    EXPECT_NEAR(v->sequence_ratios[1], 3.0, 1e-12);
    expect_grads_near(*v, {{-0.25, -0.75}, {0.0}, {-1.0}});
  }
  {
    // token_mean over the 3 tokens left: (-1 - 3 - 2) / 3.
    auto v = compute_loss(seqs, {.aggregation = loss_aggregation::token_mean, .offpolicy = drop});
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_NEAR(v->loss, -2.0, 1e-12);
    expect_grads_near(*v, {{-1.0 / 3, -1.0}, {0.0}, {-2.0 / 3}});
  }
  {
    // A band wide enough keeps B: the same as off.
    auto v = compute_loss(
        seqs, {.offpolicy = {.mode = offpolicy_mode::drop_sequence, .low = 0.5, .high = 3.5}});
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_NEAR(v->loss, 2.0 / 3.0, 1e-12);
    EXPECT_EQ(v->dropped_sequences, 0);
  }
}

// The geometric mean, not the product: ratios 4 and 1/4 give R = 1, kept; 4 and 1 give R = 2.
TEST(OffPolicy, DropSequenceUsesTheGeometricMeanRatio) {
  const double l4 = std::log(4.0);
  const std::vector<loss_tokens> seqs = {
      {.logprobs = {-1.0, -1.0},
       .behaviour_logprobs = {-1.0 - l4, -1.0 + l4},
       .advantages = {0.0, 0.0}},
      {.logprobs = {-1.0, -1.0}, .behaviour_logprobs = {-1.0 - l4, -1.0}, .advantages = {0.0, 0.0}},
  };
  auto v = compute_loss(
      seqs, {.offpolicy = {.mode = offpolicy_mode::drop_sequence, .low = 0.5, .high = 1.9}});
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_NEAR(v->sequence_ratios[0], 1.0, 1e-12);
  EXPECT_NEAR(v->sequence_ratios[1], 2.0, 1e-12);
  EXPECT_EQ(v->dropped_sequences, 1);
}

// One sequence, token_mean, ratios {1, 3, 0.25} and advantages {1, -1, 1}: the band [0.5, 2] masks
// the last two; the normaliser stays 3 tokens.
TEST(OffPolicy, MaskTokenZeroesTokensOutsideTheBand) {
  const std::vector<loss_tokens> seqs = {
      {.logprobs = {-1.0, -1.0, -1.0},
       .behaviour_logprobs = {-1.0, -1.0 - std::log(3.0), -1.0 - std::log(0.25)},
       .advantages = {1.0, -1.0, 1.0}}};
  auto v = compute_loss(
      seqs, {.aggregation = loss_aggregation::token_mean,
             .offpolicy = {.mode = offpolicy_mode::mask_token, .low = 0.5, .high = 2.0}});
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_NEAR(v->loss, -1.0 / 3.0, 1e-12);
  EXPECT_EQ(v->masked_tokens, 2);
  EXPECT_EQ(v->dropped_sequences, 0);
  EXPECT_NEAR(v->sequence_ratios[0], std::cbrt(0.75), 1e-12);
  expect_grads_near(*v, {{-1.0 / 3, 0.0, 0.0}});
}

// token_mean, clip 0.2 / 0.28, advantages -1: ratio 4 keeps the unclipped surrogate 4 (gradient 4)
// when off; truncate_token at high 2 scales it by 2 / 4 (surrogate 2, gradient 2: the token's
// importance weight capped at 2). Ratio 1.5 is under the cap and unchanged (1.5).
TEST(OffPolicy, TruncateTokenCapsTheImportanceWeight) {
  const std::vector<loss_tokens> seqs = {
      {.logprobs = {-1.0, -1.0},
       .behaviour_logprobs = {-1.0 - std::log(4.0), -1.0 - std::log(1.5)},
       .advantages = {-1.0, -1.0}}};
  auto off = compute_loss(seqs, {.aggregation = loss_aggregation::token_mean});
  ASSERT_TRUE(off.ok()) << off.err().message;
  EXPECT_NEAR(off->loss, (4.0 + 1.5) / 2, 1e-12);
  expect_grads_near(*off, {{2.0, 0.75}});
  auto v = compute_loss(seqs, {.aggregation = loss_aggregation::token_mean,
                               .offpolicy = {.mode = offpolicy_mode::truncate_token, .high = 2.0}});
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_NEAR(v->loss, (2.0 + 1.5) / 2, 1e-12);
  EXPECT_NEAR(v->pg_loss, (2.0 + 1.5) / 2, 1e-12);
  EXPECT_EQ(v->masked_tokens, 0);
  expect_grads_near(*v, {{1.0, 0.75}});
}

// Staleness {0, 2, 1} with max_staleness 1 masks the middle token in every mode (off here); the
// normaliser stays 3 tokens.
TEST(OffPolicy, StalenessCapMasksTokensFromOldWeights) {
  const std::vector<loss_tokens> seqs = {{.logprobs = {-1.0, -1.0, -1.0},
                                          .behaviour_logprobs = {-1.0, -1.0, -1.0},
                                          .advantages = {1.0, 2.0, 3.0},
                                          .staleness = {0, 2, 1}}};
  auto capped = compute_loss(
      seqs, {.aggregation = loss_aggregation::token_mean, .offpolicy = {.max_staleness = 1}});
  ASSERT_TRUE(capped.ok()) << capped.err().message;
  EXPECT_NEAR(capped->loss, (-1.0 - 3.0) / 3, 1e-12);
  EXPECT_EQ(capped->masked_tokens, 1);
  expect_grads_near(*capped, {{-1.0 / 3, 0.0, -1.0}});
  auto uncapped = compute_loss(seqs, {.aggregation = loss_aggregation::token_mean});
  ASSERT_TRUE(uncapped.ok()) << uncapped.err().message;
  EXPECT_NEAR(uncapped->loss, -2.0, 1e-12);
  EXPECT_EQ(uncapped->masked_tokens, 0);
}

// On-policy tokens (ratio 1) pass every filter: each mode gives off's loss and gradient.
TEST(OffPolicy, RatiosOfOneChangeNothing) {
  const std::vector<loss_tokens> seqs = {
      {.logprobs = {-1.0, -2.0}, .behaviour_logprobs = {-1.0, -2.0}, .advantages = {1.0, 3.0}},
      {.logprobs = {-0.5}, .behaviour_logprobs = {-0.5}, .advantages = {-2.0}},
  };
  auto off = compute_loss(seqs, {});
  ASSERT_TRUE(off.ok()) << off.err().message;
  for (auto mode : {offpolicy_mode::drop_sequence, offpolicy_mode::truncate_token,
                    offpolicy_mode::mask_token}) {
    SCOPED_TRACE(to_string(mode));
    auto v = compute_loss(
        seqs, {.offpolicy = {.mode = mode, .low = 0.9, .high = 1.1, .max_staleness = 0}});
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_NEAR(v->loss, off->loss, 1e-12);
    EXPECT_EQ(v->dropped_sequences, 0);
    EXPECT_EQ(v->masked_tokens, 0);
    expect_grads_near(*v, off->grad_logprobs);
  }
}

TEST(OffPolicy, InvalidBandsAndLengths) {
  struct test_case {
    offpolicy_options options;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {{.low = 1.5}, "'offpolicy.low' must be in [0, 1]"},
      {{.low = -0.1}, "'offpolicy.low' must be in [0, 1]"},
      {{.high = 0.9}, "'offpolicy.high' must be >= 1"},
      {{.max_staleness = -2}, "'offpolicy.max_staleness' must be >= -1"},
  };
  for (const auto& c : cases) {
    auto v = compute_loss({}, {.offpolicy = c.options});
    ASSERT_FALSE(v.ok());
    EXPECT_THAT(v.err().message, HasSubstr(c.expected));
  }
  auto v = compute_loss(
      {{.logprobs = {1.0}, .behaviour_logprobs = {1.0}, .advantages = {1.0}, .staleness = {0, 1}}},
      {});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.err().message, HasSubstr("differ in length"));
}

TEST(OffPolicy, QuantilesInterpolateBetweenOrderStatistics) {
  EXPECT_NEAR(quantile({5, 1, 3, 2, 4}, 0.5), 3.0, 1e-12);
  EXPECT_NEAR(quantile({5, 1, 3, 2, 4}, 0.05), 1.2, 1e-12);
  EXPECT_NEAR(quantile({5, 1, 3, 2, 4}, 0.95), 4.8, 1e-12);
  EXPECT_NEAR(quantile({7}, 0.05), 7.0, 1e-12);
  EXPECT_EQ(quantile({}, 0.5), 0.0);
}

// The whole chain (model, chunked log-probs, surrogate, KL, aggregation, micro-batch accumulation,
// layer recomputation) against central finite differences, in double precision.
struct fd_case {
  std::string label;
  model_config config;
  loss_aggregation aggregation;
  bool checkpointing;
};

update_batch fd_batch(const policy& p, std::uint64_t seed) {
  const auto vocab = p.config().vocab_size;
  std::vector<std::vector<std::int32_t>> ids = {testing::random_ids(9, vocab, seed),
                                                testing::random_ids(6, vocab, seed + 1),
                                                testing::random_ids(4, vocab, seed + 2)};
  auto current = p.token_logprobs(ids);
  EXPECT_TRUE(current.ok());
  // Offsets that put each ratio well inside or well outside the clip range (no kinks nearby).
  const double offsets[] = {0.05, -0.5, 0.3, -0.05, 0.0, 0.4, -0.3};
  const double advantages[] = {1.0, -1.0, 0.5, 2.0, -0.7};
  update_batch batch;
  std::size_t k = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    sequence s;
    s.token_ids = ids[i];
    const auto n = ids[i].size();
    s.loss_mask.assign(n, 0);
    s.behaviour_logprobs.assign(n, 0.0F);
    s.advantages.assign(n, 0.0F);
    s.reference_logprobs.assign(n, 0.0F);
    for (std::size_t t = 1; t < n; ++t) {
      s.loss_mask[t] = (t + i) % 3 != 0 ? 1 : 0;  // some tokens of each sequence untrained
      s.behaviour_logprobs[t] = static_cast<float>((*current)[i][t] + offsets[k % 7]);
      s.reference_logprobs[t] = static_cast<float>((*current)[i][t] + offsets[(k + 3) % 7]);
      s.advantages[t] = static_cast<float>(advantages[k % 5]);
      ++k;
    }
    batch.sequences.push_back(std::move(s));
  }
  return batch;
}

TEST(Loss, GradientsMatchFiniteDifferences) {
  const std::vector<fd_case> cases = {
      {"qwen2 tied, sample-level", testing::tiny_qwen2(), loss_aggregation::seq_mean_token_mean,
       false},
      {"llama untied, token-mean, recomputed layers", testing::tiny_llama(),
       loss_aggregation::token_mean, true},
      {"qwen2, seq-mean-token-sum, recomputed layers", testing::tiny_qwen2(),
       loss_aggregation::seq_mean_token_sum, true},
      {"qwen3 q/k norms, recomputed layers", testing::tiny_qwen3(), loss_aggregation::token_mean,
       true},
      {"qwen3 q/k norms", testing::tiny_qwen3(), loss_aggregation::seq_mean_token_mean, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    auto initial = policy::create_random(
        c.config, 5,
        {.dtype = "float64", .logprob_chunk = 4, .activation_checkpointing = c.checkpointing});
    ASSERT_TRUE(initial.ok()) << initial.err().message;
    // Larger weights than the 0.02 init, so that every parameter's gradient is well above noise.
    for (const auto& [name, t] : testing::random_test_weights(c.config, 6, dtype::f64)) {
      ASSERT_TRUE(initial->set_parameter(name, t).ok());
    }
    const auto batch = fd_batch(*initial, 31);
    trainer_options options;
    options.loss = {
        .clip_low = 0.2, .clip_high = 0.28, .kl_coef = 0.05, .aggregation = c.aggregation};
    options.batching.micro_batch_tokens =
        10;  // one sequence per micro-batch: accumulation is exercised
    auto t = trainer::create(std::move(*initial), options);
    ASSERT_TRUE(t.ok()) << t.err().message;
    auto analytic = t->compute_gradients(batch);
    ASSERT_TRUE(analytic.ok()) << analytic.err().message;
    EXPECT_GT(analytic->metrics.clip_fraction, 0.0) << "some tokens are clipped";
    EXPECT_LT(analytic->metrics.clip_fraction, 1.0);

    // Probe entries of every kind of parameter; `p` below is the policy the trainer owns.
    auto& p = const_cast<policy&>(t->current_policy());  // NOLINT: perturbing in place is the point
    std::vector<std::pair<std::string, std::size_t>> probes = {
        // A row of a token that occurs in the batch (other rows have no gradient when untied).
        {"model.embed_tokens.weight",
         static_cast<std::size_t>(batch.sequences[0].token_ids[1] * c.config.hidden_size + 3)},
        {"model.layers.0.input_layernorm.weight", 7},
        {"model.layers.0.self_attn.q_proj.weight", 41},
        {"model.layers.0.self_attn.k_proj.bias", 2},
        {"model.layers.1.self_attn.v_proj.weight", 100},
        {"model.layers.1.self_attn.o_proj.weight", 17},
        {"model.layers.1.post_attention_layernorm.weight", 3},
        {"model.layers.0.mlp.gate_proj.weight", 211},
        {"model.layers.1.mlp.down_proj.weight", 77},
        {"model.norm.weight", 11},
        {c.config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", 2 * 32 + 9},
    };
    if (c.config.qk_norm) {  // Qwen3: no biases, but q/k norms
      probes.erase(probes.begin() + 3);
      probes.push_back({"model.layers.0.self_attn.q_norm.weight", 5});
      probes.push_back({"model.layers.1.self_attn.k_norm.weight", 10});
    }
    const double eps = 1e-5;
    // Not a structured binding: clang 14 (clang-tidy's parser) refuses one captured by a lambda.
    for (const auto& probe : probes) {
      const std::string& name = probe.first;
      const auto index = probe.second;
      SCOPED_TRACE(name + "[" + std::to_string(index) + "]");
      auto original = p.parameter(name);
      ASSERT_TRUE(original.ok());
      auto v = to_doubles(*original);
      ASSERT_LT(index, v.size());
      const auto loss_at = [&](double x) {
        auto changed = v;
        changed[index] = x;
        EXPECT_TRUE(
            p.set_parameter(name, make_float_tensor(dtype::f64, original->shape, changed)).ok());
        auto r = t->compute_gradients(batch);
        EXPECT_TRUE(r.ok());
        return r->loss;
      };
      const double numeric = (loss_at(v[index] + eps) - loss_at(v[index] - eps)) / (2 * eps);
      ASSERT_TRUE(p.set_parameter(name, *original).ok());
      const double exact = to_doubles(analytic->gradients.at(name))[index];
      EXPECT_NEAR(exact, numeric, 1e-7 * std::max(1.0, std::abs(numeric))) << "analytic " << exact;
      EXPECT_GT(std::abs(exact), 1e-6) << "the probe exercises a non-trivial gradient";
    }
  }
}

TEST(Loss, LayerRecomputationGivesTheSameGradients) {
  const auto config = testing::tiny_llama();
  std::map<std::string, std::vector<double>> grads[2];
  for (int recompute = 0; recompute < 2; ++recompute) {
    auto p = policy::create_random(
        config, 5, {.dtype = "float64", .activation_checkpointing = recompute == 1});
    ASSERT_TRUE(p.ok());
    const auto batch = fd_batch(*p, 3);
    auto t = trainer::create(std::move(*p), {});
    ASSERT_TRUE(t.ok());
    auto g = t->compute_gradients(batch);
    ASSERT_TRUE(g.ok()) << g.err().message;
    for (const auto& [name, tensor] : g->gradients) {
      grads[recompute][name] = to_doubles(tensor);
    }
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (const auto& [name, g] : grads[0]) {
    const auto& h = grads[1].at(name);
    for (std::size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(g[i], h[i], 1e-12 * std::max(1.0, std::abs(g[i]))) << name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace leap::learner
