#include "actors/torch/torch_policy_backend.hpp"

#include "common/splitmix.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"
#include "learner/weight_broadcast.hpp"
#include "learner/weight_delta.hpp"
#include "learner/weight_ipc.hpp"
#include "policy/chat/chat.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <utility>
#include <vector>

namespace leap::actors {

status check_byte_vocabulary(const learner::model_config& config) {
  if (config.vocab_size != policy::byte_tokenizer::vocab_size()) {
    return error{"vocab_size is " + std::to_string(config.vocab_size) +
                 ", but the policy server speaks the project's byte-level tokenizer (" +
                 std::to_string(policy::byte_tokenizer::vocab_size()) +
                 " ids: 256 bytes, <|bos|>, <|eos|>, <|im_start|>, <|im_end|>, <|pad|>); serve a "
                 "byte-level model (leap init-model writes one) or a Hugging Face model through "
                 "vLLM/SGLang"};
  }
  return ok_status();
}

status check_vocabulary(const learner::model_config& config,
                        const policy::model_vocabulary& vocab) {
  if (config.vocab_size < vocab.vocab_size()) {
    return error{"vocab_size is " + std::to_string(config.vocab_size) + ", smaller than the " +
                 vocab.describe() + "; the model cannot emit or embed every id"};
  }
  return ok_status();
}

result<learner::model_config> byte_model_preset(const std::string& name) {
  learner::model_config c;
  if (name.starts_with("qwen")) {
    // A public checkpoint's architecture (learner::model_preset) with the byte vocabulary.
    auto shape = learner::model_preset(name);
    if (!shape) {
      return error{"unknown preset '" + name +
                   "'; choose tiny, small, qwen3-0.6b, qwen3-1.7b or "
                   "qwen3-8b"};
    }
    c = *shape;
    c.vocab_size = policy::byte_tokenizer::vocab_size();
    c.torch_dtype = "float32";
    c.bos_token_id = policy::special::bos;
    c.eos_token_ids = {policy::special::eos, policy::special::im_end};
    return c;
  }
  c.model_type = "qwen2";
  c.vocab_size = policy::byte_tokenizer::vocab_size();
  c.qkv_bias = true;
  c.tie_word_embeddings = true;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 2048;
  c.bos_token_id = policy::special::bos;
  c.eos_token_ids = {policy::special::eos, policy::special::im_end};
  if (name == "tiny") {
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
  } else if (name == "small") {
    c.hidden_size = 256;
    c.intermediate_size = 704;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
  } else {
    return error{"unknown preset '" + name +
                 "'; choose tiny, small, qwen3-0.6b, qwen3-1.7b or "
                 "qwen3-8b"};
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

result<random_model_info> write_random_byte_model(const std::string& preset, const std::string& dir,
                                                  std::uint64_t seed, const std::string& dtype) {
  return write_random_model(preset, dir, seed, dtype, "");
}

result<random_model_info> write_random_model(const std::string& preset, const std::string& dir,
                                             std::uint64_t seed, const std::string& dtype,
                                             const std::string& tokenizer_dir) {
  auto config = byte_model_preset(preset);
  if (!config) {
    return config.err();
  }
  std::vector<std::string> copied;
  if (!tokenizer_dir.empty()) {
    std::error_code exists_ec;
    if (!std::filesystem::exists(std::filesystem::path(tokenizer_dir) / "tokenizer.json",
                                 exists_ec)) {
      return error{tokenizer_dir + ": no tokenizer.json there"};
    }
    auto vocab = policy::load_vocabulary(tokenizer_dir);
    if (!vocab) {
      return vocab.err();
    }
    config->vocab_size = (static_cast<std::int64_t>((*vocab)->vocab_size()) + 127) / 128 * 128;
    config->eos_token_ids.assign((*vocab)->end_of_generation_ids().begin(),
                                 (*vocab)->end_of_generation_ids().end());
    config->bos_token_id = -1;
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
      if (std::filesystem::exists(std::filesystem::path(tokenizer_dir) / name, exists_ec)) {
        copied.emplace_back(name);
      }
    }
  }
  auto type = learner::parse_torch_dtype(dtype);
  if (!type) {
    return type.err();
  }
  config->torch_dtype = learner::to_torch_dtype(*type);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return error{dir + ": cannot create: " + ec.message()};
  }
  const auto weights = learner::random_weights(*config, seed, *type);
  if (auto w = learner::write_safetensors_dir(dir, weights); !w) {
    return w.err();
  }
  if (auto c = learner::write_model_config(dir, *config); !c) {
    return c.err();
  }
  for (const auto& name : copied) {
    std::filesystem::copy_file(std::filesystem::path(tokenizer_dir) / name,
                               std::filesystem::path(dir) / name,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      return error{dir + "/" + name + ": cannot copy from " + tokenizer_dir + ": " + ec.message()};
    }
  }
  random_model_info info{*config, 0};
  for (const auto& [name, shape] : learner::parameter_shapes(*config)) {
    std::int64_t n = 1;
    for (auto s : shape) {
      n *= s;
    }
    info.parameters += n;
  }
  return info;
}

namespace {

class torch_policy_backend final : public policy::policy_backend {
 public:
  torch_policy_backend(learner::policy model, torch_backend_options options)
      : model_(std::move(model)), options_(std::move(options)) {}

