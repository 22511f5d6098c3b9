// The `leap` command's LibTorch work, and how a command gets it. Two programs are built from the
// same command files: `leap`, which links no LibTorch, so that its start costs no LibTorch load
// (about 295 libraries and 0.9 CPU-s, before main, on every start), and `leap-torch`, installed
// beside it, which links it. Each links one definition of these functions: `leap-torch`
// tools/leap/torch/present.cpp (the work itself), `leap` tools/leap/torch/absent.cpp, where each
// hands the process's whole command line to `leap-torch` (exec: same pid, arguments, environment
// and output), which runs the same command with the same messages and exit code. The commands
// that need it: `leap init-model`, `leap serve-policy --model` (or --backend torch) and
// `leap run` of a config that launch::needs_torch().
#pragma once

#include "common/result.hpp"
#include "policy/chat/chat.hpp"
#include "policy/server/server.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace leap::cli::torch {

// Whether this program links LibTorch (leap-torch). Thread-safe.
[[nodiscard]] bool linked();

// At the start of main: leap-torch installs the LibTorch parts of runs
// (launch::install_libtorch_parts); leap nothing.
void install();

// Replaces this process with `leap-torch` from the folder of this program's executable, with the
// command line main() saw (set_command_line, command.hpp). Returns only when that fails: the
// error names the file and why ("...: No such file or directory").
[[nodiscard]] error hand_over();

// `leap init-model`'s options, as parsed.
struct init_model_options {
  std::string preset = "tiny";
  std::string out;
  std::uint64_t seed = 0;
  std::string dtype = "float32";
  bool force = false;
  std::string tokenizer;
};

// `leap init-model`: writes the model and prints what it wrote; its exit status (errors printed
// as "leap init-model: error: ...").
[[nodiscard]] int init_model(const init_model_options& options);

// A model folder `leap serve-policy --model` serves, loaded.
struct served_model {
  std::shared_ptr<policy::policy_backend> backend;
  std::shared_ptr<const policy::model_vocabulary> vocab;  // the folder's, or the byte-level one's
  std::int64_t vocab_size = 0;                            // the model's embedding rows
  std::int64_t num_hidden_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t max_position_embeddings = 0;
};

// Loads `model_dir` (config.json, its tokenizer when it holds tokenizer.json, the weights) on
// `device` as `dtype`. Errors: the folder's, each naming the file (the caller adds "--model").
[[nodiscard]] result<served_model> serve_model(const std::string& model_dir,
                                               const std::string& device, const std::string& dtype);

}  // namespace leap::cli::torch
