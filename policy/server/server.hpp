// The project's OpenAI-compatible policy server (`leap serve-policy`): vLLM's /v1/completions and
// /v1/chat/completions (with SSE streaming), SGLang's /generate, tokenizer routes, health, metrics,
// and the control routes a client's weight-sync state machine drives. One backend behind it
// (policy_backend), one error shape for every route (wire.hpp's render_error).
//
// Routes (see policy/README.md for bodies):
//   GET  /health /v1/models /metrics /is_paused /get_model_info
//   POST /v1/completions /v1/chat/completions /generate /tokenize /detokenize
//   POST /update_weights_from_disk (SGLang's)
//   vLLM's weight-transfer engine: POST /init_weight_transfer_engine /start_weight_update
//   /update_weights /finish_weight_update (server_config::weight_transfer_backend)
//   POST /pause_generation /continue_generation /resume_generation /flush_cache /reset_prefix_cache
//   vLLM's control routes: POST /sleep /wake_up /collective_rpc /v1/load_lora_adapter
//   /v1/unload_lora_adapter, GET /is_sleeping
// Every response carries the header x-weight-version; generation responses also carry the
// version in their body (weight_version, or SGLang's meta_info.weight_version).
#pragma once

#include "common/enums/transfer_backend.hpp"
#include "common/result.hpp"
#include "policy/chat/model_vocabulary.hpp"
#include "policy/server/server_backend.hpp"
#include "policy/server/server_faults.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace leap::policy {

// One request on a generation route, as it arrived, with the fault it was given (after parsing,
// before any fault is applied or the backend runs; requests refused while parsing are not seen).
struct generation_arrival {
  std::uint64_t serial = 0;       // the arrival number on the generation routes (0-based)
  std::string route;              // "/v1/completions", "/v1/chat/completions" or "/generate"
  std::string request_id;         // the X-Request-Id header ("" when absent)
  std::size_t prompt_tokens = 0;  // of the first prompt
  int max_tokens = 0;             // resolved, of the first sequence
  fault_decision fault;
};

// A request as the server answered it (for a stream: when its headers go out).
struct answered_request {
  std::string method;  // "GET", "POST"
  std::string path;    // "/flush_cache"
  std::string query;   // "level=2&mode=abort" (parameters in name order), or ""
  std::string body;
  std::string request_id;  // the X-Request-Id header ("" when absent)
  int status = 200;
};

