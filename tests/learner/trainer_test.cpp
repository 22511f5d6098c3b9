#include "learner/trainer.hpp"

#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;
using testing::scratch_dir;

// Sequences of 12 to 14 tokens (a 4-token prompt), on-policy, advantages alternating in sign.
update_batch make_batch(const policy& p, std::size_t count, std::uint64_t seed) {
  return testing::scored_batch(p, {.count = count, .seed = seed});
}

double mean_trained_logprob(const policy& p, const update_batch& batch, float advantage_sign) {
  double sum = 0;
  int n = 0;
  for (const auto& s : batch.sequences) {
    if ((s.advantages.back() > 0) != (advantage_sign > 0)) {
      continue;
    }
    auto logp = p.token_logprobs({s.token_ids});
    for (std::size_t t = 0; t < s.token_ids.size(); ++t) {
      if (s.loss_mask[t] != 0) {
        sum += (*logp)[0][t];
        ++n;
      }
    }
  }
  return sum / n;
}

TEST(Trainer, LossDecreasesOnAFixedBatch) {
  auto p = policy::create_random(testing::tiny_qwen2(), 1);
  ASSERT_TRUE(p.ok());
  const auto batch = make_batch(*p, 6, 10);
  trainer_options options;
  options.optimizer.lr = 3e-3;
  options.loss.clip_high = 10.0;  // let the ratio move far, so the loss keeps falling
  options.loss.clip_low = 0.9;
  auto t = trainer::create(std::move(*p), options);
  ASSERT_TRUE(t.ok()) << t.err().message;
  const double good_before = mean_trained_logprob(t->current_policy(), batch, 1);
  const double bad_before = mean_trained_logprob(t->current_policy(), batch, -1);
  std::vector<double> losses;
  for (int i = 0; i < 8; ++i) {
    auto r = t->update(batch);
    ASSERT_TRUE(r.ok()) << r.err().message;
    losses.push_back(r->summary.loss);
    EXPECT_EQ(r->step, i + 1);
  }
  EXPECT_NEAR(losses.front(), 0.0, 1e-5)
      << "on-policy, advantages +1/-1 in equal numbers: the loss starts at 0";
  for (std::size_t i = 1; i < losses.size(); ++i) {
    EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
  }
  EXPECT_GT(mean_trained_logprob(t->current_policy(), batch, 1), good_before + 0.1);
  EXPECT_LT(mean_trained_logprob(t->current_policy(), batch, -1), bad_before - 0.1);
}

// Two trainers: one runs steps 1 and 2 without stopping; the other runs step 1, is destroyed, and
// a third resumes from the checkpoint and runs step 2. Everything after step 2 must be identical.
TEST(Trainer, ResumingFromACheckpointGivesABitIdenticalNextStep) {
  for (const std::string dtype : {"float32", "bfloat16"}) {
    SCOPED_TRACE(dtype);
    scratch_dir dir;
    const auto config = testing::tiny_llama();
    trainer_options options;
    options.policy.dtype = dtype;
    options.optimizer = {.lr = 1e-3, .weight_decay = 0.1, .max_grad_norm = 0.5, .warmup_steps = 3};
    options.batching = {.micro_batch_tokens = 30, .mini_batches = 2, .epochs = 1};
    options.loss.kl_coef = 0.1;  // with the trainer's own frozen reference
    auto fresh = [&] { return policy::create_random(config, 42, {.dtype = dtype}).value(); };
    const auto b1 = make_batch(fresh(), 5, 100);
    const auto b2 = make_batch(fresh(), 5, 200);

    options.checkpoint.dir = dir.sub("straight");
    auto straight = trainer::create(fresh(), options);
    ASSERT_TRUE(straight.ok()) << straight.err().message;
    ASSERT_TRUE(straight->update(b1).ok());
    auto straight2 = straight->update(b2);
    ASSERT_TRUE(straight2.ok()) << straight2.err().message;

    options.checkpoint.dir = dir.sub("resumed");
    {
      auto first = trainer::create(fresh(), options);
      ASSERT_TRUE(first.ok());
      auto r = first->update(b1);
      ASSERT_TRUE(r.ok()) << r.err().message;
      EXPECT_EQ(r->checkpoint_dir, dir.sub("resumed/step-00000001"));
    }
    auto resumed = trainer::create(fresh(), options);
    ASSERT_TRUE(resumed.ok()) << resumed.err().message;
    EXPECT_EQ(resumed->step(), 1);
    EXPECT_EQ(resumed->optimizer_step(), 2);
    auto resumed2 = resumed->update(b2);
    ASSERT_TRUE(resumed2.ok()) << resumed2.err().message;

    EXPECT_EQ(resumed2->summary.loss, straight2->summary.loss);
    EXPECT_EQ(resumed2->summary.grad_norm, straight2->summary.grad_norm);
    EXPECT_EQ(resumed2->summary.kl, straight2->summary.kl);
    EXPECT_GT(resumed2->summary.kl, 0.0);
    for (const auto& name : straight->current_policy().parameter_names()) {
      EXPECT_TRUE(straight->current_policy().parameter(name)->data ==
                  resumed->current_policy().parameter(name)->data)
          << name;
    }
    // The optimiser states agree too: compare the files of step 2.
    auto a = read_safetensors(dir.sub("straight/step-00000002/optimizer.safetensors"));
    auto b = read_safetensors(dir.sub("resumed/step-00000002/optimizer.safetensors"));
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    for (const auto& [name, t] : *a) {
      EXPECT_TRUE(b->at(name).data == t.data) << name;
    }
    EXPECT_EQ(a->count("master/model.norm.weight"), dtype == "bfloat16" ? 1U : 0U)
        << "float32 master weights exist only for a lower-precision model";
  }
}

