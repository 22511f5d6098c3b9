#include "learner/policy.hpp"
#include "learner/trainer.hpp"
#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;
using testing::scratch_dir;

// A policy with adapters whose B matrices are random too, so that they change the logits.
policy with_random_adapters(const model_config& config, const lora_options& options) {
  auto p = policy::create_random(config, 3);
  EXPECT_TRUE(p.ok());
  EXPECT_TRUE(p->add_lora(options).ok());
  std::mt19937_64 engine(99);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  for (const auto& name : p->parameter_names()) {
    if (name.find("lora_B") != std::string::npos) {
      auto t = p->parameter(name);
      std::vector<double> v(static_cast<std::size_t>(t->numel()));
      for (auto& x : v) {
        x = u(engine);
      }
      EXPECT_TRUE(p->set_parameter(name, make_float_tensor(dtype::f32, t->shape, v)).ok());
    }
  }
  return std::move(*p);
}

TEST(Lora, AdapterFolderHasPeftLayout) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  auto p = with_random_adapters(config, {.rank = 4, .alpha = 8.0});
  ASSERT_TRUE(p.save_lora_adapter(dir.path(), "Qwen/Qwen2-tiny").ok());

  std::ifstream in(dir.sub("adapter_config.json"));
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["peft_type"], "LORA");
  EXPECT_EQ(doc["task_type"], "CAUSAL_LM");
  EXPECT_EQ(doc["r"], 4);
  EXPECT_EQ(doc["lora_alpha"], 8.0);
  EXPECT_EQ(doc["bias"], "none");
  EXPECT_EQ(doc["base_model_name_or_path"], "Qwen/Qwen2-tiny");
  EXPECT_EQ(doc["target_modules"], nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"}));
  EXPECT_EQ(doc["use_rslora"], false);
  EXPECT_EQ(doc["fan_in_fan_out"], false);
  EXPECT_TRUE(doc["modules_to_save"].is_null());

  auto tensors = read_safetensors(dir.sub("adapter_model.safetensors"));
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(tensors->size(), 2U * 7U * 2U) << "layers x projections x {A, B}";
  const std::map<std::string, std::vector<std::int64_t>> expected = {
      {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {4, 32}},
      {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", {32, 4}},
      {"base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight", {16, 4}},
      {"base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight", {4, 32}},
      {"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight", {4, 64}},
      {"base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight", {64, 4}},
  };
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(tensors->contains(name)) << name;
    EXPECT_EQ(tensors->at(name).shape, shape) << name;
  }
}

TEST(Lora, FreshAdaptersChangeNothingAndMergingKeepsTheLogits) {
  const auto config = testing::tiny_llama();
  const std::vector<std::int32_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  auto base = policy::create_random(config, 3);
  ASSERT_TRUE(base.ok());
  const auto base_logits = *base->logits(ids);
  ASSERT_TRUE(base->add_lora({.rank = 2, .target_modules = {"q_proj", "up_proj"}}).ok());
  EXPECT_EQ(*base->logits(ids), base_logits) << "B starts at zero";

  auto p = with_random_adapters(
      config, {.rank = 3, .alpha = 6.0, .target_modules = {"q_proj", "v_proj", "down_proj"}});
  const auto adapted = *p.logits(ids);
  double changed = 0;
  for (std::size_t i = 0; i < adapted.size(); ++i) {
    changed = std::max(changed, static_cast<double>(std::abs(adapted[i] - base_logits[i])));
  }
  EXPECT_GT(changed, 1e-3) << "the adapters matter";

  // Merge by hand for one projection: W + alpha / r * B A.
  const auto w = to_doubles(*p.parameter("model.layers.1.self_attn.v_proj.weight"));
  const auto a = to_doubles(*p.parameter("model.layers.1.self_attn.v_proj.lora_A.weight"));
  const auto b = to_doubles(*p.parameter("model.layers.1.self_attn.v_proj.lora_B.weight"));
  ASSERT_TRUE(p.merge_lora().ok());
  EXPECT_FALSE(p.has_lora());
  const auto merged = to_doubles(*p.parameter("model.layers.1.self_attn.v_proj.weight"));
  const std::size_t out = 48;
  const std::size_t in = 48;
  const std::size_t r = 3;
  for (std::size_t o = 0; o < out; ++o) {
    for (std::size_t i = 0; i < in; ++i) {
      double delta = 0;
      for (std::size_t k = 0; k < r; ++k) {
        delta += b[o * r + k] * a[k * in + i];
      }
      ASSERT_NEAR(merged[o * in + i], w[o * in + i] + 2.0 * delta, 1e-6);
    }
  }
  const auto after = *p.logits(ids);
  for (std::size_t i = 0; i < after.size(); ++i) {
    ASSERT_NEAR(after[i], adapted[i], 1e-4 * std::max(1.0F, std::abs(adapted[i])));
  }
  EXPECT_THAT(p.merge_lora().err().message, HasSubstr("no LoRA adapters"));
}

