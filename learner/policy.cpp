// The public policy: loading and saving, scoring, sampling with a KV cache, PEFT LoRA files.
#include "learner/policy.hpp"

#include "common/durable_file.hpp"
#include "learner/detail/files.hpp"
#include "learner/detail/transformer.hpp"

#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#ifdef LEAP_LEARNER_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace leap::learner {
namespace {

using json = nlohmann::json;

// Sequences scored together in one forward pass: at most this many padded tokens.
constexpr std::int64_t scoring_batch_tokens = 8192;

status check_ids(const std::vector<std::int32_t>& ids, std::int64_t vocab,
                 const std::string& what) {
  if (ids.empty()) {
    return error{what + " is empty"};
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return error{what + ": token id " + std::to_string(ids[i]) + " at position " +
                   std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                   ")"};
    }
  }
  return ok_status();
}

// [rows, longest] int64 ids, right-padded with 0 (padding sits after every real token, so the
// causal mask already keeps it out of their attention).
at::Tensor padded_ids(const std::vector<const std::vector<std::int32_t>*>& rows,
                      at::Device device) {
  std::size_t longest = 0;
  for (const auto* r : rows) {
    longest = std::max(longest, r->size());
  }
  std::vector<std::int64_t> flat(rows.size() * longest, 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i]->begin(), rows[i]->end(),
              flat.begin() + static_cast<std::ptrdiff_t>(i * longest));
  }
  return at::tensor(flat, at::TensorOptions().dtype(at::kLong))
      .view({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(longest)})
      .to(device);
}

std::vector<float> to_float_vector(const at::Tensor& t) {
  const auto cpu = t.detach().to(at::kCPU, at::kFloat).contiguous();
  return {cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel()};
}

// Picks the next token of each row and its log-prob under the unmodified model. Sampling draws one
// uniform per row on the host from `engine`, so results depend on the seed, not on device RNGs.
std::pair<at::Tensor, at::Tensor> choose_tokens(const at::Tensor& logits,
                                                const sampling_params& params,
                                                std::mt19937_64& engine) {
  const auto logp = at::log_softmax(logits, -1);
  at::Tensor next;
  if (params.temperature == 0) {
    next = logits.argmax(-1);
  } else {
    auto scaled = logits / params.temperature;
    const auto vocab = logits.size(-1);
    if (params.top_k > 0 && params.top_k < vocab) {
      const auto kth = std::get<0>(scaled.topk(params.top_k, -1)).narrow(-1, params.top_k - 1, 1);
      scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<double>::infinity());
    }
    auto probs = at::softmax(scaled, -1);
    if (params.top_p < 1.0) {
      // Keep the smallest set of most likely tokens whose mass reaches top_p (the first one
      // always).
      auto [sorted, order] = probs.sort(-1, /*descending=*/true);
      const auto before = sorted.cumsum(-1) - sorted;
      sorted = sorted.masked_fill(before > params.top_p, 0.0);
      probs = at::zeros_like(probs).scatter(-1, order, sorted);
    }
    const auto cdf = probs.cumsum(-1);
    std::vector<double> u(static_cast<std::size_t>(logits.size(0)));
    for (auto& x : u) {
      x = static_cast<double>(engine() >> 11) * 0x1.0p-53;
    }
    // Scaling by the cdf's own last value (not a separately summed total) keeps the draw strictly
    // below it, so a token of zero probability is never picked.
    const auto draw =
        at::tensor(u, at::TensorOptions().dtype(at::kDouble)).to(cdf.device(), cdf.scalar_type()) *
        cdf.narrow(-1, vocab - 1, 1).squeeze(-1);
    next = (cdf <= draw.unsqueeze(1)).sum(-1).clamp_max(vocab - 1);
  }
  return {next, logp.gather(-1, next.unsqueeze(1)).squeeze(1)};
}

status validate(const sampling_params& p) {
  if (p.max_tokens < 1) {
    return error{"'max_tokens' must be at least 1 (got " + std::to_string(p.max_tokens) + ")"};
  }
  if (!(p.temperature >= 0)) {
    return error{"'temperature' must be >= 0"};
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return error{"'top_p' must be in (0, 1]"};
  }
  if (p.top_k < 0) {
    return error{"'top_k' must be >= 0 (0 = off)"};
  }
  if (p.n < 1) {
    return error{"'n' must be at least 1"};
  }
  return ok_status();
}

}  // namespace

