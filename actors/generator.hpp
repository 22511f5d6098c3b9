// The generator pool: the actor face of the policy client. One request per rollout turn; each
// answer is sent back to the requester the moment the client's callback delivers it. Prompts and
// feedback are rendered to token ids here (locally, or by the server's /tokenize), so that
// requesters deal in chat messages and token ids only.
//
// The client runs its own event-loop thread; its callback does nothing but anon_send the result to
// the pool, so the cooperative scheduler never blocks on the network. Back-pressure: at most
// `max_in_flight` turns are handed to the client at once; the rest wait in the pool in FIFO order
// (their number is bounded by the rollouts the driver keeps in flight). A `busy` answer of the
// client puts the turn back at the head of that queue until a turn completes.
#pragma once

#include "actors/messages.hpp"
#include "actors/renderer.hpp"
#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace leap::policy {
class policy_client;
}

namespace leap::telemetry {
struct run_telemetry;
}

namespace leap::actors {

// generate: renders the request's `append` after its history, samples one turn and answers with it.
//   A turn the client could not complete (rejected, unavailable, cancelled, ...) is answered with
//   finish_reason::error and the reason in `error` (the gate then fails the group: such a turn is
//   an infrastructure fault, never a model's answer); a context overflow with
//   finish_reason::length.
// weights: the policy now serves `version` (after a learner step); with a weights_path the pool
//   first runs the weight sync on every endpoint. Answers an ack once every endpoint is done.
// Gates and debug-turn actors see only `generate` (generation_actor), so that the barrier proxy can
// stand in for the pool.
using generation_actor =
    caf::typed_actor<caf::replies_to<generate_atom, generation_request>::with<generation_result>>;
using generator_actor =
    generation_actor::extend<caf::replies_to<weights_atom, weight_update>::with<ack>>;

struct generator_pool_config {
  // Turns handed to the client at once (the client's in-flight and pending limits bound it too).
  // Default: 64
  int max_in_flight = 64;
  // The weight version the endpoints serve at start (a resumed run's last version). Default: 0
  std::uint64_t initial_weight_version = 0;
  // How new weights reach the servers (policy/client/client.hpp's presets). None: a weight
  // update with a weights_path is refused. Default: none
  std::optional<policy::weight_sync_plan> sync_plan;
  // The trainer's end of the plan's calls (a transfer engine's broadcast), given to every sync
  // request. Its work must end before the client goes away. Default: none
  policy::sync_companion sync_companion;
  // policy.weight_sync_delta: the learner's delta folder (torch_learner_options::delta_dir). A
  // sync to version V whose delta policy::weight_delta_folder(dir, V) is there sends it first and
  // the full folder only when the server refuses it. Default: "" (full folders only)
  std::string sync_delta_dir;
  // policy.weight_sync_delta with a transfer engine (nccl): the update_info of the delta to a
  // version ("" for none), handed to each sync request as its delta_update_info. Must not block.
  // Default: none
  std::function<std::string(std::uint64_t version)> sync_delta_info;
  // Called (on the client's loop, must not block) with "<endpoint>: <why>" for each delta a server
  // refused. Default: none
  std::function<void(const std::string&)> on_delta_refused;
  // Live metrics: the generation queue's depth and the requests on the wire, updated whenever a
  // turn is handed to the client or answered. Null: none. Default: null
  std::shared_ptr<telemetry::run_telemetry> telemetry;
};

// The turn record's segments (turn_record::weight_segments) from the client's
// (policy::generated_turn::weight_segments), whose versions are the strings the servers reported.
// The first segment takes `started`, the pool's version when the turn was handed to the client
// (the turn's weight_version). A later segment takes the version its server reported when that is
// a decimal number (the syncs name versions so); an absent or other version becomes `current`, the
// pool's version when the answer came (the weights last synced, which a resumed generation
// continues with). Neighbours with the same version merge, and a segment from `tokens` (the turn's
// output tokens) on, which sampled nothing, is dropped. No client segments (a request with n > 1,
// an error) give none. Pure.
[[nodiscard]] std::vector<turn_weight_segment> record_segments(
    const std::vector<policy::weight_segment>& client, std::size_t tokens, std::uint64_t started,
    std::uint64_t current);

// Spawns the pool around `client`, which must outlive the actor: stop the actor (send_exit and
// wait for it) before destroying the client. `renderer` turns prompt and feedback messages into
// ids locally; null renders them with the servers' /tokenize (the model's own chat template): the
// prompt directly, a feedback as a delta learned from three renderings of a short conversation
// (policy/chat/chat.hpp's template_closing / template_delta; two of them only once per
// pool). A rendering failure answers the turn with finish_reason::error. Thread-safe.
[[nodiscard]] generator_actor spawn_generator_pool(caf::actor_system& system,
                                                   policy::policy_client& client,
                                                   std::shared_ptr<const prompt_renderer> renderer,
                                                   generator_pool_config config = {});

}  // namespace leap::actors
