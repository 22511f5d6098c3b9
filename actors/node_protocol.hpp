// What the orchestrator and a verifier node (`leap verifier-node`) say to each other over CAF's
// middleman: the node's typed interface and its messages, registered in a type-ID block of their
// own (`caf::id_block::leap_node`, after `leap`'s) so that messages.hpp stays untouched.
//
// A session: hello -> node_challenge (a fresh nonce, the node's slots); auth(proof) ->
// node_welcome (empty error: the sender may submit jobs); then job(id, request) -> node_verdict
// for each job. The proof is node_proof(secret, nonce) (common/node_auth.hpp). A node without a
// secret welcomes everyone. Both sides register both blocks.
//
// Profiles (verifier.profile on the node): an admitted orchestrator that reads them asks with
// profiles(version) -> the version the node will send (0: none; the node does not profile). From
// then on the node sends one node_profile per job of that orchestrator, as a message of its own
// after the job's verdict (the verdict never waits for it). A node older than profiles lacks the
// handler: its interface is basic_verifier_node_actor, and it is a node without profiles.
#pragma once

#include "actors/messages.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace leap::actors {

// The node's answer to hello.
struct node_challenge {
  std::string nonce;        // 64 hex digits, fresh per hello
  std::string name;         // how the node calls itself in logs (its bind address and port)
  std::uint32_t slots = 0;  // jobs it takes at once
  bool secret_required = false;

  friend bool operator==(const node_challenge&, const node_challenge&) = default;
};

// The node's answer to auth.
struct node_welcome {
  std::string error;  // empty: accepted
  std::uint32_t slots = 0;

  friend bool operator==(const node_welcome&, const node_welcome&) = default;
};

// The node's answer to a job: the verdict, and the node's load when it answered.
struct node_verdict {
  std::uint64_t job = 0;
  verification_result result;
  std::uint32_t slots = 0;  // the node's capacity
  std::uint32_t free = 0;   // its free slots as it answered
  std::string error;        // non-empty: the job was refused (not authenticated); no verdict

  friend bool operator==(const node_verdict&, const node_verdict&) = default;
};

// The profile of a job's verdict, sent after the verdict to an orchestrator that asked for
// profiles: one per job, with an empty text and summary when none was made (not selected,
// profiling failed, the verdict was an infrastructure error), so the orchestrator need not wait
// for a profile that is not coming.
struct node_profile {
  std::uint64_t job = 0;
  std::string text;                          // the feedback with the diagnosis; "": nothing new
  std::vector<turn_profile_record> summary;  // to store with the turn; empty: none

  friend bool operator==(const node_profile&, const node_profile&) = default;
};

// The version of node_profile a node sends and an orchestrator reads. 2: each summary record
// carries its profile's source (ncu | events); a node and an orchestrator of different versions
// work together without profiles.
inline constexpr std::uint32_t node_profile_version = 2;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_challenge& x) {
  return f(caf::meta::type_name("node_challenge"), x.nonce, x.name, x.slots, x.secret_required);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_welcome& x) {
  return f(caf::meta::type_name("node_welcome"), x.error, x.slots);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_verdict& x) {
  return f(caf::meta::type_name("node_verdict"), x.job, x.result, x.slots, x.free, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_profile& x) {
  return f(caf::meta::type_name("node_profile"), x.job, x.text, x.summary);
}

}  // namespace leap::actors

CAF_BEGIN_TYPE_ID_BLOCK(leap_node, caf::id_block::leap::end)

CAF_ADD_TYPE_ID(leap_node, (leap::actors::node_challenge))
CAF_ADD_TYPE_ID(leap_node, (leap::actors::node_welcome))
CAF_ADD_TYPE_ID(leap_node, (leap::actors::node_verdict))

CAF_ADD_ATOM(leap_node, leap::actors, node_hello_atom, "nd_hello")
CAF_ADD_ATOM(leap_node, leap::actors, node_auth_atom, "nd_auth")
CAF_ADD_ATOM(leap_node, leap::actors, node_job_atom, "nd_job")
CAF_ADD_ATOM(leap_node, leap::actors, node_retry_atom, "nd_retry")
CAF_ADD_TYPE_ID(leap_node, (leap::actors::node_profile))
CAF_ADD_ATOM(leap_node, leap::actors, node_profiles_atom, "nd_profs")
CAF_ADD_ATOM(leap_node, leap::actors, node_profile_atom, "nd_prof")

CAF_END_TYPE_ID_BLOCK(leap_node)

namespace leap::actors {

// What every node speaks, the first ones included: the handshake and jobs.
using basic_verifier_node_actor = caf::typed_actor<
    caf::replies_to<node_hello_atom>::with<node_challenge>,
    caf::replies_to<node_auth_atom, std::string>::with<node_welcome>,
    caf::replies_to<node_job_atom, std::uint64_t, verification_request>::with<node_verdict>>;

// The interface `leap verifier-node` publishes: the basic one and profiles (the orchestrator's
// highest node_profile version -> the node's; 0: it sends none).
using verifier_node_actor = basic_verifier_node_actor::extend<
    caf::replies_to<node_profiles_atom, std::uint32_t>::with<std::uint32_t>>;

// Where a node sends profiles: the orchestrator's dispatcher, as the node sees it.
using node_profile_reader = caf::typed_actor<caf::reacts_to<node_profile_atom, node_profile>>;

// Registers `leap_node` with a config (register_message_types adds `leap`): both sides of a node
// connection need both.
void register_node_message_types(caf::actor_system_config& config);

}  // namespace leap::actors