policy::policy(std::unique_ptr<detail::transformer> impl) : impl_(std::move(impl)) {}
policy::policy(policy&&) noexcept = default;
policy& policy::operator=(policy&&) noexcept = default;
policy::~policy() = default;

result<policy> policy::load(const std::string& model_dir, const policy_options& options) {
  return detail::guarded("loading '" + model_dir + "'", [&]() -> result<policy> {
    auto config = read_model_config(model_dir);
    if (!config) {
      return config.err();
    }
    auto weights = detail::mapped_checkpoint::open_dir(model_dir);
    if (!weights) {
      return weights.err();
    }
    auto model = detail::make_transformer(*config, weights->tensors(), options);
    if (!model) {
      return model.err().wrap("'" + model_dir + "'");
    }
    return policy(std::move(*model));
  });
}

result<policy> policy::create_random(const model_config& config, std::uint64_t seed,
                                     const policy_options& options) {
  // The round trip through JSON validates a config built in code exactly as a file is validated.
  auto checked = parse_model_config(to_json(config));
  if (!checked) {
    return checked.err().wrap("invalid model config");
  }
  return detail::guarded("creating a random model", [&]() -> result<policy> {
    const bool f64 = options.dtype == "float64";
    auto weights = random_weights(*checked, seed, f64 ? dtype::f64 : dtype::f32);
    auto model = detail::make_transformer(*checked, detail::views_of(weights), options);
    if (!model) {
      return model.err();
    }
    (*model)->config.torch_dtype = detail::dtype_name((*model)->dtype);
    return policy(std::move(*model));
  });
}

result<policy> policy::create_random_on_device(const model_config& config, std::uint64_t seed,
                                               const policy_options& options) {
  auto checked = parse_model_config(to_json(config));
  if (!checked) {
    return checked.err().wrap("invalid model config");
  }
  return detail::guarded("creating a random model", [&]() -> result<policy> {
    auto model = detail::make_empty_transformer(*checked, options);
    if (!model) {
      return model.err();
    }
    (*model)->draw_weights(seed);
    (*model)->config.torch_dtype = detail::dtype_name((*model)->dtype);
    return policy(std::move(*model));
  });
}

const model_config& policy::config() const { return impl_->config; }

std::string policy::device() const { return detail::device_name(impl_->device); }

std::string policy::dtype() const { return detail::dtype_name(impl_->dtype); }

result<std::vector<std::vector<float>>> policy::token_logprobs(
    const std::vector<std::vector<std::int32_t>>& sequences) const {
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    if (auto s = check_ids(sequences[i], impl_->config.vocab_size, "sequence " + std::to_string(i));
        !s) {
      return s.err();
    }
  }
  return detail::guarded("scoring", [&]() -> result<std::vector<std::vector<float>>> {
    at::NoGradGuard no_grad;
    std::vector<std::vector<float>> out(sequences.size());
    std::size_t begin = 0;
    while (begin < sequences.size()) {
      // Group consecutive sequences while the padded group stays within the token budget.
      std::size_t end = begin;
      std::size_t longest = 0;
      while (end < sequences.size()) {
        const auto l = std::max(longest, sequences[end].size());
        if (end > begin &&
            static_cast<std::int64_t>(l * (end - begin + 1)) > scoring_batch_tokens) {
          break;
        }
        longest = l;
        ++end;
      }
      std::vector<const std::vector<std::int32_t>*> rows;
      std::vector<std::int64_t> positions;
      std::vector<std::int64_t> targets;
      for (std::size_t i = begin; i < end; ++i) {
        rows.push_back(&sequences[i]);
        for (std::size_t t = 0; t + 1 < sequences[i].size(); ++t) {
          positions.push_back(static_cast<std::int64_t>((i - begin) * longest + t));
          targets.push_back(sequences[i][t + 1]);
        }
      }
      std::vector<float> values;
      if (!positions.empty()) {
        const auto ids = padded_ids(rows, impl_->device);
        const auto hidden = impl_->forward_hidden(ids, nullptr);
        const auto index =
            at::tensor(positions, at::TensorOptions().dtype(at::kLong)).to(impl_->device);
        const auto target =
            at::tensor(targets, at::TensorOptions().dtype(at::kLong)).to(impl_->device);
        const auto selected = hidden.reshape({-1, hidden.size(-1)}).index_select(0, index);
        values = to_float_vector(detail::chunked_logprobs(selected, impl_->output_weight(), target,
                                                          impl_->logprob_chunk, false)
                                     .first);
      }
      std::size_t k = 0;
      for (std::size_t i = begin; i < end; ++i) {
        auto& v = out[i];
        v.assign(sequences[i].size(), 0.0F);
        for (std::size_t t = 1; t < v.size(); ++t) {
          v[t] = values[k++];
        }
      }
      begin = end;
    }
    return out;
  });
}

