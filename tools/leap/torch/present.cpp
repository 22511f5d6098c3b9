// `leap-torch`'s side of tools/leap/torch/torch.hpp: the LibTorch work itself.
#include "actors/torch/torch_policy_backend.hpp"
#include "learner/model_config.hpp"
#include "learner/safetensors.hpp"
#include "tools/launch/torch/torch_parts.hpp"
#include "tools/leap/torch/torch.hpp"

#include <filesystem>
#include <iostream>

namespace leap::cli::torch {
namespace {

int fail_init_model(const std::string& message) {
  std::cerr << "leap init-model: error: " << message << "\n";
  return 1;
}

}  // namespace

bool linked() { return true; }

void install() { launch::install_libtorch_parts(); }

error hand_over() { return error{"leap-torch does not hand its commands over"}; }

int init_model(const init_model_options& o) {
  if (auto preset = actors::byte_model_preset(o.preset); !preset) {
    return fail_init_model("--preset: " + preset.err().message);
  }
  if (auto type = learner::parse_torch_dtype(o.dtype); !type) {
    return fail_init_model("--dtype: " + type.err().message);
  }
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(o.out) / "config.json", ec) && !o.force) {
    return fail_init_model(o.out + " already holds a model (config.json); pass --force to " +
                           "overwrite it");
  }
  auto written = actors::write_random_model(o.preset, o.out, o.seed, o.dtype, o.tokenizer);
  if (!written) {
    return fail_init_model((o.tokenizer.empty() ? "" : "--tokenizer: ") + written.err().message);
  }
  const auto& config = written->config;
  std::cout << "leap init-model: wrote a random " << o.preset << " "
            << (o.tokenizer.empty() ? std::string("byte-level") : "tokenizer " + o.tokenizer)
            << " model (" << written->parameters << " parameters, " << config.num_hidden_layers
            << " layers, hidden " << config.hidden_size << ", vocab " << config.vocab_size << ", "
            << o.dtype << ", seed " << o.seed << ") to " << o.out << "\n";
  return 0;
}

result<served_model> serve_model(const std::string& model_dir, const std::string& device,
                                 const std::string& dtype) {
  auto config = learner::read_model_config(model_dir);
  if (!config) {
    return config.err();
  }
  // The folder's own tokenizer and chat template when it holds tokenizer.json.
  auto vocab = policy::load_vocabulary(model_dir);
  if (!vocab) {
    return vocab.err();
  }
  actors::torch_backend_options backend_options;
  backend_options.device = device;
  backend_options.dtype = dtype;
  backend_options.vocab = *vocab;
  auto backend = actors::make_torch_policy_backend(model_dir, backend_options);
  if (!backend) {
    return backend.err();
  }
  served_model out;
  out.backend = std::move(*backend);
  out.vocab = *vocab;
  out.vocab_size = config->vocab_size;
  out.num_hidden_layers = config->num_hidden_layers;
  out.hidden_size = config->hidden_size;
  out.max_position_embeddings = config->max_position_embeddings;
  return out;
}

}  // namespace leap::cli::torch