TEST(Lora, SavedAdaptersLoadBackExactly) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  auto p = with_random_adapters(
      config, {.rank = 4, .alpha = 16.0, .target_modules = {"k_proj", "o_proj", "up_proj"}});
  ASSERT_TRUE(p.save_lora_adapter(dir.path()).ok());
  const std::vector<std::int32_t> ids = {7, 8, 9, 10};

  auto q = policy::create_random(config, 3);
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(q->load_lora_adapter(dir.path()).ok());
  EXPECT_TRUE(q->has_lora());
  EXPECT_EQ(*q->logits(ids), *p.logits(ids));
  // Loading again replaces the adapters rather than failing.
  ASSERT_TRUE(q->load_lora_adapter(dir.path()).ok());
  EXPECT_EQ(*q->logits(ids), *p.logits(ids));
}

TEST(Lora, InvalidAdaptersAreRejectedAndLeaveTheModelAsItWas) {
  const auto config = testing::tiny_qwen2();
  auto p = with_random_adapters(config, {.rank = 2});
  scratch_dir good;
  ASSERT_TRUE(p.save_lora_adapter(good.path()).ok());
  const std::vector<std::int32_t> ids = {1, 2, 3};
  const auto before = *p.logits(ids);

  struct test_case {
    std::string label;
    std::function<void(nlohmann::json&, tensor_map&)> edit;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {"dora", [](nlohmann::json& c, tensor_map&) { c["use_dora"] = true; },
       "use_dora are not supported"},
      {"prefix tuning", [](nlohmann::json& c, tensor_map&) { c["peft_type"] = "PREFIX_TUNING"; },
       "must be LORA"},
      {"bias", [](nlohmann::json& c, tensor_map&) { c["bias"] = "all"; }, "only 'bias': 'none'"},
      {"regex targets", [](nlohmann::json& c, tensor_map&) { c["target_modules"] = ".*proj"; },
       "list of module names"},
      {"unknown target", [](nlohmann::json& c, tensor_map&) { c["target_modules"] = {"c_attn"}; },
       "unknown LoRA target module 'c_attn'"},
      {"missing tensor",
       [](nlohmann::json&, tensor_map& t) {
         t.erase("base_model.model.model.layers.1.mlp.up_proj.lora_A.weight");
       },
       "'base_model.model.model.layers.1.mlp.up_proj.lora_A.weight' is missing"},
      {"extra tensor",
       [](nlohmann::json&, tensor_map& t) {
         t["base_model.model.lm_head.lora_A.weight"] = make_float_tensor(dtype::f32, {2}, {1, 2});
       },
       "unexpected adapter tensor"},
      {"rank mismatch", [](nlohmann::json& c, tensor_map&) { c["r"] = 3; }, "wrong shape"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    scratch_dir dir;
    std::ifstream in(good.sub("adapter_config.json"));
    auto config_json = nlohmann::json::parse(in);
    auto tensors = *read_safetensors(good.sub("adapter_model.safetensors"));
    c.edit(config_json, tensors);
    std::ofstream(dir.sub("adapter_config.json")) << config_json.dump();
    ASSERT_TRUE(write_safetensors(dir.sub("adapter_model.safetensors"), tensors).ok());
    auto s = p.load_lora_adapter(dir.path());
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.err().message, HasSubstr(c.expected));
    EXPECT_EQ(*p.logits(ids), before) << "the old adapters are still in place";
  }
  EXPECT_THAT(p.add_lora({}).err().message, HasSubstr("already has LoRA adapters"));
  auto plain = policy::create_random(config, 1);
  EXPECT_THAT(plain->save_lora_adapter(good.path()).err().message, HasSubstr("no LoRA adapters"));
  EXPECT_THAT(plain->load_lora_adapter(good.sub("nowhere")).err().message,
              HasSubstr("adapter_config.json"));
}

