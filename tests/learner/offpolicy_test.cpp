// The trainer's off-policy filter (loss.offpolicy) against batches edited by hand: a dropped
// sequence must train exactly like a batch without it, a masked token like a token without
// advantage (the normaliser keeps it). The closed-form checks of the loss are in loss_test.cpp.
#include "learner/trainer.hpp"
#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;

// Gradients of `batch` under `options` on a fresh float64 copy of the same random model.
gradient_report gradients_of(const update_batch& batch, const trainer_options& options) {
  auto p = policy::create_random(testing::tiny_qwen2(), 3, {.dtype = "float64"});
  EXPECT_TRUE(p.ok());
  auto t = trainer::create(std::move(*p), options);
  EXPECT_TRUE(t.ok()) << t.err().message;
  auto g = t->compute_gradients(batch);
  EXPECT_TRUE(g.ok()) << g.err().message;
  return std::move(*g);
}

// float64 sums in another order agree to ~1e-14 of the terms; a wrong normaliser is off by
// a factor (5/4 here), a dropped sequence still trained by percents.
void expect_same(const gradient_report& a, const gradient_report& b) {
  EXPECT_NEAR(a.loss, b.loss, 1e-10 * std::max(1.0, std::abs(b.loss)));
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  for (const auto& [name, t] : a.gradients) {
    const auto x = to_doubles(t);
    const auto y = to_doubles(b.gradients.at(name));
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(x[i], y[i], 1e-10 * std::max(1.0, std::abs(y[i]))) << name << "[" << i << "]";
    }
  }
}

update_batch on_policy_batch() {
  auto p = policy::create_random(testing::tiny_qwen2(), 3, {.dtype = "float64"});
  EXPECT_TRUE(p.ok());
  return testing::scored_batch(*p, {.count = 5, .seed = 40});
}

// Sequence 2's behaviour log-probs 2 nats below the policy's: its ratio is e^2 on every token.
update_batch with_sequence_2_off_policy() {
  auto batch = on_policy_batch();
  for (auto& l : batch.sequences[2].behaviour_logprobs) {
    l -= 2.0F;
  }
  return batch;
}

TEST(TrainerOffPolicy, DroppedSequenceTrainsLikeABatchWithoutIt) {
  const auto batch = with_sequence_2_off_policy();
  auto without = batch;
  without.sequences.erase(without.sequences.begin() + 2);
  // Every aggregation, its name table walked: a new one is checked here with no edit.
  for (const loss_aggregation aggregation : enum_names::values<loss_aggregation>()) {
    // 14 tokens: every sequence in a micro-batch of its own, so the drop spans micro-batches.
    for (std::int64_t budget : {100000, 14}) {
      SCOPED_TRACE(to_string(aggregation) + " budget " + std::to_string(budget));
      trainer_options options;
      options.loss.aggregation = aggregation;
      options.batching.micro_batch_tokens = budget;
      const auto reference = gradients_of(without, options);
      options.loss.offpolicy = {.mode = offpolicy_mode::drop_sequence, .low = 0.5, .high = 2.0};
      const auto dropped = gradients_of(batch, options);
      expect_same(dropped, reference);
      EXPECT_EQ(dropped.metrics.dropped_sequences, 1);
      EXPECT_EQ(dropped.metrics.masked_tokens, 0);
      EXPECT_NEAR(dropped.metrics.ratio_p50, 1.0, 1e-6);  // behaviour log-probs are float32
      EXPECT_GT(dropped.metrics.ratio_p95, 2.0);
    }
  }
}

TEST(TrainerOffPolicy, MaskedAndStaleTokensTrainLikeTokensWithoutAdvantage) {
  const auto batch = with_sequence_2_off_policy();
  auto zeroed = batch;
  std::fill(zeroed.sequences[2].advantages.begin(), zeroed.sequences[2].advantages.end(), 0.0F);
  const auto trained = std::count(batch.sequences[2].loss_mask.begin(),
                                  batch.sequences[2].loss_mask.end(), std::uint8_t{1});
  trainer_options options;
  options.batching.micro_batch_tokens = 14;
  const auto reference = gradients_of(zeroed, options);
  {
    SCOPED_TRACE("mask_token");
    auto o = options;
    o.loss.offpolicy = {.mode = offpolicy_mode::mask_token, .low = 0.5, .high = 2.0};
    const auto masked = gradients_of(batch, o);
    expect_same(masked, reference);
    EXPECT_EQ(masked.metrics.masked_tokens, trained);
    EXPECT_EQ(masked.metrics.dropped_sequences, 0);
  }
  {
    SCOPED_TRACE("staleness");
    // The advantages zeroed here keep sequence 2 off-policy but without effect under mode off,
    // so the reference is the same batch as above.
    auto stale = zeroed;
    stale.sequences[0].staleness.assign(stale.sequences[0].token_ids.size(), 3);
    auto zeroed_0 = zeroed;
    std::fill(zeroed_0.sequences[0].advantages.begin(), zeroed_0.sequences[0].advantages.end(),
              0.0F);
    auto o = options;
    o.loss.offpolicy.max_staleness = 2;
    const auto capped = gradients_of(stale, o);
    expect_same(capped, gradients_of(zeroed_0, options));
    EXPECT_EQ(capped.metrics.masked_tokens,
              std::count(stale.sequences[0].loss_mask.begin(), stale.sequences[0].loss_mask.end(),
                         std::uint8_t{1}));
    o.loss.offpolicy.max_staleness = 3;
    expect_same(gradients_of(stale, o), reference);
  }
}

