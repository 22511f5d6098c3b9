// The actor `leap verifier-node` publishes: the node's face of a local verifier pool
// (verifier.hpp), speaking node_protocol.hpp. It answers a hello with a fresh nonce, admits a
// sender whose proof of the shared secret matches (a node without a secret admits everyone), and
// passes each admitted job to the pool, answering with the verdict and the node's load.
// A job from a sender that has not been admitted is refused in-band (node_verdict::error), never
// run. With profiles (the pool's faces below), an admitted orchestrator that asks for them gets a
// node_profile per job after its verdict: the pool's profile text and summary, taken by the job's
// request id as a turn on the orchestrator would take them from a local pool. Thin: the checks are
// common/node_auth.hpp's pure functions.
#pragma once

#include "actors/node_guard.hpp"
#include "actors/node_protocol.hpp"
#include "actors/verifier.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace leap::actors {

struct verifier_node_config {
  // The node's name in logs and in its challenge, e.g. "127.0.0.1:4100".
  std::string name;
  // The shared secret; empty admits every orchestrator. Default: ""
  std::string secret;
  // Jobs the node takes at once, reported to orchestrators; >= 1. Default: 1
  std::uint32_t slots = 1;
  // Where the node's lines go (orchestrators admitted, rejected, gone; one per finished job, with
  // the ids of the job's turn). Default: null (dropped)
  log_sink log;
  // Log a line per finished job. Default: true
  bool log_jobs = true;
  // Where the node records the CAF nodes of the orchestrators it admitted, so that the guarded
  // middleman (node_guard.hpp) lets their connections send jobs. Default: null (not recorded)
  std::shared_ptr<admitted_nodes> admitted;
  // The pool's profiles (profiles_of, profile_summaries_of) when its verifier profiles
  // (verifier.profile in the node's config); null: the node sends no profiles. Default: null
  profile_actor profiles;
  profile_summary_actor profile_summaries;
};

// Spawns the node actor in front of `pool` (which it does not own). Thread-safe.
[[nodiscard]] verifier_node_actor spawn_verifier_node(caf::actor_system& system,
                                                      verifier_actor pool,
                                                      verifier_node_config config);

}  // namespace leap::actors
