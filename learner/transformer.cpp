// The forward pass of the Llama / Qwen2 / Qwen3 decoder, its two custom autograd functions (chunked
// log-probs, layer recomputation for activation checkpointing), LoRA, and host <-> tensor copies.
#include "learner/detail/transformer.hpp"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <set>

// Faster kernels of newer LibTorch releases, each with the plain formulation as the fallback (the
// CPU LibTorch 1.13 of the tests takes the fallbacks; learner/standalone/run_gpu_checks.sh checks
// the fast paths against transformers on a GPU).
#define LEAP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||       \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace leap::learner::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::string shape_string(at::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// Norms and softmax run in float32 (float64 models stay in float64), as Hugging Face's do.
at::Tensor upcast(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? t : t.to(at::kFloat);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
#if LEAP_TORCH_AT_LEAST(2, 4)
  // One fused kernel on CUDA that keeps no float32 copy of x for the backward pass.
  if (x.is_cuda()) {
    return at::rms_norm(x, {x.size(-1)}, weight, eps);
  }
#endif
  const auto xf = upcast(x);
  const auto variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (xf * at::rsqrt(variance + eps)).to(x.scalar_type());
}

at::Tensor rotate_half(const at::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Recomputes a decoder layer in the backward pass instead of keeping its activations. The model is
// passed as an integer because custom functions only carry tensors and IValues; it outlives the
// graph (the trainer owns both).
struct checkpointed_layer : torch::autograd::Function<checkpointed_layer> {
  static at::Tensor forward(AutogradContext* ctx, std::int64_t model, std::int64_t layer,
                            const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            at::TensorList trainables) {
    (void)trainables;  // inputs only so that autograd routes their gradients through backward()
    ctx->saved_data["model"] = model;
    ctx->saved_data["layer"] = layer;
    ctx->save_for_backward({x, cos, sin});
    const auto* m =
        reinterpret_cast<const transformer*>(model);  // NOLINT(performance-no-int-to-ptr)
    return m->layer_forward(static_cast<std::size_t>(layer), x, cos, sin, nullptr);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto* m = reinterpret_cast<const transformer*>(  // NOLINT(performance-no-int-to-ptr)
        ctx->saved_data["model"].toInt());
    const auto layer = static_cast<std::size_t>(ctx->saved_data["layer"].toInt());
    auto trainables = m->layer_trainables(layer);
    const auto x = saved[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      out = m->layer_forward(layer, x, saved[1], saved[2], nullptr);
    }
    variable_list inputs{x};
    inputs.insert(inputs.end(), trainables.begin(), trainables.end());
    auto grads = torch::autograd::grad({out}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    // One gradient per forward argument: model, layer, x, cos, sin, then each trainable.
    variable_list result{at::Tensor(), at::Tensor(), grads[0], at::Tensor(), at::Tensor()};
    result.insert(result.end(), grads.begin() + 1, grads.end());
    return result;
  }
};

// a b in `acc` (float32 for half types): cuBLAS writes float32 directly where LibTorch can.
at::Tensor product_in(const at::Tensor& a, const at::Tensor& b, at::ScalarType acc) {
#if LEAP_TORCH_AT_LEAST(2, 9)
  if (a.is_cuda() && a.scalar_type() != acc) {
    return at::mm(a, b, acc);
  }
#endif
  return at::mm(a, b).to(acc);
}

// sum += a b, with `sum` in float32 and a, b in the model's dtype.
void add_product(at::Tensor& sum, const at::Tensor& a, const at::Tensor& b) {
#if LEAP_TORCH_AT_LEAST(2, 9)
  if (a.is_cuda() && a.scalar_type() != sum.scalar_type()) {
    at::addmm_out(sum, sum, a, b, sum.scalar_type());
    return;
  }
#endif
  sum.add_(at::mm(a, b));
}

// log softmax(h W^T)[target] without keeping the [rows, vocab] logits: the backward pass recomputes
// them chunk by chunk. d logp / d logits = onehot(target) - softmax.
struct chunked_logprob_function : torch::autograd::Function<chunked_logprob_function> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden,
                               const at::Tensor& weight, const at::Tensor& targets,
                               std::int64_t chunk, bool with_entropy) {
    const auto acc = accumulate_type(hidden.scalar_type());
    const auto rows = hidden.size(0);
    auto logp = at::empty({rows}, hidden.options().dtype(acc));
    auto entropy = with_entropy ? at::empty({rows}, hidden.options().dtype(acc))
                                : at::empty({0}, hidden.options().dtype(acc));
    const auto weight_t = weight.t();
    for (std::int64_t start = 0; start < rows; start += chunk) {
      const auto n = std::min(chunk, rows - start);
      // One fused log-softmax pass (logsumexp alone is four passes over the chunk).
      const auto logp_all =
          at::log_softmax(product_in(hidden.narrow(0, start, n), weight_t, acc), -1);
      logp.narrow(0, start, n)
          .copy_(logp_all.gather(1, targets.narrow(0, start, n).unsqueeze(1)).squeeze(1));
      if (with_entropy) {
        entropy.narrow(0, start, n).copy_(logp_all.exp().mul_(logp_all).sum(-1).neg_());
      }
    }
    ctx->saved_data["chunk"] = chunk;
    ctx->save_for_backward({hidden, weight, targets});
    ctx->mark_non_differentiable({entropy});
    return {logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& targets = saved[2];
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto acc = accumulate_type(hidden.scalar_type());
    const auto grad = grad_outputs[0].to(acc);
    const auto rows = hidden.size(0);
    const bool need_hidden = ctx->needs_input_grad(0);
    const bool need_weight = ctx->needs_input_grad(1);
    at::Tensor grad_hidden = need_hidden ? at::empty_like(hidden) : at::Tensor();
    // Accumulated over chunks in float32 even for bfloat16 weights: many small additions.
    at::Tensor grad_weight =
        need_weight ? at::zeros(weight.sizes(), weight.options().dtype(acc)) : at::Tensor();
    const auto weight_t = weight.t();
    for (std::int64_t start = 0; start < rows; start += chunk) {
      const auto n = std::min(chunk, rows - start);
      const auto h = hidden.narrow(0, start, n);
      const auto g = grad.narrow(0, start, n).unsqueeze(1);
      // d logits = g (onehot - p) = -g e with e = p - onehot, formed in float32 (so that a
      // confident token keeps its small 1 - p) and rounded once into the model's dtype. g, a
      // per-row factor, goes onto the [n, hidden] side of each product: no [n, vocab] pass for it.
      auto e = at::softmax(product_in(h, weight_t, acc), -1);
      e.scatter_add_(1, targets.narrow(0, start, n).unsqueeze(1),
                     at::full({n, 1}, -1.0, e.options()));
      const auto e_low = e.to(hidden.scalar_type());
      e = at::Tensor();
      const auto minus_g = g.neg();
      if (need_hidden) {
        grad_hidden.narrow(0, start, n).copy_(product_in(e_low, weight, acc).mul_(minus_g));
      }
      if (need_weight) {
        add_product(grad_weight, e_low.t(), h * minus_g.to(hidden.scalar_type()));
      }
    }
    if (need_weight) {
      grad_weight = grad_weight.to(weight.scalar_type());
    }
    return {grad_hidden, grad_weight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           std::int64_t group) {
  // q [B, H, T, D]; k, v [B, KV, Tk, D]. Query head h reads key/value head h / group (Hugging
  // Face's repeat_kv order), done by broadcasting instead of copying the keys.
  const auto b = q.size(0);
  const auto heads = q.size(1);
  const auto t = q.size(2);
  const auto d = q.size(3);
  const auto kv_heads = k.size(1);
  const auto tk = k.size(2);
  const auto qg = q.reshape({b, kv_heads, group, t, d});
  auto scores =
      at::matmul(qg, k.unsqueeze(2).transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(d)));
  if (t > 1) {
    // Query i sits at absolute position tk - t + i and sees keys up to there.
    const auto mask = at::ones({t, tk}, q.options().dtype(at::kBool)).triu(tk - t + 1);
    scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  }
  const auto probs = at::softmax(scores, -1, accumulate_type(q.scalar_type())).to(q.scalar_type());
  return at::matmul(probs, v.unsqueeze(2)).reshape({b, heads, t, d});
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     std::int64_t group) {
#if TORCH_VERSION_MAJOR >= 2
  // LibTorch 2 has fused (flash / memory-efficient) attention: no [T, T] score matrix is kept.
  // Used where its causal mask is the one we need: a full square block, or one query at the end.
  const auto t = q.size(2);
  const auto tk = k.size(2);
  if (q.is_cuda() && (t == tk || t == 1)) {
#if LEAP_TORCH_AT_LEAST(2, 5)
    // The kernels read each key/value head for its group of query heads: no copies of them.
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/t > 1, std::nullopt,
                                            /*enable_gqa=*/group > 1);
#else
    // expand + reshape rather than repeat_interleave, which synchronises with the host to size
    // its output: a sync per layer stalls the GPU's queue.
    auto repeat = [&](const at::Tensor& x) {
      if (group == 1) {
        return x;
      }
      return x.unsqueeze(2)
          .expand({x.size(0), x.size(1), group, x.size(2), x.size(3)})
          .reshape({x.size(0), x.size(1) * group, x.size(2), x.size(3)});
    };
    return at::scaled_dot_product_attention(q, repeat(k), repeat(v), {}, 0.0,
                                            /*is_causal=*/t > 1);
#endif
  }
#endif
  return eager_attention(q, k, v, group);
}

at::Tensor inv_frequencies(const model_config& c, at::ScalarType acc) {
  // As Hugging Face computes them (in float32), so that positions far out agree to the last bit.
  const auto d = c.head_dim;
  auto exponent =
      at::arange(0, d, 2, at::TensorOptions().dtype(at::kLong)).to(acc) / static_cast<double>(d);
  auto inv = 1.0 / at::pow(c.rope_theta, exponent);
  if (c.rope_type == "linear") {
    inv = inv / c.rope_factor;
  } else if (c.rope_type == "llama3") {
    const double old_len = static_cast<double>(c.rope_original_max_position);
    const double low_wavelen = old_len / c.rope_low_freq_factor;
    const double high_wavelen = old_len / c.rope_high_freq_factor;
    const auto wavelen = 2.0 * std::numbers::pi / inv;
    auto scaled = at::where(wavelen > low_wavelen, inv / c.rope_factor, inv);
    const auto smooth = (old_len / wavelen - c.rope_low_freq_factor) /
                        (c.rope_high_freq_factor - c.rope_low_freq_factor);
    const auto smoothed = (1 - smooth) * scaled / c.rope_factor + smooth * scaled;
    const auto medium =
        at::logical_not(wavelen < high_wavelen).logical_and(at::logical_not(wavelen > low_wavelen));
    inv = at::where(medium, smoothed, scaled);
  }
  return inv;
}

const char* const projection_names[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                        "gate_proj", "up_proj", "down_proj"};

std::string projection_prefix(std::size_t layer, const std::string& proj) {
  const bool attn = proj == "q_proj" || proj == "k_proj" || proj == "v_proj" || proj == "o_proj";
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + proj;
}

template <class Layer>
auto& projection(Layer& l, const std::string& name) {
  if (name == "q_proj") {
    return l.q_proj;
  }
  if (name == "k_proj") {
    return l.k_proj;
  }
  if (name == "v_proj") {
    return l.v_proj;
  }
  if (name == "o_proj") {
    return l.o_proj;
  }
  if (name == "gate_proj") {
    return l.gate_proj;
  }
  if (name == "up_proj") {
    return l.up_proj;
  }
  return l.down_proj;
}

}  // namespace

