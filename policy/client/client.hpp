// The policy client: sends generation turns to vLLM or SGLang servers over HTTP (libcurl) without
// blocking its callers.
//
// Threading. Each client runs one event-loop thread: a curl multi handle driven by socket actions
// on an epoll set, with an eventfd as wake-up. Any thread may call submit(), tokenize() and
// sync_weights(): they put the work on a locked queue and wake the loop. Every callback runs on the
// loop thread, exactly once per accepted call, and must not block (the actor layer turns it into a
// message). Connections are kept alive and reused across requests.
//
// Back-pressure. The client holds at most sum(endpoints[i].max_in_flight) + max_pending turns that
// are accepted and not yet completed; submit() answers `busy` beyond that and the callback is not
// called. Turns that cannot be sent yet (every endpoint full or down) wait in FIFO queues: one per
// endpoint for pinned turns, one shared.
//
// Faults. A transient fault (connection error, timeout, a status in retry.retry_statuses, a body
// that is not JSON or is cut short) is retried with exponential backoff and seeded jitter, on the
// same endpoint unless it went down; a retried status with Retry-After (seconds or an HTTP-date)
// waits at least that long too, up to retry.max_backoff, on a timer. A generation the server
// aborted is resumed from the tokens already received: they are appended to the prompt and the
// rest is asked for with max_tokens reduced; the turn's ids are the stitched whole. With
// config.stream, a stream cut short (dropped, truncated, an event that is not JSON, an error event)
// keeps the tokens that arrived and resumes from them the same way (n == 1; otherwise, or with no
// tokens, the request is retried whole). A 400 is never retried: when it says the context is too
// long the turn ends `truncated`, otherwise `rejected`. After health.down_after_failures
// consecutive failures an endpoint is marked down until a health check (GET health.path every
// health.interval) passes. Every HTTP attempt carries the id "<request_id>.<attempt>" (X-Request-Id
// header and the body's request_id / rid), so servers see retries as distinct requests of one turn,
// and the turn's callback runs once whatever happened: no turn is lost or duplicated.
#pragma once

#include "common/result.hpp"
#include "policy/chat/conversation.hpp"
#include "policy/client/client_config.hpp"
#include "policy/client/weight_sync.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace leap::policy {

struct turn_request {
  // The turn's identity: the same id for every attempt and resumption. Empty: the client makes one.
  std::string request_id;
  std::vector<token_id> prompt;  // the whole conversation so far
  sampling_config sampling;
  // The endpoint that served the conversation's previous turn (conversation::pinned_endpoint()), or
  // -1. The turn goes there unless it is down or not admitting.
  int pinned_endpoint = -1;
};

enum class turn_status : std::uint8_t {
  ok,              // choices hold the generations
  truncated,       // the context is full (a 400 saying so, or max_context_tokens): end the rollout
  rejected,        // the server refused the request (a 4xx, or a 5xx not listed for retry)
  protocol_error,  // the server answered, but not in the flavour's shape (e.g. no token ids)
  unavailable,     // attempts, resumptions or the turn deadline ran out
  cancelled,       // the client stopped first
};

[[nodiscard]] std::string_view to_string(turn_status status);

struct turn_result {
  std::string request_id;
  turn_status status = turn_status::ok;
  std::string message;                  // why, when status != ok (the last error otherwise)
  std::vector<generated_turn> choices;  // sampling.n of them when ok
  int endpoint = -1;                    // the endpoint that gave the final answer
  int attempts = 0;                     // HTTP attempts, resumptions included
  int resumes = 0;
  // The weight version the endpoint's last weight sync set ("" before any).
  std::string endpoint_weight_version;
};

using turn_callback = std::function<void(turn_result)>;

enum class submit_status : std::uint8_t {
  accepted,  // the callback will run exactly once
  busy,      // the client holds as many turns as it may; try later (the callback will not run)
  stopped,   // the client is shutting down (the callback will not run)
};

// Counters since the client started; read with stats(), from any thread.
struct client_stats {
  std::uint64_t submitted = 0;
  std::uint64_t busy = 0;
  std::uint64_t completed = 0;
  std::uint64_t ok = 0;
  std::uint64_t truncated = 0;
  std::uint64_t rejected = 0;
  std::uint64_t protocol_errors = 0;
  std::uint64_t unavailable = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t attempts = 0;
  std::uint64_t retries = 0;
  std::uint64_t resumes = 0;
  std::uint64_t health_checks = 0;
  std::uint64_t tokenize_attempts = 0;   // /tokenize requests sent, retries included
  std::uint64_t connections_opened = 0;  // TCP connections made (reuse keeps this low)
  std::uint64_t in_flight = 0;           // generation requests on the wire now
  std::uint64_t pending = 0;  // turns accepted and not on the wire (queued or backing off)
};

