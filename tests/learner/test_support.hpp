// Helpers for the learner tests: tiny configs, random checkpoints written with the test's own
// random numbers, a scratch folder, and a reference forward pass written straight from the formulas
// with plain loops in double precision (independent of the LibTorch implementation).
#pragma once

#include "learner/model_config.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"
#include "learner/trainer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace leap::learner::testing {

// A folder under the system temp dir, removed with its contents at scope exit.
class scratch_dir {
 public:
  scratch_dir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("leap-learner-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  [[nodiscard]] std::string path() const { return path_.string(); }
  [[nodiscard]] std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Qwen2-like: grouped-query attention (4 heads over 2 kv heads), q/k/v biases, tied embeddings.
inline model_config tiny_qwen2() {
  model_config c;
  c.model_type = "qwen2";
  c.vocab_size = 300;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.qkv_bias = true;
  return c;
}

// Llama-like: full multi-head attention, all biases on (attention_bias + mlp_bias), untied head.
inline model_config tiny_llama() {
  model_config c;
  c.model_type = "llama";
  c.vocab_size = 257;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.head_dim = 12;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = false;
  c.qkv_bias = true;
  c.o_bias = true;
  c.mlp_bias = true;
  return c;
}

// Qwen3-like: per-head q/k norms, no biases, head_dim (12) unlike hidden / heads (32 / 4 = 8), an
// untied head.
inline model_config tiny_qwen3() {
  model_config c;
  c.model_type = "qwen3";
  c.vocab_size = 280;
  c.hidden_size = 32;
  c.intermediate_size = 72;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 12;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.tie_word_embeddings = false;
  c.qk_norm = true;
  return c;
}

// Random weights drawn by the test itself (uniform, scaled so activations stay O(1)); norms are
// random around 1 and biases random, so that a forgotten norm weight or bias shows in the logits.
inline tensor_map random_test_weights(const model_config& c, std::uint64_t seed,
                                      dtype type = dtype::f32) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  tensor_map w;
  for (const auto& [name, shape] : parameter_shapes(c)) {
    std::int64_t n = 1;
    for (auto s : shape) {
      n *= s;
    }
    std::vector<double> v(static_cast<std::size_t>(n));
    const double fan_in = shape.size() == 2 ? static_cast<double>(shape[1]) : 1.0;
    for (auto& x : v) {
      if (name.ends_with("norm.weight")) {
        x = 1.0 + 0.3 * u(engine);
      } else if (name.ends_with(".bias")) {
        x = 0.2 * u(engine);
      } else if (name.find("embed_tokens") != std::string::npos) {
        x = u(engine);
      } else {
        x = u(engine) * std::sqrt(3.0 / fan_in);
      }
    }
    w.emplace(name, make_float_tensor(type, shape, v));
  }
  return w;
}

// Writes config.json and model.safetensors into `dir` (created).
inline void write_checkpoint(const std::string& dir, const model_config& c, const tensor_map& w) {
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_model_config(dir, c).ok());
  ASSERT_TRUE(write_safetensors_dir(dir, w).ok());
}

inline std::vector<double> values(const tensor_map& w, const std::string& name) {
  return to_doubles(w.at(name));
}