TEST(Trainer, MicroBatchingDoesNotChangeTheGradient) {
  const auto config = testing::tiny_qwen2();
  std::vector<tensor_map> grads;
  double loss = 0;
  for (std::int64_t budget : {100000, 20, 1}) {
    auto p = policy::create_random(config, 3, {.dtype = "float64"});
    ASSERT_TRUE(p.ok());
    const auto batch = make_batch(*p, 5, 7);
    trainer_options options;
    options.batching.micro_batch_tokens = budget;
    auto t = trainer::create(std::move(*p), options);
    ASSERT_TRUE(t.ok());
    auto g = t->compute_gradients(batch);
    ASSERT_TRUE(g.ok()) << g.err().message;
    // Different budgets split the batch into products of different shapes, so float64 sums run in
    // another order: the results agree to ~1e-14 of the terms' size, not to the last bit. A
    // micro-batching bug (a sequence weighted twice or dropped, a wrong token count) is off by
    // percents, eight orders of magnitude above this tolerance.
    if (!grads.empty()) {
      EXPECT_NEAR(g->loss, loss, 1e-10 * std::max(1.0, std::abs(loss)));
    }
    loss = g->loss;
    grads.push_back(std::move(g->gradients));
  }
  for (std::size_t k = 1; k < grads.size(); ++k) {
    for (const auto& [name, t] : grads[0]) {
      const auto a = to_doubles(t);
      const auto b = to_doubles(grads[k].at(name));
      for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], b[i], 1e-10 * std::max(1.0, std::abs(a[i]))) << name << "[" << i << "]";
      }
    }
  }
}

