// The experiment config: one YAML file, parsed into typed sections and validated as a whole.
//
// Every key has a default, so an empty file is a valid config: the paper's hyperparameters (batch
// 32, G = 8 rollouts, M = 3 turns, lr 1e-6, weight decay 0.1, rollout sampling 1.0 / -1 / 0.95,
// validation sampling 0.7 / 20 / 0.95, sample-level loss) with a vLLM endpoint on 127.0.0.1:8000
// and a learner that only records its batches. Relative paths are relative to the working
// directory.
//
// The schema (key, type, default, meaning) lives in one table in config.cpp, from which parsing,
// validation, rendering and the key reference (`leap config keys`, the README) are all derived, so
// they cannot drift apart.
#pragma once

#include "common/enums/loss_aggregation.hpp"
#include "common/enums/server_flavour.hpp"
#include "common/result.hpp"
#include "orchestrator/advantage.hpp"
#include "orchestrator/gate.hpp"
#include "orchestrator/reward.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap {

enum class log_verbosity : std::uint8_t { trace, debug, info, warn, error, off };
enum class learner_kind : std::uint8_t { record, torch };
enum class schedule_mode : std::uint8_t { streaming, barrier };

struct experiment_section {
  // Names the run in logs, metrics and the store; letters, digits, '.', '_' and '-' only, because
  // it becomes part of file names and store keys. Default: "leap"
  std::string name = "leap";
  // Seeds every random choice the orchestrator makes (task order, validation split, simulation), so
  // the same config and seed replay the same run. Default: 0
  std::uint64_t seed = 0;
  // Folder for the run's store, logs, metrics and checkpoints; created when missing. Default:
  // "runs/leap"
  std::string run_dir = "runs/leap";
  // Training steps (one learner update each) before the run ends; >= 1. Default: 100
  int steps = 100;
  // Least severe log level that is printed. Default: info
  log_verbosity log_level = log_verbosity::info;

  friend bool operator==(const experiment_section&, const experiment_section&) = default;
};

struct data_section {
  // Task suite to train on (a file or folder the dataset loader reads). Empty: no training data,
  // which only `leap simulate` (synthetic tasks) accepts. Default: ""
  std::string train;
  // Held-out task suite for validation; exclusive with validation_fraction. Default: ""
  std::string validation;
  // Fraction of the training tasks held out for validation when `validation` is empty, in [0, 1).
  // 0 with an empty `validation`: no validation. Default: 0
  double validation_fraction = 0.0;
  // Task kinds to keep (the sandbox's kind names, e.g. "cuda"); empty keeps every kind. Default: []
  std::vector<std::string> task_kinds;
  // Tasks per training step (the paper's batch size); >= 1. Default: 32
  int batch_size = 32;

  friend bool operator==(const data_section&, const data_section&) = default;
};

// Sampling parameters sent with every generation request (OpenAI / vLLM names).
struct sampling_section {
  // Softmax temperature; >= 0, 0 is greedy. Default: 1.0 (training), 0.7 (validation)
  double temperature = 1.0;
  // Keep the k most likely tokens; -1 disables, else >= 1. Default: -1 (training), 20 (validation)
  int top_k = -1;
  // Nucleus sampling mass, in (0, 1]. Default: 0.95
  double top_p = 0.95;
  // Most tokens generated per turn; >= 1. Default: 4096
  int max_tokens = 4096;
  // Per-request seed base: -1 sends none (the server samples freely); s >= 0 gives request k the
  // seed s + k, so runs replay on a deterministic server. Default: -1
  std::int64_t seed = -1;
  // Strings that end a generation (not included in the output). Default: []
  std::vector<std::string> stop;
  // Token ids that end a generation, besides the tokenizer's end-of-sequence token. Default: []
  std::vector<std::int64_t> stop_token_ids;

  friend bool operator==(const sampling_section&, const sampling_section&) = default;
};