result<std::vector<float>> policy::logits(const std::vector<std::int32_t>& token_ids) const {
  if (auto s = check_ids(token_ids, impl_->config.vocab_size, "the sequence"); !s) {
    return s.err();
  }
  return detail::guarded("computing logits", [&]() -> result<std::vector<float>> {
    at::NoGradGuard no_grad;
    const auto ids = padded_ids({&token_ids}, impl_->device);
    return to_float_vector(impl_->logits(impl_->forward_hidden(ids, nullptr)).reshape({-1}));
  });
}

result<std::vector<completion>> policy::sample(const std::vector<std::int32_t>& prompt,
                                               const sampling_params& params) const {
  if (auto s = validate(params); !s) {
    return s.err();
  }
  if (auto s = check_ids(prompt, impl_->config.vocab_size, "the prompt"); !s) {
    return s.err();
  }
  return detail::guarded("sampling", [&]() -> result<std::vector<completion>> {
    at::NoGradGuard no_grad;
    const auto& model = *impl_;
    std::mt19937_64 engine(params.seed);
    const std::set<std::int32_t> stops(params.stop_token_ids.begin(), params.stop_token_ids.end());
    const auto n = params.n;
    std::vector<completion> out(static_cast<std::size_t>(n));
    std::vector<std::int64_t> active(static_cast<std::size_t>(n));  // row -> completion
    for (std::int64_t i = 0; i < n; ++i) {
      active[static_cast<std::size_t>(i)] = i;
    }

    detail::kv_cache cache;
    at::Tensor last;  // [rows, hidden]: the hidden state that predicts each row's next token
    const auto prompt_ids = padded_ids({&prompt}, model.device);
    if (params.use_kv_cache) {
      // The prompt is encoded once, then its cache is shared by the n rows.
      const auto hidden = model.forward_hidden(prompt_ids, &cache);
      const auto rows = at::zeros({n}, at::TensorOptions().dtype(at::kLong).device(model.device));
      cache.select_rows(rows);
      last = hidden.select(1, hidden.size(1) - 1).expand({n, hidden.size(-1)});
    } else {
      const auto hidden = model.forward_hidden(prompt_ids, nullptr);
      last = hidden.select(1, hidden.size(1) - 1).expand({n, hidden.size(-1)});
    }
    for (std::int64_t step = 0; step < params.max_tokens; ++step) {
      auto [next, logp] = choose_tokens(model.logits(last), params, engine);
      const auto next_cpu = next.to(at::kCPU);
      const auto logp_cpu = logp.to(at::kCPU, at::kFloat);
      std::vector<std::int64_t> keep;
      for (std::size_t r = 0; r < active.size(); ++r) {
        auto& c = out[static_cast<std::size_t>(active[r])];
        const auto token =
            static_cast<std::int32_t>(next_cpu[static_cast<std::int64_t>(r)].item<std::int64_t>());
        c.token_ids.push_back(token);
        c.logprobs.push_back(logp_cpu[static_cast<std::int64_t>(r)].item<float>());
        if (stops.contains(token)) {
          c.finish = finish_reason::stop;
        } else {
          keep.push_back(static_cast<std::int64_t>(r));
        }
      }
      if (keep.empty() || step + 1 == params.max_tokens) {
        break;
      }
      if (keep.size() < active.size()) {
        const auto rows = at::tensor(keep, at::TensorOptions().dtype(at::kLong)).to(model.device);
        if (params.use_kv_cache) {
          cache.select_rows(rows);
        }
        next = next.index_select(0, rows);
        std::vector<std::int64_t> still;
        for (auto r : keep) {
          still.push_back(active[static_cast<std::size_t>(r)]);
        }
        active = std::move(still);
      }
      if (params.use_kv_cache) {
        const auto hidden = model.forward_hidden(next.view({-1, 1}), &cache);
        last = hidden.select(1, 0);
      } else {
        // Recompute everything from the prompt: the reference the cached path must agree with.
        std::vector<std::vector<std::int32_t>> seqs;
        std::vector<const std::vector<std::int32_t>*> rows;
        for (auto a : active) {
          auto s = prompt;
          const auto& toks = out[static_cast<std::size_t>(a)].token_ids;
          s.insert(s.end(), toks.begin(), toks.end());
          seqs.push_back(std::move(s));
        }
        for (const auto& s : seqs) {
          rows.push_back(&s);
        }
        const auto hidden = model.forward_hidden(padded_ids(rows, model.device), nullptr);
        last = hidden.select(1, hidden.size(1) - 1);
      }
    }
    return out;
  });
}

