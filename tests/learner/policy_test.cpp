#include "learner/policy.hpp"

#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;
using testing::scratch_dir;

struct golden_case {
  std::string label;
  model_config config;
  std::string dtype;
  double tolerance;  // max |ours - reference| / max(1, |reference|)
};

model_config with_rope(model_config c, const std::string& type) {
  c.rope_type = type;
  c.rope_factor = 8.0;
  c.rope_low_freq_factor = 1.0;
  c.rope_high_freq_factor = 4.0;
  c.rope_original_max_position = 16;  // small, so that all three frequency bands occur
  return c;
}

// The forward pass against loops written from the formulas, on checkpoints written by the test.
TEST(Policy, LogitsMatchAnIndependentReferenceForwardPass) {
  const std::vector<golden_case> cases = {
      {"qwen2 gqa tied qkv-bias fp32", testing::tiny_qwen2(), "float32", 2e-5},
      {"llama mha untied all-bias fp32", testing::tiny_llama(), "float32", 2e-5},
      {"llama3 rope scaling fp64", with_rope(testing::tiny_llama(), "llama3"), "float64", 1e-10},
      {"linear rope scaling fp64", with_rope(testing::tiny_qwen2(), "linear"), "float64", 1e-10},
      {"qwen2 fp64", testing::tiny_qwen2(), "float64", 1e-10},
      {"qwen3 qk-norm head_dim!=hidden/heads fp32", testing::tiny_qwen3(), "float32", 2e-5},
      {"qwen3 fp64", testing::tiny_qwen3(), "float64", 1e-10},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    scratch_dir dir;
    const auto weights = testing::random_test_weights(c.config, 11);
    testing::write_checkpoint(dir.path(), c.config, weights);
    policy_options options;
    options.dtype = c.dtype;
    auto p = policy::load(dir.path(), options);
    ASSERT_TRUE(p.ok()) << p.err().message;
    const auto ids = testing::random_ids(13, c.config.vocab_size, 5);
    auto ours = p->logits(ids);
    ASSERT_TRUE(ours.ok()) << ours.err().message;
    const auto ref = testing::reference_logits(c.config, weights, ids);
    ASSERT_EQ(ours->size(), ref.size());
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs((*ours)[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
    }
    // float64 logits come back as float: compare at float resolution there.
    EXPECT_LT(worst, c.dtype == "float64" ? 1e-6 : c.tolerance);

    auto logp = p->token_logprobs({ids});
    ASSERT_TRUE(logp.ok()) << logp.err().message;
    const auto n_vocab = static_cast<std::size_t>(c.config.vocab_size);
    EXPECT_EQ((*logp)[0][0], 0.0F);
    for (std::size_t t = 1; t < ids.size(); ++t) {
      EXPECT_NEAR((*logp)[0][t],
                  testing::log_softmax_at(ref, n_vocab, t - 1, static_cast<std::size_t>(ids[t])),
                  1e-4);
    }
  }
}

TEST(Policy, SaveLoadRoundTripIsBitExact) {
  for (auto type : {dtype::f32, dtype::bf16, dtype::f16}) {
    SCOPED_TRACE(to_string(type));
    scratch_dir dir;
    auto config = testing::tiny_qwen2();
    config.torch_dtype = to_torch_dtype(type);
    const auto weights = testing::random_test_weights(config, 3, type);
    testing::write_checkpoint(dir.sub("in"), config, weights);
    policy_options options;
    options.dtype = "auto";  // the checkpoint's torch_dtype
    auto p = policy::load(dir.sub("in"), options);
    ASSERT_TRUE(p.ok()) << p.err().message;
    EXPECT_EQ(p->dtype(), to_torch_dtype(type));
    // Sharded on the way out (small shards), single file on the way in: both layouts round-trip.
    ASSERT_TRUE(p->save(dir.sub("out"), "", 4000).ok());
    EXPECT_TRUE(std::filesystem::exists(dir.sub("out/model.safetensors.index.json")));
    auto back = read_safetensors_dir(dir.sub("out"));
    ASSERT_TRUE(back.ok()) << back.err().message;
    ASSERT_EQ(back->size(), weights.size());
    for (const auto& [name, t] : weights) {
      EXPECT_EQ(back->at(name).type, type) << name;
      EXPECT_EQ(back->at(name).shape, t.shape) << name;
      EXPECT_TRUE(back->at(name).data == t.data) << name;
    }
    auto config_back = read_model_config(dir.sub("out"));
    ASSERT_TRUE(config_back.ok());
    EXPECT_EQ(config_back->torch_dtype, to_torch_dtype(type));
    // And through the policy again.
    auto reloaded = policy::load(dir.sub("out"), options);
    ASSERT_TRUE(reloaded.ok()) << reloaded.err().message;
    for (const auto& [name, t] : weights) {
      auto param = reloaded->parameter(name);
      ASSERT_TRUE(param.ok());
      EXPECT_TRUE(param->data == t.data) << name;
    }
  }
}

// Qwen3's q_norm / k_norm weights take part in the forward pass: changing one layer's changes the
// logits, and the weights survive a save / load round trip under their Hugging Face names.
TEST(Policy, Qwen3QkNormWeightsChangeOutputsAndRoundTrip) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen3();
  const auto weights = testing::random_test_weights(config, 5);
  testing::write_checkpoint(dir.sub("in"), config, weights);
  auto p = policy::load(dir.sub("in"));
  ASSERT_TRUE(p.ok()) << p.err().message;
  const auto ids = testing::random_ids(9, config.vocab_size, 2);
  auto base = p->logits(ids);
  ASSERT_TRUE(base.ok()) << base.err().message;
  for (const auto& name : {std::string("model.layers.1.self_attn.q_norm.weight"),
                           std::string("model.layers.0.self_attn.k_norm.weight")}) {
    SCOPED_TRACE(name);
    auto changed = weights;
    auto v = to_doubles(changed.at(name));
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] *= i % 2 == 0 ? 1.5 : 0.5;
    }
    changed.insert_or_assign(name, make_float_tensor(dtype::f32, changed.at(name).shape, v));
    ASSERT_TRUE(p->set_parameter(name, changed.at(name)).ok());
    auto out = p->logits(ids);
    ASSERT_TRUE(out.ok()) << out.err().message;
    double diff = 0;
    for (std::size_t i = 0; i < out->size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs((*out)[i] - (*base)[i])));
    }
    EXPECT_GT(diff, 1e-3) << "the norm weight must change the logits";
    const auto ref = testing::reference_logits(config, changed, ids);
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs((*out)[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
    }
    EXPECT_LT(worst, 2e-5);
    ASSERT_TRUE(p->set_parameter(name, weights.at(name)).ok());
  }
  ASSERT_TRUE(p->save(dir.sub("out")).ok());
  auto back = read_safetensors_dir(dir.sub("out"));
  ASSERT_TRUE(back.ok()) << back.err().message;
  ASSERT_EQ(back->size(), weights.size());
  for (const auto& [name, t] : weights) {
    ASSERT_TRUE(back->contains(name)) << name;
    EXPECT_TRUE(back->at(name).data == t.data) << name;
  }
  auto config_back = read_model_config(dir.sub("out"));
  ASSERT_TRUE(config_back.ok()) << config_back.err().message;
  EXPECT_EQ(config_back->model_type, "qwen3");
  EXPECT_TRUE(config_back->qk_norm);
  EXPECT_EQ(config_back->head_dim, 12);
  auto reloaded = policy::load(dir.sub("out"));
  ASSERT_TRUE(reloaded.ok()) << reloaded.err().message;
  auto again = reloaded->logits(ids);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *base) << "same weights, same code path: same logits";
  // A Qwen3 checkpoint without its q/k norms is refused, naming the tensor.
  auto missing = weights;
  missing.erase("model.layers.0.self_attn.q_norm.weight");
  testing::write_checkpoint(dir.sub("missing"), config, missing);
  auto refused = p->reload_weights(dir.sub("missing"));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.err().message, HasSubstr("model.layers.0.self_attn.q_norm.weight"));
}