TEST(Lora, TrainingChangesOnlyTheAdaptersAndResumes) {
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  auto base = policy::create_random(config, 8);
  ASSERT_TRUE(base.ok());
  // A batch with on-policy log-probs (fresh adapters do not change the model).
  update_batch batch;
  for (std::uint64_t i = 0; i < 4; ++i) {
    sequence s;
    s.token_ids = testing::random_ids(10, config.vocab_size, 40 + i);
    s.loss_mask.assign(10, 1);
    s.loss_mask[0] = 0;
    s.behaviour_logprobs = (*base->token_logprobs({s.token_ids}))[0];
    s.advantages.assign(10, i % 2 == 0 ? 1.0F : -1.0F);
    batch.sequences.push_back(std::move(s));
  }
  trainer_options options;
  options.lora = lora_options{.rank = 4, .alpha = 8.0};
  options.optimizer.lr = 1e-2;
  options.loss.kl_coef = 0.2;  // the reference is the base model: the adapters switched off
  options.checkpoint.dir = dir.path();

  auto fresh = [&] { return policy::create_random(config, 8).value(); };
  auto t = trainer::create(fresh(), options);
  ASSERT_TRUE(t.ok()) << t.err().message;
  auto r1 = t->update(batch);
  ASSERT_TRUE(r1.ok()) << r1.err().message;
  EXPECT_EQ(r1->summary.kl, 0.0) << "B = 0: the adapted model is the reference";
  EXPECT_TRUE(std::filesystem::exists(dir.sub("step-00000001/adapter_model.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(dir.sub("step-00000001/adapter_config.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("step-00000001/model.safetensors")))
      << "the base is not copied";
  for (const auto& name : fresh().parameter_names()) {
    EXPECT_TRUE(t->current_policy().parameter(name)->data == base->parameter(name)->data)
        << name << " is frozen";
  }
  const auto b_before =
      to_doubles(*t->current_policy().parameter("model.layers.0.self_attn.q_proj.lora_B.weight"));
  EXPECT_TRUE(std::any_of(b_before.begin(), b_before.end(), [](double x) { return x != 0.0; }))
      << "B was trained";

  auto r2 = t->update(batch);
  ASSERT_TRUE(r2.ok());
  EXPECT_GT(r2->summary.kl, 0.0);

  // Resume from step 1 in a fresh trainer (its own copy of the checkpoints) and redo step 2.
  scratch_dir copy;
  std::filesystem::copy(dir.sub("step-00000001"), copy.sub("step-00000001"),
                        std::filesystem::copy_options::recursive);
  options.checkpoint.dir = copy.path();
  auto resumed = trainer::create(fresh(), options);
  ASSERT_TRUE(resumed.ok()) << resumed.err().message;
  EXPECT_EQ(resumed->step(), 1);
  auto again = resumed->update(batch);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->summary.loss, r2->summary.loss);
  for (const auto& name : t->current_policy().parameter_names()) {
    EXPECT_TRUE(t->current_policy().parameter(name)->data ==
                resumed->current_policy().parameter(name)->data)
        << name;
  }

  // A LoRA checkpoint cannot resume a full fine-tune.
  options.lora.reset();
  EXPECT_THAT(trainer::create(fresh(), options).err().message, HasSubstr("written with LoRA"));
}

}  // namespace
}  // namespace leap::learner