status policy::save(const std::string& dir, const std::string& dtype_name,
                    std::int64_t max_shard_bytes, durability sync) const {
  return detail::guarded("saving to '" + dir + "'", [&]() -> status {
    if (auto s = detail::make_directories(dir); !s) {
      return s;
    }
    at::ScalarType type = impl_->dtype;
    if (!dtype_name.empty()) {
      auto t = detail::parse_compute_dtype(dtype_name, "");
      if (!t) {
        return t.err();
      }
      type = *t;
    }
    tensor_map tensors;
    for (auto& [name, t] : impl_->base_parameters()) {
      auto host = detail::to_host(t->detach().to(type));
      if (!host) {
        return host.err();
      }
      tensors.emplace(name, std::move(*host));
    }
    auto config = impl_->config;
    config.torch_dtype = detail::dtype_name(type);
    if (auto s = write_safetensors_dir(dir, tensors, "model", max_shard_bytes, sync); !s) {
      return s;
    }
    return write_model_config(dir, config, sync);
  });
}

status policy::reload_weights(const std::string& model_dir) {
  return detail::guarded("reloading weights from '" + model_dir + "'", [&]() -> status {
    auto config = read_model_config(model_dir);
    if (!config) {
      return config.err();
    }
    if (parameter_shapes(*config) != parameter_shapes(impl_->config)) {
      return error{"'" + model_dir + "' holds a different architecture than the loaded model"};
    }
    // Mapped, not read: each tensor is copied once, from the page cache to the device.
    auto weights = detail::mapped_checkpoint::open_dir(model_dir);
    if (!weights) {
      return weights.err();
    }
    return impl_->assign_weights(weights->tensors());
  });
}

status policy::copy_weights_from(const policy& source) {
  return detail::guarded("copying weights in memory", [&]() -> status {
    if (parameter_shapes(source.impl_->config) != parameter_shapes(impl_->config)) {
      return error{"the source model has a different architecture than this one"};
    }
    if (source.has_lora()) {
      return error{"the source model carries LoRA adapters; merge them before copying weights"};
    }
    at::NoGradGuard no_grad;
    // base_parameters() only hands out pointers; the source's tensors are read, never written.
    auto from = source.impl_->base_parameters();
    auto to = impl_->base_parameters();
    if (from.size() != to.size()) {
      return error{"the source model has " + std::to_string(from.size()) + " tensors, this one " +
                   std::to_string(to.size())};
    }
    // Stage what needs a device or dtype conversion (the step that can run out of memory) before
    // the first tensor is replaced; same-device same-dtype copies cannot fail half-way.
    std::vector<at::Tensor> staged(from.size());
    for (std::size_t i = 0; i < from.size(); ++i) {
      const at::Tensor& src = *from[i].tensor;
      const at::Tensor& dst = *to[i].tensor;
      if (from[i].name != to[i].name || !src.sizes().equals(dst.sizes())) {
        return error{"tensor '" + from[i].name + "' does not match '" + to[i].name + "'"};
      }
      staged[i] = src.device() == dst.device() && src.scalar_type() == dst.scalar_type()
                      ? src
                      : src.to(dst.device(), dst.scalar_type(), false, true);
    }
    for (std::size_t i = 0; i < to.size(); ++i) {
      to[i].tensor->copy_(staged[i]);
    }
    return ok_status();
  });
}

std::vector<std::string> policy::parameter_names() const {
  std::vector<std::string> names;
  for (auto& [name, t] : impl_->base_parameters()) {
    names.push_back(name);
  }
  for (auto& [name, t] : impl_->lora_parameters()) {
    names.push_back(name);
  }
  return names;
}

namespace {

at::Tensor* find_parameter(detail::transformer& model, const std::string& name) {
  for (auto& [n, t] : model.base_parameters()) {
    if (n == name) {
      return t;
    }
  }
  for (auto& [n, t] : model.lora_parameters()) {
    if (n == name) {
      return t;
    }
  }
  return nullptr;
}

}  // namespace