TEST(Policy, SaveConvertsDtype) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  const auto weights = testing::random_test_weights(config, 3, dtype::f32);
  testing::write_checkpoint(dir.sub("in"), config, weights);
  auto p = policy::load(dir.sub("in"));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->save(dir.sub("out"), "bfloat16").ok());
  auto back = read_safetensors_dir(dir.sub("out"));
  ASSERT_TRUE(back.ok());
  const auto& t = back->at("model.norm.weight");
  EXPECT_EQ(t.type, dtype::bf16);
  const auto original = to_doubles(weights.at("model.norm.weight"));
  const auto converted = to_doubles(t);
  for (std::size_t i = 0; i < original.size(); ++i) {
    EXPECT_EQ(converted[i], bf16_to_float(float_to_bf16(static_cast<float>(original[i]))));
  }
}

TEST(Policy, LoadErrorsNameTheTensor) {
  const auto config = testing::tiny_qwen2();
  struct test_case {
    std::string label;
    std::function<void(tensor_map&)> edit;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {"missing", [](tensor_map& w) { w.erase("model.layers.1.mlp.up_proj.weight"); },
       "missing tensor 'model.layers.1.mlp.up_proj.weight'"},
      {"wrong shape",
       [](tensor_map& w) {
         w["model.norm.weight"] = make_float_tensor(dtype::f32, {31}, std::vector<double>(31, 1.0));
       },
       "tensor 'model.norm.weight' has shape [31], the config needs [32]"},
      {"unexpected",
       [](tensor_map& w) {
         w["model.layers.0.self_attn.o_proj.bias"] =
             make_float_tensor(dtype::f32, {32}, std::vector<double>(32));
       },
       "unexpected tensor 'model.layers.0.self_attn.o_proj.bias'"},
      {"integer", [](tensor_map& w) { w["model.norm.weight"].type = dtype::i32; }, "has dtype I32"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    scratch_dir dir;
    auto weights = testing::random_test_weights(config, 1);
    c.edit(weights);
    testing::write_checkpoint(dir.path(), config, weights);
    auto p = policy::load(dir.path());
    ASSERT_FALSE(p.ok());
    EXPECT_THAT(p.err().message, HasSubstr(c.expected));
    EXPECT_THAT(p.err().message, HasSubstr(dir.path()));
  }
  // Derived tensors older checkpoints carry are accepted.
  scratch_dir dir;
  auto weights = testing::random_test_weights(config, 1);
  weights["model.layers.0.self_attn.rotary_emb.inv_freq"] =
      make_float_tensor(dtype::f32, {4}, {1, 2, 3, 4});
  weights["lm_head.weight"] = weights.at("model.embed_tokens.weight");
  testing::write_checkpoint(dir.path(), config, weights);
  EXPECT_TRUE(policy::load(dir.path()).ok());
}

TEST(Policy, OptionErrors) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  testing::write_checkpoint(dir.path(), config, testing::random_test_weights(config, 1));
  struct test_case {
    policy_options options;
    std::string expected;
  };
  std::vector<test_case> cases;
  cases.push_back({{.device = "tpu"}, "unknown device 'tpu'"});
  cases.push_back({{.device = "cuda:x"}, "unknown device 'cuda:x'"});
  cases.push_back({{.dtype = "int8"}, "unsupported dtype 'int8'"});
  cases.push_back({{.logprob_chunk = 0}, "'logprob_chunk' must be at least 1"});
  for (const auto& c : cases) {
    auto p = policy::load(dir.path(), c.options);
    ASSERT_FALSE(p.ok());
    EXPECT_THAT(p.err().message, HasSubstr(c.expected));
  }
  EXPECT_THAT(policy::load(dir.sub("absent")).err().message, HasSubstr("config.json"));
}

