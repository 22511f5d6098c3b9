// The policy model: a Llama / Qwen2-family decoder loaded from a Hugging Face folder (config.json +
// safetensors), on a device chosen at run time ("cpu", "cuda", "cuda:N"). It scores token ids
// (log-probs, computed in chunks so full-vocabulary logits of a long sequence never exist at once),
// samples with a KV cache, carries optional LoRA adapters (PEFT layout) and saves itself back.
//
// This header includes no LibTorch: the model lives behind an opaque pointer, inputs and outputs
// are std::vectors, so the policy server, actors and the `leap` command can use it without paying
// for LibTorch headers at compile time.
//
// Thread-safety: const member functions may run concurrently with each other; a non-const one needs
// exclusive access. Every function reports LibTorch failures (out of memory, bad device, ...) as
// errors, never as exceptions.
#pragma once

#include "common/enums/finish_reason.hpp"
#include "common/result.hpp"
#include "learner/model_config.hpp"
#include "learner/safetensors.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace leap::learner {

namespace detail {
class transformer;
}  // namespace detail

struct policy_options {
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N". Default: cpu
  // Parameter and activation dtype: "float32", "bfloat16", "float16", "float64", or "auto" (the
  // checkpoint's torch_dtype). Norms, softmax, rotary tables and log-probs are computed in float32
  // whatever this is. Default: float32
  std::string dtype = "float32";
  // Positions scored per chunk: at most logprob_chunk x vocab_size logits exist at a time, in the
  // forward and in the backward pass. Default: 1024
  std::int64_t logprob_chunk = 1024;
  // Recompute each decoder layer in the backward pass instead of keeping its activations: less
  // memory, about one more forward pass of compute. Default: false
  bool activation_checkpointing = false;
};

// LoRA adapters W + (alpha / rank) * B A on the named projections of every layer; A is initialised
// like PEFT (Kaiming-uniform), B with zeros, so a fresh adapter leaves the model unchanged.
struct lora_options {
  std::int64_t rank = 8;  // Default: 8
  double alpha = 16.0;    // Default: 16
  // Any of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj. Default: all seven
  std::vector<std::string> target_modules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
  std::uint64_t seed = 0;  // initialisation of A. Default: 0
};

struct sampling_params {
  std::int64_t max_tokens = 16;  // Default: 16
  double temperature = 1.0;      // 0 = greedy (argmax). Default: 1
  double top_p = 1.0;            // nucleus mass kept, in (0, 1]. Default: 1 (off)
  std::int64_t top_k = 0;        // keep the k most likely tokens; 0 = off. Default: 0
  std::int64_t n = 1;            // completions of the prompt, decoded as one batch. Default: 1
  // Generation of a completion ends after one of these ids, which is kept in its tokens (the model
  // produced it, so it is trained on). Default: none
  std::vector<std::int32_t> stop_token_ids;
  std::uint64_t seed = 0;  // same seed, prompt, params and device: same tokens. Default: 0
  // Off recomputes the whole sequence for every token (slow; for tests). Default: true
  bool use_kv_cache = true;
};

struct completion {
  std::vector<std::int32_t> token_ids;
  // log pi(token | prefix) of each sampled token under the model itself (temperature 1, no top-k /
  // top-p): what the scorer returns for the same ids and what the learner's importance ratio needs.
  std::vector<float> logprobs;
  finish_reason finish = finish_reason::length;  // stop (a stop id) or length, nothing else
};

class policy {
 public:
  // Loads `<model_dir>/config.json` and its safetensors (single file or sharded index). Errors name
  // the file and key: unsupported architecture, a missing tensor, a tensor of the wrong shape, an
  // unexpected tensor, an unusable device or dtype.
  [[nodiscard]] static result<policy> load(const std::string& model_dir,
                                           const policy_options& options = {});

  // A model with random weights (normal with std 0.02, norms 1, biases 0), drawn from `seed`
  // independently of the device. Errors: an invalid config, device or dtype.
  [[nodiscard]] static result<policy> create_random(const model_config& config, std::uint64_t seed,
                                                    const policy_options& options = {});
  // The same distribution drawn on `options.device` by LibTorch's generator of that device: seconds
  // for a 7B shape on a GPU where create_random's host draw takes minutes, but the values depend on
  // the device kind and the LibTorch version. For benchmarks and memory probes, not for tests that
  // compare values across machines. Errors: as create_random.
  [[nodiscard]] static result<policy> create_random_on_device(const model_config& config,
                                                              std::uint64_t seed,
                                                              const policy_options& options = {});

  policy(policy&&) noexcept;
  policy& operator=(policy&&) noexcept;
  ~policy();

  [[nodiscard]] const model_config& config() const;
  [[nodiscard]] std::string device() const;  // e.g. "cpu", "cuda:0"
  [[nodiscard]] std::string dtype() const;   // e.g. "float32"

  // log pi(ids[t] | ids[0..t)) for every position t >= 1 of each sequence; element 0 is 0 (nothing
  // predicts the first token). Errors: an empty sequence, a token id outside [0, vocab_size).
  [[nodiscard]] result<std::vector<std::vector<float>>> token_logprobs(
      const std::vector<std::vector<std::int32_t>>& sequences) const;