// truncate_token scales a token's surrogate by high / r > 0, which is the same as scaling its
// advantage: sequence 2 (r = e^2 on every token) must train like advantages times 2 / e^2.
TEST(TrainerOffPolicy, TruncatedTokensTrainLikeScaledAdvantages) {
  const auto batch = with_sequence_2_off_policy();
  auto scaled = batch;
  for (auto& a : scaled.sequences[2].advantages) {
    a = static_cast<float>(a * 2.0 / std::exp(2.0));
  }
  trainer_options options;
  options.loss.clip_high = 10.0;  // r = e^2 inside the clip range: the scaled term has a gradient
  options.batching.micro_batch_tokens = 14;
  const auto reference = gradients_of(scaled, options);
  options.loss.offpolicy = {.mode = offpolicy_mode::truncate_token, .high = 2.0};
  const auto truncated = gradients_of(batch, options);
  // The behaviour log-probs and the scaled advantages are float32: agreement to ~1e-6.
  EXPECT_NEAR(truncated.loss, reference.loss, 1e-6 * std::max(1.0, std::abs(reference.loss)));
  for (const auto& [name, t] : truncated.gradients) {
    const auto x = to_doubles(t);
    const auto y = to_doubles(reference.gradients.at(name));
    // Relative to the tensor's largest element: elements that nearly cancel carry the float32
    // inputs' rounding at a larger relative size.
    double scale = 0;
    for (auto v : y) {
      scale = std::max(scale, std::abs(v));
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(x[i], y[i], 1e-5 * scale) << name << "[" << i << "]";
    }
  }
  EXPECT_EQ(truncated.metrics.masked_tokens, 0);
  options.loss.offpolicy.mode = offpolicy_mode::off;
  const auto untouched = gradients_of(batch, options);
  EXPECT_GT(std::abs(untouched.loss - reference.loss), 1e-3) << "the truncation must matter here";
}

TEST(TrainerOffPolicy, AllDroppedTakesNoOptimizerStep) {
  auto batch = with_sequence_2_off_policy();
  const auto only = batch.sequences[2];
  batch.sequences = {only};
  auto p = policy::create_random(testing::tiny_qwen2(), 3, {.dtype = "float64"});
  ASSERT_TRUE(p.ok());
  trainer_options options;
  options.loss.offpolicy = {.mode = offpolicy_mode::drop_sequence, .low = 0.5, .high = 2.0};
  auto t = trainer::create(std::move(*p), options);
  ASSERT_TRUE(t.ok()) << t.err().message;
  auto r = t->update(batch);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->optimizer_steps.empty());
  EXPECT_EQ(t->optimizer_step(), 0);
  EXPECT_EQ(r->summary.dropped_sequences, 1);
  EXPECT_NEAR(r->summary.ratio_p50, std::exp(2.0), 1e-4);
}

TEST(TrainerOffPolicy, InvalidStalenessIsRejected) {
  auto batch = on_policy_batch();
  auto p = policy::create_random(testing::tiny_qwen2(), 3, {.dtype = "float64"});
  ASSERT_TRUE(p.ok());
  auto t = trainer::create(std::move(*p), {});
  ASSERT_TRUE(t.ok());
  auto shorter = batch;
  shorter.sequences[1].staleness = {0, 1};
  auto r = t->update(shorter);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.err().message, HasSubstr("sequence 1: staleness must be empty or as long"));
  auto negative = batch;
  negative.sequences[0].staleness.assign(negative.sequences[0].token_ids.size(), -1);
  r = t->update(negative);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.err().message, HasSubstr("staleness must be >= 0"));
  EXPECT_EQ(t->optimizer_step(), 0);
}

}  // namespace
}  // namespace leap::learner