// The paper's evaluation sampling: temperature 0.7, top_k 20, top_p 0.95, the rest as training's.
[[nodiscard]] inline sampling_section validation_sampling_defaults() {
  sampling_section s;
  s.temperature = 0.7;
  s.top_k = 20;
  s.top_p = 0.95;
  return s;
}

struct validation_section {
  // Validate every `every` training steps (and after the last); 0 disables validation. Default: 10
  int every = 10;
  // Samples per validation task; accuracy is averaged over them; >= 1. Default: 1
  int n = 1;
  // Validation requests' sampling. Default: validation_sampling_defaults()
  sampling_section sampling = validation_sampling_defaults();

  friend bool operator==(const validation_section&, const validation_section&) = default;
};

struct rollout_section {
  // Rollouts per task (G); >= 2, a group needs peers to be compared with. Default: 8
  int group_size = 8;
  // Most turns per rollout (M), the first included; >= 1. Default: 3
  int max_turns = 3;
  // Training rollouts' sampling. Default: temperature 1.0, top_k -1, top_p 0.95 (the paper's)
  sampling_section sampling;
  // Periodic validation on held-out tasks. Default: every 10 steps, n 1, the paper's evaluation
  // sampling (validation_sampling_defaults())
  validation_section validation;

  friend bool operator==(const rollout_section&, const rollout_section&) = default;
};

struct learner_section {
  // record: store the scored batches, update nothing (dry runs, benchmarks, external trainers);
  // torch: the LibTorch learner. Default: record
  learner_kind kind = learner_kind::record;
  // Folder of the initial policy weights (safetensors + config.json); required when kind is torch.
  // Default: ""
  std::string model_path;
  // AdamW learning rate; > 0. Default: 1e-6
  double lr = 1e-6;
  // AdamW decoupled weight decay; >= 0. Default: 0.1
  double weight_decay = 0.1;
  // AdamW beta1, beta2; each in [0, 1). Default: {0.9, 0.999}
  std::array<double, 2> betas = {0.9, 0.999};
  // Ratio clip range [1 - clip_low, 1 + clip_high], asymmetric as in DAPO. Default: 0.2 and 0.28
  double clip_low = 0.2;
  double clip_high = 0.28;
  // Weight of the KL penalty to the reference (initial) policy; 0 disables it. Default: 0
  double kl_coef = 0.0;
  // How token losses become the batch loss. Default: seq_mean_token_mean (the paper's sample-level
  // loss, so long multi-turn rollouts do not dominate)
  leap::loss_aggregation loss_aggregation = leap::loss_aggregation::seq_mean_token_mean;
  // Global gradient-norm clip; 0 disables clipping. Default: 1.0
  double grad_clip = 1.0;
  // Steps of linear learning-rate warm-up from 0. Default: 0
  int warmup_steps = 0;
  // Tokens per forward/backward pass; gradients accumulate across micro-batches. Default: 16384
  int micro_batch_tokens = 16384;
  // Optimiser steps per training step (the batch is split in this many parts); 1 is on-policy.
  // Default: 1
  int mini_batches = 1;
  // Folder for checkpoints. Empty: <run_dir>/checkpoints. Default: ""
  std::string checkpoint_dir;
  // Save a checkpoint every this many steps (and after the last); 0 saves only after the last.
  // Default: 50
  int checkpoint_every = 50;
  // Where the LibTorch learner (and, with policy.flavour embedded, the served model) runs: "cpu",
  // "cuda" or "cuda:N". Default: cpu
  std::string device = "cpu";
  // When model_path holds no model yet, `leap run` first writes a randomly initialised model of
  // this preset there ("tiny" or "small", seeded by experiment.seed): byte-level, or with
  // policy.tokenizer set that tokenizer's vocabulary and files (leap init-model --tokenizer); ""
  // requires the model to exist. Default: ""
  std::string init_preset;

  friend bool operator==(const learner_section&, const learner_section&) = default;
};

