#include "learner/model_config.hpp"

#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;

// A Qwen2-0.5B-shaped config.json, as Hugging Face writes it.
const char* const qwen2_json = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936
})";

const char* const llama3_json = R"({
  "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "tie_word_embeddings": true, "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64, "attention_bias": false, "mlp_bias": false,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}
})";

TEST(ModelConfig, ParsesQwen2) {
  auto c = parse_model_config(qwen2_json);
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->hidden_size, 896);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->kv_group_size(), 7);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->qkv_bias) << "Qwen2 always has q/k/v biases";
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->eos_token_ids, std::vector<std::int64_t>{151645});
  EXPECT_EQ(c->rope_type, "default");
}

// Qwen3-0.6B's config.json (Qwen/Qwen3-0.6B on the Hugging Face hub): head_dim 128 while
// hidden_size / num_attention_heads is 64.
const char* const qwen3_json = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
})";

TEST(ModelConfig, ParsesQwen3) {
  auto c = parse_model_config(qwen3_json);
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_EQ(c->head_dim, 128) << "explicit, not hidden_size / heads (64)";
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias) << "Qwen3 has no q/k/v biases";
  EXPECT_FALSE(c->o_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<std::int64_t>{151645});
  EXPECT_EQ(c->kv_group_size(), 2);
  // Saved and parsed again: the same architecture, head_dim kept.
  const auto doc = nlohmann::json::parse(to_json(*c));
  EXPECT_EQ(doc["head_dim"], 128);
  EXPECT_EQ(doc["architectures"][0], "Qwen3ForCausalLM");
  auto back = parse_model_config(to_json(*c));
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_TRUE(back->qk_norm);
  EXPECT_EQ(back->head_dim, 128);
  // Qwen2 and Llama have no q/k norms.
  EXPECT_FALSE(parse_model_config(qwen2_json)->qk_norm);
  EXPECT_FALSE(parse_model_config(llama3_json)->qk_norm);
}

TEST(ModelConfig, Qwen3ShapesHaveQkNorms) {
  const auto c = testing::tiny_qwen3();
  const auto shapes = parameter_shapes(c);
  std::map<std::string, std::vector<std::int64_t>> by_name(shapes.begin(), shapes.end());
  EXPECT_EQ(by_name.at("model.layers.1.self_attn.q_norm.weight"), (std::vector<std::int64_t>{12}));
  EXPECT_EQ(by_name.at("model.layers.1.self_attn.k_norm.weight"), (std::vector<std::int64_t>{12}));
  EXPECT_EQ(by_name.at("model.layers.0.self_attn.q_proj.weight"),
            (std::vector<std::int64_t>{48, 32}))
      << "heads x head_dim rows";
  EXPECT_EQ(by_name.at("model.layers.0.self_attn.o_proj.weight"),
            (std::vector<std::int64_t>{32, 48}));
  EXPECT_EQ(by_name.count("model.layers.0.self_attn.q_proj.bias"), 0U);
  // 1 embedding + 2 x (2 norms + 2 q/k norms + 4 attention + 3 mlp) + final norm + lm_head
  EXPECT_EQ(shapes.size(), 1U + 2U * 11U + 2U);
  const auto w = random_weights(c, 1);
  const auto qn = to_doubles(w.at("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_TRUE(std::all_of(qn.begin(), qn.end(), [](double x) { return x == 1.0; }));
}

// The presets are the public config.json files' shapes; a config that parses back to the same.
TEST(ModelConfig, PresetsOfPublicCheckpoints) {
  struct expected {
    const char* name;
    std::int64_t hidden, layers, heads, kv_heads, head_dim;
    bool tied;
    std::int64_t vocab = 151936;
  };
  for (const auto& e : {expected{"qwen3-0.6b", 1024, 28, 16, 8, 128, true},
                        expected{"qwen3-1.7b", 2048, 28, 16, 8, 128, true},
                        expected{"qwen3-8b", 4096, 36, 32, 8, 128, false},
                        expected{"qwen2-0.5b", 896, 24, 14, 2, 64, true},
                        expected{"qwen2-7b", 3584, 28, 28, 4, 128, false, 152064}}) {
    SCOPED_TRACE(e.name);
    auto c = model_preset(e.name);
    ASSERT_TRUE(c.ok()) << c.err().message;
    EXPECT_EQ(c->hidden_size, e.hidden);
    EXPECT_EQ(c->num_hidden_layers, e.layers);
    EXPECT_EQ(c->num_attention_heads, e.heads);
    EXPECT_EQ(c->num_key_value_heads, e.kv_heads);
    EXPECT_EQ(c->head_dim, e.head_dim);
    EXPECT_EQ(c->tie_word_embeddings, e.tied);
    EXPECT_EQ(c->vocab_size, e.vocab);
    auto back = parse_model_config(to_json(*c));
    ASSERT_TRUE(back.ok()) << back.err().message;
    EXPECT_EQ(back->qk_norm, c->qk_norm);
    EXPECT_EQ(back->qkv_bias, c->qkv_bias);
    EXPECT_EQ(back->head_dim, c->head_dim);
    EXPECT_EQ(parameter_shapes(*back), parameter_shapes(*c));
  }
  auto unknown = model_preset("qwen3-9b");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.err().message, HasSubstr("qwen3-0.6b"));
}

TEST(ModelConfig, ParsesLlama3WithRopeScaling) {
  auto c = parse_model_config(llama3_json);
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope_factor, 32.0);
  EXPECT_EQ(c->rope_original_max_position, 8192);
  EXPECT_EQ(c->eos_token_ids, (std::vector<std::int64_t>{128001, 128008, 128009}));
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->kv_group_size(), 4);
}

