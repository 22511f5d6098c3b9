// The experiment config: one YAML file, parsed into typed sections and validated as a whole.
//
// Every key has a default, so an empty file is a valid config: the paper's hyperparameters (batch
// 32, G = 8 rollouts, M = 3 turns, lr 1e-6, weight decay 0.1, rollout sampling 1.0 / -1 / 0.95,
// validation sampling 0.7 / 20 / 0.95, sample-level loss) with a vLLM endpoint on 127.0.0.1:8000
// and a learner that only records its batches. Relative paths are relative to the working
// directory.
//
// Each key is declared once, in the schema (orchestrator/detail/schema_<section>.cpp, joined by
// config_schema.cpp): its type, its check, its meaning and whether a resumed run may change it,
// beside the member below that it fills; that member's initializer is the default. Parsing,
// validation, rendering, the resume rule and the key reference (`leap config keys`, the README's
// table, config_keys()) are all walks over that table, so none of them can drift from another. The
// members below carry no comments of their own on purpose: read a key's meaning, range and default
// in `leap config keys` or the README, which are generated from the one place that states them.
#pragma once

#include "common/enums/learner_kind.hpp"
#include "common/enums/log_verbosity.hpp"
#include "common/enums/profile_mode.hpp"
#include "common/enums/profile_tool.hpp"
#include "common/enums/schedule_mode.hpp"
#include "common/enums/server_flavour.hpp"
#include "common/enums/weight_sync_method.hpp"
#include "common/loss_options.hpp"
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

struct experiment_section {
  std::string name = "leap";
  std::uint64_t seed = 0;
  std::string run_dir = "runs/leap";
  int steps = 100;
  log_verbosity log_level = log_verbosity::info;

  friend bool operator==(const experiment_section&, const experiment_section&) = default;
};

struct data_section {
  std::string train;
  std::string validation;
  double validation_fraction = 0.0;
  std::vector<std::string> task_kinds;
  int batch_size = 32;

  friend bool operator==(const data_section&, const data_section&) = default;
};

// Sampling parameters sent with every generation request (OpenAI / vLLM names).
struct sampling_section {
  double temperature = 1.0;
  int top_k = -1;
  double top_p = 0.95;
  int max_tokens = 4096;
  std::int64_t seed = -1;
  std::vector<std::string> stop;
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
  int every = 10;
  int n = 1;
  sampling_section sampling = validation_sampling_defaults();

  friend bool operator==(const validation_section&, const validation_section&) = default;
};

struct rollout_section {
  int group_size = 8;
  int max_turns = 3;
  sampling_section sampling;
  validation_section validation;

  friend bool operator==(const rollout_section&, const rollout_section&) = default;
};

struct learner_section {
  learner_kind kind = learner_kind::record;
  std::string model_path;
  double lr = 1e-6;
  double weight_decay = 0.1;
  std::array<double, 2> betas = {0.9, 0.999};
  // learner.clip_low, clip_high, kl_coef, loss_aggregation and offpolicy.*: the learner's own
  // options type, handed to it whole.
  leap::loss_options loss;
  double grad_clip = 1.0;
  int warmup_steps = 0;
  int micro_batch_tokens = 16384;
  int mini_batches = 1;
  std::string checkpoint_dir;
  int checkpoint_every = 50;
  std::string device = "cpu";
  int world_size = 1;
  std::vector<std::string> devices;
  std::string init_preset;

  friend bool operator==(const learner_section&, const learner_section&) = default;
};

struct policy_section {
  server_flavour flavour = server_flavour::vllm;
  std::vector<std::string> endpoints = {"http://127.0.0.1:8000"};
  std::string model;
  std::string tokenizer;
  int max_in_flight = 64;
  double request_timeout_s = 600.0;
  int retries = 3;
  weight_sync_method weight_sync = weight_sync_method::automatic;
  // The servers' dtype, in which each step's delta is computed; empty: full folders only.
  std::string weight_sync_delta;
  bool stream = false;
  // A weight sync pauses generation in abort mode instead of draining it, and the client resumes
  // the aborted turns under the new weights (each token keeps the version that sampled it).
  bool inflight_updates = false;

  friend bool operator==(const policy_section&, const policy_section&) = default;
};

// The method a run syncs its weights by: policy.weight_sync, with `automatic` decided here once
// (in memory for an embedded server that shares the learner's process, else from disk). Never
// `automatic`.
[[nodiscard]] inline weight_sync_method effective_weight_sync(const policy_section& policy) {
  if (policy.weight_sync != weight_sync_method::automatic) {
    return policy.weight_sync;
  }
  return policy.flavour == server_flavour::embedded && !policy.model.empty()
             ? weight_sync_method::in_memory
             : weight_sync_method::disk;
}