struct policy_section {
  // The inference server's protocol: vllm (/v1/completions with token ids), sglang (/generate), or
  // embedded (the project's in-process policy; endpoints unused). Default: vllm
  server_flavour flavour = server_flavour::vllm;
  // Base URLs (http://host:port, no path: the client adds the route) of the servers, load-balanced
  // with each conversation pinned to one. Default: ["http://127.0.0.1:8000"] (vLLM's default port)
  std::vector<std::string> endpoints = {"http://127.0.0.1:8000"};
  // Model name sent with each request (vLLM's --served-model-name). Empty: the endpoint's only
  // model. For embedded: a model folder (config.json + safetensors) that the in-process server
  // serves with LibTorch, with its own tokenizer.json and chat template when the folder holds them
  // (else the byte-level tokenizer, vocab 261); empty: the scripted backend. Default: ""
  std::string model;
  // Folder with tokenizer.json and tokenizer_config.json (whose chat_template formats prompts),
  // rendered here for every flavour; the embedded server with a policy.model then serves this
  // vocabulary. Empty: the endpoint tokenises (vLLM's /tokenize), or for embedded the model
  // folder's tokenizer.json when it has one, else the byte-level template. Default: ""
  std::string tokenizer;
  // Most requests in flight per endpoint (back-pressure); >= 1. Default: 64
  int max_in_flight = 64;
  // Seconds one generation request may take before it is retried; > 0. Default: 600
  double request_timeout_s = 600.0;
  // Retries of a failed or timed-out request before the rollout fails; >= 0. Default: 3
  int retries = 3;
  // How the torch learner's weights reach the servers (learner.kind torch): "disk" (each step's
  // folder, loaded through the server's route: vLLM /collective_rpc reload_weights, SGLang
  // /update_weights_from_disk), "in_memory" (policy.flavour embedded with a policy.model: the
  // served model copies the learner's tensors in the process), "nccl" (policy.flavour vllm, one
  // endpoint started with --weight-transfer-config '{"backend": "nccl"}': the learner broadcasts
  // each step's weights over c10d, NCCL on cuda, gloo on cpu), "ipc" (policy.flavour vllm,
  // learner.kind torch on learner.device cuda, one endpoint on a loopback address started with
  // `leap serve-policy --device cuda --weight-transfer-config '{"backend": "ipc"}'`: the server
  // copies each step's weights out of the learner's exported CUDA buffer). Default: "" (in_memory
  // where it applies, else disk)
  std::string weight_sync;
  // Ask the servers for streamed responses (SSE), so that a connection cut mid-generation resumes
  // from the tokens already received. Default: false
  bool stream = false;

  friend bool operator==(const policy_section&, const policy_section&) = default;
};

struct verifier_section {
  // Parallel compilations; 0: one per CPU core. Default: 0
  int compile_workers = 0;
  // Candidates run on GPUs at once on this host; one per GPU keeps timings honest; 0 runs none
  // locally (remote nodes only). Default: 1
  int gpu_slots = 1;
  // Wall-clock limit of one compilation, seconds; > 0. Default: 120
  double compile_timeout_s = 120.0;
  // Wall-clock limit of one candidate run, seconds; > 0. Default: 30
  double run_timeout_s = 30.0;
  // Most bytes of a candidate's output kept; more is an output-flood verdict; >= 1. Default:
  // 1048576
  std::int64_t output_limit_bytes = 1 << 20;
  // Folder of the content-addressed compile cache. Empty: <run_dir>/cache. Default: ""
  std::string cache_dir;
  // Size at which the compile cache evicts its oldest entries; 0 disables the cache.
  // Default: 10737418240 (10 GiB)
  std::int64_t cache_max_bytes = std::int64_t{10} << 30;
  // nvcc -arch of CUDA candidates (sm_NN[a|f] or compute_NN). Default: sm_90a (H100/H200)
  std::string cuda_arch = "sm_90a";
  // Python interpreter of python and kernelbench tasks: a name (looked up in /usr/local/bin,
  // /usr/bin and /bin, never in the caller's PATH) or an absolute path, e.g. a virtualenv's python
  // whose torch sees the GPU. Default: python3
  std::string python = "python3";
  // Characters of compiler/runtime feedback kept for a debug turn's prompt; >= 1. Default: 4000
  int feedback_max_chars = 4000;
  // Remote verifier nodes (`leap verifier-node`) as host:port. Default: []
  std::vector<std::string> nodes;
  // With nodes: jobs this host's own verifier takes at once beside them; 0 sends every job to the
  // nodes. Ignored without nodes. Default: 64
  int local_jobs = 64;
  // File holding the nodes' shared secret (their --secret-file); empty: none. Default: ""
  std::string node_secret_file;
  // Seconds without traffic after which a node counts as cut off; > 0. Default: 10
  double node_timeout_s = 10.0;
  // Longest delay between attempts to reach a lost node, seconds; > 0. Default: 10
  double node_retry_max_s = 10.0;
  // TLS to the nodes (PEM files; caf::openssl): certificate and key of this side, CA that signed
  // the nodes' certificates. All empty: plain TCP. Default: ""
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_ca;

