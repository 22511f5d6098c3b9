// The verifier dispatcher: the orchestrator's face of remote verifier nodes (`leap verifier-node`),
// behind the same typed interface as the local pool (verifier_actor), so gates and debug-turn
// actors do not change. It connects to each node of verifier.nodes through CAF's middleman (TLS
// through caf::openssl when configured), proves the shared secret, and sends each job to the
// target with the most free slots: the nodes, and the local pool when verifier.local_jobs > 0.
// It monitors every node: when one dies or is cut off, its jobs in flight go to other targets;
// a verdict that arrives for a job already judged is dropped (the first one counts, once). A lost
// node is tried again with a growing delay (up to verifier.node_retry_max_s) and used again as
// soon as it answers. The bookkeeping is dispatch_table.hpp's; this actor only sends.
//
// With no target up, jobs wait (the run does not fail): a node that comes back picks them up.
//
// Profiles: a node that profiles (verifier.profile in its own config) sends each job's profile
// after the verdict; the dispatcher hands it to `dispatcher_settings::profiles` (the local pool's
// inbox), so it reaches the turns, the gates and the store exactly as a local profile does. A
// verdict from such a node is announced to the inbox before it is delivered, so the turn after it
// waits for its profile; when the node is lost first, the inbox hears that none is coming.
#pragma once

#include "actors/log_sink.hpp"
#include "actors/verifier.hpp"
#include "common/result.hpp"
#include "orchestrator/config.hpp"

#include <caf/fwd.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace leap::actors {

// The transport shared by `leap run` and `leap verifier-node`.
struct node_transport {
  // PEM files; a certificate (with its key) or a CA file turns TLS on (caf::openssl). The CA file
  // makes the peer's certificate required and checked. Default: "" (plain TCP)
  std::string certificate;
  std::string key;
  std::string ca;
  // Seconds without traffic after which a connection counts as cut (CAF heartbeats every
  // timeout/4, at most every 0.5 s, so peers with different timeouts agree); > 0. Default: 10
  double timeout_s = 10.0;

  [[nodiscard]] bool tls() const { return !certificate.empty() || !ca.empty(); }
};

// Loads the middleman (and caf::openssl's manager with TLS) into `config`, sets heartbeats and
// the connection timeout, and registers both message blocks (leap, leap_node). Call once, before
// the actor_system is built.
void configure_node_transport(caf::actor_system_config& config, const node_transport& transport);

// Checks the transport's files exist and pair up (a key with a certificate). Errors name `what`
// (the config key or option prefix) and the file.
[[nodiscard]] status check_node_transport(const node_transport& transport, const std::string& what);

struct dispatcher_settings {
  std::vector<std::string> nodes;  // host:port, as verifier.nodes
  std::string secret;              // empty: no proof is sent (nodes without a secret admit it)
  // Jobs the local pool takes at once; 0: all work goes to the nodes. Default: 0
  std::size_t local_jobs = 0;
  // Longest delay between two attempts to reach a lost node, seconds. Default: 10
  double retry_max_s = 10.0;
  node_transport transport;
  // Where the dispatcher's lines go (nodes joining, lost, refusing; jobs sent again, with the
  // ids of the job's turn). Default: null (dropped)
  log_sink log;
  // Where the nodes' profiles go (profile_inbox_of the local pool); null: the dispatcher asks no
  // node for profiles. Default: null
  profile_inbox_actor profiles;
};

// The settings of `leap run` from the config's verifier section: reads the secret file, checks
// the TLS files. Errors name the key and the file.
[[nodiscard]] result<dispatcher_settings> dispatcher_settings_of(const verifier_section& verifier);

// Spawns the dispatcher. `local` (when set) is the local pool; it is not owned (stop it after the
// dispatcher). The system must have been configured with configure_node_transport. On exit the
// dispatcher logs one summary line (jobs, verdicts, re-sent, duplicates dropped, per target).
[[nodiscard]] verifier_actor spawn_verifier_dispatcher(caf::actor_system& system,
                                                       std::optional<verifier_actor> local,
                                                       dispatcher_settings settings);

}  // namespace leap::actors