// The optimiser works on flat buffers of all parameters; this checks it per parameter against the
// textbook first AdamW step: m = (1 - b1) g, v = (1 - b2) g^2, so w' = w (1 - lr wd [matrix])
// - lr g / (|g| + eps) after bias correction. With bfloat16 the step acts on the float32 masters
// (read from the checkpoint) and the model holds their rounding; its gradient is summed in float32
// over several micro-batches, or used as autograd wrote it when there is one.
TEST(Trainer, OneAdamWStepIsTheTextbookUpdatePerParameter) {
  const std::pair<std::string, std::int64_t> cases[] = {
      {"float64", 20}, {"bfloat16", 20}, {"bfloat16", 100000}};
  for (const auto& [dtype, budget] : cases) {
    SCOPED_TRACE(dtype + ", micro-batch budget " + std::to_string(budget));
    scratch_dir dir;
    auto p = policy::create_random(testing::tiny_qwen2(), 4, {.dtype = dtype});
    ASSERT_TRUE(p.ok());
    const auto batch = make_batch(*p, 4, 9);
    std::map<std::string, std::vector<double>> before;
    for (const auto& name : p->parameter_names()) {
      before[name] = to_doubles(*p->parameter(name));
    }
    trainer_options options;
    options.optimizer = {.lr = 1e-2, .eps = 1e-3, .weight_decay = 0.5, .max_grad_norm = 0};
    options.batching.micro_batch_tokens = budget;
    options.checkpoint.dir = dir.path();
    auto t = trainer::create(std::move(*p), options);
    ASSERT_TRUE(t.ok()) << t.err().message;
    auto g = t->compute_gradients(batch);
    ASSERT_TRUE(g.ok()) << g.err().message;
    auto r = t->update(batch);
    ASSERT_TRUE(r.ok()) << r.err().message;
    auto state = read_safetensors(r->checkpoint_dir + "/optimizer.safetensors");
    ASSERT_TRUE(state.ok());
    const double tolerance = dtype == "float64" ? 1e-12 : 1e-5;
    for (const auto& [name, w0] : before) {
      const auto grad = to_doubles(g->gradients.at(name));
      const auto& shape = t->current_policy().parameter(name)->shape;
      const double decay = shape.size() >= 2 ? 1.0 - 1e-2 * 0.5 : 1.0;
      const auto after = dtype == "float64" ? to_doubles(*t->current_policy().parameter(name))
                                            : to_doubles(state->at("master/" + name));
      ASSERT_EQ(after.size(), w0.size());
      for (std::size_t i = 0; i < w0.size(); ++i) {
        const double expected = w0[i] * decay - 1e-2 * grad[i] / (std::abs(grad[i]) + 1e-3);
        ASSERT_NEAR(after[i], expected, tolerance) << name << "[" << i << "]";
      }
      if (dtype == "bfloat16") {
        const auto model = to_doubles(*t->current_policy().parameter(name));
        for (std::size_t i = 0; i < w0.size(); ++i) {
          ASSERT_NEAR(model[i], after[i], std::abs(after[i]) / 128) << name << "[" << i << "]";
        }
      }
    }
  }
}

TEST(Trainer, MiniBatchesEpochsWarmupAndMetrics) {
  auto p = policy::create_random(testing::tiny_qwen2(), 2);
  ASSERT_TRUE(p.ok());
  const auto batch = make_batch(*p, 6, 50);
  trainer_options options;
  options.optimizer.lr = 1e-3;
  options.optimizer.warmup_steps = 4;
  options.batching.mini_batches = 3;
  options.batching.epochs = 2;
  auto t = trainer::create(std::move(*p), options);
  ASSERT_TRUE(t.ok());
  auto r = t->update(batch);
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->optimizer_steps.size(), 6U) << "3 mini-batches x 2 epochs";
  const double expected_lr[] = {0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3, 1e-3};
  std::int64_t trained = 0;
  for (std::size_t i = 0; i < 6; ++i) {
    const auto& m = r->optimizer_steps[i];
    EXPECT_EQ(m.optimizer_step, static_cast<std::int64_t>(i) + 1);
    EXPECT_DOUBLE_EQ(m.lr, expected_lr[i]);
    EXPECT_EQ(m.sequences, 2);
    EXPECT_GT(m.grad_norm, 0.0);
    EXPECT_GT(m.entropy, 0.0);
    EXPECT_LE(m.entropy, std::log(300.0) + 1e-6) << "entropy of a 300-way distribution";
    EXPECT_GE(m.clip_fraction, 0.0);
    EXPECT_LE(m.clip_fraction, 1.0);
    EXPECT_GE(m.behaviour_kl, 0.0);
    EXPECT_EQ(m.kl, 0.0) << "no reference without kl_coef";
    EXPECT_GT(m.tokens_per_second, 0.0);
    trained += m.trained_tokens;
  }
  EXPECT_EQ(r->optimizer_steps[0].behaviour_kl, 0.0) << "the first mini-batch is exactly on-policy";
  EXPECT_GT(r->optimizer_steps[5].behaviour_kl, 0.0) << "later ones see the updated policy";
  EXPECT_EQ(r->summary.trained_tokens, trained);
  EXPECT_EQ(r->summary.sequences, 12);
  EXPECT_EQ(r->summary.optimizer_step, 6);
  EXPECT_EQ(t->optimizer_step(), 6);
  EXPECT_EQ(t->step(), 1);
  EXPECT_TRUE(r->checkpoint_dir.empty());
}