  friend bool operator==(const verifier_section&, const verifier_section&) = default;
};

struct schedule_section {
  // streaming: every stage starts the moment its input arrives (groups overlap); barrier: each
  // stage of a step waits for the whole batch (the baseline for timing comparisons). Default:
  // streaming
  schedule_mode mode = schedule_mode::streaming;
  // Steps the generation may run ahead of the learner (0 is strictly on-policy); must be 0 with
  // mode barrier. Default: 0
  int max_staleness = 0;

  friend bool operator==(const schedule_section&, const schedule_section&) = default;
};

// `leap simulate`: an offline simulator of the gate/reward/advantage math with a synthetic policy
// (orchestrator/simulation.hpp); its steps, batch, group, turns, seed and math come from the other
// sections.
struct simulation_section {
  // Synthetic tasks; >= data.batch_size. Default: 256
  int tasks = 256;
  // Each task's first-turn pass probability is drawn from Beta(difficulty_alpha, difficulty_beta);
  // both > 0. Default: 1.0 and 1.0 (uniform: every difficulty, so every gate decision, occurs)
  double difficulty_alpha = 1.0;
  double difficulty_beta = 1.0;
  // Chance that a failed rollout of an opened group passes at each debug turn, in [0, 1].
  // Default: 0.3
  double debug_fix_probability = 0.3;
  // Step size of the synthetic policy's learning: a turn's advantage a moves the logit of its pass
  // probability p by skill_gain * a * (outcome - p); >= 0, 0 freezes the policy. Default: 0.5
  double skill_gain = 0.5;

  friend bool operator==(const simulation_section&, const simulation_section&) = default;
};

// The whole config; each member is the YAML section of the same name. Defaults as each struct says
// (gate: dcp over fractions [0.5, 1.0]; reward: rank; advantage: grpo, gamma 0.9).
struct experiment_config {
  experiment_section experiment;  // what the run is called, where it writes, how long it runs
  data_section data;              // which tasks, how many per step
  rollout_section rollout;        // G, M and sampling
  gate_config gate;               // which groups enter debug turns (gate.hpp)
  reward_config reward;           // rewards from outcomes (reward.hpp)
  advantage_config advantage;     // group normalisation and per-turn discount (advantage.hpp)
  learner_section learner;        // the policy update
  policy_section policy;          // the inference servers
  verifier_section verifier;      // compile and run limits, caches, remote nodes
  schedule_section schedule;      // overlap of generation, verification and learning
  simulation_section simulation;  // `leap simulate`'s synthetic policy
};

// Field-by-field equality (gate_config, reward_config and advantage_config included).
[[nodiscard]] bool operator==(const experiment_config& a, const experiment_config& b);

// The text of the config file at `path`. Errors: the file is missing, unreadable or a directory
// ("PATH: cannot read config: ..."). Thread-safe.
[[nodiscard]] result<std::string> read_config_file(const std::string& path);