  [[nodiscard]] std::string name() const override { return "torch"; }

  status generate(const policy::backend_request& request, policy::generation_control& control,
                  const policy::token_sink& sink) override {
    if (!control.checkpoint()) {
      return ok_status();
    }
    const auto& s = request.sampling;
    learner::sampling_params params;
    params.max_tokens = s.max_tokens.value_or(16);
    if (params.max_tokens < 1) {
      return ok_status();
    }
    params.temperature = s.temperature;
    params.top_p = s.top_p;
    params.top_k = s.top_k > 0 ? s.top_k : 0;
    params.n = 1;
    // A request seed gives the same tokens for the same prompt; n > 1 samples differ by index.
    params.seed = s.seed ? splitmix64(static_cast<std::uint64_t>(*s.seed) ^
                                      (static_cast<std::uint64_t>(request.sample_index) << 32))
                         : splitmix64(request.request_serial * 1024 +
                                      static_cast<std::uint64_t>(request.sample_index));
    // The model's end ids (and the request's stop ids) end sampling early, unless the server
    // must look past them (ignore_eos, min_tokens): then it samples max_tokens and the server cuts.
    if (!s.ignore_eos && s.min_tokens == 0) {
      params.stop_token_ids = options_.vocab->end_of_generation_ids();
      for (auto id : s.stop_token_ids) {
        params.stop_token_ids.push_back(id);
      }
    }
    std::vector<std::int32_t> prompt(request.prompt.begin(), request.prompt.end());

    std::vector<policy::token_step> steps;
    {
      std::shared_lock lock(mutex_);
      auto sampled = model_.sample(prompt, params);
      if (!sampled) {
        return sampled.err().wrap("torch backend: sampling");
      }
      const auto& c = sampled->front();
      steps.resize(c.token_ids.size());
      for (std::size_t i = 0; i < steps.size(); ++i) {
        steps[i].id = c.token_ids[i];
        steps[i].logprob = c.logprobs[i];
      }
      if (request.top_logprobs > 0 && !steps.empty()) {
        auto alternatives = top_alternatives(prompt, c.token_ids, request.top_logprobs);
        if (!alternatives) {
          return alternatives.err();
        }
        for (std::size_t i = 0; i < steps.size(); ++i) {
          steps[i].top = std::move((*alternatives)[i]);
        }
      }
    }
    if (steps.empty() || control.should_stop()) {
      return ok_status();
    }
    sink(std::span<const policy::token_step>(steps));
    return ok_status();
  }