TEST(Policy, ChunkedLogprobsEqualUnchunkedOnes) {
  const auto config = testing::tiny_llama();
  std::vector<std::vector<std::int32_t>> seqs = {
      testing::random_ids(40, config.vocab_size, 1), testing::random_ids(7, config.vocab_size, 2),
      testing::random_ids(1, config.vocab_size, 3), testing::random_ids(23, config.vocab_size, 4)};
  std::vector<std::vector<float>> baseline;
  for (std::int64_t chunk : {100000, 1, 3, 16}) {
    SCOPED_TRACE(chunk);
    auto p = policy::create_random(config, 9, {.logprob_chunk = chunk});
    ASSERT_TRUE(p.ok()) << p.err().message;
    auto logp = p->token_logprobs(seqs);
    ASSERT_TRUE(logp.ok()) << logp.err().message;
    ASSERT_EQ(logp->size(), seqs.size());
    if (baseline.empty()) {
      baseline = *logp;
      // The unchunked value is the log-softmax of the full logits.
      auto logits = p->logits(seqs[0]);
      ASSERT_TRUE(logits.ok());
      std::vector<double> l(logits->begin(), logits->end());
      for (std::size_t t = 1; t < seqs[0].size(); ++t) {
        EXPECT_NEAR(baseline[0][t],
                    testing::log_softmax_at(l, static_cast<std::size_t>(config.vocab_size), t - 1,
                                            static_cast<std::size_t>(seqs[0][t])),
                    1e-5);
      }
      continue;
    }
    // Chunks change the shapes of the matrix products, and the BLAS behind LibTorch picks its
    // kernels and summation order by shape and processor, so the last bits may differ (they did on
    // an Intel AVX-512 host). Reordering a float32 sum of `hidden` products moves a log-prob of
    // size ~6 by about 1e-6; a chunking bug (a row scored against another row's target, a boundary
    // row dropped or taken twice) moves it by the gap between two tokens' log-probs, 1e-3 to 1e-2
    // even in this random model whose log-probs all sit near log(1 / vocab): scoring each chunk's
    // rows against targets shifted by one fails 181 of these checks.
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_EQ((*logp)[i].size(), seqs[i].size());
      for (std::size_t t = 0; t < seqs[i].size(); ++t) {
        EXPECT_NEAR((*logp)[i][t], baseline[i][t], 2e-5 * std::max(1.0F, std::abs(baseline[i][t])))
            << i << "," << t;
      }
    }
  }
}

