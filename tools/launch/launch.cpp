#include "tools/launch/launch.hpp"

#include "actors/generator.hpp"
#include "actors/learner.hpp"
#include "actors/log_sink.hpp"
#include "actors/renderer.hpp"
#include "actors/scorer.hpp"
#include "actors/store.hpp"
#include "actors/verifier.hpp"
#include "common/log.hpp"
#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"
#include "policy/server/server.hpp"
#include "sandbox/engine.hpp"
#include "tools/launch/metrics.hpp"
#include "tools/launch/resume.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <limits>
#include <mutex>
#include <optional>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;

// The `vocab_size` of FOLDER/config.json (a model's embedding rows); 0 when the folder has no
// such file or it holds no positive integer vocab_size.
int config_vocab_size(const std::string& folder) {
  std::error_code ec;
  if (folder.empty() || !fs::is_regular_file(fs::path(folder) / "config.json", ec)) {
    return 0;
  }
  std::ifstream in(fs::path(folder) / "config.json");
  const auto config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("vocab_size") ||
      !config["vocab_size"].is_number_integer()) {
    return 0;
  }
  const auto rows = config["vocab_size"].get<std::int64_t>();
  return rows > 0 && rows <= std::numeric_limits<int>::max() ? static_cast<int>(rows) : 0;
}

}  // namespace

policy::client_config policy_client_settings(const run_preflight& checked,
                                             const std::vector<std::string>& endpoints) {
  const experiment_config& c = checked.config;
  policy::client_config cc;
  cc.flavour = wire_of(c.policy.flavour);
  for (const auto& url : endpoints) {
    cc.endpoints.push_back({url, c.policy.max_in_flight});
  }
  cc.model = c.policy.model;
  cc.request_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(c.policy.request_timeout_s * 1000));
  cc.retry.max_attempts = c.policy.retries + 1;
  cc.seed = c.experiment.seed;
  cc.stream = c.policy.stream;
  // The served model's own folder first (policy.model, when it is one here), then the tokenizer's;
  // a model has at least its tokenizer's ids.
  const int ids = checked.renderer ? checked.renderer->vocab_size() : 0;
  for (const auto* folder : {&c.policy.model, &checked.renderer_dir}) {
    if (const int rows = config_vocab_size(*folder); rows > 0 && rows >= ids) {
      cc.fallback_vocab_size = rows;
      return cc;
    }
  }
  cc.fallback_vocab_size = ids;
  return cc;
}

namespace {

// Waits for `answer`, polling `interrupted` (the future's producer is the client's loop, bounded
// by its retries and turn deadline). nullopt: interrupted first.
template <class T>
std::optional<T> await(std::future<T>& answer, const std::function<bool()>& interrupted) {
  while (answer.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (interrupted()) {
      return std::nullopt;
    }
  }
  return answer.get();
}

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
    if (!ids) {
      return ids.err().wrap("rendering a test prompt");
    }
    probe.prompt = std::move(*ids);
  }
  auto done = std::make_shared<std::promise<result<std::vector<policy::endpoint_check>>>>();
  auto answer = done->get_future();
  client.preflight(std::move(probe), [done](auto checks) { done->set_value(std::move(checks)); });
  auto checks = await(answer, interrupted);
  if (!checks) {
    return error{"interrupted by a signal"};
  }
  if (!*checks) {
    return checks->err();
  }
  return ok_status();
}

// Whether a sync runs vLLM's weight-transfer routes beside a transfer the learner drives (nccl,
// ipc) rather than the servers' folder-load route (disk; in_memory takes that route too, which
// the embedded server's backend serves from the learner).
bool weight_sync_transfers(weight_sync_method method) {
  switch (method) {
    case weight_sync_method::automatic:  // resolved by effective_weight_sync before it gets here
    case weight_sync_method::disk:
    case weight_sync_method::in_memory:
      return false;
    case weight_sync_method::nccl:
    case weight_sync_method::ipc:
      return true;
  }
  return false;
}

// The first sync of a weight transfer, for nccl and ipc alike: sends the learner's weights of
// `version` (a resumed run's server starts from the model folder, not from the checkpoint the
// learner resumed); for nccl the server joins the learner's broadcast group in it. Nothing when a
// signal ended it, so the caller tells an interrupt apart from the server's own failure.
std::optional<status> first_sync(policy::policy_client& client, torch_parts& torch,
                                 const policy::weight_sync_plan& plan, std::uint64_t version,
                                 const std::function<bool()>& interrupted) {
  policy::weight_sync_request first;
  first.version = std::to_string(version);
  first.companion = torch.companion();
  auto done = std::make_shared<std::promise<status>>();
  auto answer = done->get_future();
  // The client's stop ends the sync; its callback fires before the client is gone.
  client.sync_weights(0, plan, std::move(first),
                      [done](status s) { done->set_value(std::move(s)); });
  return await(answer, interrupted);
}

