// What the policy server asks of a model: one interface, so that the scripted backend (a task
// suite's known answers) and the LibTorch backend (a real model, built in the learner issue) plug
// into the same HTTP server. The server owns stopping rules (max tokens, stop strings, stop ids),
// pausing and aborts; a backend only produces tokens and honours its generation_control.
#pragma once

#include "common/enums/transfer_backend.hpp"
#include "common/result.hpp"
#include "policy/chat/byte_tokenizer.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace leap::policy {

// Shared by every generation of one server: pausing and shutting down. Thread-safe.
// A pause always holds new generations back; with `freeze_running` it also freezes the running
// ones at their next checkpoint (SGLang's in-place pause) until resume.
class generation_gate {
 public:
  void pause(bool freeze_running = false);
  void resume();
  // Wakes every waiter for good: generations end as soon as they look (server shutdown).
  void stop();
  [[nodiscard]] bool paused() const;
  [[nodiscard]] bool stopping() const;
  // Blocks while paused. Returns false when the server is stopping or `give_up` says so.
  bool wait_while_paused(const std::function<bool()>& give_up);

 private:
  friend class generation_control;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool paused_ = false;
  bool frozen_ = false;
  bool stopping_ = false;
};

// One request's handle on its generation: the server aborts it (pause with mode abort, a fault,
// the client leaving), the backend sleeps and checks through it. Thread-safe.
class generation_control {
 public:
  // A control with a gate of its own (tests, standalone use).
  generation_control();
  explicit generation_control(std::shared_ptr<generation_gate> gate);

  // Ends the generation as soon as the backend looks; the first message is kept.
  void abort(std::string message);
  [[nodiscard]] bool aborted() const;
  [[nodiscard]] std::string abort_message() const;
  // True when the generation must end now: aborted or the server is stopping.
  [[nodiscard]] bool should_stop() const;

  // Sleeps until `deadline` unless the generation must end first. Returns !should_stop().
  bool sleep_until(std::chrono::steady_clock::time_point deadline);
  // Blocks while the server is paused with running generations frozen. Returns !should_stop().
  bool checkpoint();

 private:
  std::shared_ptr<generation_gate> gate_;
  bool aborted_ = false;  // guarded by gate_->mutex_
  std::string abort_message_;
};

// One sequence to generate (the server splits n > 1 and batches into one call per sequence).
struct backend_request {
  std::vector<token_id> prompt;
  sampling_params sampling;  // temperature, top_p, top_k, seed; max_tokens resolved
  int sample_index = 0;      // which of the request's n samples this is
  int top_logprobs = 0;      // alternatives wanted per token (0: only the sampled token's)
  // The server's arrival counter for this request: a backend may use it in place of a seed when
  // the request gave none (every call then samples anew, as a real sampler would).
  std::uint64_t request_serial = 0;
};

struct token_step {
  token_id id = 0;
  double logprob = 0.0;
  std::vector<top_logprob> top;  // at most backend_request::top_logprobs entries
};

// Receives tokens as the backend produces them, in order. Returns false to end the generation (a
// stop condition met, max tokens reached, the client gone); the backend then returns at once.
using token_sink = std::function<bool(std::span<const token_step>)>;

class policy_backend {
 public:
  virtual ~policy_backend() = default;

  // Short name for logs and /v1/models ("scripted").
  [[nodiscard]] virtual std::string name() const = 0;

  // Whether the backend can serve (GET /health answers 503 with the message when not: a device
  // lost, an engine process gone). Thread-safe. Default: always healthy.
  [[nodiscard]] virtual status health() const { return done{}; }

  // Generates a continuation of request.prompt, handing tokens to `sink` as they come, until the
  // model ends its sequence (an end-of-generation token, which it does emit), `sink` returns false,
  // or control.should_stop(). Returns an error only when it cannot generate at all (the server
  // answers 500 with its message). Thread-safe: called concurrently from many server threads.
  virtual status generate(const backend_request& request, generation_control& control,
                          const token_sink& sink) = 0;

  // Loads the weights at `path` as `version` (the server's weight-update route). Returns an error
  // the operator can act on (missing file, shape mismatch). Called while generation is paused or
  // not; must be safe against concurrent generate calls.
  virtual status load_weights(const std::string& path, std::int64_t version) = 0;

  // vLLM's weight-transfer engine with a backend that moves tensors (nccl, ipc; the server itself
  // serves the disk backend through load_weights). The server calls, one at a time and in this
  // order: init_weight_transfer once per rendezvous (POST /init_weight_transfer_engine: it may
  // block until the trainer has joined), then per update receive_weights for each POST
  // /update_weights (staged aside: generations keep sampling the weights they had), then
  // commit_weights at POST /finish_weight_update (the staged weights replace the served ones under
  // the backend's exclusive lock, all or nothing), or discard_weights when the update is abandoned
  // (a failed receive, a new start). Default: every call answers that the backend has no such
  // engine, and the server answers 501.
  [[nodiscard]] virtual bool supports_weight_transfer(transfer_backend backend) const {
    (void)backend;
    return false;
  }
  virtual status init_weight_transfer(transfer_backend backend, const nlohmann::json& init_info) {
    (void)init_info;
    return error{"the " + name() + " backend has no '" + to_string(backend) +
                 "' weight-transfer engine"};
  }
  // Receives the tensors `update_info` describes (names, dtypes, shapes for nccl) into a staging
  // buffer. An error leaves nothing staged from this call; the server then discards the update.
  virtual status receive_weights(const nlohmann::json& update_info) {
    (void)update_info;
    return error{"the " + name() + " backend has no weight-transfer engine"};
  }
  // Swaps the staged weights in as `version`. Errors: nothing staged, an incomplete set (the
  // served weights stay as they were).
  virtual status commit_weights(std::int64_t version) {
    (void)version;
    return error{"the " + name() + " backend has no weight-transfer engine"};
  }
  virtual void discard_weights() {}

  // Runtime LoRA adapters (vLLM's POST /v1/load_lora_adapter). Whether load_adapter works; when
  // it does not, the server answers the adapter routes with 501. Default: false.
  [[nodiscard]] virtual bool supports_adapters() const { return false; }

  // Loads the adapter at `path` under `name` (replacing one loaded under that name) as weight
  // version `version`. Returns an error the operator can act on. Thread-safe, like load_weights.
  // Default: an error saying the backend cannot load adapters.
  virtual status load_adapter(const std::string& name, const std::string& path,
                              std::int64_t version) {
    (void)path;
    (void)version;
    return error{"the " + this->name() + " backend cannot load LoRA adapters (asked for '" + name +
                 "')"};
  }
};

}  // namespace leap::policy
