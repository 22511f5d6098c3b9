// What a peer of a verifier-node connection may make us read. CAF's middleman (BASP, 0.17)
// reads a frame header, then allocates and reads whatever payload length the header claims (up
// to 4 GiB), and deserialises byte sequences whose length a payload claims (again up to 4 GiB)
// before the bytes are there: all of that before our own handshake (node_protocol.hpp) has
// checked the secret. The guarded middleman here puts a check in front of BASP on every
// connection of `leap verifier-node` and of the orchestrator's dispatcher:
//
// - a frame longer than the limit closes the connection before anything is allocated for it:
//   `before_auth` while the peer's orchestrator has not proved the secret, `after_auth` once it
//   has (and always on the orchestrator's side, whose peers are the nodes it chose);
// - before the proof, a node accepts only CAF's handshake, heartbeat and monitor frames, the
//   exchange CAF's BASP starts on its own once a handshake is done (each side asks the other's
//   spawn server `sys, get, "info"`: the peer's query, byte for byte, and its reply to ours, by
//   shape and size, each once), and direct messages that are our hello or auth (with an empty
//   forwarding stack); anything else closes the connection. That exchange crosses the wire before
//   the orchestrator's hello can, so refusing it dropped every first connection.
//
// - a connection a node accepted whose peer has not proved the secret within
//   guard_settings::auth_timeout is closed, so that peers that connect and then send nothing (a
//   port scan, a slow-loris) cannot hold the node's sockets and file descriptors.
//
// The frame checks are plain functions (`frame_guard`); the rest is CAF I/O glue.
#pragma once

#include "actors/log_sink.hpp"

#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/node_id.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace leap::actors {

struct frame_limits {
  // Largest frame payload a node reads from a peer that has not proved the secret: CAF's
  // handshake and our hello and auth take a few hundred bytes. Default: 64 KiB
  std::size_t before_auth = std::size_t{64} << 10;
  // Largest frame payload after the proof, and from a node: a job carries a candidate's code, a
  // verdict its feedback (both bounded far below this by the sandbox and the policy's token
  // limits). Default: 64 MiB
  std::size_t after_auth = std::size_t{64} << 20;
};

// BASP 0.17's frame header (32 bytes, network byte order): operation, two padding bytes,
// flags, payload length, operation data, source and destination actor.
inline constexpr std::size_t basp_header_bytes = 32;
struct basp_header {
  std::uint8_t operation = 0;  // 0 server handshake, 1 client handshake, 2 direct message,
                               // 3 routed, 4 monitor, 5 down, 6 heartbeat
  std::uint8_t flags = 0;      // 0x01: dest_actor is a registered name (an atom's value)
  std::uint32_t payload_len = 0;
  std::uint64_t dest_actor = 0;
};

// The direct messages a node takes from a peer that has not proved the secret.
struct before_auth_messages {
  // The content type lists of our hello and auth, as CAF 0.17 names them on the wire
  // ("@<>+leap::actors::node_hello_atom").
  std::vector<std::string> types;
  // The whole payload of the query CAF's BASP sends to a node it has just shaken hands with
  // (sys_atom, get_atom, "info" to the registered name "SpawnServ"): taken once per connection,
  // only to that name and only byte for byte. Empty: not taken.
  std::string spawn_server_query;
  // The content type list of the peer's spawn server's reply to the node's own query (ok_atom,
  // "info", the spawn server's handle, its name; an asynchronous message to the node's helper
  // actor, as the query was): taken once per connection, to an actor id, of at most
  // spawn_server_reply_bytes. Empty: not taken.
  std::string spawn_server_reply_types;
};

// The largest reply of a spawn server taken before the proof: CAF's is about 120 bytes.
inline constexpr std::size_t spawn_server_reply_bytes = 512;

// The frame checks of one connection, fed each chunk BASP reads, in order (a header, then its
// payload when it has one). Pure: no CAF, no I/O.
class frame_guard {
 public:
  // `accepted`: a node's side of the connection (the peer must prove the secret); false: the
  // orchestrator's side. `allowed`: the direct messages taken before the proof.
  frame_guard(frame_limits limits, bool accepted, before_auth_messages allowed);

  // Checks the next chunk. `admitted`: the peer's orchestrator has proved the secret. Returns
  // "" to let BASP read it, else why the connection must be closed.
  [[nodiscard]] std::string check(std::string_view chunk, bool admitted);

  // After a client handshake's payload has passed: the bytes (the peer's node id), so that the
  // caller can learn whom the connection belongs to. Empty otherwise.
  [[nodiscard]] std::string_view handshake_payload() const { return handshake_payload_; }

 private:
  [[nodiscard]] std::string check_header(std::string_view chunk, bool admitted);
  [[nodiscard]] std::string check_payload(std::string_view chunk, bool admitted);

  frame_limits limits_;
  bool accepted_;
  before_auth_messages allowed_;
  bool spawn_server_query_taken_ = false;
  bool spawn_server_reply_taken_ = false;
  bool expect_payload_ = false;
  basp_header header_;
  std::string_view handshake_payload_;
};

// Reads a BASP header; false when `bytes` is not basp_header_bytes long.
[[nodiscard]] bool parse_basp_header(std::string_view bytes, basp_header& out);

// The content type list of a direct message's payload ("@<>+leap::actors::node_hello_atom"),
// read without deserialising anything: "" when its forwarding stack is not empty or the bytes
// are not a message.
[[nodiscard]] std::string direct_message_types(std::string_view payload);

// Node ids whose orchestrator has proved the secret (the node actor adds and removes them; the
// guarded connections read them). Thread-safe.
class admitted_nodes {
 public:
  void add(const caf::node_id& node);
  void remove(const caf::node_id& node);
  [[nodiscard]] bool contains(const caf::node_id& node) const;

 private:
  mutable std::mutex mutex_;
  std::map<caf::node_id, int> count_;
};

struct guard_settings {
  frame_limits limits;
  // How long a connection the node accepted may stay open before its peer's orchestrator has
  // proved the secret: past it the connection is closed (one warning). An orchestrator's whole
  // handshake takes a few round trips; the peer's proof counts however long the rest of the
  // connection lives. 0: never closed for this. Default: 10 s
  std::chrono::milliseconds auth_timeout{10'000};
  // Set on a node: the orchestrators it admitted. Null on the orchestrator's side.
  std::shared_ptr<admitted_nodes> admitted;
  // TLS through caf::openssl (its manager must be loaded, configure_node_transport does).
  bool tls = false;
  // One line per refused or timed-out connection (a warning), from the middleman's thread or the
  // auth_timeout's thread. Default: null
  log_sink log;
};

// A middleman actor (CAF's interface: publish, connect, ...) whose connections are guarded as
// above, in front of the system's BASP broker. Stop it with an exit message (kill) before the
// system goes down: it runs on a thread of its own. Thread-safe.
[[nodiscard]] caf::io::middleman_actor spawn_guarded_middleman(caf::actor_system& system,
                                                               guard_settings settings);

// What a node takes before the proof: hello, auth and CAF's spawn-server query and reply,
// serialised by `system` as a peer's CAF writes them.
[[nodiscard]] before_auth_messages handshake_messages(caf::actor_system& system);

}  // namespace leap::actors