// The LibTorch parts a process's runs use (install_torch_parts); empty: none linked.
std::function<std::unique_ptr<torch_parts>()>& torch_parts_maker() {
  static std::function<std::unique_ptr<torch_parts>()> make;
  return make;
}

std::vector<actors::group_task> group_tasks(
    const std::vector<std::shared_ptr<const sandbox::task>>& tasks) {
  std::vector<actors::group_task> out;
  out.reserve(tasks.size());
  for (const auto& t : tasks) {
    out.push_back({t->id, t->prompt});
  }
  return out;
}

}  // namespace

// Members in the order they are built; teardown() takes them down in the reverse order, which
// is also the order the destructor would.
struct run::impl {
  run_preflight checked;
  run_options options;
  log::ids ids;
  fs::path run_dir;

  std::mutex mutex;
  bool stop_requested = false;
  std::optional<actors::experiment_actor> driver;  // while wait() runs the graph
  // A write the run cannot go on without failed (a full disk under the metrics files): the driver
  // was stopped, and the run ends failed with this error.
  std::optional<error> fatal;

  std::shared_ptr<trajectory_store> store;
  run_record record;
  actors::resume_plan plan;
  // The torch learner (and its ranks), the embedded server's model, the weight transfer: made
  // when the config needs them. Before the server, so that it goes after it.
  std::unique_ptr<torch_parts> torch;
  std::unique_ptr<policy::policy_server> server;
  std::vector<std::string> endpoints;
  std::shared_ptr<const actors::prompt_renderer> renderer;
  std::unique_ptr<policy::policy_client> client;
  bool transfer = false;  // torch's weight transfer is open
  std::optional<policy::weight_sync_plan> sync_plan;
  // policy.weight_sync_delta: deltas the servers refused (the generator counts, the learner
  // reports them per step).
  std::shared_ptr<std::atomic<std::int64_t>> delta_refusals =
      std::make_shared<std::atomic<std::int64_t>>(0);
  std::unique_ptr<sandbox::verifier> verifier;

  bool stopping() {
    std::lock_guard lock(mutex);
    return stop_requested;
  }

  status open_store();
  // `torch`, made on first use; `what` names the config's reason in the error without it.
  result<torch_parts*> torch_for(const std::string& what);
  status make_learner();
  status start_embedded_server();
  status connect_policy();
  // The transfer's last job calls back into the client: it goes first; the client's destructor
  // runs the cancelled callbacks, which may still send into the actor system.
  void release_clients() {
    if (transfer) {
      torch->close_transfer();
      transfer = false;
    }
    client.reset();
    verifier.reset();
  }
};

status run::impl::open_store() {
  const experiment_config& c = checked.config;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) {
    return error{run_dir.string() + ": cannot create the run folder: " + ec.message()};
  }
  auto opened = trajectory_store::open(store_path_of_run_dir(run_dir), options.store);
  if (!opened) {
    return opened.err();
  }
  store = std::move(*opened);
  if (const auto& lost = store->lost_writes()) {
    // An error, not a warning: a log level that hides warnings must still show lost data.
    log::error(store->path().string() + ": " + lost->describe() + "; going on with what it holds",
               ids);
  }
  const std::string& run_id = c.experiment.name;
  auto existing = store->get_run(run_id);
  if (!existing) {
    return existing.err();
  }
  record = run_record{run_id, checked.text, actors::unix_ms(), run_status::running};
  if (*existing) {
    auto stored = parse_config((*existing)->config_yaml, run_dir.string() + " (stored config)");
    if (!stored) {
      return stored.err();
    }
    if (auto diff = resume_conflicts(*stored, c); !diff.empty()) {
      std::string message = run_dir.string() + " holds run '" + run_id +
                            "' started with another config; resume needs the same experiment " +
                            "(only where and how fast it runs may change: endpoints, timeouts, " +
                            "worker counts, steps, ...). Differences:";
      for (const auto& d : diff) {
        message += "\n  " + d;
      }
      return error{message + "\nUse another experiment.run_dir or experiment.name for a new run."};
    }
    record.created_unix_ms = (*existing)->created_unix_ms;
  }
  auto planned = plan_resume(*store, run_id, c, checked.tasks.validation.size());
  if (!planned) {
    return planned.err();
  }
  plan = std::move(*planned);
  if (auto put = store->put_run(record); !put) {
    return put;
  }
  if (options.events.on_resume) {
    options.events.on_resume(plan);
  }
  return ok_status();
}

