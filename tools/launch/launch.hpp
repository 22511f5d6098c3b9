// The composition library: builds a run from a checked config (store, tasks, model, servers,
// weight transfer, actor graph), runs it and tears it down in order. `leap run` is a thin command
// over it (tools/leap/run_command.cpp), the daemon's child is that command, and the benchmarks
// that drive the whole graph (tools/bench/bench_pipeline.cpp) build their runs with it too, with
// their own services in place of the policy, verifier or learner.
//
// Errors are values with context (what was being built, the config key, the file); nothing here
// prints them. The order of what `run::start` builds, and what each failure says, is in
// tools/launch/README.md.
//
// The first part is every check `leap run` makes of a config before it starts, in one place:
// `leap config check`, `leap run` and the daemon's `leap submit` call the same function, so that a
// config one of them accepts never fails another's start for a reason of the config (a key, a file
// it names, a task kind, a remote node's secret). What only the run can find out (a server that
// does not answer, a store that is in use) is not a config reason and is not checked there.
#pragma once

#include "actors/experiment.hpp"
#include "actors/learner.hpp"
#include "actors/remote_verifier.hpp"
#include "common/result.hpp"
#include "orchestrator/config.hpp"
#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"
#include "policy/server/server.hpp"
#include "sandbox/verifier.hpp"
#include "storage/trajectory_store.hpp"
#include "tools/launch/tasks.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace caf {
class actor_system;
}