at::Tensor linear::forward(const at::Tensor& x, bool use_lora) const {
  auto y = bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
  if (use_lora && lora_a.defined()) {
    y = y + at::linear(at::linear(x, lora_a), lora_b) * lora_scale;
  }
  return y;
}

void kv_cache::select_rows(const at::Tensor& rows) {
  for (auto& k : keys) {
    k = k.index_select(0, rows);
  }
  for (auto& v : values) {
    v = v.index_select(0, rows);
  }
}

transformer::transformer(model_config c, at::Device d, at::ScalarType t)
    : config(std::move(c)), device(d), dtype(t) {
  layers.resize(static_cast<std::size_t>(config.num_hidden_layers));
  inv_freq = inv_frequencies(config, accumulate_type(dtype)).to(device);
}

std::vector<named_tensor> transformer::base_parameters() {
  std::vector<named_tensor> out;
  out.push_back({"model.embed_tokens.weight", &embed_tokens});
  for (std::size_t i = 0; i < layers.size(); ++i) {
    auto& l = layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", &l.input_norm});
    for (const char* name : {"q_proj", "k_proj", "v_proj"}) {
      auto& proj = projection(l, name);
      out.push_back({p + "self_attn." + name + ".weight", &proj.weight});
      if (proj.bias.defined()) {
        out.push_back({p + "self_attn." + name + ".bias", &proj.bias});
      }
    }
    // parameter_shapes() order: the q/k norms sit between v_proj and o_proj.
    if (config.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", &l.q_norm});
      out.push_back({p + "self_attn.k_norm.weight", &l.k_norm});
    }
    {
      auto& proj = l.o_proj;
      out.push_back({p + "self_attn.o_proj.weight", &proj.weight});
      if (proj.bias.defined()) {
        out.push_back({p + "self_attn.o_proj.bias", &proj.bias});
      }
    }
    out.push_back({p + "post_attention_layernorm.weight", &l.post_norm});
    for (const char* name : {"gate_proj", "up_proj", "down_proj"}) {
      auto& proj = projection(l, name);
      out.push_back({p + "mlp." + name + ".weight", &proj.weight});
      if (proj.bias.defined()) {
        out.push_back({p + "mlp." + name + ".bias", &proj.bias});
      }
    }
  }
  out.push_back({"model.norm.weight", &norm});
  if (!config.tie_word_embeddings) {
    out.push_back({"lm_head.weight", &lm_head});
  }
  return out;
}