struct endpoint_view {
  std::string base_url;
  bool up = true;
  bool admitting = true;
  int in_flight = 0;
  int consecutive_failures = 0;
  std::string weight_version;
  sync_phase sync = sync_phase::idle;
};

// What the start-up check found on one endpoint.
struct endpoint_check {
  std::string base_url;
  // The model ids GET /v1/models lists (vLLM, SGLang and ours serve it); empty when the server
  // has no such route.
  std::vector<std::string> models;
  int max_model_len = 0;  // 0: not reported
  int vocab_size = 0;     // 0: not reported (our server reports it; vLLM and SGLang do not)
};

// What the start-up check exercises besides /v1/models.
struct preflight_request {
  // Rendered with the server's /tokenize (the run renders prompts there); its ids are then the
  // test generation's prompt. Empty: /tokenize is not checked.
  std::vector<chat_message> tokenize_probe;
  // The test generation's prompt when tokenize_probe is empty. Both empty: no test generation.
  std::vector<token_id> prompt;
};

class policy_client {
 public:
  // Validates the config and starts the loop thread. Errors: the config's (validate_client_config)
  // and resource failures (curl, epoll).
  [[nodiscard]] static result<std::unique_ptr<policy_client>> create(client_config config);

  // Stops the loop: turns not yet completed get their callback with `cancelled`, running syncs and
  // tokenize calls get an error, on the loop thread, before the destructor returns. Must not be
  // called from a callback.
  ~policy_client();

  policy_client(const policy_client&) = delete;
  policy_client& operator=(const policy_client&) = delete;

  // Queues a turn. Thread-safe; never blocks on the network.
  [[nodiscard]] submit_status submit(turn_request request, turn_callback callback);

  // Renders chat messages to ids with the server's /tokenize (config.tokenize_path), on `endpoint`
  // (-1: the least loaded routable one, chosen again for each attempt), in the flavour's request
  // shape (build_tokenize_body). Transient faults (connection errors, config.retry's statuses, a
  // body that is not JSON or holds impossible ids) are retried with the turns' backoff, up to
  // retry.max_attempts and within turn_deadline; each attempt is bounded by request_timeout. For
  // the sglang flavour, add_generation_prompt == false is an error (SGLang always renders it),
  // given to the callback. Thread-safe.
  void tokenize(int endpoint, const std::vector<chat_message>& messages, bool add_generation_prompt,
                std::function<void(result<std::vector<token_id>>)> callback);

  // Runs a weight sync on `endpoint` (see weight_sync.hpp). The callback gets ok, or an error
  // naming the step that failed; a second sync on an endpoint whose sync is still running is
  // refused with an error. A request's companion is called on the loop for each control call; the
  // work it starts must call its `done` before this client is destroyed. Thread-safe.
  void sync_weights(int endpoint, weight_sync_plan plan, weight_sync_request request,
                    std::function<void(status)> callback);

  // The start-up check, on every endpoint at once: GET /v1/models must answer (a 404 is allowed
  // only when config.model is empty) and list config.model when it is set; /tokenize must render
  // request.tokenize_probe; a test generation of one token (the run's flavour, stream or not)
  // must come back in the flavour's shape with valid ids. Each call retries as a turn does. The
  // callback (on the loop thread) gets one endpoint_check per endpoint, or an error naming the
  // endpoint, the route and what is wrong. A vocabulary size an endpoint reports becomes the
  // client's id bound when config.vocab_size is 0. The test generations count in stats().
  // Thread-safe.
  void preflight(preflight_request request,
                 std::function<void(result<std::vector<endpoint_check>>)> callback);

  [[nodiscard]] client_stats stats() const;
  [[nodiscard]] std::vector<endpoint_view> endpoints() const;
  // CPU time the loop thread has used so far: the client's own cost, for benchmarks.
  [[nodiscard]] std::chrono::nanoseconds loop_cpu_time() const;

  class impl;

 private:
  explicit policy_client(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

}  // namespace leap::policy