// transformers 5 writes "dtype" and nests rope_theta / scaling under "rope_parameters".
TEST(ModelConfig, ParsesTransformers5Layout) {
  const char* const text = R"({
    "model_type": "qwen2", "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 704,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "dtype": "bfloat16",
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "use_sliding_window": false
  })";
  auto c = parse_model_config(text);
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_type, "default");
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  c->rope_theta = 5e5;
  c->torch_dtype = "float32";
  const auto doc = nlohmann::json::parse(to_json(*c));
  EXPECT_EQ(doc["rope_parameters"]["rope_theta"], 5e5) << "saved in the layout it came in";
  EXPECT_EQ(doc["dtype"], "float32");
  EXPECT_FALSE(doc.contains("rope_scaling"));
  auto again = parse_model_config(to_json(*c));
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->rope_theta, 5e5);

  auto llama3 = parse_model_config(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
    "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  ASSERT_TRUE(llama3.ok()) << llama3.err().message;
  EXPECT_EQ(llama3->rope_type, "llama3");
  EXPECT_DOUBLE_EQ(llama3->rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(llama3->rope_factor, 8.0);
}

TEST(ModelConfig, DefaultsForAbsentKeys) {
  auto c = parse_model_config(
      R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
          "num_hidden_layers": 1, "num_attention_heads": 2})");
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(ModelConfig, InvalidConfigsNameTheKey) {
  const std::string base =
      R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1)";
  struct test_case {
    std::string json;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {"not json", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {R"({"vocab_size": 10})", "'model_type' is required"},
      {R"({"model_type": "gpt2", )" + base + R"(, "num_attention_heads": 2})",
       "'model_type' is 'gpt2'"},
      {R"({"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
           "num_attention_heads": 2})",
       "'vocab_size' is required"},
      {R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": "two"})",
       "'num_attention_heads' has the wrong type"},
      {R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": 0})",
       "'num_attention_heads' must be positive"},
      {R"({"model_type": "llama", )" + base +
           R"(, "num_attention_heads": 4, "num_key_value_heads": 3})",
       "must be a multiple of 'num_key_value_heads'"},
      {R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": 3})",
       "'hidden_size' (8) must be a multiple"},
      {R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": 8})",
       "'head_dim' must be even"},
      {R"({"model_type": "llama", )" + base +
           R"(, "num_attention_heads": 2, "hidden_act": "gelu"})",
       "'hidden_act' is 'gelu'"},
      {R"({"model_type": "qwen2", )" + base +
           R"(, "num_attention_heads": 2, "use_sliding_window": true,
           "sliding_window": 4096})",
       "'sliding_window' attention is not supported"},
      {R"({"model_type": "llama", )" + base +
           R"(, "num_attention_heads": 2, "rope_scaling": {"rope_type": "yarn",
           "factor": 4.0}})",
       "'rope_scaling' type 'yarn' is not supported"},
      {R"({"model_type": "llama", )" + base +
           R"(, "num_attention_heads": 2, "rope_scaling": {"rope_type": "linear"}})",
       "'factor' is required"},
      {R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": 2, "eos_token_id": "x"})",
       "'eos_token_id' must be a number or a list"},
      {R"({"model_type": "llama", )" + base + R"(, "num_attention_heads": 2, "rms_norm_eps": -1})",
       "'rms_norm_eps' must be positive"},
  };
  for (const auto& c : cases) {
    auto r = parse_model_config(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_THAT(r.err().message, HasSubstr(c.expected)) << c.json;
  }
}