result<torch_parts*> run::impl::torch_for(const std::string& what) {
  if (!torch) {
    const auto& make = torch_parts_maker();
    if (!make) {
      return error{what + " needs LibTorch, which this program does not link (leap-torch does; " +
                   "`leap` hands such runs to it)"};
    }
    torch = make();
  }
  return torch.get();
}

// learner.kind torch: LibTorch training learner.model_path (resuming from the newest checkpoint
// in the run folder), with a random model written there first when learner.init_preset asks.
status run::impl::make_learner() {
  const experiment_config& c = checked.config;
  if (options.services.learner || c.learner.kind != learner_kind::torch) {
    return ok_status();
  }
  auto parts = torch_for("learner.kind torch");
  if (!parts) {
    return parts.err();
  }
  torch_learner_request request;
  request.checked = &checked;
  request.run_dir = run_dir;
  request.weight_version = plan.weight_version;
  request.delta_refusals = delta_refusals;
  request.on_model_written = options.events.on_model_written;
  return (*parts)->make_learner(request);
}

// policy.flavour embedded: the project's server in-process, the LibTorch backend on policy.model
// (starting from the weights the torch learner holds: a resumed run's newest checkpoint), else
// the scripted backend on the tasks' solutions.
status run::impl::start_embedded_server() {
  const experiment_config& c = checked.config;
  endpoints = c.policy.endpoints;
  if (c.policy.flavour != server_flavour::embedded) {
    if (options.server_faults.any()) {
      return error{
          "server faults are injected by the embedded server only, and policy.flavour "
          "is " +
          to_string(c.policy.flavour) +
          "; give them to the server instead (leap serve-policy --faults)"};
    }
    return ok_status();
  }
  policy::server_config server_config;
  server_config.host = "127.0.0.1";
  server_config.port = 0;
  server_config.threads = static_cast<std::size_t>(c.policy.max_in_flight) + 4;
  server_config.faults = options.server_faults;
  std::shared_ptr<policy::policy_backend> backend;
  if (!c.policy.model.empty()) {
    auto parts = torch_for("policy.model");
    if (!parts) {
      return parts.err();
    }
    std::shared_ptr<const policy::model_vocabulary> served_vocab;  // null: the byte-level tokenizer
    if (checked.renderer) {
      served_vocab = policy::make_vocabulary(checked.renderer, checked.renderer_dir);
    }
    auto model = (*parts)->serve_model(c.policy.model, c.learner.device, served_vocab);
    if (!model) {
      return model.err().wrap("policy.model");
    }
    backend = std::move(model->backend);
    server_config.model_name = c.policy.model;  // the name the client sends
    server_config.model_path = c.policy.model;
    server_config.max_model_len =
        static_cast<int>(std::min<std::int64_t>(model->max_position_embeddings, 1 << 20));
    server_config.weight_version = static_cast<std::int64_t>(plan.weight_version);
    server_config.vocab = served_vocab;
    server_config.vocab_size = static_cast<int>(model->vocab_size);
  } else {
    policy::scripted_config sc;
    sc.seed = c.experiment.seed;
    for (const auto* list : {&checked.tasks.train, &checked.tasks.validation}) {
      for (const auto& t : *list) {
        if (!t->solution.empty()) {
          sc.tasks.push_back(scripted_task_of(*t));
        }
      }
    }
    auto made = policy::scripted_backend::create(std::move(sc));
    if (!made) {
      return made.err().wrap("policy.flavour embedded");
    }
    backend = std::move(*made);
  }
  auto started = policy::policy_server::start(server_config, std::move(backend));
  if (!started) {
    return started.err().wrap("policy.flavour embedded");
  }
  server = std::move(*started);
  endpoints = {server->base_url()};
  return ok_status();
}