result<host_tensor> policy::parameter(const std::string& name) const {
  auto* t = find_parameter(*impl_, name);
  if (t == nullptr) {
    return error{"unknown parameter '" + name + "'"};
  }
  return detail::guarded("reading '" + name + "'", [&] { return detail::to_host(*t); });
}

status policy::set_parameter(const std::string& name, const host_tensor& value) {
  auto* t = find_parameter(*impl_, name);
  if (t == nullptr) {
    return error{"unknown parameter '" + name + "'"};
  }
  if (!std::equal(value.shape.begin(), value.shape.end(), t->sizes().begin(), t->sizes().end())) {
    return error{"parameter '" + name + "': shape mismatch"};
  }
  return detail::guarded("setting '" + name + "'", [&]() -> status {
    at::NoGradGuard no_grad;
    t->copy_(detail::to_tensor(value, impl_->device, impl_->dtype));
    return ok_status();
  });
}

status policy::add_lora(const lora_options& options) {
  return detail::guarded("adding LoRA adapters", [&] { return impl_->add_lora(options); });
}

bool policy::has_lora() const { return impl_->lora_rank > 0; }

status policy::save_lora_adapter(const std::string& dir,
                                 const std::string& base_model_name_or_path) const {
  if (!has_lora()) {
    return error{"the model has no LoRA adapters to save"};
  }
  return detail::guarded("saving the LoRA adapter to '" + dir + "'", [&]() -> status {
    if (auto s = detail::make_directories(dir); !s) {
      return s;
    }
    tensor_map tensors;
    for (auto& [name, t] : impl_->lora_parameters()) {
      auto host = detail::to_host(*t);
      if (!host) {
        return host.err();
      }
      tensors.emplace(detail::peft_name(name), std::move(*host));
    }
    // The keys PEFT writes and vLLM's LoRA loader reads; dropout is irrelevant at inference.
    const json config = {
        {"peft_type", "LORA"},
        {"task_type", "CAUSAL_LM"},
        {"base_model_name_or_path", base_model_name_or_path},
        {"r", impl_->lora_rank},
        {"lora_alpha", impl_->lora_alpha},
        {"lora_dropout", 0.0},
        {"target_modules", impl_->lora_targets},
        {"bias", "none"},
        {"fan_in_fan_out", false},
        {"inference_mode", true},
        {"init_lora_weights", true},
        {"modules_to_save", nullptr},
        {"layers_to_transform", nullptr},
        {"layers_pattern", nullptr},
        {"rank_pattern", json::object()},
        {"alpha_pattern", json::object()},
        {"use_rslora", false},
        {"use_dora", false},
        {"revision", nullptr},
    };
    if (auto s = write_safetensors(detail::join(dir, "adapter_model.safetensors"), tensors,
                                   {{"format", "pt"}});
        !s) {
      return s;
    }
    return write_file_durably(detail::join(dir, "adapter_config.json"), config.dump(2) + "\n");
  });
}