std::vector<named_tensor> transformer::lora_parameters() {
  std::vector<named_tensor> out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    for (const char* name : projection_names) {
      auto& proj = projection(layers[i], name);
      if (proj.lora_a.defined()) {
        const auto prefix = projection_prefix(i, name);
        out.push_back({prefix + ".lora_A.weight", &proj.lora_a});
        out.push_back({prefix + ".lora_B.weight", &proj.lora_b});
      }
    }
  }
  return out;
}

std::vector<named_tensor> transformer::trainable_parameters() {
  return lora_rank > 0 ? lora_parameters() : base_parameters();
}

std::vector<at::Tensor> transformer::layer_trainables(std::size_t layer) const {
  const auto& l = layers[layer];
  std::vector<at::Tensor> out;
  for (const char* name : projection_names) {
    const auto& proj = projection(l, name);
    if (lora_rank > 0) {
      if (proj.lora_a.defined()) {
        out.push_back(proj.lora_a);
        out.push_back(proj.lora_b);
      }
    } else {
      out.push_back(proj.weight);
      if (proj.bias.defined()) {
        out.push_back(proj.bias);
      }
    }
  }
  if (lora_rank == 0) {
    out.push_back(l.input_norm);
    out.push_back(l.post_norm);
    if (l.q_norm.defined()) {
      out.push_back(l.q_norm);
      out.push_back(l.k_norm);
    }
  }
  return out;
}