namespace leap::launch {

// Which task kinds a task set holds: what the verifier's engine must be ready for.
struct task_set_kinds {
  bool cuda = false;         // GPU run slots
  bool kernelbench = false;  // torch's precompiled header, built ahead
  void add(task_kind kind) {
    cuda = cuda || kind == task_kind::cuda;
    kernelbench = kernelbench || kind == task_kind::kernelbench;
  }
};

struct run_preflight {
  // The config file as read: what the run stores (empty: render_config(config) is stored).
  std::string text;
  experiment_config config;
  run_tasks tasks;
  task_set_kinds kinds;                              // of the training and validation tasks
  std::optional<actors::dispatcher_settings> nodes;  // verifier.nodes set
  // The tokenizer and chat template prompts are rendered with here (tokenizer_folder's rule),
  // loaded; null when the endpoint renders (its /tokenize) or the byte-level template applies.
  std::shared_ptr<const policy::hf_chat_renderer> renderer;
  std::string renderer_dir;  // the folder it was loaded from
};

// The one rule for which folder's tokenizer a run uses: policy.tokenizer when set (any flavour);
// else, for the embedded server with a policy.model folder holding tokenizer.json, that folder
// (the embedded server then serves that vocabulary too); else "" (the embedded server's byte-level
// template, or the endpoint's /tokenize). `resolve` maps a configured path to the one to open.
[[nodiscard]] std::string tokenizer_folder(
    const experiment_config& config, const std::function<std::string(const std::string&)>& resolve);

// Reads `path` and checks it for `leap run`. Errors, one problem per line, each as
// "PATH:LINE: key: what is wrong" where the key is set in the file (parse_config's format): the
// file missing, unreadable or a folder; everything parse_config refuses; an empty config;
// data.train empty, missing, unreadable or without a task of data.task_kinds; an unknown task kind;
// the verifier nodes' secret and TLS files; policy.tokenizer's folder (its tokenizer and chat
// template load, and the template can continue a conversation with feedback). Relative paths are
// the process's (as `leap run` reads them).
[[nodiscard]] result<run_preflight> preflight_run(const std::string& path);

// The same for config text whose relative paths are relative to `base_dir` (the daemon checks a
// submission against the folder its `leap run` will start in). `source` names the text in errors.
[[nodiscard]] result<run_preflight> preflight_run_text(const std::string& text,
                                                       const std::string& source,
                                                       const std::filesystem::path& base_dir);

// The policy client's settings for a checked run that talks to `endpoints` (the embedded server's
// URL, or policy.endpoints). Its fallback token-id bound (client_config::fallback_vocab_size, for
// servers that do not report their vocabulary: vLLM, SGLang) is the model's vocabulary as known
// here: the `vocab_size` of config.json in policy.model (when it names a folder here) or else in
// the tokenizer folder, the first that is at least the tokenizer's size (a model's embedding may
// have more rows than its tokenizer has ids, and it may sample any); else the tokenizer's own
// size; 0 when neither is known.
[[nodiscard]] policy::client_config policy_client_settings(
    const run_preflight& checked, const std::vector<std::string>& endpoints);

// The sandbox's settings from a config's verifier section: one mapping for `leap run` and
// `leap verifier-node`, so that a node verifies exactly as the orchestrator's own pool would.
// `cache_dir`, when not empty, overrides the section's verifier.cache_dir; with both empty the
// sandbox's default cache folder is used. GPU run slots only when the task set has cuda tasks;
// torch's precompiled header built ahead only when it has KernelBench tasks.
[[nodiscard]] sandbox::verifier_config sandbox_settings(const verifier_section& s,
                                                        const task_set_kinds& kinds,
                                                        const std::string& cache_dir);

// ---- the LibTorch parts -------------------------------------------------------------------------

// A random model learner.init_preset wrote (the run's learner.model_path had none).
struct written_model {
  std::string preset;
  std::string path;
  std::string tokenizer_dir;  // "": byte-level
  std::int64_t parameters = 0;
};

// Whether a run of `c` needs LibTorch: learner.kind torch (the learner, a random model from
// learner.init_preset, the weight transfer of policy.weight_sync nccl or ipc) or the embedded
// server on policy.model. Pure.
[[nodiscard]] bool needs_torch(const experiment_config& c);

// What a run's torch learner is made from (torch_parts::make_learner).
struct torch_learner_request {
  const run_preflight* checked = nullptr;
  std::filesystem::path run_dir;
  std::uint64_t weight_version = 0;  // the resume plan's
  // policy.weight_sync_delta: refusals the generator counts and the learner reports.
  std::shared_ptr<std::atomic<std::int64_t>> delta_refusals;
  std::function<void(const written_model&)> on_model_written;
};

// A model the embedded server serves (policy.model), loaded.
struct served_model {
  std::shared_ptr<policy::policy_backend> backend;
  std::int64_t max_position_embeddings = 0;
  std::int64_t vocab_size = 0;
};

// The plans a weight transfer (policy.weight_sync nccl or ipc) syncs by.
struct transfer_plans {
  policy::weight_sync_plan first_plan;  // the first sync's: nccl forms the group in it
  policy::weight_sync_plan step_plan;   // every later step's
};

// One run's LibTorch parts: the torch learner (with ranks 1.. of a data-parallel one), the
// embedded server's model and the weight transfer. leap::launch links no LibTorch, so that a
// binary that never needs it (the `leap` command) starts without loading it;
// leap::launch_torch (tools/launch/torch/) implements this class, and a process whose runs may
// need it installs that with install_torch_parts() before its first run. Used from the thread
// that calls run::start() and run::wait(); destroyed after the embedded server.
class torch_parts {
 public:
  virtual ~torch_parts() = default;
  // learner.kind torch: the learner on learner.model_path (a random model written there first when
  // learner.init_preset asks and it holds none), resumed from the newest checkpoint. Errors: the
  // model or checkpoint cannot be loaded, the ranks cannot start (named).
  [[nodiscard]] virtual status make_learner(const torch_learner_request& request) = 0;
  [[nodiscard]] virtual bool has_learner() const = 0;
  // The embedded server's model `model_dir` on `device`, serving `vocab` (null: byte-level);
  // with a learner, from the weights it holds (a resumed run's newest checkpoint), its in-memory
  // syncs copied from it. Errors: the folder's (named by the caller).
  [[nodiscard]] virtual result<served_model> serve_model(
      const std::string& model_dir, const std::string& device,
      std::shared_ptr<const policy::model_vocabulary> vocab) = 0;
  // policy.weight_sync nccl or ipc with the learner: opens the transfer to the server at
  // `endpoint`. Errors: the transfer's.
  [[nodiscard]] virtual result<transfer_plans> open_transfer(const experiment_config& c,
                                                             const std::string& endpoint) = 0;
  // The open transfer's sync companion; empty without one.
  [[nodiscard]] virtual policy::sync_companion companion() = 0;
  // Ends the transfer (its queued jobs finish first); before the policy client goes.
  virtual void close_transfer() = 0;
  // Where the learner writes weight deltas (policy.weight_sync_delta); empty without.
  [[nodiscard]] virtual std::string delta_dir() const = 0;
  // policy.weight_sync_delta with nccl: the update_info of the learner's delta to a version ("":
  // none, the full weights go); empty without an open nccl transfer or deltas.
  [[nodiscard]] virtual std::function<std::string(std::uint64_t)> delta_info_source() const = 0;
  // Hands the learner to the learner actor; null without one.
  [[nodiscard]] virtual std::shared_ptr<actors::learner_backend> take_learner() = 0;
};

// Makes the LibTorch parts of the runs this process starts from now on (leap::launch_torch's
// install() passes its own). Not thread-safe: call before the first run. Without it, a run that
// needs_torch() fails at start, saying so.
void install_torch_parts(std::function<std::unique_ptr<torch_parts>()> make);

// ---- the run ------------------------------------------------------------------------------------

// What a run tells its caller as it goes; every member may be empty. on_resume, on_model_written
// and on_stopping run on the caller's thread (start(), wait()); `progress` on the driver's.
struct run_events {
  // The store's plan for this run, once it is read (a new run's plan is all zero).
  std::function<void(const actors::resume_plan&)> on_resume;
  std::function<void(const written_model&)> on_model_written;
  // A stop came: the run now waits for the compiles and runs in flight.
  std::function<void()> on_stopping;
  actors::progress_sink progress;
};

// Services that take the place of the ones the config names (benchmarks, tests). Each spawns in
// the run's actor system when wait() builds the graph.
struct service_overrides {
  // The policy: no policy client, embedded server, endpoint check or weight transfer is made;
  // policy.* is not used. Default: none
  std::function<actors::generator_actor(caf::actor_system&)> generator;
  // The verifier: no sandbox and no remote nodes are made. Default: none
  std::function<actors::verifier_actor(caf::actor_system&)> verifier;
  // The learner backend, made with the weight version the run starts from (the resume plan's): no
  // torch or record learner is made. Default: none
  std::function<std::shared_ptr<actors::learner_backend>(std::uint64_t initial_version)> learner;
};

struct run_options {
  // How the store opens (store_options.accept_lost_writes: go on with a store that lost
  // acknowledged writes; sync: fsync each commit). Default: store_options{}
  store_options store;
  // Write RUN_DIR/metrics.prom and metrics.json. Default: true
  bool write_metrics = true;
  // Seconds between metrics writes; 0: only at each step's end and at exit. Default: 5
  double metrics_interval_s = 5.0;
  // CAF scheduler threads; 0: CAF's default (one per core). Default: 0
  std::size_t scheduler_threads = 0;
  // Faults the embedded server injects on its generation routes, as `leap serve-policy --faults`
  // (policy/server/server.hpp's fault_config; `leap run --server-faults`): for tests that need a
  // server fault inside a run, such as a generation held until the next weight sync. Only with
  // policy.flavour embedded: start() refuses them for a run without the embedded server.
  // Default: none
  policy::fault_config server_faults;
  run_events events;
  service_overrides services;
};

struct run_outcome {
  // finished, interrupted (stop()) or failed (summary.error says why); never running.
  run_status status = run_status::failed;
  actors::run_summary summary;
  // Seconds from the driver's start to its answer (the graph's own time, without set-up and
  // teardown).
  double run_seconds = 0.0;
};

// One run of the config, in the run folder experiment.run_dir (created when missing). A folder
// that holds the run already continues it (same experiment; only where and how fast it runs may
// differ). Not copyable; start() and wait() are called once each, in that order, from one thread;
// stop() from any thread at any time.
class run {
 public:
  run(run_preflight checked, run_options options);
  ~run();  // stops and tears down whatever start() built
  run(const run&) = delete;
  run& operator=(const run&) = delete;