  status load_weights(const std::string& path, std::int64_t version) override {
    if (path.empty()) {
      return error{"the LibTorch backend reloads weights from a model folder: give its path"};
    }
    if (path == in_memory_weights) {
      if (!options_.source) {
        return error{
            "this server has no in-memory weight source (it is not embedded in the "
            "learner's process): give a model folder"};
      }
      std::unique_lock lock(mutex_);
      auto copied = options_.source(model_, version);
      if (!copied) {
        return copied.err().wrap("taking weights in memory");
      }
      return ok_status();
    }
    if (learner::is_weight_delta_dir(path)) {
      // Only the changed tensors; the server has checked the delta's base version, the checksums
      // are checked here (learner/weight_delta.hpp).
      std::unique_lock lock(mutex_);
      if (auto applied = learner::apply_weight_delta(model_, path); !applied) {
        return applied.err();
      }
      return ok_status();
    }
    std::unique_lock lock(mutex_);
    auto loaded = model_.reload_weights(path);
    if (!loaded) {
      return loaded.err().wrap("reloading weights from " + path);
    }
    (void)version;  // the server reports the version; the model only needs the weights
    return ok_status();
  }

  // vLLM's nccl weight-transfer engine over learner::broadcast_receiver (c10d: NCCL on cuda where
  // built in, else gloo), and the project's ipc engine over learner::ipc_receiver (CUDA IPC from
  // a learner process on this host). The server calls these one at a time (its session lock).
  // Receiving reads only the served model's shapes, under the shared lock: generations go on
  // meanwhile.
  [[nodiscard]] bool supports_weight_transfer(transfer_backend backend) const override {
    return stages_tensors(backend);  // the server loads disk's folders through load_weights
  }

  status init_weight_transfer(transfer_backend backend, const nlohmann::json& init_info) override {
    switch (backend) {
      case transfer_backend::disk:
        return error{"the torch backend has no 'disk' engine (the server loads the folder)"};
      case transfer_backend::ipc:
        return init_ipc(init_info);
      case transfer_backend::nccl:
        return init_nccl(init_info);
    }
    return error{"the torch backend has no '" + to_string(backend) + "' engine"};
  }

  status receive_weights(const nlohmann::json& update_info) override {
    if (ipc_receiver_) {
      auto info = learner::parse_ipc_update_info(update_info);
      if (!info) {
        return info.err();
      }
      std::shared_lock lock(mutex_);  // shapes are read; generations may go on meanwhile
      return ipc_receiver_->receive(*info, model_);
    }
    auto info = policy::parse_nccl_update_info(update_info);
    if (!info) {
      return info.err();
    }
    if (!receiver_) {
      return error{
          "no weight-transfer group (none yet, or the last transfer broke it): POST "
          "/init_weight_transfer_engine first"};
    }
    if (info->delta) {
      learner::weight_delta_layout delta;
      delta.base_version = info->delta->base_version;
      for (std::size_t i = 0; i < info->names.size(); ++i) {
        delta.tensors.push_back({info->names[i], info->dtype_names[i], info->shapes[i],
                                 info->delta->num_updates_list[i],
                                 info->delta->encodings[i] == "sparse", info->delta->checksums[i]});
      }
      std::shared_lock lock(mutex_);  // read to rebuild aside; generations go on meanwhile
      auto received = receiver_->receive_delta(delta, model_);
      if (!received && !receiver_->in_step()) {
        receiver_.reset();  // as a cut full transfer: the next update asks for a rendezvous
      }
      return received;
    }
    std::vector<learner::broadcast_tensor> layout;
    for (std::size_t i = 0; i < info->names.size(); ++i) {
      layout.push_back({info->names[i], info->dtype_names[i], info->shapes[i]});
    }
    std::shared_lock lock(mutex_);  // shapes are read; generations may go on meanwhile
    auto received = receiver_->receive(layout, model_);
    if (!received) {
      // A cut transfer leaves the group unusable (the peer is gone, or out of step): drop it, so
      // that the next update asks for a new rendezvous instead of reading a broken stream.
      receiver_.reset();
    }
    return received;
  }

  status commit_weights(std::int64_t version) override {
    (void)version;
    if (ipc_receiver_) {
      std::unique_lock lock(mutex_);  // no generation runs while the weights are replaced
      return ipc_receiver_->commit(model_);
    }
    if (!receiver_) {
      return error{"no weight-transfer group: nothing was received"};
    }
    std::unique_lock lock(mutex_);  // no generation runs while the weights are replaced
    return receiver_->commit(model_);
  }

  void discard_weights() override {
    if (receiver_) {
      receiver_->discard();
    }
    if (ipc_receiver_) {
      ipc_receiver_->discard();
    }
  }

