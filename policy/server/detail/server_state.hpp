// The policy server's mutable state (internal to policy/), apart from HTTP so that its rules are
// tested directly: who holds generation back, the generation requests in the server, the runtime
// LoRA adapters, vLLM's weight-transfer session and the served weight version. Thread-safe.
//
// Invariants:
// - The gate is paused exactly while a holder holds it: a /pause_generation, the weights asleep or
//   the KV cache asleep. /continue_generation lifts only the pause and a wake-up only what it
//   wakes, so neither releases generation that the other still holds.
// - A flight (a generation request) counts as waiting from arrival until admitted past the gate,
//   then as running until its response ends; metrics' running + waiting is the number of flights.
// - One weight-transfer session at a time: start, one or more update, finish. Nothing reaches the
//   served weights before finish; a failed update or a finish ends the session, and a start while
//   one is open discards it (its client is gone: a retry must be able to begin again).
#pragma once

#include "common/enums/transfer_backend.hpp"
#include "policy/server/detail/server_metrics.hpp"
#include "policy/server/server.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

namespace leap::policy {

// What a pause or a sleep found: running generations it aborted, and those still running when it
// returned (frozen in place, or none after a drain).
struct pause_counts {
  std::size_t aborted = 0;
  std::size_t running = 0;
};

class server_state {
 public:
  // `metrics` counts the flights (running, waiting); it must outlive the state.
  server_state(std::int64_t weight_version, server_metrics& metrics);

  [[nodiscard]] std::int64_t weight_version() const { return weight_version_.load(); }
  void set_weight_version(std::int64_t version) { weight_version_.store(version); }

  [[nodiscard]] const std::shared_ptr<generation_gate>& gate() const { return gate_; }

  // ---- holders of the gate ----
  // /pause_generation: holds new generations back and deals with running ones by `mode` (wait:
  // returns once they have finished, or the server stops).
  pause_counts pause(pause_mode mode);
  // /continue_generation: lifts the pause; generation goes on unless asleep.
  void resume();
  // /sleep: the weights and the KV cache fall asleep; running generations as by `mode`.
  pause_counts sleep(pause_mode mode);
  // /wake_up: wakes what is named; generation goes on once nothing holds it.
  void wake(bool weights, bool kv_cache);
  [[nodiscard]] bool sleeping() const;
  [[nodiscard]] bool weights_asleep() const;
  // Shutdown: the gate stops for good and every waiter (a pause draining, a held flight) wakes.
  void stop();

  // A generation request's place in the server, from arrival to its response's end.
  class flight {
   public:
    flight(server_state& state, std::shared_ptr<generation_control> control);
    ~flight();
    flight(const flight&) = delete;
    flight& operator=(const flight&) = delete;
    // Waits out a pause or sleep, then counts as running. False when the server is stopping.
    bool admit();

   private:
    server_state& state_;
    std::shared_ptr<generation_control> control_;
    bool running_ = false;
  };

  // ---- runtime LoRA adapters (vLLM's /v1/load_lora_adapter): name -> path ----
  [[nodiscard]] bool has_adapter(const std::string& name) const;
  [[nodiscard]] std::map<std::string, std::string> adapters() const;
  // Loads run one at a time, so that versions and the table change together: `load` (the
  // backend's load at version current + 1) runs under the load lock; on success the adapter is
  // listed and the version set, which is returned. Refuses (400) a name already loaded unless
  // `replace`, and answers 400 when the load fails.
  [[nodiscard]] std::variant<std::int64_t, http_error> load_adapter(
      const std::string& name, const std::string& path, bool replace,
      const std::function<status(std::int64_t version)>& load);
  // False when no adapter has that name.
  bool unload_adapter(const std::string& name);