TEST(Trainer, GradientClippingBoundsWhatReachesTheOptimizer) {
  scratch_dir dir;
  auto p = policy::create_random(testing::tiny_qwen2(), 2);
  ASSERT_TRUE(p.ok());
  const auto batch = make_batch(*p, 4, 60);
  trainer_options options;
  options.optimizer.max_grad_norm = 1e-3;
  options.checkpoint.dir = dir.path();
  auto t = trainer::create(std::move(*p), options);
  ASSERT_TRUE(t.ok());
  auto r = t->update(batch);
  ASSERT_TRUE(r.ok());
  ASSERT_GT(r->summary.grad_norm, 1e-2) << "the raw gradient is far above the limit";
  // After one step exp_avg = (1 - beta1) * clipped gradient, whose norm is max_grad_norm.
  auto state = read_safetensors(r->checkpoint_dir + "/optimizer.safetensors");
  ASSERT_TRUE(state.ok());
  double sq = 0;
  for (const auto& [name, t2] : *state) {
    if (name.starts_with("exp_avg/")) {
      for (double x : to_doubles(t2)) {
        sq += x * x;
      }
    }
  }
  EXPECT_NEAR(std::sqrt(sq), 0.1 * 1e-3, 1e-7);
}

TEST(Trainer, CheckpointsAreCompleteLoadableAndPruned) {
  scratch_dir dir;
  auto p = policy::create_random(testing::tiny_qwen2(), 2);
  ASSERT_TRUE(p.ok());
  const auto batch = make_batch(*p, 3, 70);
  trainer_options options;
  options.optimizer.lr = 1e-3;
  options.checkpoint = {.dir = dir.path(), .every = 1, .keep_last = 2};
  auto t = trainer::create(std::move(*p), options);
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(t->update(batch).ok());
  }
  std::vector<std::string> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    entries.push_back(e.path().filename().string());
  }
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"step-00000002", "step-00000003"}))
      << "no temporary folder is left";
  for (const char* file :
       {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.sub(std::string("step-00000003/") + file))) << file;
  }
  EXPECT_EQ(*latest_checkpoint(dir.path()), dir.sub("step-00000003"));

  // The step folder is a Hugging Face model folder: the policy server can load it as is.
  auto loaded = policy::load(dir.sub("step-00000003"));
  ASSERT_TRUE(loaded.ok()) << loaded.err().message;
  const std::vector<std::int32_t> ids = {5, 6, 7, 8};
  EXPECT_EQ(*loaded->logits(ids), *t->current_policy().logits(ids));

  // A folder without trainer_state.json (a crash mid-write) is not a checkpoint.
  std::filesystem::create_directories(dir.sub("step-00000009"));
  EXPECT_EQ(*latest_checkpoint(dir.path()), dir.sub("step-00000003"));
  EXPECT_EQ(*latest_checkpoint(dir.sub("does-not-exist")), "");

  // save_checkpoint() writes the current state on demand (here: replacing step 3's folder).
  auto again = t->save_checkpoint();
  ASSERT_TRUE(again.ok()) << again.err().message;
  EXPECT_EQ(*again, dir.sub("step-00000003"));
}

TEST(Trainer, KlToTheFrozenReferenceStartsAtZeroAndGrows) {
  auto p = policy::create_random(testing::tiny_qwen2(), 2);
  ASSERT_TRUE(p.ok());
  const auto batch = make_batch(*p, 4, 80);
  trainer_options options;
  options.optimizer.lr = 1e-2;
  options.loss.kl_coef = 0.5;
  auto t = trainer::create(std::move(*p), options);
  ASSERT_TRUE(t.ok());
  auto first = t->update(batch);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->summary.kl, 0.0) << "the reference is a copy of the initial weights";
  auto second = t->update(batch);
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->summary.kl, 0.0);
}

