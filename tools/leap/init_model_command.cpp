// `leap init-model`: writes a randomly initialised model (byte-level, or with --tokenizer a Hugging
// Face tokenizer's vocabulary, its files copied beside the weights) in Hugging Face layout
// (config.json + model.safetensors), the starting point of toy runs and of tests that need a real
// model for `leap serve-policy --model` and `learner.kind: torch`. The weights are drawn by
// learner::random_weights (as policy::create_random draws them), in leap-torch
// (tools/leap/torch/torch.hpp): the learner library links LibTorch.
#include "tools/leap/command.hpp"
#include "tools/leap/torch/torch.hpp"

#include <CLI/CLI.hpp>

#include <memory>

namespace leap::cli {
namespace {

using torch::init_model_options;

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
  cmd->callback([options, exit_code] { *exit_code = torch::init_model(*options); });
}

LEAP_COMMAND("init-model", add_init_model);

}  // namespace
}  // namespace leap::cli