// The policy client, its endpoint check and, for policy.weight_sync nccl or ipc with the torch
// learner, the weight transfer and its first sync.
status run::impl::connect_policy() {
  const experiment_config& c = checked.config;
  // Prompts render here with the tokenizer tokenizer_folder() chose (policy.tokenizer, or the
  // embedded model's own), for every flavour; else the embedded server's byte-level template is
  // rendered here, and any other server renders with its own chat template through /tokenize.
  if (checked.renderer) {
    renderer = actors::make_chat_renderer(checked.renderer);
  } else if (c.policy.flavour == server_flavour::embedded) {
    renderer = actors::make_byte_chatml_renderer();
  }
  auto made = policy::policy_client::create(policy_client_settings(checked, endpoints));
  if (!made) {
    return made.err().wrap("policy");
  }
  client = std::move(*made);
  const auto interrupted = [this] { return stopping(); };
  if (auto checked_endpoints = check_policy_endpoints(*client, renderer.get(), interrupted);
      !checked_endpoints) {
    return checked_endpoints.err().wrap("policy endpoint check");
  }
  // The torch learner's weights reach the servers through their load route, each step's version
  // recorded: vLLM reloads the step folder (/collective_rpc reload_weights with weights_path);
  // SGLang loads it (/update_weights_from_disk); the embedded server takes the same SGLang route
  // with the in-memory path, which its backend serves from the learner. policy.weight_sync nccl:
  // vLLM's weight-transfer routes, the learner broadcasting alongside; ipc: the same routes, the
  // learner filling its exported buffer at "start".
  if (!torch || !torch->has_learner()) {
    return ok_status();
  }
  const weight_sync_method method = effective_weight_sync(c.policy);
  if (!weight_sync_transfers(method)) {
    // policy.inflight_updates: pause in abort mode around the load instead of draining; the
    // client resumes the aborted turns.
    sync_plan = policy::disk_sync_plan(c.policy.flavour, c.policy.inflight_updates);
    return ok_status();
  }
  auto opened = torch->open_transfer(c, endpoints.front());
  if (!opened) {
    return opened.err();
  }
  transfer = true;
  sync_plan = std::move(opened->step_plan);
  // nccl forms the broadcast group in the first sync.
  const bool nccl = method == weight_sync_method::nccl;
  const auto synced =
      first_sync(*client, *torch, opened->first_plan, plan.weight_version, interrupted);
  if (!synced) {
    torch->close_transfer();
    transfer = false;
    return error{nccl ? "interrupted by a signal while forming the weight-transfer group"
                      : "interrupted by a signal during the first weight sync"};
  }
  if (!*synced) {
    torch->close_transfer();
    transfer = false;
    return synced->err().wrap("policy.weight_sync " + to_string(method) +
                              (nccl ? ": forming the broadcast group with the server"
                                    : ": the first weight sync with the server"));
  }
  return ok_status();
}

run::run(run_preflight checked, run_options options) : impl_(std::make_unique<impl>()) {
  impl_->checked = std::move(checked);
  // What the store keeps must parse back to this config: a resumed run compares the two.
  if (impl_->checked.text.empty()) {
    impl_->checked.text = render_config(impl_->checked.config);
  }
  impl_->options = std::move(options);
  impl_->ids = log::ids{impl_->checked.config.experiment.name};
  impl_->run_dir = impl_->checked.config.experiment.run_dir;
}

run::~run() {
  impl_->release_clients();
  if (impl_->server) {
    impl_->server->stop();
  }
}

status run::start() {
  impl& m = *impl_;
  if (auto s = m.open_store(); !s) {
    return s;
  }
  if (auto s = m.make_learner(); !s) {
    return s;
  }
  if (!m.options.services.generator) {
    if (auto s = m.start_embedded_server(); !s) {
      return s;
    }
    if (auto s = m.connect_policy(); !s) {
      return s;
    }
  }
  if (!m.options.services.verifier) {
    // The compile cache lives in the run folder unless verifier.cache_dir names another.
    const experiment_config& c = m.checked.config;
    const std::string cache_dir =
        c.verifier.cache_dir.empty() ? (m.run_dir / "cache").string() : "";
    auto made = sandbox::verifier::create(sandbox_settings(c.verifier, m.checked.kinds, cache_dir));
    if (!made) {
      return made.err().wrap("verifier");
    }
    m.verifier = std::move(*made);
  }
  return ok_status();
}

void run::stop() {
  std::lock_guard lock(impl_->mutex);
  impl_->stop_requested = true;
  if (impl_->driver) {
    caf::anon_send(*impl_->driver, actors::stop_atom_v);
  }
}