std::pair<at::Tensor, at::Tensor> transformer::rotary(std::int64_t offset,
                                                      std::int64_t length) const {
  const auto positions = at::arange(offset, offset + length, inv_freq.options());
  const auto freqs = at::outer(positions, inv_freq);
  const auto emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor transformer::layer_forward(std::size_t index, const at::Tensor& x, const at::Tensor& cos,
                                      const at::Tensor& sin, kv_cache* cache) const {
  const auto& l = layers[index];
  const auto b = x.size(0);
  const auto t = x.size(1);
  const auto heads = config.num_attention_heads;
  const auto kv_heads = config.num_key_value_heads;
  const auto d = config.head_dim;
  const bool lora = lora_active;

  const auto h = rms_norm(x, l.input_norm, config.rms_norm_eps);
  auto q = l.q_proj.forward(h, lora).view({b, t, heads, d});
  auto k = l.k_proj.forward(h, lora).view({b, t, kv_heads, d});
  if (config.qk_norm) {
    // Qwen3: each head's q and k normalised over its head_dim features, before RoPE.
    q = rms_norm(q, l.q_norm, config.rms_norm_eps);
    k = rms_norm(k, l.k_norm, config.rms_norm_eps);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  auto v = l.v_proj.forward(h, lora).view({b, t, kv_heads, d}).transpose(1, 2);
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  if (cache != nullptr) {
    auto& ck = cache->keys[index];
    auto& cv = cache->values[index];
    if (ck.defined()) {
      k = at::cat({ck, k}, 2);
      v = at::cat({cv, v}, 2);
    }
    ck = k;
    cv = v;
  }
  const auto attn =
      attention(q, k, v, config.kv_group_size()).transpose(1, 2).reshape({b, t, heads * d});
  const auto after_attn = x + l.o_proj.forward(attn, lora);

  const auto h2 = rms_norm(after_attn, l.post_norm, config.rms_norm_eps);
  const auto mlp = l.down_proj.forward(
      at::silu(l.gate_proj.forward(h2, lora)) * l.up_proj.forward(h2, lora), lora);
  return after_attn + mlp;
}

at::Tensor transformer::forward_hidden(const at::Tensor& ids, kv_cache* cache) const {
  const auto offset = cache != nullptr ? cache->length : 0;
  const auto [cos, sin] = rotary(offset, ids.size(1));
  auto x = at::embedding(embed_tokens, ids);
  if (cache != nullptr && cache->keys.size() != layers.size()) {
    cache->keys.resize(layers.size());
    cache->values.resize(layers.size());
  }
  const bool recompute = activation_checkpointing && cache == nullptr && at::GradMode::is_enabled();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (recompute) {
      const auto trainables = layer_trainables(i);
      x = checkpointed_layer::apply(reinterpret_cast<std::int64_t>(this),
                                    static_cast<std::int64_t>(i), x, cos, sin,
                                    at::TensorList(trainables));
    } else {
      x = layer_forward(i, x, cos, sin, cache);
    }
  }
  if (cache != nullptr) {
    cache->length += ids.size(1);
  }
  return rms_norm(x, norm, config.rms_norm_eps);
}

at::Tensor transformer::logits(const at::Tensor& hidden) const {
  return at::matmul(hidden, output_weight().t()).to(accumulate_type(dtype));
}

status transformer::assign_weights(const view_map& weights) {
  // Stage every tensor first: a bad file must leave the model as it was.
  std::map<std::string, at::Tensor> staged;
  std::set<std::string> expected;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    expected.insert(name);
    auto it = weights.find(name);
    if (it == weights.end()) {
      return error{"missing tensor '" + name + "'"};
    }
    const auto& t = it->second;
    if (t.shape != shape) {
      return error{"tensor '" + name + "' has shape " + shape_string(t.shape) +
                   ", the config needs " + shape_string(shape)};
    }
    if (t.type != dtype::f32 && t.type != dtype::bf16 && t.type != dtype::f16 &&
        t.type != dtype::f64) {
      return error{"tensor '" + name + "' has dtype " + to_string(t.type) +
                   "; expected a float type"};
    }
    staged.emplace(name, to_tensor(t, device, dtype));
  }
  for (const auto& [name, t] : weights) {
    if (expected.contains(name)) {
      continue;
    }
    // Older checkpoints store rotary tables and tied heads; both are derived, not parameters.
    if (name.ends_with("rotary_emb.inv_freq") ||
        (name == "lm_head.weight" && config.tie_word_embeddings)) {
      continue;
    }
    return error{"unexpected tensor '" + name +
                 "' (the config.json does not describe this checkpoint)"};
  }
  install(std::move(staged));
  return ok_status();
}