TEST(Policy, BatchedScoringEqualsOneSequenceAtATime) {
  const auto config = testing::tiny_qwen2();
  auto p = policy::create_random(config, 4);
  ASSERT_TRUE(p.ok());
  std::vector<std::vector<std::int32_t>> seqs = {testing::random_ids(30, config.vocab_size, 1),
                                                 testing::random_ids(5, config.vocab_size, 2)};
  auto together = p->token_logprobs(seqs);
  ASSERT_TRUE(together.ok());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    auto alone = p->token_logprobs({seqs[i]});
    ASSERT_TRUE(alone.ok());
    for (std::size_t t = 0; t < seqs[i].size(); ++t) {
      EXPECT_NEAR((*together)[i][t], (*alone)[0][t], 1e-5)
          << "right padding must not leak into real tokens";
    }
  }
}

TEST(Policy, RandomOnDeviceDrawsTheSameDistributionAndDependsOnTheSeed) {
  auto config = testing::tiny_qwen2();
  config.qkv_bias = true;
  auto a = policy::create_random_on_device(config, 7);
  auto b = policy::create_random_on_device(config, 7);
  auto c = policy::create_random_on_device(config, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->parameter_names(), policy::create_random(config, 7)->parameter_names());
  const auto embed = to_doubles(*a->parameter("model.embed_tokens.weight"));
  EXPECT_EQ(embed, to_doubles(*b->parameter("model.embed_tokens.weight")));
  EXPECT_NE(embed, to_doubles(*c->parameter("model.embed_tokens.weight")));
  double sum = 0;
  double squares = 0;
  for (double v : embed) {
    sum += v;
    squares += v * v;
  }
  const auto n = static_cast<double>(embed.size());
  EXPECT_NEAR(sum / n, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(squares / n), 0.02, 0.002);
  EXPECT_EQ(to_doubles(*a->parameter("model.norm.weight")),
            std::vector<double>(static_cast<std::size_t>(config.hidden_size), 1.0));
  const auto bias = to_doubles(*a->parameter("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_EQ(bias, std::vector<double>(bias.size(), 0.0));
  // A usable model: scoring runs and gives finite log-probs.
  auto logp = a->token_logprobs({testing::random_ids(12, config.vocab_size, 3)});
  ASSERT_TRUE(logp.ok());
  for (float v : (*logp)[0]) {
    EXPECT_TRUE(std::isfinite(v));
  }
  EXPECT_THAT(policy::create_random_on_device(config, 1, {.device = "tpu"}).err().message,
              HasSubstr("tpu"));
}

TEST(Policy, ScoringRejectsBadIds) {
  auto p = policy::create_random(testing::tiny_qwen2(), 1);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->token_logprobs({{1, 2}, {}}).err().message, HasSubstr("sequence 1 is empty"));
  EXPECT_THAT(p->token_logprobs({{1, 300}}).err().message,
              HasSubstr("token id 300 at position 1 is outside"));
  EXPECT_THAT(p->logits({-1}).err().message, HasSubstr("token id -1"));
}

TEST(Policy, ParametersCanBeReadAndWritten) {
  auto p = policy::create_random(testing::tiny_qwen2(), 1);
  ASSERT_TRUE(p.ok());
  const auto names = p->parameter_names();
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_EQ(names.back(), "model.norm.weight");
  auto norm = p->parameter("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  auto changed = make_float_tensor(dtype::f64, {32}, std::vector<double>(32, 0.5));
  ASSERT_TRUE(p->set_parameter("model.norm.weight", changed).ok());
  EXPECT_EQ(to_doubles(*p->parameter("model.norm.weight")), std::vector<double>(32, 0.5));
  EXPECT_THAT(p->parameter("nope").err().message, HasSubstr("unknown parameter 'nope'"));
  EXPECT_THAT(p->set_parameter("model.norm.weight", make_float_tensor(dtype::f32, {2}, {1, 2}))
                  .err()
                  .message,
              HasSubstr("shape mismatch"));
}

TEST(Policy, ReloadWeightsReplacesThemAllOrNothing) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  const auto weights = testing::random_test_weights(config, 21);
  testing::write_checkpoint(dir.sub("good"), config, weights);
  auto p = policy::create_random(config, 1);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->reload_weights(dir.sub("good")).ok());
  EXPECT_TRUE(p->parameter("model.layers.1.self_attn.q_proj.bias")->data ==
              weights.at("model.layers.1.self_attn.q_proj.bias").data);

  auto broken = weights;
  broken.erase("model.layers.1.mlp.down_proj.weight");
  broken["model.embed_tokens.weight"] =
      testing::random_test_weights(config, 99).at("model.embed_tokens.weight");
  testing::write_checkpoint(dir.sub("broken"), config, broken);
  auto s = p->reload_weights(dir.sub("broken"));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, HasSubstr("missing tensor"));
  EXPECT_TRUE(p->parameter("model.embed_tokens.weight")->data ==
              weights.at("model.embed_tokens.weight").data)
      << "a failed reload changes nothing";

  auto other = testing::tiny_llama();
  testing::write_checkpoint(dir.sub("other"), other, testing::random_test_weights(other, 1));
  EXPECT_THAT(p->reload_weights(dir.sub("other")).err().message,
              HasSubstr("different architecture"));
}

TEST(Policy, DeviceHelpersOnCpu) {
  auto m = memory_stats("cpu");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->peak_allocated_bytes, 0);
  EXPECT_TRUE(reset_peak_memory("cpu").ok());
  EXPECT_TRUE(synchronize("cpu").ok());
  EXPECT_FALSE(synchronize("gpu").ok());
}

}  // namespace
}  // namespace leap::learner