struct server_config {
  std::string host = "127.0.0.1";  // Default: 127.0.0.1
  int port = 0;                    // Default: 0, a free port (policy_server::port() says which)
  std::string model_name = "leap-policy";  // Default: "leap-policy"; requests naming another
                                           // model get 404, as vLLM answers
  int max_model_len = 32768;               // Default: 32768 tokens of context (prompt + generated)
  // Worker threads. A worker serves one whole request at a time (connections waiting for their
  // request, or idle between requests, hold none), and a request's latency (the scripted
  // backend's timers, a stall) is slept on its worker; so this must be at least the number of
  // requests clients have in flight at once, or the excess requests queue behind them.
  // Default: 256.
  std::size_t threads = 256;
  int listen_backlog = 1024;  // Default: 1024
  // Connections open at once, waiting for their request or served by a worker. At the cap a new
  // connection takes the place of the one waiting longest for its request (idle kept-alive ones
  // first, closed; else one incomplete for 1 s, answered 503), or is itself answered 503 with
  // Retry-After: 1 (policy/server/http_gate.hpp). Above `threads`, whole requests may wait for a
  // worker. Default: 0, `threads` (never above the descriptor limit less 64)
  std::size_t max_connections = 0;
  // A connection's request line and headers must be in within this of its accept (of its first
  // byte, for a later request on a kept-alive connection), else 408 and close. Default: 10 s
  std::chrono::milliseconds header_timeout{10000};
  // A request's body must be in within this of its headers, else 408 and close. Default: 60 s
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds keep_alive_timeout{5000};  // Default: 5 s idle before closing
  std::size_t keep_alive_max_requests = 100000;        // Default: 100000 requests per connection
  std::chrono::milliseconds read_timeout{30000};       // Default: 30 s
  // What of a body the server does not hold before a worker gets the request (past its first
  // 16 MiB; all of it after Expect: 100-continue) its worker reads, and drops a client sending
  // fewer than body_min_rate bytes a second on average once body_rate_grace has passed (0: no
  // minimum). Default: 16 KiB/s after 5 s
  std::size_t body_min_rate = std::size_t{16} << 10;
  std::chrono::milliseconds body_rate_grace{5000};
  std::chrono::milliseconds write_timeout{30000};  // Default: 30 s
  // Tokens per streamed chunk at most (vLLM streams one engine step per chunk). Default: 16.
  std::size_t stream_chunk_tokens = 16;
  std::int64_t weight_version = 0;  // Default: 0, until an update route sets another
  // Where the served weights come from: POST /collective_rpc {"method": "reload_weights"} reloads
  // them from here (the backend's load_weights, as /update_weights_from_disk). Default: "" (the
  // scripted backend has no weights; the LibTorch backend then answers that it needs a path)
  std::string model_path;
  // The backend of vLLM's weight-transfer routes (vllm serve --weight-transfer-config
  // '{"backend": B}'): disk (update_info {"path": folder}, loaded by the backend's load_weights
  // at /finish_weight_update), or nccl / ipc, which the policy backend must support
  // (policy_backend::supports_weight_transfer; start() refuses otherwise). Default: disk
  transfer_backend weight_transfer_backend = transfer_backend::disk;
  // The served model's tokenizer and chat template: /tokenize, /detokenize, chat rendering, the
  // text of responses and the end-of-generation ids (load_vocabulary(model folder) for a model
  // with tokenizer.json). Default: null, the byte-level tokenizer (byte_vocabulary())
  std::shared_ptr<const model_vocabulary> vocab;
  // The ids requests may hold and /v1/models reports: the larger of this and the vocabulary's.
  // A model's embedding rows, which checkpoints pad past the tokenizer's ids (Qwen3: 151,936 rows
  // for 151,669 ids): a model may sample a padding id, which decodes as nothing, and the next
  // turn's prompt then holds it. Default: 0 (the vocabulary's size)
  int vocab_size = 0;
  std::uint64_t seed = 0;  // Default: 0; seeds response ids only
  fault_config faults;     // Default: none
  // Called on the request's worker for every generation arrival (an access log, a test's
  // record of what the server saw and did). Must be thread-safe and quick. Default: none
  std::function<void(const generation_arrival&)> on_generation;
  // Called on the request's worker for every request on a route, once its handler has answered
  // (an access log; a test's record of the order of calls). Must be thread-safe. Default: none
  std::function<void(const answered_request&)> on_request;
};

// A running server. Thread-safe; stop() is idempotent and the destructor stops.
class policy_server {
 public:
  // Binds host:port and starts serving on background threads. Returns an error when the address
  // cannot be bound (in use, bad host) or the configuration is invalid.
  static result<std::unique_ptr<policy_server>> start(server_config config,
                                                      std::shared_ptr<policy_backend> backend);
  ~policy_server();
  policy_server(const policy_server&) = delete;
  policy_server& operator=(const policy_server&) = delete;

  // The bound port (the free one picked when the config said 0).
  [[nodiscard]] int port() const;
  [[nodiscard]] const std::string& host() const;
  // "http://host:port".
  [[nodiscard]] std::string base_url() const;
  [[nodiscard]] std::int64_t weight_version() const;

  // Stops accepting, ends in-flight generations (sleeping ones wake at once), and joins every
  // thread. Returns when the server is fully down.
  void stop();

  struct impl;

 private:
  explicit policy_server(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace leap::policy