void transformer::draw_weights(std::uint64_t seed) {
  // A private generator of the device's kind: the draw neither reads nor moves the global one.
  at::Generator generator = at::globalContext().defaultGenerator(device).clone();
  generator.set_current_seed(seed);
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  std::map<std::string, at::Tensor> staged;
  at::NoGradGuard no_grad;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    at::Tensor t = at::empty(shape, options);
    if (name.ends_with("norm.weight")) {
      t.fill_(1.0);
    } else if (name.ends_with(".bias")) {
      t.zero_();
    } else {
      t.normal_(0.0, 0.02, generator);
    }
    staged.emplace(name, std::move(t));
  }
  install(std::move(staged));
}

void transformer::install(std::map<std::string, at::Tensor> staged) {
  at::NoGradGuard no_grad;
  // Projections with a bias in the config get their bias tensors created here.
  for (std::size_t i = 0; i < layers.size(); ++i) {
    for (const char* name : projection_names) {
      const std::string proj = name;
      const bool is_qkv = proj == "q_proj" || proj == "k_proj" || proj == "v_proj";
      const bool has_bias = is_qkv             ? config.qkv_bias
                            : proj == "o_proj" ? config.o_bias
                                               : config.mlp_bias;
      auto& p = projection(layers[i], proj);
      if (has_bias && !p.bias.defined()) {
        p.bias = staged.at(projection_prefix(i, proj) + ".bias");
      }
    }
  }
  for (auto& [name, tensor] : base_parameters()) {
    auto& src = staged.at(name);
    if (tensor->defined() && tensor->sizes() == src.sizes()) {
      tensor->copy_(src);
    } else {
      *tensor = src;
    }
  }
}

