// The LibTorch policy behind the project's OpenAI-compatible server: implements
// policy/server/server.hpp's policy_backend over learner::policy's torch-free API (sample, logits,
// reload_weights). It lives in actors/ because it is the one folder allowed to know both the
// HTTP side (policy/) and LibTorch's (learner/); it includes no LibTorch header itself.
//
// Tokenizer: the folder's own (policy::load_vocabulary: tokenizer.json and its chat template) when
// the folder holds tokenizer.json, and then the model's vocab_size must cover it (added tokens
// included; checkpoints pad it, Qwen3's 151936 for 151669 ids); else the project's byte-level
// tokenizer and ChatML template (policy/chat/chat.hpp, 261 ids), and vocab_size must be
// 261.
#pragma once

#include "common/result.hpp"
#include "learner/model_config.hpp"
#include "policy/chat/chat.hpp"
#include "policy/server/server.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace leap::learner {
class policy;
}  // namespace leap::learner

namespace leap::actors {

// The weights path that asks the backend for its in-memory weight source instead of a folder
// (policy.flavour embedded with the torch learner: the learner and the server share the process).
inline constexpr std::string_view in_memory_weights = "leap:in-memory";

// Writes weight version `version` into `target` (the served model, held exclusively meanwhile),
// e.g. torch_learner::copy_weights_to. Errors are the sync's (the server answers 500 and keeps
// the weights it had, if the source guarantees all-or-nothing, as learner::policy does).
using weight_source = std::function<status(learner::policy& target, std::int64_t version)>;

struct torch_backend_options {
  std::string device = "cpu";     // "cpu", "cuda", "cuda:N". Default: cpu
  std::string dtype = "float32";  // as learner::policy_options::dtype. Default: float32
  // Serves load_weights(in_memory_weights, version). Default: none (that path is refused)
  weight_source source;
  // How long the nccl weight-transfer engine waits for the learner: to join the group, and for
  // each tensor of an update. Default: 5 min
  std::chrono::milliseconds transfer_timeout{300'000};
  // The served vocabulary: its end-of-generation ids end sampling. Default: null, the byte-level
  // tokenizer (the model must then have vocab_size 261)
  std::shared_ptr<const policy::model_vocabulary> vocab;
};

// Checks that a model's vocabulary is the byte tokenizer's (vocab_size 261). Pure.
// Errors: another vocabulary size, naming it and what a --model folder must hold.
[[nodiscard]] status check_byte_vocabulary(const learner::model_config& config);

// Checks that a model's embedding covers `vocab` (vocab_size at least the tokenizer's ids). Pure.
// Errors: a smaller vocab_size, naming both sizes.
[[nodiscard]] status check_vocabulary(const learner::model_config& config,
                                      const policy::model_vocabulary& vocab);

// The shape of a byte-level model for `leap init-model --preset`: "tiny" (hidden 64, 2 layers,
// 4 heads over 2 kv heads; about 0.1 M parameters, for tests) or "small" (hidden 256, 4 layers,
// 8 heads over 2 kv heads; about 3 M, a toy task on a CPU), both in Qwen2 layout (q/k/v biases,
// tied embeddings) with 2048 positions; or the architecture of a public checkpoint,
// learner::model_preset's "qwen3-0.6b", "qwen3-1.7b", "qwen3-8b" (also "qwen2-0.5b",
// "qwen2-1.5b"), with its layers, heads, head_dim, q/k norms, rope_theta and tied embeddings as
// published but the byte vocabulary (about 0.44 B, 1.4 B and 6.9 B parameters for the Qwen3
// ones). All: vocab 261, <|bos|> 256, eos <|eos|> 257 and <|im_end|> 259.
// Errors: an unknown preset name.
[[nodiscard]] result<learner::model_config> byte_model_preset(const std::string& name);

// What write_random_byte_model wrote.
struct random_model_info {
  learner::model_config config;
  std::int64_t parameters = 0;
};

// Writes a randomly initialised byte-level model of `preset` to `dir` (created) in Hugging Face
// layout, config.json + model.safetensors, weights drawn by learner::random_weights from `seed` and
// stored as `dtype` ("float32", "bfloat16", "float16", "float64"). Overwrites what is there.
// Errors: an unknown preset or dtype, a folder or file that cannot be written (named).
[[nodiscard]] result<random_model_info> write_random_byte_model(
    const std::string& preset, const std::string& dir, std::uint64_t seed,
    const std::string& dtype = "float32");

// The same with the vocabulary of the Hugging Face tokenizer in `tokenizer_dir` (tokenizer.json,
// tokenizer_config.json and its chat template, as policy::load_vocabulary reads them): vocab_size
// is the tokenizer's ids (added tokens included) rounded up to a multiple of 128, as checkpoints
// pad it (Qwen3: 151669 ids, 151936 rows), eos_token_id its end-of-generation ids, and
// tokenizer.json, tokenizer_config.json and chat_template.jinja (when there) are copied into `dir`,
// so `leap serve-policy --model DIR` serves it with that tokenizer. An empty `tokenizer_dir` is
// write_random_byte_model. Errors: those, a folder without tokenizer.json, the tokenizer's.
[[nodiscard]] result<random_model_info> write_random_model(const std::string& preset,
                                                           const std::string& dir,
                                                           std::uint64_t seed,
                                                           const std::string& dtype,
                                                           const std::string& tokenizer_dir);

// Loads `model_dir` (config.json + safetensors) for serving. Errors: check_byte_vocabulary's,
// learner::policy::load's (naming the file and key).
//
// The backend's generate() samples one sequence with the request's temperature, top_p, top_k and
// seed (no seed: the server's request serial and the sample index stand in), up to max_tokens, and
// ends at <|eos|>, <|im_end|> or a request stop id (unless ignore_eos or min_tokens asks for more;
// the server cuts then). Log-probs are the unmodified model's (temperature 1, no filtering), as
// learner::policy::sample reports them and the learner's importance ratio needs. Tokens reach the
// sink once sampling ends (learner::policy samples a whole completion per call): an abort or a
// pause is honoured before and after sampling, not inside it.
// load_weights(path, version) reloads the weights of the model folder `path` (a learner
// checkpoint), or with path in_memory_weights asks options.source for them (no file is read);
// generations run under a shared lock, a reload under an exclusive one, so a generation samples
// wholly from the old or wholly from the new weights.
// vLLM's nccl weight-transfer engine (a policy_server with transfer_backend::nccl): the
// backend joins the learner's c10d group at /init_weight_transfer_engine, receives each
// /update_weights into a staging buffer (learner/weight_broadcast.hpp) and swaps it in at
// /finish_weight_update under the exclusive lock; a cut transfer drops the staging and the group.
// The project's ipc engine (transfer_backend::ipc, a cuda device): init is a no-op (an
// empty init_info), each /update_weights opens the learner's exported buffer
// (learner/weight_ipc.hpp), copies it into staging and closes it; /finish_weight_update swaps the
// staging in as for nccl.
[[nodiscard]] result<std::shared_ptr<policy::policy_backend>> make_torch_policy_backend(
    const std::string& model_dir, const torch_backend_options& options = {});

}  // namespace leap::actors
