// The architecture of a decoder-only transformer of the Llama / Qwen2 / Qwen3 family, read from a
// Hugging Face config.json: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP, tied
// or untied embeddings, optional projection biases, optional per-head q/k norms (Qwen3). No
// LibTorch here, so tools can inspect a checkpoint cheaply. All functions are pure and thread-safe.
#pragma once

#include "common/result.hpp"
#include "learner/safetensors.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace leap::learner {

struct model_config {
  std::string model_type = "qwen2";  // "llama", "qwen2", "qwen3" or "mistral". Default: qwen2
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;          // Default (config key absent): num_attention_heads
  std::int64_t head_dim = 0;                     // Default (config key absent): hidden_size / heads
  double rms_norm_eps = 1e-6;                    // Default: 1e-6
  double rope_theta = 10000.0;                   // Default: 10000
  std::int64_t max_position_embeddings = 32768;  // Default: 32768 (informational)
  bool tie_word_embeddings = false;              // Default: false
  // Biases: Qwen2 always has q/k/v biases; Llama has `attention_bias` (q, k, v and o) and
  // `mlp_bias`.
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  // Qwen3: an RMSNorm over each head's head_dim features of q and of k (weights
  // self_attn.q_norm.weight / k_norm.weight, [head_dim], shared by the heads), after the projection
  // and before RoPE. Set for model_type qwen3, off otherwise.
  bool qk_norm = false;
  // rope_scaling: "default" (none), "linear" (positions divided by factor) or "llama3".
  std::string rope_type = "default";  // Default: default
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;               // llama3 only
  double rope_high_freq_factor = 4.0;              // llama3 only
  std::int64_t rope_original_max_position = 8192;  // llama3 only
  std::string torch_dtype = "float32";             // the checkpoint's dtype. Default: float32
  std::vector<std::int64_t> eos_token_ids;  // from eos_token_id (a number or a list); may be empty
  std::int64_t bos_token_id = -1;           // -1 when absent

  // The original config.json text, so that saving keeps keys this struct does not model.
  std::string source_json;

  [[nodiscard]] std::int64_t kv_group_size() const {
    return num_attention_heads / num_key_value_heads;
  }
};

// Parses config.json text. Errors name the key: a missing required key (vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads), a wrong type, an unsupported
// model_type or hidden_act (only "silu"), sliding-window attention switched on, an unknown
// rope_scaling type, heads not dividing evenly.
[[nodiscard]] result<model_config> parse_model_config(const std::string& json_text);

// Reads and parses `<dir>/config.json`; errors are prefixed with the file's path.
[[nodiscard]] result<model_config> read_model_config(const std::string& dir);

// The config as config.json text: source_json's keys with this struct's values written over them
// (so unknown keys survive a load/save round trip).
[[nodiscard]] std::string to_json(const model_config& config);

// Random weights for `config` under Hugging Face names, drawn from `seed` as policy::create_random
// does (std 0.02 normal projections and embeddings, norms 1, biases 0), in dtype f32, bf16, f16 or
// f64. For toy models trained from scratch, benchmarks and tests.
[[nodiscard]] tensor_map random_weights(const model_config& config, std::uint64_t seed,
                                        dtype type = dtype::f32);

// The parameters a config needs, with their shapes, in Hugging Face names and a stable order.
[[nodiscard]] std::vector<std::pair<std::string, std::vector<std::int64_t>>> parameter_shapes(
    const model_config& config);

// The shape of a public checkpoint, as its config.json on the Hugging Face hub gives it
// (vocabulary, special ids, rope_theta, tied embeddings included): "qwen2-0.5b", "qwen2-1.5b",
// "qwen3-0.6b", "qwen3-1.7b", "qwen3-8b". For random models of a real architecture (benchmarks,
// `leap init-model`). Errors: an unknown name, listing the known ones.
[[nodiscard]] result<model_config> model_preset(const std::string& name);

// Writes `<dir>/config.json` atomically, and synced unless `sync` says otherwise
// (common/durable_file.hpp). Errors: I/O failures naming the path.
[[nodiscard]] status write_model_config(const std::string& dir, const model_config& config,
                                        durability sync = durability::synced);

}  // namespace leap::learner
