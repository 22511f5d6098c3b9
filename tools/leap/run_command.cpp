// `leap run CONFIG`: the main job. Builds the actor graph (policy client, or the project's server
// started in-process for policy.flavour embedded, scripted or LibTorch on policy.model; the sandbox
// verifier; the RocksDB store in the run folder; the record or LibTorch learner, whose weights the
// generator's weight sync hands to the servers after each step) and runs the experiment, printing a
// progress line per step and a summary table at the end. A run folder that already holds the run
// continues it. SIGINT and SIGTERM stop cleanly: in-flight groups are abandoned (a later `leap run`
// redoes them).
#include "actors/experiment.hpp"
#include "actors/generator.hpp"
#include "actors/learner.hpp"
#include "actors/progress.hpp"
#include "actors/remote_verifier.hpp"
#include "actors/renderer.hpp"
#include "actors/resume.hpp"
#include "actors/scorer.hpp"
#include "actors/store.hpp"
#include "actors/tasks.hpp"
#include "actors/torch_learner.hpp"
#include "actors/torch_policy_backend.hpp"
#include "actors/torch_weight_transfer.hpp"
#include "actors/verifier.hpp"
#include "common/log.hpp"
#include "common/signals.hpp"
#include "orchestrator/config.hpp"
#include "policy/client.hpp"
#include "policy/dialect.hpp"
#include "policy/scripted_backend.hpp"
#include "policy/server.hpp"
#include "policy/vocabulary.hpp"
#include "sandbox/verifier.hpp"
#include "storage/trajectory_store.hpp"
#include "tools/leap/command.hpp"
#include "tools/leap/run_metrics.hpp"
#include "tools/leap/run_preflight.hpp"
#include "tools/leap/verifier_settings.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>

namespace leap::cli {
namespace {

struct run_options {
  std::string config_path;
  bool quiet = false;
  bool accept_lost_writes = false;
  run_metrics_options metrics;
};

int fail(const std::string& message) {
  std::cerr << "leap run: error: " << message << "\n";
  return 1;
}

sandbox::verifier_config verifier_settings(const experiment_config& c, bool has_cuda) {
  // The compile cache lives in the run folder unless verifier.cache_dir names another.
  const auto in_run_dir = std::filesystem::path(c.experiment.run_dir) / "cache";
  const std::string cache_dir = c.verifier.cache_dir.empty() ? in_run_dir.string() : "";
  return sandbox_settings(c.verifier, has_cuda, cache_dir);
}

policy::client_config client_settings(const experiment_config& c,
                                      const std::vector<std::string>& endpoints) {
  policy::client_config cc;
  cc.flavour = wire_of(c.policy.flavour);
  for (const auto& url : endpoints) cc.endpoints.push_back({url, c.policy.max_in_flight});
  cc.model = c.policy.model;
  cc.request_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(c.policy.request_timeout_s * 1000));
  cc.retry.max_attempts = c.policy.retries + 1;
  cc.seed = c.experiment.seed;
  cc.stream = c.policy.stream;
  return cc;
}

// How the torch learner's step folder reaches the flavour's servers: the flavour's preset.
using policy::disk_sync_plan;

// Before any turn: the routes the run needs answer in the flavour's shape (policy_client::
// preflight), so that a server that cannot serve the run fails it now, with the reason, instead
// of failing every turn.
status check_policy_endpoints(policy::policy_client& client,
                              const actors::prompt_renderer* renderer,
                              const std::function<bool()>& interrupted) {
  policy::preflight_request probe;
  const std::vector<actors::chat_text> hello{{"user", "Say hello."}};
  if (renderer == nullptr) {
    probe.tokenize_probe = {{"user", "Say hello."}};
  } else {
    auto ids = renderer->render({}, hello);
    if (!ids) return ids.err().wrap("rendering a test prompt");
    probe.prompt = std::move(*ids);
  }
  auto done = std::make_shared<std::promise<result<std::vector<policy::endpoint_check>>>>();
  auto answer = done->get_future();
  client.preflight(std::move(probe), [done](auto checks) { done->set_value(std::move(checks)); });
  // Bounded by the client's retries and turn deadline; a signal (the watcher saw it) ends the wait.
  while (answer.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (interrupted()) return error{"interrupted by a signal"};
  }
  auto checks = answer.get();
  if (!checks) return checks.err();
  return ok_status();
}

std::vector<actors::group_task> group_tasks(
    const std::vector<std::shared_ptr<const sandbox::task>>& tasks) {
  std::vector<actors::group_task> out;
  for (const auto& t : tasks) out.push_back({t->id, t->prompt});
  return out;
}

// Waits for SIGINT/SIGTERM (routed to it by common/signals.hpp) from start-up until the command
// returns, through the teardown (the verifier's destructor waits for the compiles and runs in
// flight). The first signal asks the driver to stop, once there is one; a second exits at once,
// at any point. Exiting at once is as safe as kill -9: every group the store acknowledged is
// durable, the groups and the step in flight are redone by the next `leap run`, and the run
// record stays "running" until then.
class signal_watcher {
 public:
  signal_watcher() : thread_([this] { watch(); }) {}
  ~signal_watcher() {
    done_ = true;
    thread_.join();
  }
  signal_watcher(const signal_watcher&) = delete;
  signal_watcher& operator=(const signal_watcher&) = delete;