TEST(ModelConfig, SavingKeepsUnknownKeysAndRoundTrips) {
  auto c = parse_model_config(qwen2_json);
  ASSERT_TRUE(c.ok());
  c->torch_dtype = "float32";
  const auto doc = nlohmann::json::parse(to_json(*c));
  EXPECT_EQ(doc["max_window_layers"], 21) << "unknown keys survive";
  EXPECT_EQ(doc["transformers_version"], "4.43.1");
  EXPECT_EQ(doc["torch_dtype"], "float32");
  auto again = parse_model_config(to_json(*c));
  ASSERT_TRUE(again.ok()) << again.err().message;
  EXPECT_EQ(parameter_shapes(*again), parameter_shapes(*c));

  // A config built in code (no source) writes every key the parser needs.
  auto built = parse_model_config(to_json(testing::tiny_llama()));
  ASSERT_TRUE(built.ok()) << built.err().message;
  EXPECT_EQ(parameter_shapes(*built), parameter_shapes(testing::tiny_llama()));
  auto llama3 = parse_model_config(to_json(*parse_model_config(llama3_json)));
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(llama3->rope_type, "llama3");
  EXPECT_DOUBLE_EQ(llama3->rope_high_freq_factor, 4.0);
}

TEST(ModelConfig, ParameterShapesUseHuggingFaceNames) {
  const auto shapes = parameter_shapes(testing::tiny_qwen2());
  std::map<std::string, std::vector<std::int64_t>> by_name(shapes.begin(), shapes.end());
  EXPECT_EQ(by_name.at("model.embed_tokens.weight"), (std::vector<std::int64_t>{300, 32}));
  EXPECT_EQ(by_name.at("model.layers.1.self_attn.q_proj.weight"),
            (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(by_name.at("model.layers.1.self_attn.k_proj.weight"),
            (std::vector<std::int64_t>{16, 32}));
  EXPECT_EQ(by_name.at("model.layers.1.self_attn.k_proj.bias"), (std::vector<std::int64_t>{16}));
  EXPECT_EQ(by_name.at("model.layers.0.mlp.down_proj.weight"), (std::vector<std::int64_t>{32, 64}));
  EXPECT_EQ(by_name.count("lm_head.weight"), 0U) << "tied";
  EXPECT_EQ(by_name.count("model.layers.0.self_attn.o_proj.bias"), 0U);
  // 1 embedding + 2 x (2 norms + 3 q/k/v weights + 3 biases + o + 3 mlp) + final norm
  EXPECT_EQ(shapes.size(), 1U + 2U * 12U + 1U);
  const auto llama = parameter_shapes(testing::tiny_llama());
  EXPECT_EQ(llama.back().first, "lm_head.weight");
}

TEST(ModelConfig, RandomWeightsAreSeededAndShaped) {
  const auto c = testing::tiny_qwen2();
  const auto a = random_weights(c, 7);
  const auto b = random_weights(c, 7);
  const auto other = random_weights(c, 8);
  ASSERT_EQ(a.size(), parameter_shapes(c).size());
  EXPECT_EQ(a.at("model.embed_tokens.weight").data, b.at("model.embed_tokens.weight").data);
  EXPECT_NE(a.at("model.embed_tokens.weight").data, other.at("model.embed_tokens.weight").data);
  const auto norm = to_doubles(a.at("model.norm.weight"));
  EXPECT_TRUE(std::all_of(norm.begin(), norm.end(), [](double x) { return x == 1.0; }));
  const auto embed = to_doubles(a.at("model.embed_tokens.weight"));
  double sq = 0;
  for (double x : embed) {
    sq += x * x;
  }
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(embed.size())), 0.02, 0.002);
}

}  // namespace
}  // namespace leap::learner