status transformer::add_lora(const lora_options& options) {
  if (lora_rank > 0) {
    return error{"the model already has LoRA adapters"};
  }
  if (options.rank < 1) {
    return error{"LoRA 'rank' must be at least 1 (got " + std::to_string(options.rank) + ")"};
  }
  if (options.target_modules.empty()) {
    return error{"LoRA 'target_modules' is empty"};
  }
  for (const auto& target : options.target_modules) {
    if (std::find(std::begin(projection_names), std::end(projection_names), target) ==
        std::end(projection_names)) {
      return error{"unknown LoRA target module '" + target +
                   "' (expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj)"};
    }
  }
  // A is drawn on the host from the seed (PEFT's Kaiming-uniform bound 1/sqrt(in)), so the same
  // seed gives the same adapters on every device.
  std::mt19937_64 engine(options.seed);
  const double scale = options.alpha / static_cast<double>(options.rank);
  for (auto& l : layers) {
    for (const auto& target : options.target_modules) {
      auto& proj = projection(l, target);
      const auto out = proj.weight.size(0);
      const auto in = proj.weight.size(1);
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      std::vector<double> a(static_cast<std::size_t>(options.rank * in));
      for (auto& x : a) {
        x = (static_cast<double>(engine() >> 11) * 0x1.0p-53 * 2.0 - 1.0) * bound;
      }
      proj.lora_a =
          to_tensor(make_float_tensor(dtype::f64, {options.rank, in}, a), device, this->dtype);
      proj.lora_b = at::zeros({out, options.rank}, proj.weight.options());
      proj.lora_scale = scale;
    }
  }
  lora_rank = options.rank;
  lora_alpha = options.alpha;
  lora_targets = options.target_modules;
  return ok_status();
}

void transformer::merge_lora() {
  at::NoGradGuard no_grad;
  for (auto& l : layers) {
    for (const char* name : projection_names) {
      auto& proj = projection(l, name);
      if (proj.lora_a.defined()) {
        const auto acc = accumulate_type(dtype);
        const auto delta = at::matmul(proj.lora_b.to(acc), proj.lora_a.to(acc)) * proj.lora_scale;
        proj.weight.copy_((proj.weight.to(acc) + delta).to(dtype));
        proj.lora_a = at::Tensor();
        proj.lora_b = at::Tensor();
        proj.lora_scale = 0;
      }
    }
  }
  lora_rank = 0;
  lora_alpha = 0;
  lora_targets.clear();
}

void transformer::set_trainable() {
  const bool lora = lora_rank > 0;
  for (auto& [name, t] : base_parameters()) {
    t->requires_grad_(!lora);
  }
  for (auto& [name, t] : lora_parameters()) {
    t->requires_grad_(true);
  }
}

std::pair<at::Tensor, at::Tensor> chunked_logprobs(const at::Tensor& hidden,
                                                   const at::Tensor& weight,
                                                   const at::Tensor& targets, std::int64_t chunk,
                                                   bool with_entropy) {
  auto out = chunked_logprob_function::apply(hidden, weight, targets,
                                             std::max<std::int64_t>(chunk, 1), with_entropy);
  return {out[0], with_entropy ? out[1] : at::Tensor()};
}

at::ScalarType accumulate_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

at::ScalarType scalar_type(dtype d) {
  switch (d) {
    case dtype::f64:
      return at::kDouble;
    case dtype::f32:
      return at::kFloat;
    case dtype::f16:
      return at::kHalf;
    case dtype::bf16:
      return at::kBFloat16;
    case dtype::i64:
      return at::kLong;
    case dtype::i32:
      return at::kInt;
    case dtype::i16:
      return at::kShort;
    case dtype::i8:
      return at::kChar;
    case dtype::u8:
      return at::kByte;
    case dtype::boolean:
      return at::kBool;
  }
  return at::kFloat;
}