  // The first signal calls `stop`; called at once when one came already. Clear it (an empty
  // function) before what it refers to goes away.
  void on_first_signal(std::function<void()> stop) {
    std::lock_guard lock(mutex_);
    stop_ = std::move(stop);
    if (signal_ != 0 && stop_) stop_();
  }
  [[nodiscard]] int signal() const { return signal_; }

 private:
  void watch() {
    while (!done_) {
      const int sig = signals::wait(std::chrono::milliseconds(100));
      if (sig == 0) continue;
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (signal_ != 0) {
        log::warn(std::string(name) +
                  " again: exiting now; the groups stored so far are kept, the groups in flight "
                  "are redone by the next `leap run`");
        std::_Exit(128 + sig);
      }
      signal_ = sig;
      log::warn(std::string(name) + ": stopping (again to exit at once)");
      std::lock_guard lock(mutex_);
      if (stop_) stop_();
    }
  }

  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};
  std::mutex mutex_;
  std::function<void()> stop_;
  std::thread thread_;
};

int run_experiment(const run_options& options) {
  // Before any thread of ours exists, so that they inherit the mask; only the watcher takes them.
  if (auto routed = signals::route({SIGINT, SIGTERM}); !routed) return fail(routed.err().message);
  signal_watcher watcher;
  log::setup("leap run");

  // Every config rule lives in run_preflight, which `leap config check` applies too.
  auto preflight = preflight_run(options.config_path);
  if (!preflight) return fail(preflight.err().message);
  const std::string& config_text = preflight->text;
  const experiment_config& c = preflight->config;
  // experiment.log_level from here on; --quiet keeps warnings and errors only.
  log::set_level(options.quiet ? std::max(c.experiment.log_level, log_verbosity::warn)
                               : c.experiment.log_level);
  const log::ids run_ids{c.experiment.name};
  const auto& tasks = preflight->tasks;
  const bool has_cuda = preflight->has_cuda;
  auto table =
      std::make_shared<std::unordered_map<std::string, std::shared_ptr<const sandbox::task>>>();
  for (const auto* list : {&tasks.train, &tasks.validation}) {
    for (const auto& t : *list) table->emplace(t->id, t);
  }

  // The store: a run folder that holds this run continues it.
  const std::filesystem::path run_dir = c.experiment.run_dir;
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return fail(run_dir.string() + ": cannot create the run folder: " + ec.message());
  store_options opening;
  opening.accept_lost_writes = options.accept_lost_writes;
  auto opened = trajectory_store::open(store_path_of_run_dir(run_dir), opening);
  if (!opened) return fail(opened.err().message);
  std::shared_ptr<trajectory_store> store = std::move(*opened);
  if (const auto& lost = store->lost_writes()) {
    log::warn(store->path().string() + ": " + lost->describe() + "; going on with what it holds",
              run_ids);
  }
  const std::string run_id = c.experiment.name;
  auto existing = store->get_run(run_id);
  if (!existing) return fail(existing.err().message);
  run_record run{run_id, config_text, actors::unix_ms(), run_status::running};
  if (*existing) {
    auto stored = parse_config((*existing)->config_yaml, run_dir.string() + " (stored config)");
    if (!stored) return fail(stored.err().message);
    if (auto diff = resume_conflicts(*stored, c); !diff.empty()) {
      std::string message = run_dir.string() + " holds run '" + run_id +
                            "' started with another config; resume needs the same experiment " +
                            "(only where and how fast it runs may change: endpoints, timeouts, " +
                            "worker counts, steps, ...). Differences:";
      for (const auto& d : diff) message += "\n  " + d;
      return fail(message + "\nUse another experiment.run_dir or experiment.name for a new run.");
    }
    run.created_unix_ms = (*existing)->created_unix_ms;
  }
  auto plan = actors::plan_resume(*store, run_id, c, tasks.validation.size());
  if (!plan) return fail(plan.err().message);
  if (auto put = store->put_run(run); !put) return fail(put.err().message);
  if (plan->first_step >= static_cast<std::uint64_t>(std::max(0, c.experiment.steps)) &&
      plan->first_step > 0) {
    std::printf("run '%s': all %d steps are stored already%s\n", run_id.c_str(), c.experiment.steps,
                plan->validation_pending.empty()
                    ? ""
                    : (" (finishing the validation of " +
                       std::to_string(plan->validation_pending.size()) + " of them)")
                          .c_str());
  } else if (plan->first_step > 0 || !plan->train_done.empty()) {
    std::size_t stored_groups = 0;
    for (const auto& [step, groups] : plan->train_done) stored_groups += groups.size();
    std::printf("resuming run '%s' at step %llu/%d (%zu groups of the steps in progress stored)\n",
                run_id.c_str(), static_cast<unsigned long long>(plan->first_step + 1),
                c.experiment.steps, stored_groups);
  }

  // The learner: LibTorch training learner.model_path (resuming from the newest checkpoint in the
  // run folder), or the record learner.
  std::shared_ptr<actors::torch_learner> torch_learner;
  if (c.learner.kind == learner_kind::torch && !c.learner.init_preset.empty() &&
      !std::filesystem::exists(std::filesystem::path(c.learner.model_path) / "config.json", ec)) {
    // With policy.tokenizer the model gets that vocabulary and its files.
    const std::string with_tokenizer = c.policy.tokenizer.empty() ? "" : preflight->renderer_dir;
    auto written = actors::write_random_model(c.learner.init_preset, c.learner.model_path,
                                              static_cast<std::uint64_t>(c.experiment.seed),
                                              "float32", with_tokenizer);
    if (!written) return fail("learner.init_preset: " + written.err().message);
    std::printf("wrote a random %s %s model (%lld parameters, seed %lld) to %s\n",
                c.learner.init_preset.c_str(),
                with_tokenizer.empty() ? "byte-level" : ("tokenizer " + with_tokenizer).c_str(),
                static_cast<long long>(written->parameters),
                static_cast<long long>(c.experiment.seed), c.learner.model_path.c_str());
  }
  if (c.learner.kind == learner_kind::torch) {
    actors::torch_learner_options lo;
    lo.model_dir = c.learner.model_path;
    lo.checkpoint_dir = c.learner.checkpoint_dir.empty() ? (run_dir / "checkpoints").string()
                                                         : c.learner.checkpoint_dir;
    lo.weights_dir = (run_dir / "weights").string();
    lo.trainer = actors::trainer_options_of(c.learner);
    lo.checkpoint_every = c.learner.checkpoint_every;
    lo.total_steps = static_cast<std::uint64_t>(c.experiment.steps);
    lo.initial_version = plan->weight_version;
    // The embedded server shares this process: the weights reach it in memory, no folder per step.
    // policy.weight_sync disk keeps the folders (e.g. to time the disk path against this one).
    // policy.weight_sync nccl broadcasts the weights, ipc shares them in GPU memory: no folder per
    // step either.
    lo.in_memory = (c.policy.flavour == server_flavour::embedded && !c.policy.model.empty() &&
                    c.policy.weight_sync != "disk") ||
                   c.policy.weight_sync == "nccl" || c.policy.weight_sync == "ipc";
    auto created = actors::torch_learner::create(std::move(lo));
    if (!created) return fail(created.err().message);
    torch_learner = std::move(*created);
  }

  // The policy: for `embedded` the project's server in-process (the LibTorch backend on
  // policy.model, else the scripted backend), otherwise the configured endpoints.
  std::unique_ptr<policy::policy_server> server;
  std::shared_ptr<const policy::vocabulary> served_vocab;  // null: the byte-level tokenizer
  std::vector<std::string> endpoints = c.policy.endpoints;
  if (c.policy.flavour == server_flavour::embedded && !c.policy.model.empty()) {
    // With the torch learner the server starts from the weights the learner holds, which are a
    // resumed run's newest checkpoint.
    const std::string weights = torch_learner ? torch_learner->current_weights() : c.policy.model;
    auto model_config = learner::read_model_config(weights);
    if (!model_config) return fail("policy.model: " + model_config.err().message);
    actors::torch_backend_options backend_options;
    backend_options.device = c.learner.device;
    if (preflight->renderer) {
      served_vocab = policy::make_vocabulary(preflight->renderer, preflight->renderer_dir);
      backend_options.vocab = served_vocab;
    }
    if (torch_learner) {
      // Weak: the learner actor owns the learner and may be gone while the server still stands.
      backend_options.source = [owner = std::weak_ptr<actors::torch_learner>(torch_learner)](
                                   learner::policy& target, std::int64_t version) -> status {
        auto held = owner.lock();
        if (!held) return error{"the learner has stopped"};
        return held->copy_weights_to(target, version);
      };
    }
    auto backend = actors::make_torch_policy_backend(weights, backend_options);
    if (!backend) return fail("policy.model: " + backend.err().message);
    policy::server_config server_config;
    server_config.host = "127.0.0.1";
    server_config.port = 0;
    server_config.threads = static_cast<std::size_t>(c.policy.max_in_flight) + 4;
    server_config.model_name = c.policy.model;  // the name the client sends
    server_config.model_path = c.policy.model;
    server_config.max_model_len =
        static_cast<int>(std::min<std::int64_t>(model_config->max_position_embeddings, 1 << 20));
    server_config.weight_version = static_cast<std::int64_t>(plan->weight_version);
    server_config.vocab = served_vocab;
    server_config.vocab_size = static_cast<int>(model_config->vocab_size);
    auto started = policy::policy_server::start(server_config, *backend);
    if (!started) return fail("policy.flavour embedded: " + started.err().message);
    server = std::move(*started);
    endpoints = {server->base_url()};
  } else if (c.policy.flavour == server_flavour::embedded) {
    policy::scripted_config sc;
    sc.seed = c.experiment.seed;
    for (const auto* list : {&tasks.train, &tasks.validation}) {
      for (const auto& t : *list) {
        if (!t->solution.empty()) sc.tasks.push_back(actors::scripted_task_of(*t));
      }
    }
    auto backend = policy::scripted_backend::create(std::move(sc));
    if (!backend) return fail("policy.flavour embedded: " + backend.err().message);
    policy::server_config server_config;
    server_config.host = "127.0.0.1";
    server_config.port = 0;
    server_config.threads = static_cast<std::size_t>(c.policy.max_in_flight) + 4;
    auto started = policy::policy_server::start(server_config, *backend);
    if (!started) return fail("policy.flavour embedded: " + started.err().message);
    server = std::move(*started);
    endpoints = {server->base_url()};
  }
  // Prompts render here with the tokenizer tokenizer_folder() chose (policy.tokenizer, or the
  // embedded model's own), for every flavour; else the embedded server's byte-level template is
  // rendered here, and any other server renders with its own chat template through /tokenize.
  std::shared_ptr<const actors::prompt_renderer> renderer;
  auto client_config = client_settings(c, endpoints);
  if (preflight->renderer) {
    renderer = actors::make_chat_renderer(preflight->renderer);
  } else if (c.policy.flavour == server_flavour::embedded) {
    renderer = actors::make_byte_chatml_renderer();
  }
  auto client = policy::policy_client::create(std::move(client_config));
  if (!client) return fail("policy: " + client.err().message);
  if (auto checked = check_policy_endpoints(**client, renderer.get(),
                                            [&watcher] { return watcher.signal() != 0; });
      !checked) {
    return fail("policy endpoint check: " + checked.err().message);
  }

  // policy.weight_sync nccl: the learner's broadcast group, which the server joins now, in a first
  // sync that also sends the learner's weights (a resumed run's server starts from the model
  // folder, not from the checkpoint the learner resumed).
  std::unique_ptr<actors::torch_weight_transfer> transfer;
  std::string transfer_update_info;
  if (c.policy.weight_sync == "ipc" && torch_learner) {
    // policy.weight_sync ipc: the learner's exported CUDA buffer, which the server copies out of
    // at each /update_weights; a first sync sends the learner's weights, as for nccl.
    auto opened_transfer = actors::torch_weight_transfer::open_ipc(torch_learner);
    if (!opened_transfer) return fail(opened_transfer.err().message);
    transfer = std::move(*opened_transfer);
    auto info = transfer->update_info();
    if (!info) return fail(info.err().message);
    transfer_update_info = std::move(*info);
    policy::weight_sync_request first;
    first.version = std::to_string(plan->weight_version);
    first.companion = transfer->companion();
    auto done = std::make_shared<std::promise<status>>();
    auto answer = done->get_future();
    (*client)->sync_weights(0, policy::vllm_transfer_ipc_plan(transfer_update_info),
                            std::move(first), [done](status s) { done->set_value(std::move(s)); });
    while (answer.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (watcher.signal() != 0) {
        transfer.reset();
        return fail("interrupted by a signal during the first weight sync");
      }
    }
    if (auto first_sync = answer.get(); !first_sync) {
      return fail("policy.weight_sync ipc: the first weight sync with the server: " +
                  first_sync.err().message);
    }
  } else if (c.policy.weight_sync == "nccl" && torch_learner) {
    // For the rendezvous and for each tensor's broadcast: the server joins as soon as its
    // /init_weight_transfer_engine arrives, and the largest tensor of a 7B model is 1 GB. A run
    // that fails while the learner waits for a server that will not join ends after it.
    constexpr std::chrono::milliseconds transfer_timeout{120'000};
    auto opened_transfer = actors::torch_weight_transfer::open(torch_learner, endpoints.front(),
                                                               c.learner.device, transfer_timeout);
    if (!opened_transfer) return fail(opened_transfer.err().message);
    transfer = std::move(*opened_transfer);
    auto info = transfer->update_info();
    if (!info) return fail("policy.weight_sync nccl: " + info.err().message);
    transfer_update_info = std::move(*info);
    policy::weight_sync_request first;
    first.version = std::to_string(plan->weight_version);
    first.companion = transfer->companion();
    auto done = std::make_shared<std::promise<status>>();
    auto answer = done->get_future();
    (*client)->sync_weights(
        0, policy::vllm_transfer_nccl_plan(transfer->init_info(), transfer_update_info),
        std::move(first), [done](status s) { done->set_value(std::move(s)); });
    while (answer.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (watcher.signal() != 0) {
        // The client's stop ends the sync; its callback fires before the client is gone.
        transfer.reset();
        return fail("interrupted by a signal while forming the weight-transfer group");
      }
    }
    if (auto formed = answer.get(); !formed) {
      return fail("policy.weight_sync nccl: forming the broadcast group with the server: " +
                  formed.err().message);
    }
  }

  auto verifier = sandbox::verifier::create(verifier_settings(c, has_cuda));
  if (!verifier) return fail("verifier: " + verifier.err().message);
  // Remote verifier nodes: a dispatcher stands in for the local pool (actors/remote_verifier.hpp).
  std::optional<actors::dispatcher_settings> nodes = preflight->nodes;

  std::printf(
      "run '%s': %d steps x %d tasks x %d rollouts, up to %d turns | gate %s, reward %s, "
      "schedule %s | %zu training tasks, %zu validation tasks | policy %s\n",
      run_id.c_str(), c.experiment.steps, c.data.batch_size, c.rollout.group_size,
      c.rollout.max_turns, to_string(c.gate.policy).c_str(), to_string(c.reward.kind).c_str(),
      to_string(c.schedule.mode).c_str(), tasks.train.size(), tasks.validation.size(),
      endpoints.front().c_str());
  std::fflush(stdout);

  // Live metrics: RUN_DIR/metrics.prom and metrics.json (tools/leap/run_metrics.hpp).
  run_metrics metrics(run_dir, options.metrics, client->get(), verifier->get());

  actors::run_summary summary;
  {
    caf::actor_system_config cfg;
    cfg.set("logger.verbosity", caf::atom("quiet"));
    actors::register_message_types(cfg);
    if (nodes) actors::configure_node_transport(cfg, nodes->transport);
    caf::actor_system system{cfg};

    actors::generator_pool_config gc;
    gc.max_in_flight = c.policy.max_in_flight * static_cast<int>(endpoints.size());
    gc.initial_weight_version = plan->weight_version;
    gc.telemetry = metrics.telemetry();
    // The torch learner's weights reach the servers through their load route, each step's
    // version recorded: vLLM reloads the step folder (/collective_rpc reload_weights with
    // weights_path); SGLang loads it (/update_weights_from_disk); the embedded server takes the
    // same SGLang route with the in-memory path, which its backend serves from the learner.
    // policy.weight_sync nccl: vLLM's weight-transfer routes, the learner broadcasting alongside.
    // policy.weight_sync ipc: the same routes, the learner filling its exported buffer at "start".
    if (transfer && c.policy.weight_sync == "ipc") {
      gc.sync_plan = policy::vllm_transfer_ipc_plan(transfer_update_info);
      gc.sync_companion = transfer->companion();
    } else if (transfer) {
      gc.sync_plan = policy::vllm_transfer_nccl_plan("", transfer_update_info);
      gc.sync_companion = transfer->companion();
    } else if (torch_learner) {
      gc.sync_plan = disk_sync_plan(c.policy.flavour);
    }
    actors::verifier_pool_config vc;
    vc.max_in_flight = sandbox::verifier_config{}.queue_capacity;
    actors::experiment_services services;
    services.generator = actors::spawn_generator_pool(system, **client, renderer, gc);
    const auto local_verifier = actors::spawn_verifier_pool(system, **verifier, table, vc);
    services.verifier = local_verifier;
    if (nodes) {
      nodes->log = actors::program_log(run_ids);
      services.verifier = actors::spawn_verifier_dispatcher(system, local_verifier, *nodes);
    }
    services.scorer = actors::spawn_scorer(system, c.reward, c.advantage);
    services.store = actors::spawn_store(system, store);
    actors::learner_actor_config lc;
    lc.gamma = c.advantage.gamma;
    lc.telemetry = metrics.telemetry();
    services.learner = actors::spawn_learner(
        system,
        torch_learner ? std::shared_ptr<actors::learner_backend>(std::move(torch_learner))
                      : std::shared_ptr<actors::learner_backend>(
                            actors::make_record_learner(run_dir / "batches", plan->weight_version)),
        lc);

    actors::experiment_settings settings;
    settings.run_id = run_id;
    settings.config = c;
    settings.train_tasks = group_tasks(tasks.train);
    settings.validation_tasks = group_tasks(tasks.validation);
    settings.resume = *plan;
    settings.probe_fraction = c.gate.probe_fraction;
    settings.telemetry = metrics.telemetry();
    settings.progress.on_step = [m = &metrics](const actors::step_progress& p) {
      std::printf("%s\n", actors::format_step_line(p).c_str());
      std::fflush(stdout);
      m->request_write();
    };
    settings.progress.on_validation = [](const actors::validation_progress& p) {
      std::printf("%s\n", actors::format_validation_line(p).c_str());
      std::fflush(stdout);
    };
    settings.progress.on_log = actors::program_log(run_ids);
    auto driver = actors::spawn_experiment(system, std::move(settings), services);

    {
      caf::scoped_actor self{system};
      watcher.on_first_signal([driver] { caf::anon_send(driver, actors::stop_atom_v); });
      self->request(driver, caf::infinite, actors::run_atom_v)
          .receive([&](const actors::run_summary& s) { summary = s; },
                   [&](caf::error& e) {
                     // A signal before the run started stops the driver before it answers.
                     summary.status =
                         watcher.signal() != 0 ? run_status::interrupted : run_status::failed;
                     summary.error = system.render(e);
                   });
      watcher.on_first_signal({});
      if (watcher.signal() != 0) {
        log::info(
            "waiting for the compiles and runs in flight to end (signal again to exit at "
            "once)",
            run_ids);
      }
      // Stop the services before the objects they wrap go away.
      self->send_exit(services.generator, caf::exit_reason::user_shutdown);
      self->send_exit(services.verifier, caf::exit_reason::user_shutdown);
      self->send_exit(services.scorer, caf::exit_reason::user_shutdown);
      self->send_exit(services.store, caf::exit_reason::user_shutdown);
      self->send_exit(services.learner, caf::exit_reason::user_shutdown);
      self->wait_for(services.generator, services.verifier, services.scorer, services.store,
                     services.learner);
      self->send_exit(local_verifier, caf::exit_reason::user_shutdown);  // behind a dispatcher
      self->wait_for(local_verifier);
    }
    // The last metrics write; the writer samples the client and the verifier no more.
    metrics.stop();
    // The transfer's last job calls back into the client: it goes first.
    transfer.reset();
    // The client's destructor runs the cancelled callbacks, which still send into the system.
    client->reset();
    verifier->reset();
  }
  if (server) server->stop();

  run.status = summary.status == run_status::running ? run_status::failed : summary.status;
  if (auto put = store->put_run(run); !put) return fail(put.err().message);

  auto steps = store->steps(run_id);
  if (steps && !steps->empty()) {
    std::printf("\n%s", actors::format_summary_table(*steps, c.rollout.max_turns).c_str());
  }
  std::printf(
      "run '%s' %s: %llu steps completed by this process, %llu groups run, %llu read back "
      "from the store, %llu finished turns of unfinished groups taken from the store | "
      "trajectories in %s\n",
      run_id.c_str(), to_string(run.status).c_str(),
      static_cast<unsigned long long>(summary.steps_completed),
      static_cast<unsigned long long>(summary.groups_completed),
      static_cast<unsigned long long>(summary.groups_resumed),
      static_cast<unsigned long long>(summary.turns_resumed),
      store_path_of_run_dir(run_dir).string().c_str());
  if (run.status == run_status::failed) return fail(summary.error);
  if (run.status == run_status::interrupted) return 130;
  return 0;
}

void add_run(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<run_options>();
  auto* cmd = app.add_subcommand(
      "run",
      "Run an experiment: sample tasks, generate G rollouts each, verify them in the sandbox, gate "
      "groups into debug turns (DCP), score, store every trajectory in the run folder and hand the "
      "batches to the learner. Prints a line per step and a summary table. Running it again on "
      "the same run folder continues the run (completed groups are kept, in-flight ones redone). "
      "SIGINT/SIGTERM stop cleanly.");
  cmd->add_option("config", options->config_path, "Experiment config (YAML)")->required();
  cmd->add_flag("--quiet", options->quiet, "Only progress lines and the summary; no event log");
  cmd->add_flag("--accept-lost-writes", options->accept_lost_writes,
                "Go on with a store that lost writes it had acknowledged (a deleted or truncated "
                "write-ahead log), which is otherwise refused; the lost groups are redone");
  cmd->add_option("--metrics-interval", options->metrics.interval_s,
                  "Seconds between writes of RUN_DIR/metrics.prom and metrics.json (also written "
                  "at each step's end and at exit); 0: only then")
      ->default_val(5.0)
      ->check(CLI::NonNegativeNumber);
  cmd->callback([options, exit_code] { *exit_code = run_experiment(*options); });
}

}  // namespace

LEAP_COMMAND("run", add_run);

}  // namespace leap::cli
