// LibTorch side of the policy model. Internal to learner/: only learner's .cpp files include this
// header (it pulls in ATen, about 12 s of compile time per translation unit), never a public
// header.
//
// The model is a plain struct of tensors named after Hugging Face's parameters rather than a
// torch::nn::Module: loading, saving, LoRA and the optimiser all work on (name, tensor) pairs, and
// the forward pass is a handful of ATen calls that read like the formulas.
#pragma once

#include "common/result.hpp"
#include "learner/detail/checkpoint_view.hpp"
#include "learner/model_config.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard; ATen.h alone no longer brings it in LibTorch 2
#include <c10/util/Exception.h>
#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace leap::learner::detail {

// y = x W^T + b, plus the LoRA term (x A^T) B^T * scale when adapters are present and active.
struct linear {
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out]; undefined when the projection has none
  at::Tensor lora_a;  // [rank, in]; undefined without LoRA
  at::Tensor lora_b;  // [out, rank]
  double lora_scale = 0;

  [[nodiscard]] at::Tensor forward(const at::Tensor& x, bool use_lora) const;
};

struct decoder_layer {
  at::Tensor input_norm;  // input_layernorm.weight
  at::Tensor post_norm;   // post_attention_layernorm.weight
  at::Tensor q_norm;      // self_attn.q_norm.weight [head_dim]; undefined without qk_norm
  at::Tensor k_norm;      // self_attn.k_norm.weight [head_dim]
  linear q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
};

// Keys and values of every layer for the positions decoded so far, [batch, kv_heads, length,
// head_dim].
struct kv_cache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  std::int64_t length = 0;

  // Keeps only the batch rows in `rows` (int64 indices), e.g. to drop finished completions.
  void select_rows(const at::Tensor& rows);
};

struct named_tensor {
  std::string name;
  at::Tensor* tensor;
};

class transformer {
 public:
  transformer(model_config config, at::Device device, at::ScalarType dtype);

  model_config config;
  at::Device device;
  at::ScalarType dtype;
  std::int64_t logprob_chunk = 1024;
  bool activation_checkpointing = false;
  // False runs the base model without adapters: the frozen KL reference under LoRA.
  bool lora_active = true;
  // LoRA settings; rank 0 = no adapters.
  std::int64_t lora_rank = 0;
  double lora_alpha = 0;
  std::vector<std::string> lora_targets;

  at::Tensor embed_tokens;  // [vocab, hidden]
  at::Tensor norm;          // [hidden]
  at::Tensor lm_head;       // [vocab, hidden]; undefined when tied to embed_tokens
  std::vector<decoder_layer> layers;
  at::Tensor inv_freq;  // rotary frequencies [head_dim / 2], float32 (float64 for a float64 model)

  [[nodiscard]] const at::Tensor& output_weight() const {
    return config.tie_word_embeddings ? embed_tokens : lm_head;
  }

  // Parameters under Hugging Face names, in parameter_shapes() order.
  [[nodiscard]] std::vector<named_tensor> base_parameters();
  // LoRA parameters, "model.layers.N.<module>.<proj>.lora_A.weight" / "lora_B.weight".
  [[nodiscard]] std::vector<named_tensor> lora_parameters();
  // What an optimiser updates: the LoRA parameters when there are adapters, else the base ones.
  [[nodiscard]] std::vector<named_tensor> trainable_parameters();
  // The trainable tensors of one layer, in a fixed order (for activation checkpointing).
  [[nodiscard]] std::vector<at::Tensor> layer_trainables(std::size_t layer) const;

  // Hidden states after the final norm, [batch, length, hidden]. With a cache, positions start at
  // cache->length and the cache grows by the input's length.
  [[nodiscard]] at::Tensor forward_hidden(const at::Tensor& ids, kv_cache* cache) const;
  // One decoder layer; `cos`/`sin` are the rotary tables of the input's positions.
  [[nodiscard]] at::Tensor layer_forward(std::size_t layer, const at::Tensor& x,
                                         const at::Tensor& cos, const at::Tensor& sin,
                                         kv_cache* cache) const;
  // Rotary tables [length, head_dim] for positions offset .. offset + length - 1, in the model
  // dtype.
  [[nodiscard]] std::pair<at::Tensor, at::Tensor> rotary(std::int64_t offset,
                                                         std::int64_t length) const;
  // Full logits [.., vocab] in float32 (float64 for a float64 model).
  [[nodiscard]] at::Tensor logits(const at::Tensor& hidden) const;