struct verifier_section {
  int compile_workers = 0;
  int gpu_slots = 1;
  int runs_per_gpu = 2;
  double compile_timeout_s = 120.0;
  double run_timeout_s = 30.0;
  std::int64_t output_limit_bytes = 1 << 20;
  std::string cache_dir;
  std::int64_t cache_max_bytes = std::int64_t{10} << 30;
  std::string cuda_arch = "sm_90a";
  std::string python = "python3";
  int timing_reps = 0;
  int feedback_max_chars = 4000;
  // Nsight Compute profiling of cuda and kernelbench verdicts after they are known (the sandbox's
  // engine_config::profile): off, passing or all_compiled. Default: off
  profile_mode profile = profile_mode::off;
  int profile_max_kernels = 2;       // kernels named in the feedback. Default: 2
  double profile_timeout_s = 120.0;  // wall-clock limit of one profiling run. Default: 120
  // Longest a rollout's next turn waits for its last verdict's profile before it goes on with the
  // verdict's own feedback. Default: 60
  double profile_wait_s = 60.0;
  // What profiles (the sandbox's engine_config::profiler): auto (ncu; kernel events once ncu says
  // GPU counters are not permitted), ncu or events. Default: auto
  leap::profile_tool profile_tool = leap::profile_tool::automatic;
  std::string ncu;  // empty: the ncu beside nvcc. Default: empty
  // KernelBench task sets: runs ahead that each run slot keeps a judge started (the sandbox's
  // engine_config::kernelbench_standby_depth). Default: 1
  int kernelbench_standby_depth = 1;
  // KernelBench runs: bytes of each run's scratch, which holds every trial's and timing set's
  // inputs and outputs (the sandbox's set_kernelbench_scratch). Default: 4 GiB
  std::int64_t kernelbench_scratch_bytes = std::int64_t{4} << 30;
  std::vector<std::string> nodes;
  int local_jobs = 64;
  std::string node_secret_file;
  double node_timeout_s = 10.0;
  double node_retry_max_s = 10.0;
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_ca;

  friend bool operator==(const verifier_section&, const verifier_section&) = default;
};

struct schedule_section {
  schedule_mode mode = schedule_mode::streaming;
  int max_staleness = 0;
  // Partial rollouts (schedule.partial, issue 33; orchestrator/partial_rollouts.hpp): groups kept
  // in flight beyond data.batch_size, and the most unfinished or leftover groups a step carries
  // into the next. Off while partial_over_provision is 0. Default: 0, 0
  int partial_over_provision = 0;
  int partial_max_carry = 0;

  friend bool operator==(const schedule_section&, const schedule_section&) = default;
};

// `leap simulate`: an offline simulator of the gate/reward/advantage math with a synthetic policy
// (orchestrator/simulation.hpp); its steps, batch, group, turns, seed and math come from the other
// sections.
struct simulation_section {
  int tasks = 256;
  double difficulty_alpha = 1.0;
  double difficulty_beta = 1.0;
  double debug_fix_probability = 0.3;
  double skill_gain = 0.5;
  // Speed and optimisation turns (read when verifier.timing_reps > 0); simulation.hpp says how.
  double speedup_median = 1.0;
  double speedup_task_spread = 0.3;
  double speedup_spread = 0.2;
  double speedup_noise = 0.05;
  double speedup_ceiling = 10.0;
  double optimise_improve_probability = 0.3;
  double optimise_break_probability = 0.2;
  double optimise_gain = 1.3;
  // Profiles and structural terms (read when verifier.profile is not off); simulation.hpp says how.
  double structural_clean = 0.5;
  double structural_concentration = 2.0;
  int structural_kernels = 2;
  double structural_missing = 0.0;

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
[[nodiscard]] std::optional<int> config_key_line(const std::string& yaml_text,
                                                 std::string_view key);

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
  bool resumable = false;     // resume_may_change(key)
};

// Every key render_config writes, in the same order. Thread-safe.
[[nodiscard]] std::vector<config_key_doc> config_keys();

// config_keys() as a Markdown table (key | type | default | resume | meaning), one row per key,
// ending in a newline: the README's config reference is this text. Thread-safe.
[[nodiscard]] std::string config_reference_markdown();

// The value of one dotted key as render_config writes it; nullopt for a key not in the schema.
[[nodiscard]] std::optional<std::string> config_value(const experiment_config& config,
                                                      std::string_view key);

}  // namespace leap
