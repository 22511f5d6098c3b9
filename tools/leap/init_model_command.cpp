// `leap init-model`: writes a randomly initialised model (byte-level, or with --tokenizer a Hugging
// Face tokenizer's vocabulary, its files copied beside the weights) in Hugging Face layout
// (config.json + model.safetensors), the starting point of toy runs and of tests that need a real
// model for `leap serve-policy --model` and `learner.kind: torch`. No LibTorch at run time: the
// weights are drawn by learner::random_weights (as policy::create_random draws them).
#include "actors/torch_policy_backend.hpp"
#include "learner/model_config.hpp"
#include "learner/safetensors.hpp"
#include "tools/leap/command.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

namespace leap::cli {
namespace {

struct init_model_options {
  std::string preset = "tiny";
  std::string out;
  std::uint64_t seed = 0;
  std::string dtype = "float32";
  bool force = false;
  std::string tokenizer;
};

int fail(const std::string& message) {
  std::cerr << "leap init-model: error: " << message << "\n";
  return 1;
}

int run(const init_model_options& o) {
  if (auto preset = actors::byte_model_preset(o.preset); !preset) {
    return fail("--preset: " + preset.err().message);
  }
  if (auto type = learner::parse_torch_dtype(o.dtype); !type) {
    return fail("--dtype: " + type.err().message);
  }
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(o.out) / "config.json", ec) && !o.force) {
    return fail(o.out + " already holds a model (config.json); pass --force to overwrite it");
  }
  auto written = actors::write_random_model(o.preset, o.out, o.seed, o.dtype, o.tokenizer);
  if (!written) {
    return fail((o.tokenizer.empty() ? "" : "--tokenizer: ") + written.err().message);
  }
  const auto& config = written->config;
  std::cout << "leap init-model: wrote a random " << o.preset << " "
            << (o.tokenizer.empty() ? std::string("byte-level") : "tokenizer " + o.tokenizer)
            << " model (" << written->parameters << " parameters, " << config.num_hidden_layers
            << " layers, hidden " << config.hidden_size << ", vocab " << config.vocab_size << ", "
            << o.dtype << ", seed " << o.seed << ") to " << o.out << "\n";
  return 0;
}

void add_init_model(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<init_model_options>();
  auto* cmd = app.add_subcommand(
      "init-model",
      "Write a randomly initialised model as a Hugging Face folder: config.json + "
      "model.safetensors, with the byte-level tokenizer (261 ids) or, with --tokenizer, a Hugging "
      "Face tokenizer's vocabulary and files. Serve it with "
      "`leap serve-policy --model DIR`, train it with learner.kind: torch.");
  cmd->add_option("--preset", options->preset,
                  "Model shape: tiny (~0.1 M parameters), small (~3 M), or the architecture of "
                  "qwen3-0.6b, qwen3-1.7b, qwen3-8b (with the byte vocabulary)")
      ->capture_default_str();
  cmd->add_option("--out", options->out, "Folder to write (created)")->required();
  cmd->add_option("--seed", options->seed, "Seed of the random weights")->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "Stored dtype: float32, bfloat16, float16 or float64")
      ->capture_default_str();
  cmd->add_flag("--force", options->force, "Overwrite a model already in --out");
  cmd->add_option("--tokenizer", options->tokenizer,
                  "Folder with a Hugging Face tokenizer.json (and tokenizer_config.json with its "
                  "chat template): the model gets that vocabulary (vocab_size covering it, its end "
                  "ids) and the files are copied into --out; empty: the byte-level tokenizer");
  cmd->callback([options, exit_code] { *exit_code = run(*options); });
}

LEAP_COMMAND("init-model", add_init_model);

}  // namespace
}  // namespace leap::cli