  // The full logits of one sequence, row-major [length x vocab_size], in float32. For tests and
  // debugging: this is exactly what token_logprobs avoids for long sequences.
  [[nodiscard]] result<std::vector<float>> logits(const std::vector<std::int32_t>& token_ids) const;

  // `params.n` completions of `prompt`. Errors: an empty prompt, ids out of range, invalid params
  // (max_tokens < 1, temperature < 0, top_p outside (0, 1], top_k < 0, n < 1).
  [[nodiscard]] result<std::vector<completion>> sample(const std::vector<std::int32_t>& prompt,
                                                       const sampling_params& params) const;

  // Writes config.json and the weights (sharded above max_shard_bytes) into `dir`, creating it.
  // LoRA adapters are not part of the weights: merge them first or save them with
  // save_lora_adapter. `dtype` "" keeps the policy's dtype; else "float32", "bfloat16", "float16"
  // or "float64". Every file is synced before it is renamed into place (a checkpoint survives a
  // power loss) unless `sync` is durability::unsynced (weights the servers reload each step).
  [[nodiscard]] status save(const std::string& dir, const std::string& dtype = "",
                            std::int64_t max_shard_bytes = std::int64_t{5} << 30,
                            durability sync = durability::synced) const;

  // Replaces the weights with those of `model_dir` (same architecture), e.g. a learner checkpoint;
  // the weights are all read and checked before any is replaced. LoRA adapters are kept.
  [[nodiscard]] status reload_weights(const std::string& model_dir);

  // Replaces the weights with `source`'s (same architecture; any device and dtype, converted to
  // this policy's), in memory: no file is written or read. All tensors are checked, and those that
  // need a conversion are converted, before any is replaced, so a failure leaves the weights as
  // they were. LoRA adapters of this policy are kept. Errors: another architecture, a source that
  // carries LoRA adapters (merge them first: its base weights alone are not what it samples from),
  // LibTorch failures. `source` must not change meanwhile (a const call on it may run).
  [[nodiscard]] status copy_weights_from(const policy& source);
  // The Hugging Face names of the parameters (model.embed_tokens.weight, ..., lm_head.weight unless
  // tied), then LoRA parameters (model.layers.N.self_attn.q_proj.lora_A.weight, ...).
  [[nodiscard]] std::vector<std::string> parameter_names() const;
  // A copy of one parameter in host memory. Errors: an unknown name.
  [[nodiscard]] result<host_tensor> parameter(const std::string& name) const;
  // Overwrites one parameter (converted to the policy's dtype). Errors: unknown name, shape
  // mismatch.
  [[nodiscard]] status set_parameter(const std::string& name, const host_tensor& value);

  // Adds LoRA adapters. Errors: adapters already present, rank < 1, an unknown target module.
  [[nodiscard]] status add_lora(const lora_options& options);
  [[nodiscard]] bool has_lora() const;
  // Writes `dir`/adapter_config.json and `dir`/adapter_model.safetensors in PEFT's layout
  // (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight, ...), which vLLM loads.
  // Errors: no adapters, I/O failures.
  [[nodiscard]] status save_lora_adapter(const std::string& dir,
                                         const std::string& base_model_name_or_path = "") const;
  // Loads a PEFT adapter folder written by save_lora_adapter (or PEFT itself), replacing any
  // adapters. Errors: missing files, an unsupported adapter_config (not LORA, fan_in_fan_out,
  // rslora, DoRA, bias other than "none"), tensors not matching the model.
  [[nodiscard]] status load_lora_adapter(const std::string& dir);
  // Folds the adapters into the base weights (W += alpha / rank * B A) and removes them.
  // Errors: no adapters.
  [[nodiscard]] status merge_lora();

 private:
  explicit policy(std::unique_ptr<detail::transformer> impl);
  friend class trainer;
  friend struct weight_broadcast_access;  // learner/weight_broadcast.cpp reads the tensors

  std::unique_ptr<detail::transformer> impl_;
};

// Accelerator memory of `device` ("cuda:N") as counted by LibTorch's caching allocator. On "cpu",
// or with a LibTorch built without CUDA, both are 0.
struct device_memory {
  std::int64_t allocated_bytes = 0;
  std::int64_t peak_allocated_bytes = 0;
};
[[nodiscard]] result<device_memory> memory_stats(const std::string& device);
// Restarts the peak count of `device`. Errors: an invalid device name.
[[nodiscard]] status reset_peak_memory(const std::string& device);
// Waits for the device's queued work (for timing). No-op on CPU.
[[nodiscard]] status synchronize(const std::string& device);

// Makes the C library keep freed host memory for reuse rather than hand large blocks back to the
// system after every tensor (glibc's default, which then page-faults the same memory in again):
// CPU training frees and reallocates its activations every micro-batch, and those faults cost as
// much as the arithmetic (bench_learner --preset tiny on CPU: 1.8x faster with this). The price is
// a resident size that stays at its peak. Process-wide, so programs call it once at start; no-op
// outside glibc.
void keep_freed_host_memory();

}  // namespace leap::learner