// Reads and parses the file at `path`. Errors: the file is missing, unreadable or a directory
// ("PATH: cannot read config: ..."), or any error of parse_config with `path` as the source name.
// Thread-safe.
[[nodiscard]] result<experiment_config> load_config(const std::string& path);

// Parses and validates YAML text. Keys absent from the text keep their defaults. On failure the
// error holds every problem found, one per line, sorted by line, each as
//   SOURCE:LINE: dotted.key: what is wrong
// (LINE is 1-based; it is left out for a cross-key problem whose keys all kept their defaults).
// Problems: YAML syntax, more than one document, unknown keys (with a "did you mean" suggestion),
// duplicate keys, wrong types (a list for a scalar, a quoted string for a number, ...), values out
// of range, and inconsistent keys (gate.tau_min > gate.tau_max, ...). A check whose inputs already
// failed is skipped, so one mistake gives one message. Thread-safe.
[[nodiscard]] result<experiment_config> parse_config(const std::string& yaml_text,
                                                     const std::string& source_name);

// The 1-based line where `key` ("data.train") is set in the YAML text; nullopt when it is not set
// there (or the text does not parse). For checks made after parse_config (`leap run`'s tasks, say)
// to point at the line as parse_config's own do. Thread-safe.
[[nodiscard]] std::optional<int> config_key_line(const std::string& yaml_text, std::string_view key);

// Whether a resumed run may change `key`: true for the keys that say where and how fast the
// experiment runs (policy.endpoints, request timeouts and retries, worker counts, caches, remote
// nodes, log level, experiment.steps, simulation.*), false for those that define what it computes.
[[nodiscard]] bool resume_may_change(std::string_view key);

// "key (stored X, now Y)" for each key that differs between the two configs and that a resume may
// not change, in the reference's order; empty: `now` may continue the run stored with `stored`.
[[nodiscard]] std::vector<std::string> resume_conflicts(const experiment_config& stored,
                                                        const experiment_config& now);

// The range and consistency checks of parse_config, for a config built in code. Errors as
// parse_config's, without source and line ("dotted.key: what is wrong"). Thread-safe.
[[nodiscard]] status validate_config(const experiment_config& config);

// YAML with every key, defaults included, in the reference's order. parse_config accepts it back
// and gives an equal config (numbers are written in their shortest exact form). Thread-safe.
[[nodiscard]] std::string render_config(const experiment_config& config);

// One documented key of the schema.
struct config_key_doc {
  std::string key;            // dotted, e.g. "gate.tau_min"
  std::string type;           // e.g. "number", "integer", "list of strings", "one of: dcp, full"
  std::string default_value;  // as render_config writes it, e.g. "0.5", "\"sm_90a\"", "[]"
  std::string meaning;        // one line: what it does, its range, why the default
};

// Every key render_config writes, in the same order. Thread-safe.
[[nodiscard]] std::vector<config_key_doc> config_keys();

// config_keys() as a Markdown table (key | type | default | meaning), one row per key, ending in a
// newline: the README's config reference is this text. Thread-safe.
[[nodiscard]] std::string config_reference_markdown();

// The value of one dotted key as render_config writes it; nullopt for a key not in the schema.
[[nodiscard]] std::optional<std::string> config_value(const experiment_config& config,
                                                      std::string_view key);

// Names are the config file's spelling; an unknown name gives nullopt.
[[nodiscard]] std::string to_string(log_verbosity v);
[[nodiscard]] std::optional<log_verbosity> parse_log_verbosity(const std::string& name);
[[nodiscard]] std::string to_string(learner_kind k);
[[nodiscard]] std::optional<learner_kind> parse_learner_kind(const std::string& name);
[[nodiscard]] std::string to_string(schedule_mode m);
[[nodiscard]] std::optional<schedule_mode> parse_schedule_mode(const std::string& name);

}  // namespace leap