result<run_outcome> run::wait() {
  impl& m = *impl_;
  const experiment_config& c = m.checked.config;
  run_outcome out;
  {
    // Live metrics: RUN_DIR/metrics.prom and metrics.json (tools/launch/metrics.hpp).
    std::optional<run_metrics> metrics;
    if (m.options.write_metrics) {
      run_metrics_options mo;
      mo.interval_s = m.options.metrics_interval_s;
      mo.on_full_disk = [&m](const error& e) {
        std::lock_guard lock(m.mutex);
        if (!m.fatal) {
          m.fatal = e.wrap("writing the live metrics (a full disk ends the run)");
        }
        if (m.driver) {
          caf::anon_send(*m.driver, actors::stop_atom_v);
        }
      };
      metrics.emplace(m.run_dir, std::move(mo), m.client.get(), m.verifier.get());
    }
    const auto telemetry = metrics ? metrics->telemetry() : nullptr;

    caf::actor_system_config cfg;
    cfg.set("logger.verbosity", caf::atom("quiet"));
    if (m.options.scheduler_threads > 0) {
      cfg.set("scheduler.max-threads", m.options.scheduler_threads);
    }
    actors::register_message_types(cfg);
    if (m.checked.nodes && !m.options.services.verifier) {
      actors::configure_node_transport(cfg, m.checked.nodes->transport);
    }
    caf::actor_system system{cfg};

    actors::experiment_services services;
    if (m.options.services.generator) {
      services.generator = m.options.services.generator(system);
    } else {
      actors::generator_pool_config gc;
      gc.max_in_flight = c.policy.max_in_flight * static_cast<int>(m.endpoints.size());
      gc.initial_weight_version = m.plan.weight_version;
      gc.telemetry = telemetry;
      if (m.sync_plan) {
        gc.sync_plan = *m.sync_plan;
      }
      if (m.transfer) {
        gc.sync_companion = m.torch->companion();
      }
      if (m.torch && m.torch->has_learner() && !c.policy.weight_sync_delta.empty()) {
        gc.sync_delta_dir = m.torch->delta_dir();
        gc.sync_delta_info = m.torch->delta_info_source();
        gc.on_delta_refused = [refusals = m.delta_refusals](const std::string& why) {
          refusals->fetch_add(1);
          log::warn("weight sync: the delta was refused, sending the full weights instead: " + why);
        };
      }
      services.generator = actors::spawn_generator_pool(system, *m.client, m.renderer, gc);
    }
    services.store = actors::spawn_store(system, m.store);
    std::optional<actors::verifier_actor> local_verifier;
    if (m.options.services.verifier) {
      services.verifier = m.options.services.verifier(system);
    } else {
      auto table =
          std::make_shared<std::unordered_map<std::string, std::shared_ptr<const sandbox::task>>>();
      for (const auto* list : {&m.checked.tasks.train, &m.checked.tasks.validation}) {
        for (const auto& t : *list) {
          table->emplace(t->id, t);
        }
      }
      actors::verifier_pool_config vc;
      vc.max_in_flight = sandbox::verifier_config{}.queue_capacity;
      // Each profile is stored with its turn as it arrives (the store is spawned first for it).
      vc.profile_store = services.store;
      vc.log = actors::program_log(m.ids);
      local_verifier = actors::spawn_verifier_pool(system, *m.verifier, table, vc);
      services.verifier = *local_verifier;
      // Profiles made after their verdicts are asked for here by the turns that follow; verifier
      // nodes that profile (as their own config says) send theirs to the same pool. Without
      // profiling here or nodes, no turn asks: nothing is coming.
      if (m.verifier->verification_engine().config().profile != profile_mode::off ||
          m.checked.nodes) {
        services.profiles = actors::profiles_of(*local_verifier);
        services.profile_wait = std::chrono::milliseconds(
            static_cast<std::int64_t>(m.checked.config.verifier.profile_wait_s * 1000));
        // Structural reward terms: each finished group pulls its passes' profile summaries.
        if (m.checked.config.reward.structural.enabled()) {
          services.profile_summaries = actors::profile_summaries_of(*local_verifier);
        }
      }
      // Remote verifier nodes: a dispatcher stands in for the local pool
      // (actors/remote_verifier.hpp).
      if (auto nodes = m.checked.nodes) {
        nodes->log = actors::program_log(m.ids);
        nodes->profiles = actors::profile_inbox_of(*local_verifier);
        services.verifier = actors::spawn_verifier_dispatcher(system, *local_verifier, *nodes);
      } else {
        local_verifier.reset();  // the pool is the service itself
      }
    }
    services.scorer = actors::spawn_scorer(system, c.reward, c.advantage, c.gate.optimise.train);
    actors::learner_actor_config lc;
    lc.gamma = c.advantage.gamma;
    lc.train_optimisation = c.gate.optimise.train;
    lc.telemetry = telemetry;
    std::shared_ptr<actors::learner_backend> learner;
    if (m.options.services.learner) {
      learner = m.options.services.learner(m.plan.weight_version);
    } else if (m.torch) {
      learner = m.torch->take_learner();
    }
    if (!learner) {
      learner = actors::make_record_learner(m.run_dir / "batches", m.plan.weight_version);
    }
    services.learner = actors::spawn_learner(system, std::move(learner), lc);

    actors::experiment_settings settings;
    settings.run_id = c.experiment.name;
    settings.config = c;
    settings.train_tasks = group_tasks(m.checked.tasks.train);
    settings.validation_tasks = group_tasks(m.checked.tasks.validation);
    settings.resume = m.plan;
    settings.probe_fraction = c.gate.probe_fraction;
    settings.telemetry = telemetry;
    settings.progress = m.options.events.progress;
    if (metrics) {
      // Each step's end writes the metrics files too.
      settings.progress.on_step =
          [writer = &*metrics,
           on_step = std::move(settings.progress.on_step)](const actors::step_progress& p) {
            if (on_step) {
              on_step(p);
            }
            writer->request_write();
          };
    }

    {
      caf::scoped_actor self{system};
      {
        std::lock_guard lock(m.mutex);
        m.driver = actors::spawn_experiment(system, std::move(settings), services);
        if (m.stop_requested || m.fatal) {
          caf::anon_send(*m.driver, actors::stop_atom_v);
        }
      }
      const auto started = std::chrono::steady_clock::now();
      self->request(*m.driver, caf::infinite, actors::run_atom_v)
          .receive([&](const actors::run_summary& s) { out.summary = s; },
                   [&](caf::error& e) {
                     // A stop before the run started stops the driver before it answers.
                     out.summary.status =
                         m.stopping() ? run_status::interrupted : run_status::failed;
                     out.summary.error = system.render(e);
                   });
      out.run_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      {
        std::lock_guard lock(m.mutex);
        m.driver.reset();
      }
      if (m.stopping() && m.options.events.on_stopping) {
        m.options.events.on_stopping();
      }
      // Stop the services before the objects they wrap go away.
      for (const auto& service : {caf::actor_cast<caf::actor>(services.generator),
                                  caf::actor_cast<caf::actor>(services.verifier),
                                  caf::actor_cast<caf::actor>(services.scorer),
                                  caf::actor_cast<caf::actor>(services.store),
                                  caf::actor_cast<caf::actor>(services.learner)}) {
        self->send_exit(service, caf::exit_reason::user_shutdown);
      }
      self->wait_for(services.generator, services.verifier, services.scorer, services.store,
                     services.learner);
      if (local_verifier) {
        self->send_exit(*local_verifier, caf::exit_reason::user_shutdown);  // behind a dispatcher
        self->wait_for(*local_verifier);
      }
    }
    // The last metrics write; the writer samples the client and the verifier no more.
    if (metrics) {
      metrics->stop();
    }
    if (std::lock_guard lock(m.mutex); m.fatal) {
      out.summary.status = run_status::failed;
      out.summary.error = m.fatal->message;
    }
    m.release_clients();
  }
  if (m.server) {
    m.server->stop();
  }

  out.status = out.summary.status == run_status::running ? run_status::failed : out.summary.status;
  m.record.status = out.status;
  if (auto put = m.store->put_run(m.record); !put) {
    // A run that failed keeps its own error: after a failed store write (a full disk) this put is
    // refused with an echo of that error, which would hide the group that hit it. The run record
    // then still says running, as after a kill, and the next `leap run` continues it.
    if (out.status != run_status::failed) {
      return put.err();
    }
    log::warn("the run record keeps status running: " + put.err().message);
  }
  return out;
}

bool needs_torch(const experiment_config& c) {
  return c.learner.kind == learner_kind::torch ||
         (c.policy.flavour == server_flavour::embedded && !c.policy.model.empty());
}

void install_torch_parts(std::function<std::unique_ptr<torch_parts>()> make) {
  torch_parts_maker() = std::move(make);
}

const run_preflight& run::checked() const { return impl_->checked; }
const std::vector<std::string>& run::endpoints() const { return impl_->endpoints; }
std::shared_ptr<trajectory_store> run::store() const { return impl_->store; }

}  // namespace leap::launch
