// `leap verifier-node --port P --suite DIR ...`: a verifier node for remote hosts (GPU machines).
// Loads the task suites (the node resolves tasks by id, as the local pool does), runs a local
// sandbox verifier behind the verifier pool actor, and publishes the node actor
// (actors/verifier_node.hpp) through CAF's middleman, TLS through caf::openssl when given
// certificates. Orchestrators list it in verifier.nodes. Runs until SIGINT/SIGTERM.
#include "actors/messages.hpp"
#include "actors/node_guard.hpp"
#include "actors/remote_verifier.hpp"
#include "actors/verifier.hpp"
#include "actors/verifier_node.hpp"
#include "common/log.hpp"
#include "common/node_auth.hpp"
#include "common/signals.hpp"
#include "orchestrator/config.hpp"
#include "sandbox/verifier.hpp"
#include "tools/launch/launch.hpp"
#include "tools/launch/tasks.hpp"
#include "tools/leap/command.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <signal.h>
#include <string>
#include <unordered_map>
#include <vector>

namespace leap::cli {
namespace {

struct node_options {
  int port = -1;
  std::string bind = "127.0.0.1";
  std::vector<std::string> suites;
  std::string config_path;
  std::string secret_file;
  int gpu_slots = -1;
  int runs_per_gpu = 0;
  int compile_workers = -1;
  int slots = 0;
  std::string cache_dir;
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_ca;
  double timeout_s = 10.0;
  int max_message_mib = 64;
  bool quiet = false;
};

int fail(const std::string& message) {
  std::cerr << "leap verifier-node: error: " << message << "\n";
  return 1;
}

int run_node(const node_options& o) {
  log::setup("leap verifier-node");
  // Only the main thread takes the stop signals (our threads inherit the mask).
  if (auto routed = signals::route({SIGINT, SIGTERM}); !routed) {
    return fail(routed.err().message);
  }

  if (o.port < 0 || o.port > 65535) {
    return fail("--port: must be in 0..65535 (0: any free port)");
  }
  if (o.max_message_mib < 1 || o.max_message_mib > 4095) {
    return fail("--max-message-mib: must be in 1..4095");
  }
  verifier_section section;
  if (!o.config_path.empty()) {
    auto config = load_config(o.config_path);
    if (!config) {
      return fail(config.err().message);
    }
    section = config->verifier;
  }
  if (o.gpu_slots >= 0) {
    section.gpu_slots = o.gpu_slots;
  }
  if (o.runs_per_gpu >= 1) {
    section.runs_per_gpu = o.runs_per_gpu;
  }
  if (o.compile_workers >= 0) {
    section.compile_workers = o.compile_workers;
  }

  auto table =
      std::make_shared<std::unordered_map<std::string, std::shared_ptr<const sandbox::task>>>();
  launch::task_set_kinds kinds;
  for (const auto& suite : o.suites) {
    auto loaded = launch::load_task_source(suite);
    if (!loaded) {
      return fail("--suite " + suite + ": " + loaded.err().message);
    }
    for (auto& t : *loaded) {
      kinds.add(t.kind);
      auto id = t.id;
      (*table)[id] = std::make_shared<const sandbox::task>(std::move(t));
    }
  }
  if (table->empty()) {
    return fail("--suite: no tasks found in " + o.suites.front());
  }

  std::string secret;
  if (!o.secret_file.empty()) {
    auto read = node_auth::read_secret_file(o.secret_file);
    if (!read) {
      return fail("--secret-file: " + read.err().message);
    }
    secret = std::move(*read);
  }
  actors::node_transport transport;
  transport.certificate = o.tls_certificate;
  transport.key = o.tls_key;
  transport.ca = o.tls_ca;
  transport.timeout_s = o.timeout_s;
  if (auto checked = actors::check_node_transport(transport, "--tls-"); !checked) {
    return fail(checked.err().message);
  }
  if (transport.tls() && transport.certificate.empty()) {
    return fail("--tls-certificate and --tls-key: a TLS node needs its own certificate");
  }

  // KernelBench suites: torch's precompiled header is built before the node takes work (below), so
  // the first candidates' extension builds find it ready (built once per toolchain; later starts
  // find it in the compile cache).
  auto settings = launch::sandbox_settings(section, kinds, o.cache_dir);
  auto verifier = sandbox::verifier::create(settings);
  if (!verifier) {
    return fail("verifier: " + verifier.err().message);
  }
  if (kinds.kernelbench) {
    sandbox::prepare_kernelbench_saying((*verifier)->verification_engine(),
                                        [](const std::string& line) {
                                          std::printf("leap verifier-node: %s\n", line.c_str());
                                          std::fflush(stdout);
                                        });
  }
  const int compile_workers = (*verifier)->compile_workers();
  const int run_slots = (*verifier)->run_slots();
  const auto slots =
      static_cast<std::uint32_t>(o.slots > 0 ? o.slots : compile_workers + run_slots);

  int code = 0;
  {
    caf::actor_system_config cfg;
    cfg.set("logger.verbosity", caf::atom("quiet"));
    actors::register_message_types(cfg);
    actors::configure_node_transport(cfg, transport);
    caf::actor_system system{cfg};

    actors::verifier_pool_config vc;
    vc.max_in_flight = sandbox::verifier_config{}.queue_capacity;
    auto pool = actors::spawn_verifier_pool(system, **verifier, table, vc);
    actors::verifier_node_config nc;
    nc.secret = secret;
    nc.slots = slots;
    nc.log = actors::program_log();
    nc.log_jobs = !o.quiet;
    // The name needs the port, known only after publishing: a port-0 node learns it from CAF.
    nc.name = o.bind + ":" + std::to_string(o.port);
    // Every connection passes the guard (actors/node_guard.hpp): frames are bounded, and a peer
    // that has not proved the secret may send only the handshake.
    nc.admitted = std::make_shared<actors::admitted_nodes>();
    // verifier.profile (from --config): each verdict's profile follows it to the orchestrators
    // that read profiles.
    if ((*verifier)->verification_engine().config().profile != profile_mode::off) {
      nc.profiles = actors::profiles_of(pool);
      nc.profile_summaries = actors::profile_summaries_of(pool);
    }
    actors::guard_settings gs;
    gs.limits.after_auth = static_cast<std::size_t>(o.max_message_mib) << 20;
    gs.admitted = nc.admitted;
    gs.tls = transport.tls();
    gs.log = actors::program_log();
    auto middleman = actors::spawn_guarded_middleman(system, gs);
    auto node = actors::spawn_verifier_node(system, pool, nc);
    caf::expected<std::uint16_t> published{caf::sec::runtime_error};
    {
      caf::scoped_actor self{system};
      self->request(middleman, caf::infinite, caf::publish_atom_v,
                    static_cast<std::uint16_t>(o.port),
                    caf::actor_cast<caf::strong_actor_ptr>(node), system.message_types(node),
                    o.bind, true)
          .receive([&](std::uint16_t port) { published = port; },
                   [&](caf::error& e) { published = std::move(e); });
    }
    if (!published) {
      code = fail("cannot listen on " + o.bind + ":" + std::to_string(o.port) + ": " +
                  system.render(published.error()));
    } else {
      std::printf(
          "leap verifier-node: listening on %s:%u | %u slots (%d compile workers, %d run slots) "
          "| %zu tasks | secret %s | TLS %s\n",
          o.bind.c_str(), static_cast<unsigned>(*published), slots, compile_workers, run_slots,
          table->size(), secret.empty() ? "none (any orchestrator is admitted)" : "required",
          transport.tls() ? (transport.ca.empty() ? "on" : "on, peers checked against the CA")
                          : "off");
      std::fflush(stdout);
      const int sig = signals::wait_forever();
      log::info(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + ": stopping");
    }
    caf::scoped_actor self{system};
    self->send_exit(node, caf::exit_reason::user_shutdown);
    self->send_exit(pool, caf::exit_reason::user_shutdown);
    self->send_exit(middleman, caf::exit_reason::kill);
    self->wait_for(node, pool, middleman);
  }
  verifier->reset();
  return code;
}

void add_verifier_node(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<node_options>();
  auto* cmd = app.add_subcommand(
      "verifier-node",
      "Serve verification to orchestrators on other hosts: load the task suites, run a local "
      "sandbox verifier and publish it on PORT through CAF's middleman. List it in an "
      "experiment's verifier.nodes as host:port. Jobs of a node that dies are re-sent elsewhere; "
      "a restarted node is used again. Runs until SIGINT/SIGTERM.");
  cmd->add_option("--port", o->port, "TCP port to listen on; 0: any free port (printed)")
      ->required();
  cmd->add_option("--bind", o->bind, "Address to listen on")->capture_default_str();
  cmd->add_option("--suite", o->suites,
                  "Task suite (folder, .jsonl or KernelBench folder); repeat for several. Must "
                  "hold the orchestrator's tasks (they are resolved by id)")
      ->required();
  cmd->add_option("--config", o->config_path,
                  "Experiment config whose verifier section gives the limits (timeouts, "
                  "cuda_arch, cache); the options below override it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--secret-file", o->secret_file,
                  "File with the shared secret; orchestrators must prove it (HMAC of a nonce) "
                  "before sending jobs. Without it any orchestrator that reaches the port is "
                  "served");
  cmd->add_option("--gpu-slots", o->gpu_slots,
                  "GPUs candidates run on (CUDA suites); default: the config's, 1");
  cmd->add_option("--runs-per-gpu", o->runs_per_gpu,
                  "Candidate runs sharing one GPU at once (timed runs take it alone); default: "
                  "the config's, 2")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--compile-workers", o->compile_workers,
                  "Parallel compilations; 0: one per core; default: the config's, 0");
  cmd->add_option("--slots", o->slots,
                  "Jobs the node takes at once (reported to orchestrators); 0: compile workers + "
                  "run slots")
      ->capture_default_str();
  cmd->add_option("--cache-dir", o->cache_dir,
                  "Compile cache folder; default: the config's, else ~/.cache/leap/compile");
  cmd->add_option("--tls-certificate", o->tls_certificate, "PEM certificate: serve over TLS");
  cmd->add_option("--tls-key", o->tls_key, "PEM private key of --tls-certificate");
  cmd->add_option("--tls-ca", o->tls_ca,
                  "PEM CA file: require orchestrators to present a certificate it signed");
  cmd->add_option("--timeout-s", o->timeout_s,
                  "Seconds without traffic after which an orchestrator counts as cut off")
      ->capture_default_str();
  cmd->add_option("--max-message-mib", o->max_message_mib,
                  "Largest message an orchestrator may send once it proved the secret, MiB (a "
                  "job carries a candidate's code); before the proof, 64 KiB")
      ->capture_default_str();
  cmd->add_flag("--quiet", o->quiet, "No line per job");
  cmd->callback([o, exit_code] { *exit_code = run_node(*o); });
}

}  // namespace

LEAP_COMMAND("verifier-node", add_verifier_node);

}  // namespace leap::cli