  // Builds everything but the actor graph, in this order: the run folder, the store (opened,
  // the run's record checked against the stored config and written "running"), the resume plan,
  // the learner (a random model first when learner.init_preset asks), the embedded server, the
  // policy client and its endpoint check, the weight transfer and its first sync, the verifier.
  // Errors name what failed (tools/launch/README.md lists them); a stop() during the endpoint
  // check or the first sync ends it with "interrupted by a signal ...".
  [[nodiscard]] status start();

  // Spawns the actor graph, runs the experiment to its end (or a stop()), tears the graph and
  // every part down in order and writes the run's final status to the store. A failed run is an
  // outcome (status failed), not an error; errors: writing the run record.
  [[nodiscard]] result<run_outcome> wait();

  // Ends the run early: before the graph runs, start() fails at its next wait and wait() ends at
  // once; while it runs, the driver abandons the groups in flight (the next run redoes them).
  // Thread-safe; idempotent.
  void stop();

  [[nodiscard]] const run_preflight& checked() const;
  // The policy endpoints the run uses (the embedded server's URL for that flavour); valid after
  // start().
  [[nodiscard]] const std::vector<std::string>& endpoints() const;
  // The store; null before start().
  [[nodiscard]] std::shared_ptr<trajectory_store> store() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// ---- what `leap run` says ----------------------------------------------------------------------

// The line `leap run` prints once start() has built the run, without a newline: "run 'NAME': S
// steps x B tasks x G rollouts, up to T turns | gate P, reward R, schedule M | N training tasks, V
// validation tasks | policy ENDPOINT". Pure.
[[nodiscard]] std::string describe_start(const run_preflight& checked, const std::string& endpoint);

// The line it prints at the end, without a newline (the e2e tests read its counts): "run 'NAME'
// STATUS: S steps completed by this process, G groups run, R read back from the store, T finished
// turns of unfinished groups taken from the store | trajectories in STORE_PATH". Pure.
[[nodiscard]] std::string describe_outcome(const run_outcome& outcome, const std::string& name,
                                           const std::string& store_path);

// `leap run`'s exit status for a run's end: 0 finished, 130 interrupted (what a shell reports for
// SIGINT), 1 failed (and running, which an outcome never is). Pure.
[[nodiscard]] int exit_status(run_status status);

// ---- seeds (`leap run CONFIG --seeds 1,2,3`) ----------------------------------------------------

// The seed list of --seeds: comma-separated seeds or inclusive ranges, "1,2,3", "1-3", "1-3,7", in
// the order given. Errors: an empty list or item, a non-number, a range whose end is below its
// start, a seed given twice, more than 1000 seeds.
[[nodiscard]] result<std::vector<std::uint64_t>> parse_seeds(std::string_view text);

// The run folder of one seed of a launch whose config names RUN_DIR: RUN_DIR/seed-N.
[[nodiscard]] std::string seed_run_dir(const std::string& run_dir, std::uint64_t seed);

// The config one seed runs: experiment.seed is the seed and experiment.run_dir its folder
// (seed_run_dir); every path the config keeps inside the launch's run folder (learner.model_path,
// learner.checkpoint_dir, policy.model, policy.tokenizer, verifier.cache_dir) moves with it, to the
// same place under the seed's folder, so that no seed reads another's model or checkpoints (a
// relative path is compared as written, against the run folder as written). Everything else,
// experiment.name included, is the config's: the seeds of one launch are one group in
// `leap report`. Pure.
[[nodiscard]] experiment_config seed_config(const experiment_config& base, std::uint64_t seed);

// The checked run of one seed: seed_config() rendered (render_config: what the seed's store keeps,
// so that replay, report and a resumed run read the seed and folder back) and checked again as
// `leap run` checks a config (its task sample depends on the seed), relative paths as the
// process's. `source` names the config in errors.
[[nodiscard]] result<run_preflight> preflight_seed(const experiment_config& base,
                                                   std::uint64_t seed, const std::string& source);

// Whether RUN_DIR's store holds run `name` finished with at least `steps` completed steps (a
// second `--seeds` launch skips that seed). Opens the store read-only; false when there is no
// store or run yet. Errors: a store that exists but cannot be read.
[[nodiscard]] result<bool> run_finished(const std::string& run_dir, const std::string& name,
                                        int steps);

// ---- signals ------------------------------------------------------------------------------------

// Waits for SIGINT/SIGTERM (routed to it by common/signals.hpp: call signals::route before any
// thread starts) until it is destroyed, through a run's teardown (the verifier's destructor waits
// for the compiles and runs in flight). The first signal calls the hook (a run's stop()), once
// there is one; a second exits the process at once, at any point. Exiting at once is as safe as
// kill -9: every group the store acknowledged is durable, the groups and the step in flight are
// redone by the next `leap run`, and the run record stays "running" until then.
class signal_watcher {
 public:
  signal_watcher();
  ~signal_watcher();
  signal_watcher(const signal_watcher&) = delete;
  signal_watcher& operator=(const signal_watcher&) = delete;

  // The first signal calls `stop`; called at once when one came already. Clear it (an empty
  // function) before what it refers to goes away.
  void on_first_signal(std::function<void()> stop);
  [[nodiscard]] int signal() const { return signal_; }

 private:
  void watch();

  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};
  std::mutex mutex_;
  std::function<void()> stop_;
  std::thread thread_;
};

// Routes a watcher's first signal to `stop` (a run's stop()) while it lives, and clears the hook
// when it goes away: declared after what `stop` refers to, it is cleared before that goes.
class stop_on_signal {
 public:
  stop_on_signal(signal_watcher& watcher, std::function<void()> stop);
  ~stop_on_signal();
  stop_on_signal(const stop_on_signal&) = delete;
  stop_on_signal& operator=(const stop_on_signal&) = delete;

 private:
  signal_watcher& watcher_;
};

}  // namespace leap::launch
