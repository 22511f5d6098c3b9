// The model shapes the learner benchmarks take: public checkpoints' (learner::model_preset:
// qwen2-0.5b, qwen2-1.5b, qwen3-0.6b, qwen3-1.7b, qwen3-8b) and two toy ones, tiny and small
// (random weights; only the shape matters for speed, and they are quick on a CPU). Header-only,
// like bench_main.hpp: the benches share no library.
#pragma once

#include "common/result.hpp"
#include "learner/model_config.hpp"

#include <string>

namespace leap::bench {

// Errors: an unknown name.
inline result<learner::model_config> learner_preset(const std::string& name) {
  if (name != "tiny" && name != "small") {
    return learner::model_preset(name);
  }
  learner::model_config c;
  c.model_type = "qwen2";
  c.qkv_bias = true;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  const bool tiny = name == "tiny";
  c.vocab_size = tiny ? 300 : 4096;
  c.hidden_size = tiny ? 64 : 256;
  c.intermediate_size = tiny ? 128 : 704;
  c.num_hidden_layers = tiny ? 2 : 4;
  c.num_attention_heads = tiny ? 4 : 8;
  c.num_key_value_heads = 2;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

}  // namespace leap::bench