status policy::load_lora_adapter(const std::string& dir) {
  const auto config_path = detail::join(dir, "adapter_config.json");
  std::ifstream in(config_path);
  if (!in) {
    return error{"cannot open '" + config_path + "'"};
  }
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& e) {
    return error{"'" + config_path + "': not valid JSON: " + e.what()};
  }
  lora_options options;
  try {
    if (config.value("peft_type", std::string("LORA")) != "LORA") {
      return error{"'" + config_path + "': 'peft_type' must be LORA"};
    }
    if (config.value("fan_in_fan_out", false) || config.value("use_rslora", false) ||
        config.value("use_dora", false)) {
      return error{"'" + config_path +
                   "': fan_in_fan_out, use_rslora and use_dora are not supported"};
    }
    if (config.value("bias", std::string("none")) != "none") {
      return error{"'" + config_path + "': only 'bias': 'none' is supported"};
    }
    if (config.contains("rank_pattern") && !config["rank_pattern"].empty()) {
      return error{"'" + config_path + "': per-module 'rank_pattern' is not supported"};
    }
    if (config.contains("alpha_pattern") && !config["alpha_pattern"].empty()) {
      return error{"'" + config_path + "': per-module 'alpha_pattern' is not supported"};
    }
    options.rank = config.at("r").get<std::int64_t>();
    options.alpha = config.at("lora_alpha").get<double>();
    if (!config.at("target_modules").is_array()) {
      return error{"'" + config_path + "': 'target_modules' must be a list of module names"};
    }
    options.target_modules = config.at("target_modules").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    return error{"'" + config_path + "': " + e.what()};
  }
  auto tensors = read_safetensors(detail::join(dir, "adapter_model.safetensors"));
  if (!tensors) {
    return tensors.err();
  }
  return detail::guarded("loading the LoRA adapter '" + dir + "'", [&]() -> status {
    // Build the adapters on a copy of the LoRA state so a bad file leaves the model as it was.
    auto& model = *impl_;
    const auto saved_rank = model.lora_rank;
    const auto saved_alpha = model.lora_alpha;
    const auto saved_targets = model.lora_targets;
    std::vector<std::pair<at::Tensor, at::Tensor>> saved_tensors;
    std::vector<double> saved_scales;
    for (auto& l : model.layers) {
      for (auto* p :
           {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
        saved_tensors.emplace_back(p->lora_a, p->lora_b);
        saved_scales.push_back(p->lora_scale);
        p->lora_a = at::Tensor();
        p->lora_b = at::Tensor();
        p->lora_scale = 0;
      }
    }
    model.lora_rank = 0;
    auto restore = [&] {
      std::size_t k = 0;
      for (auto& l : model.layers) {
        for (auto* p :
             {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
          p->lora_a = saved_tensors[k].first;
          p->lora_b = saved_tensors[k].second;
          p->lora_scale = saved_scales[k];
          ++k;
        }
      }
      model.lora_rank = saved_rank;
      model.lora_alpha = saved_alpha;
      model.lora_targets = saved_targets;
    };
    if (auto s = model.add_lora(options); !s) {
      restore();
      return s.err().wrap("'" + config_path + "'");
    }
    std::set<std::string> used;
    for (auto& [name, t] : model.lora_parameters()) {
      const auto file_name = detail::peft_name(name);
      auto it = tensors->find(file_name);
      if (it == tensors->end()) {
        restore();
        return error{"'" + dir + "': adapter tensor '" + file_name + "' is missing"};
      }
      if (!std::equal(it->second.shape.begin(), it->second.shape.end(), t->sizes().begin(),
                      t->sizes().end())) {
        restore();
        return error{"'" + dir + "': adapter tensor '" + file_name + "' has the wrong shape"};
      }
      *t = detail::to_tensor(it->second, model.device, model.dtype);
      used.insert(file_name);
    }
    for (const auto& [name, t] : *tensors) {
      if (!used.contains(name)) {
        restore();
        return error{"'" + dir + "': unexpected adapter tensor '" + name + "'"};
      }
    }
    return ok_status();
  });
}

status policy::merge_lora() {
  if (!has_lora()) {
    return error{"the model has no LoRA adapters to merge"};
  }
  return detail::guarded("merging LoRA adapters", [&]() -> status {
    impl_->merge_lora();
    return ok_status();
  });
}

result<device_memory> memory_stats(const std::string& device) {
  auto d = detail::parse_device(device);
  if (!d) {
    return d.err();
  }
  device_memory m;
#ifdef LEAP_LEARNER_CUDA
  if (d->is_cuda()) {
    // Index 0 of each stat array is the aggregate over pool kinds in every LibTorch version.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d->index());
    m.allocated_bytes = stats.allocated_bytes[0].current;
    m.peak_allocated_bytes = stats.allocated_bytes[0].peak;
  }
#endif
  return m;
}

status reset_peak_memory(const std::string& device) {
  auto d = detail::parse_device(device);
  if (!d) {
    return d.err();
  }
#ifdef LEAP_LEARNER_CUDA
  if (d->is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(d->index());
  }
#endif
  return ok_status();
}

status synchronize(const std::string& device) {
  auto d = detail::parse_device(device);
  if (!d) {
    return d.err();
  }
  if (d->is_cuda()) {
    return detail::guarded("synchronize", [&]() -> status {
      torch::cuda::synchronize(d->index());
      return ok_status();
    });
  }
  return ok_status();
}

void keep_freed_host_memory() {
#if defined(__GLIBC__)
  // Blocks up to 32 MiB (glibc's ceiling for this setting) come from the heap, not fresh mmaps,
  // and up to 1 GiB of free heap stays mapped.
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
#endif
}

}  // namespace leap::learner