result<dtype> host_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble:
      return dtype::f64;
    case at::kFloat:
      return dtype::f32;
    case at::kHalf:
      return dtype::f16;
    case at::kBFloat16:
      return dtype::bf16;
    case at::kLong:
      return dtype::i64;
    case at::kInt:
      return dtype::i32;
    case at::kShort:
      return dtype::i16;
    case at::kChar:
      return dtype::i8;
    case at::kByte:
      return dtype::u8;
    case at::kBool:
      return dtype::boolean;
    default:
      return error{std::string("no safetensors dtype for ") + c10::toString(t)};
  }
}

at::Tensor to_tensor(const tensor_view& t, at::Device device, at::ScalarType type) {
  // from_blob does not own the bytes; the copy to the device (or clone on CPU) makes it owning.
  auto view = at::from_blob(const_cast<std::uint8_t*>(t.data), t.shape,  // NOLINT: read only
                            at::TensorOptions().dtype(scalar_type(t.type)));
  return view.to(device, type, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor to_tensor(const host_tensor& t, at::Device device, at::ScalarType type) {
  return to_tensor(tensor_view{t.type, t.shape, t.data.data(), t.data.size()}, device, type);
}

result<host_tensor> to_host(const at::Tensor& t) {
  auto type = host_dtype(t.scalar_type());
  if (!type) {
    return type.err();
  }
  host_tensor out;
  out.type = *type;
  out.shape.assign(t.sizes().begin(), t.sizes().end());
  out.data.resize(static_cast<std::size_t>(t.numel()) * t.element_size());
  if (!out.data.empty()) {
    // Straight into the host buffer: one device-to-host copy, no CPU tensor in between.
    at::from_blob(out.data.data(), t.sizes(), at::TensorOptions().dtype(t.scalar_type()))
        .copy_(t.detach());
  }
  return out;
}

result<at::Device> parse_device(const std::string& name) {
  if (name == "cpu") {
    return at::Device(at::kCPU);
  }
  std::int64_t index = 0;
  if (name == "cuda") {
    index = 0;
  } else if (name.starts_with("cuda:") && name.size() > 5 &&
             name.find_first_not_of("0123456789", 5) == std::string::npos && name.size() < 9) {
    index = std::stoll(name.substr(5));
  } else {
    return error{"unknown device '" + name + "' (expected cpu, cuda or cuda:N)"};
  }
  if (!at::hasCUDA()) {
    return error{"device '" + name +
                 "': this LibTorch has no CUDA support or no GPU is visible "
                 "(build against a CUDA LibTorch with -DTorch_DIR=..., or use cpu)"};
  }
  const auto count = static_cast<std::int64_t>(torch::cuda::device_count());
  if (index >= count) {
    return error{"device '" + name + "': only " + std::to_string(count) +
                 " CUDA device(s) visible"};
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

result<at::ScalarType> parse_compute_dtype(const std::string& name,
                                           const std::string& checkpoint_dtype) {
  const std::string& chosen = name == "auto" ? checkpoint_dtype : name;
  auto d = parse_torch_dtype(chosen);
  if (!d) {
    return d.err().wrap(name == "auto" ? "the checkpoint's torch_dtype" : "'dtype'");
  }
  return scalar_type(*d);
}

std::string device_name(at::Device d) { return d.str(); }

std::string dtype_name(at::ScalarType t) {
  auto d = host_dtype(t);
  return d ? to_torch_dtype(*d) : c10::toString(t);
}

result<std::unique_ptr<transformer>> make_transformer(const model_config& config,
                                                      const view_map& weights,
                                                      const policy_options& options) {
  auto model = make_empty_transformer(config, options);
  if (!model) {
    return model.err();
  }
  if (auto s = (*model)->assign_weights(weights); !s) {
    return s.err();
  }
  return model;
}

result<std::unique_ptr<transformer>> make_empty_transformer(const model_config& config,
                                                            const policy_options& options) {
  auto device = parse_device(options.device);
  if (!device) {
    return device.err();
  }
  auto type = parse_compute_dtype(options.dtype, config.torch_dtype);
  if (!type) {
    return type.err();
  }
  if (options.logprob_chunk < 1) {
    return error{"'logprob_chunk' must be at least 1 (got " +
                 std::to_string(options.logprob_chunk) + ")"};
  }
  auto model = std::make_unique<transformer>(config, *device, *type);
  model->logprob_chunk = options.logprob_chunk;
  model->activation_checkpointing = options.activation_checkpointing;
  return model;
}

std::string peft_name(const std::string& name) { return "base_model.model." + name; }

}  // namespace leap::learner::detail