TEST(Trainer, ReferenceFromAnotherFolder) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  testing::write_checkpoint(dir.sub("ref"), config, testing::random_test_weights(config, 5));
  testing::write_checkpoint(dir.sub("model"), config, testing::random_test_weights(config, 6));
  trainer_options options;
  options.loss.kl_coef = 0.1;
  options.reference_model_dir = dir.sub("ref");
  auto t = trainer::create(dir.sub("model"), options);
  ASSERT_TRUE(t.ok()) << t.err().message;
  auto r = t->update(make_batch(t->current_policy(), 2, 3));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_GT(r->summary.kl, 0.0) << "a different reference: non-zero KL at once";

  options.reference_model_dir = dir.sub("missing");
  EXPECT_THAT(trainer::create(dir.sub("model"), options).err().message, HasSubstr("missing"));
}

TEST(Trainer, InvalidBatchesAreRejectedWithoutAStep) {
  auto p = policy::create_random(testing::tiny_qwen2(), 2);
  ASSERT_TRUE(p.ok());
  const auto good = make_batch(*p, 2, 90);
  auto t = trainer::create(std::move(*p), {});
  ASSERT_TRUE(t.ok());
  struct test_case {
    std::string label;
    std::function<void(update_batch&)> edit;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {"empty", [](update_batch& b) { b.sequences.clear(); }, "the batch has no sequences"},
      {"no tokens", [](update_batch& b) { b.sequences[1] = sequence{}; }, "sequence 1: no tokens"},
      {"lengths", [](update_batch& b) { b.sequences[0].advantages.pop_back(); },
       "must have the same length"},
      {"mask[0]", [](update_batch& b) { b.sequences[0].loss_mask[0] = 1; },
       "loss_mask[0] must be 0"},
      {"mask value", [](update_batch& b) { b.sequences[0].loss_mask[5] = 2; },
       "loss_mask values must be 0 or 1"},
      {"id", [](update_batch& b) { b.sequences[1].token_ids[2] = 300; },
       "token id 300 at position 2"},
      {"nan", [](update_batch& b) { b.sequences[0].advantages[6] = std::nanf(""); }, "non-finite"},
      {"nothing trained",
       [](update_batch& b) {
         for (auto& s : b.sequences) {
           std::fill(s.loss_mask.begin(), s.loss_mask.end(), 0);
         }
       },
       "no trained token"},
      {"partial reference",
       [](update_batch& b) {
         b.sequences[0].reference_logprobs = b.sequences[0].behaviour_logprobs;
       },
       "reference_logprobs are given for 1 of 2 sequences"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    auto batch = good;
    c.edit(batch);
    auto r = t->update(batch);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.err().message, HasSubstr(c.expected));
  }
  EXPECT_EQ(t->step(), 0);
  EXPECT_EQ(t->optimizer_step(), 0);
}

TEST(Trainer, InvalidOptionsAreRejected) {
  struct test_case {
    std::function<void(trainer_options&)> edit;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {[](trainer_options& o) { o.loss.clip_low = 1.5; }, "'clip_low'"},
      {[](trainer_options& o) { o.optimizer.beta2 = 1.0; }, "'beta1' and 'beta2'"},
      {[](trainer_options& o) { o.optimizer.max_grad_norm = -1; }, "'max_grad_norm'"},
      {[](trainer_options& o) { o.batching.micro_batch_tokens = 0; }, "'micro_batch_tokens'"},
      {[](trainer_options& o) { o.batching.mini_batches = 0; }, "'mini_batches'"},
      {[](trainer_options& o) { o.checkpoint.every = 0; }, "checkpoint 'every'"},
      {[](trainer_options& o) { o.lora = lora_options{.rank = 0}; },
       "LoRA 'rank' must be at least 1"},
  };
  for (const auto& c : cases) {
    trainer_options options;
    c.edit(options);
    auto t = trainer::create(policy::create_random(testing::tiny_qwen2(), 1).value(), options);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.err().message, HasSubstr(c.expected));
  }
}

}  // namespace
}  // namespace leap::learner