// Logits [n_tok x n_vocab] of `ids`, computed with loops from the Llama / Qwen2 / Qwen3 formulas in
// double precision.
inline std::vector<double> reference_logits(const model_config& c, const tensor_map& w,
                                            const std::vector<std::int32_t>& ids) {
  const auto n_tok = ids.size();
  const auto n_hidden = static_cast<std::size_t>(c.hidden_size);
  const auto n_inter = static_cast<std::size_t>(c.intermediate_size);
  const auto n_vocab = static_cast<std::size_t>(c.vocab_size);
  const auto nh = static_cast<std::size_t>(c.num_attention_heads);
  const auto nkv = static_cast<std::size_t>(c.num_key_value_heads);
  const auto head_dim = static_cast<std::size_t>(c.head_dim);
  const auto group = nh / nkv;

  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<double>& g) {
    double ss = 0;
    for (double v : x) {
      ss += v * v;
    }
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      y[i] = g[i] * x[i] * r;
    }
    return y;
  };
  // y = weight x + b, weight [out x in] row-major.
  auto matvec = [](const std::vector<double>& weight, const std::vector<double>* b,
                   const std::vector<double>& x, std::size_t out) {
    const std::size_t in = x.size();
    std::vector<double> y(out, 0.0);
    for (std::size_t o = 0; o < out; ++o) {
      double s = b != nullptr ? (*b)[o] : 0.0;
      for (std::size_t i = 0; i < in; ++i) {
        s += weight[o * in + i] * x[i];
      }
      y[o] = s;
    }
    return y;
  };
  auto get = [&](const std::string& name) { return values(w, name); };
  auto maybe = [&](const std::string& name) -> std::vector<double> {
    return w.contains(name) ? values(w, name) : std::vector<double>{};
  };

  // Rotary frequencies, with the rope_scaling variants written out.
  std::vector<double> inv_freq(head_dim / 2);
  for (std::size_t i = 0; i < head_dim / 2; ++i) {
    double f =
        1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
    if (c.rope_type == "linear") {
      f /= c.rope_factor;
    } else if (c.rope_type == "llama3") {
      const double wavelen = 2 * M_PI / f;
      const double low = static_cast<double>(c.rope_original_max_position) / c.rope_low_freq_factor;
      const double high =
          static_cast<double>(c.rope_original_max_position) / c.rope_high_freq_factor;
      if (wavelen > low) {
        f /= c.rope_factor;
      } else if (wavelen >= high) {
        const double smooth =
            (static_cast<double>(c.rope_original_max_position) / wavelen - c.rope_low_freq_factor) /
            (c.rope_high_freq_factor - c.rope_low_freq_factor);
        f = (1 - smooth) * f / c.rope_factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
  auto rope = [&](std::vector<double>& v, std::size_t heads, std::size_t pos) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t i = 0; i < head_dim / 2; ++i) {
        const double a = static_cast<double>(pos) * inv_freq[i];
        const double x1 = v[h * head_dim + i];
        const double x2 = v[h * head_dim + i + head_dim / 2];
        v[h * head_dim + i] = x1 * std::cos(a) - x2 * std::sin(a);
        v[h * head_dim + i + head_dim / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  };

  const auto embed = get("model.embed_tokens.weight");
  std::vector<std::vector<double>> x(n_tok, std::vector<double>(n_hidden));
  for (std::size_t t = 0; t < n_tok; ++t) {
    for (std::size_t i = 0; i < n_hidden; ++i) {
      x[t][i] = embed[static_cast<std::size_t>(ids[t]) * n_hidden + i];
    }
  }
  for (std::int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    const auto in_norm = get(p + "input_layernorm.weight");
    const auto post_norm = get(p + "post_attention_layernorm.weight");
    const auto wq = get(p + "self_attn.q_proj.weight");
    const auto wk = get(p + "self_attn.k_proj.weight");
    const auto wv = get(p + "self_attn.v_proj.weight");
    const auto wo = get(p + "self_attn.o_proj.weight");
    const auto bq = maybe(p + "self_attn.q_proj.bias");
    const auto bk = maybe(p + "self_attn.k_proj.bias");
    const auto bv = maybe(p + "self_attn.v_proj.bias");
    const auto bo = maybe(p + "self_attn.o_proj.bias");
    const auto wg = get(p + "mlp.gate_proj.weight");
    const auto wu = get(p + "mlp.up_proj.weight");
    const auto wd = get(p + "mlp.down_proj.weight");
    const auto bg = maybe(p + "mlp.gate_proj.bias");
    const auto bu = maybe(p + "mlp.up_proj.bias");
    const auto bd = maybe(p + "mlp.down_proj.bias");
    auto opt = [](const std::vector<double>& b) { return b.empty() ? nullptr : &b; };

    std::vector<std::vector<double>> q(n_tok), k(n_tok), v(n_tok);
    for (std::size_t t = 0; t < n_tok; ++t) {
      const auto h = rmsnorm(x[t], in_norm);
      q[t] = matvec(wq, opt(bq), h, nh * head_dim);
      k[t] = matvec(wk, opt(bk), h, nkv * head_dim);
      v[t] = matvec(wv, opt(bv), h, nkv * head_dim);
      if (c.qk_norm) {
        // Each head's slice normalised on its own with the shared [head_dim] weight.
        const auto gq = get(p + "self_attn.q_norm.weight");
        const auto gk = get(p + "self_attn.k_norm.weight");
        auto per_head = [&](std::vector<double>& v, std::size_t heads,
                            const std::vector<double>& g) {
          for (std::size_t h = 0; h < heads; ++h) {
            const auto first = v.begin() + static_cast<std::ptrdiff_t>(h * head_dim);
            const auto y = rmsnorm(
                std::vector<double>(first, first + static_cast<std::ptrdiff_t>(head_dim)), g);
            std::copy(y.begin(), y.end(), first);
          }
        };
        per_head(q[t], nh, gq);
        per_head(k[t], nkv, gk);
      }
      rope(q[t], nh, t);
      rope(k[t], nkv, t);
    }
    for (std::size_t t = 0; t < n_tok; ++t) {
      std::vector<double> attn(nh * head_dim, 0.0);
      for (std::size_t h = 0; h < nh; ++h) {
        const std::size_t kvh = h / group;
        std::vector<double> scores(t + 1);
        double mx = -1e300;
        for (std::size_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (std::size_t i = 0; i < head_dim; ++i) {
            dot += q[t][h * head_dim + i] * k[s][kvh * head_dim + i];
          }
          scores[s] = dot / std::sqrt(static_cast<double>(head_dim));
          mx = std::max(mx, scores[s]);
        }
        double z = 0;
        for (auto& sc : scores) {
          sc = std::exp(sc - mx);
          z += sc;
        }
        for (std::size_t s = 0; s <= t; ++s) {
          for (std::size_t i = 0; i < head_dim; ++i) {
            attn[h * head_dim + i] += scores[s] / z * v[s][kvh * head_dim + i];
          }
        }
      }
      const auto o = matvec(wo, opt(bo), attn, n_hidden);
      for (std::size_t i = 0; i < n_hidden; ++i) {
        x[t][i] += o[i];
      }
      const auto h2 = rmsnorm(x[t], post_norm);
      const auto g = matvec(wg, opt(bg), h2, n_inter);
      const auto u = matvec(wu, opt(bu), h2, n_inter);
      std::vector<double> act(n_inter);
      for (std::size_t i = 0; i < n_inter; ++i) {
        act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      }
      const auto m = matvec(wd, opt(bd), act, n_hidden);
      for (std::size_t i = 0; i < n_hidden; ++i) {
        x[t][i] += m[i];
      }
    }
  }
  const auto final_norm = get("model.norm.weight");
  const auto head = get(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  std::vector<double> logits(n_tok * n_vocab);
  for (std::size_t t = 0; t < n_tok; ++t) {
    const auto h = rmsnorm(x[t], final_norm);
    const auto l = matvec(head, nullptr, h, n_vocab);
    std::copy(l.begin(), l.end(), logits.begin() + static_cast<std::ptrdiff_t>(t * n_vocab));
  }
  return logits;
}

// log softmax of row t of [n_tok x n_vocab] logits, at `target`.
inline double log_softmax_at(const std::vector<double>& logits, std::size_t n_vocab, std::size_t t,
                             std::size_t target) {
  double mx = -1e300;
  for (std::size_t i = 0; i < n_vocab; ++i) {
    mx = std::max(mx, logits[t * n_vocab + i]);
  }
  double z = 0;
  for (std::size_t i = 0; i < n_vocab; ++i) {
    z += std::exp(logits[t * n_vocab + i] - mx);
  }
  return logits[t * n_vocab + target] - mx - std::log(z);
}

inline std::vector<std::int32_t> random_ids(std::size_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(n);
  for (auto& i : ids) {
    i = d(engine);
  }
  return ids;
}

// The scored batch that scored_batch() builds from a policy. Sequence i holds
// `min_length + (i * length_step) % length_period` random ids (seed `seed + i`); its first `prompt`
// tokens are the prompt (mask 0), the rest the completion (mask 1); its behaviour log-probs are the
// policy's own minus `behaviour_shift` (off-policy a little when non-zero, so that the clipped
// terms and the behaviour KL are not all zero); every token's advantage is `advantage(i)`.
struct batch_spec {
  std::size_t count = 4;
  std::uint64_t seed = 1;
  std::size_t prompt = 4;
  std::size_t min_length = 12;
  std::size_t length_step = 1;
  std::size_t length_period = 3;
  float behaviour_shift = 0.0F;
  // Default: +1 and -1 alternating.
  std::function<float(std::size_t)> advantage = [](std::size_t i) {
    return i % 2 == 0 ? 1.0F : -1.0F;
  };
};

inline update_batch scored_batch(const policy& p, const batch_spec& spec) {
  std::vector<std::vector<std::int32_t>> ids;
  for (std::size_t i = 0; i < spec.count; ++i) {
    const auto n = spec.min_length + (i * spec.length_step) % spec.length_period;
    ids.push_back(random_ids(n, p.config().vocab_size, spec.seed + i));
  }
  auto logp = p.token_logprobs(ids);
  if (!logp) {
    ADD_FAILURE() << logp.err().message;
    return {};
  }
  update_batch batch;
  for (std::size_t i = 0; i < spec.count; ++i) {
    sequence s;
    s.token_ids = ids[i];
    const auto n = ids[i].size();
    s.loss_mask.assign(n, 0);
    std::fill(s.loss_mask.begin() + static_cast<std::ptrdiff_t>(spec.prompt), s.loss_mask.end(), 1);
    s.behaviour_logprobs = (*logp)[i];
    for (auto& l : s.behaviour_logprobs) {
      l -= spec.behaviour_shift;
    }
    s.advantages.assign(n, spec.advantage(i));
    batch.sequences.push_back(std::move(s));
  }
  return batch;
}

}  // namespace leap::learner::testing