  // Replaces the base weights with `weights` (Hugging Face names), converting dtype and device.
  // Every tensor is checked (missing, unexpected, wrong shape) and converted before any is
  // replaced. Tensors already allocated are overwritten in place, so references stay valid.
  [[nodiscard]] status assign_weights(const view_map& weights);
  // Replaces the base weights with values drawn on the model's device by LibTorch's generator of
  // that device, seeded with `seed` (normal with std 0.02, norms 1, biases 0).
  void draw_weights(std::uint64_t seed);
  // Adds zero-effect adapters (A random, B zero). Errors: see policy::add_lora.
  [[nodiscard]] status add_lora(const lora_options& options);
  // Folds adapters into the base weights and removes them.
  void merge_lora();
  // Marks the trainable parameters as requiring gradients (and the rest as not).
  void set_trainable();

 private:
  // Installs checked tensors of every base parameter (Hugging Face names, this model's device and
  // dtype); tensors already allocated are overwritten in place.
  void install(std::map<std::string, at::Tensor> staged);
};

// log softmax(hidden W^T)[target] for each row, computed `chunk` rows at a time in the forward and
// the backward pass (a custom autograd function), so at most chunk x vocab logits exist at once.
// Returns {logprobs [N], entropy [N]} in float32 (float64 for float64 inputs); the entropy carries
// no gradient and is only computed when `with_entropy` (else an empty tensor).
[[nodiscard]] std::pair<at::Tensor, at::Tensor> chunked_logprobs(const at::Tensor& hidden,
                                                                 const at::Tensor& weight,
                                                                 const at::Tensor& targets,
                                                                 std::int64_t chunk,
                                                                 bool with_entropy);

// The float type that accumulations of `t` use: float64 for float64 tensors, else float32.
[[nodiscard]] at::ScalarType accumulate_type(at::ScalarType t);

[[nodiscard]] at::ScalarType scalar_type(dtype d);
[[nodiscard]] result<dtype> host_dtype(at::ScalarType t);
// Copies a host tensor to `device` as `type`.
[[nodiscard]] at::Tensor to_tensor(const host_tensor& t, at::Device device, at::ScalarType type);
[[nodiscard]] at::Tensor to_tensor(const tensor_view& t, at::Device device, at::ScalarType type);
// Copies a tensor to host memory (contiguous, same dtype).
[[nodiscard]] result<host_tensor> to_host(const at::Tensor& t);

// "cpu", "cuda", "cuda:N". Errors: another name, CUDA not available, N out of range.
[[nodiscard]] result<at::Device> parse_device(const std::string& name);
// "float32", "bfloat16", "float16", "float64", or "auto" (= checkpoint_dtype).
[[nodiscard]] result<at::ScalarType> parse_compute_dtype(const std::string& name,
                                                         const std::string& checkpoint_dtype);
[[nodiscard]] std::string device_name(at::Device d);
[[nodiscard]] std::string dtype_name(at::ScalarType t);

// Builds a model on `options`' device and dtype from `weights`. Errors: see policy::load.
[[nodiscard]] result<std::unique_ptr<transformer>> make_transformer(const model_config& config,
                                                                    const view_map& weights,
                                                                    const policy_options& options);
// The same model with no weights yet (assign_weights or draw_weights next). Errors: an unusable
// device, dtype or logprob_chunk.
[[nodiscard]] result<std::unique_ptr<transformer>> make_empty_transformer(
    const model_config& config, const policy_options& options);

// The PEFT file name of a LoRA parameter: "base_model.model." + its name.
[[nodiscard]] std::string peft_name(const std::string& name);

// Runs `f`, turning LibTorch's exceptions into errors prefixed by `what`: public functions never
// let an exception cross the module boundary.
template <class F>
auto guarded(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    return error{what + ": " + e.what_without_backtrace()};
  } catch (const std::exception& e) {
    return error{what + ": " + e.what()};
  }
}

}  // namespace leap::learner::detail