  // ---- vLLM's weight-transfer session (one engine: disk, nccl or ipc) ----
  // Every call runs under one lock, so that calls of a session run one at a time. The disk engine
  // only records the folder that update names and loads it at finish; nccl/ipc stage tensors in
  // the backend and commit them at finish (the backend's exclusive lock), so a generation samples
  // wholly from the old or wholly from the new weights.
  [[nodiscard]] std::optional<http_error> init_transfer(policy_backend& backend,
                                                        transfer_backend engine,
                                                        const nlohmann::json& init_info);
  [[nodiscard]] std::optional<http_error> start_transfer(policy_backend& backend,
                                                         transfer_backend engine);
  [[nodiscard]] std::optional<http_error> update_transfer(policy_backend& backend,
                                                          transfer_backend engine,
                                                          const nlohmann::json& update_info);
  // A delta (an nccl update_info with base_version, policy/wire/wire.hpp) is refused with 409 when
  // the served version is not its base, after it was received (the group stays in step), and the
  // session stays open so that the same call with the full weights follows.
  // Loads or commits what the session received as `version` (default: current + 1) and serves it.
  // Returns the version now served, or the error.
  [[nodiscard]] std::variant<std::int64_t, http_error> finish_transfer(
      policy_backend& backend, transfer_backend engine, std::optional<std::int64_t> version);
  [[nodiscard]] bool transfer_active() const;

  // ---- weight loads from a folder (SGLang's /update_weights_from_disk, vLLM's reload_weights) --
  // Loads `path` through the backend as `version` (default: current + 1) and serves it; loads run
  // one at a time. A delta folder (learner/weight_delta.hpp) is first checked with
  // check_delta_base. Returns the version now served, or the error: 409 for a delta on another
  // base, else `failure_status` with the backend's message (weights unchanged either way).
  [[nodiscard]] std::variant<std::int64_t, http_error> load_folder(
      policy_backend& backend, const std::string& path, std::optional<std::int64_t> version,
      int failure_status);

  // A delta folder (its weight_delta.json, learner/weight_delta.hpp) applies only to the version it
  // was computed from: 409 naming both versions unless that is `served`, so that a server that
  // missed a delta keeps its weights and the sender falls back to a full sync; 400 for a manifest
  // that cannot be read. No error for a model folder (no manifest).
  [[nodiscard]] static std::optional<http_error> check_delta_base(const std::string& path,
                                                                  std::int64_t served);

 private:
  pause_counts hold(pause_mode mode, bool user, bool sleep);
  void release_if_free();                                 // under flights_mutex_
  void end_transfer(policy_backend& backend, bool disk);  // under transfer_mutex_
  // A delta's /update_weights (its update_info names a base_version; policy/wire/wire.hpp): 409
  // when the served version is not its base, 500 when the backend refuses it (a checksum); either
  // way nothing is staged and the session stays open for the full update. Under transfer_mutex_.
  [[nodiscard]] std::optional<http_error> update_delta(policy_backend& backend,
                                                       transfer_backend engine,
                                                       const nlohmann::json& update_info);

  server_metrics& metrics_;
  std::atomic<std::int64_t> weight_version_;
  std::shared_ptr<generation_gate> gate_ = std::make_shared<generation_gate>();

  // Who holds the gate, and the flights (true once admitted); guarded by flights_mutex_.
  mutable std::mutex flights_mutex_;
  std::condition_variable flights_changed_;
  bool user_paused_ = false;
  bool weights_asleep_ = false;
  bool kv_asleep_ = false;
  std::map<generation_control*, bool> flights_;

  mutable std::mutex adapters_mutex_;
  std::map<std::string, std::string> adapters_;
  std::mutex adapter_load_mutex_;

  std::mutex folder_load_mutex_;  // one load_folder at a time: the base check holds until served

  mutable std::mutex transfer_mutex_;
  bool transfer_initialized_ = false;
  bool transfer_active_ = false;
  std::optional<std::string> staged_path_;  // disk: the folder update named
  bool staged_tensors_ = false;             // nccl/ipc: the backend holds staged tensors
};

}  // namespace leap::policy