 private:
  status init_ipc(const nlohmann::json& init_info) {
    // Nothing to meet: each update names the learner's buffer. An init_info with fields is a
    // trainer that expects another engine (nccl's rendezvous): say so rather than ignore it.
    if (!init_info.is_null() && !(init_info.is_object() && init_info.empty())) {
      return error{"the ipc engine takes an empty init_info, got " + init_info.dump() +
                   " (a trainer for another backend?)"};
    }
    receiver_.reset();
    if (!ipc_receiver_) {
      ipc_receiver_ = std::make_unique<learner::ipc_receiver>();
    }
    return ok_status();
  }

  status init_nccl(const nlohmann::json& init_info) {
    auto info = policy::parse_nccl_init_info(init_info);
    if (!info) {
      return info.err();
    }
    receiver_.reset();  // a new rendezvous replaces the old group
    ipc_receiver_.reset();
    learner::broadcast_rendezvous r;
    r.master_address = info->master_address;
    r.master_port = info->master_port;
    r.rank_offset = info->rank_offset;
    r.world_size = info->world_size;
    auto joined = learner::broadcast_receiver::join(r, options_.device, options_.transfer_timeout);
    if (!joined) {
      return joined.err();
    }
    receiver_ = std::move(*joined);
    return ok_status();
  }

  // The k most likely ids at each generated position, under the unmodified model (as the sampled
  // token's log-prob). Computes the full logits of prompt + generated: fine for the small models
  // this backend serves.
  result<std::vector<std::vector<policy::top_logprob>>> top_alternatives(
      const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& generated,
      int k) const {
    std::vector<std::int32_t> all = prompt;
    all.insert(all.end(), generated.begin(), generated.end());
    auto logits = model_.logits(all);
    if (!logits) {
      return logits.err().wrap("torch backend: top log-probs");
    }
    const auto vocab = static_cast<std::size_t>(model_.config().vocab_size);
    const auto keep = std::min(static_cast<std::size_t>(k), vocab);
    std::vector<std::vector<policy::top_logprob>> out(generated.size());
    std::vector<std::size_t> order(vocab);
    for (std::size_t i = 0; i < generated.size(); ++i) {
      const float* row = logits->data() + (prompt.size() - 1 + i) * vocab;
      const double peak = *std::max_element(row, row + vocab);
      double sum = 0.0;
      for (std::size_t v = 0; v < vocab; ++v) {
        sum += std::exp(row[v] - peak);
      }
      const double log_z = peak + std::log(sum);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep),
                        order.end(), [&](std::size_t a, std::size_t b) { return row[a] > row[b]; });
      for (std::size_t j = 0; j < keep; ++j) {
        out[i].push_back({static_cast<policy::token_id>(order[j]), row[order[j]] - log_z});
      }
    }
    return out;
  }

  std::shared_mutex mutex_;  // shared: sampling; exclusive: a weight reload
  learner::policy model_;
  torch_backend_options options_;
  std::unique_ptr<learner::broadcast_receiver> receiver_;
  std::unique_ptr<learner::ipc_receiver> ipc_receiver_;  // the ipc engine, once initialised
};

}  // namespace

result<std::shared_ptr<policy::policy_backend>> make_torch_policy_backend(
    const std::string& model_dir, const torch_backend_options& options) {
  auto config = learner::read_model_config(model_dir);
  if (!config) {
    return config.err();
  }
  auto backend_options = options;
  if (!backend_options.vocab) {
    backend_options.vocab = policy::byte_vocabulary();
  }
  auto vocab = backend_options.vocab == policy::byte_vocabulary()
                   ? check_byte_vocabulary(*config)
                   : check_vocabulary(*config, *backend_options.vocab);
  if (!vocab) {
    return vocab.err().wrap(model_dir + "/config.json");
  }
  learner::policy_options po;
  po.device = options.device;
  po.dtype = options.dtype;
  auto model = learner::policy::load(model_dir, po);
  if (!model) {
    return model.err();
  }
  return std::shared_ptr<policy::policy_backend>(
      std::make_shared<torch_policy_backend>(std::move(*model), std::move(backend_options)));
}

}  // namespace leap::actors
