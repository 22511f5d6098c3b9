// What policy/server offers, its one public header: the project's OpenAI-compatible policy server
// (`leap serve-policy`) and what plugs into it.
//  - server_faults: fault injection on the generation routes (server_faults.cpp);
//  - server_backend: `policy_backend`, what the server asks of a model (server_backend.cpp);
//  - scripted_backend: the backend that answers a task suite's prompts with its known solutions
//    (scripted_backend.cpp);
//  - server: `policy_server` and its config (server.cpp; the routes, state and generation in
//    detail/ and the server_*.cpp beside it).
// The server is served on the HTTP room's transport (policy/http/http.hpp), which this header does
// not include: its interface is cpp-httplib's (gated_server derives from httplib::Server, handlers
// fill an httplib::Response), which would otherwise reach every includer of this header (the
// actors' tests, tools/launch), while only the server's own routes and the daemon use it.
#pragma once

#include "common/enums/transfer_backend.hpp"
#include "common/result.hpp"
#include "policy/chat/chat.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

// ==== server_faults (server_faults.cpp) ==================================
// Fault injection for the project's policy server, so that a client is shown to ride through what
// real inference servers do under load. Faults apply to the generation routes only
// (/v1/completions, /v1/chat/completions, /generate); health, metrics, tokenizer and control routes
// never fail on purpose.
//
// Which request gets which fault is a pure function of (config, the request's arrival number on the
// generation routes): the first arrivals take the kinds of `fault_config::script` in order (a test
// scripts exactly what a client meets), every later one draws with the configured probabilities
// from (seed, arrival number), so the i-th generation request of a server gets the same fault in
// every run with the same config, and a retry (a new arrival) draws afresh.

namespace leap::policy {

// The spec names (parse_fault_spec, to_string) are given after each kind.
enum class fault_kind : std::uint8_t {
  none,
  drop,       // "drop": the connection closes with no reply at all (the client sees an empty reply)
  http_5xx,   // "5xx": 502, 503 or 504 (drawn) with an OpenAI error body
  stall,      // "stall": the reply is held for stall_duration, beyond a sane client timeout
  malformed,  // "malformed": 200 with a body that is not JSON (streams: one event that is not JSON)
  truncate,   // "truncate": the body stops mid-way and the connection closes (streams: no [DONE])
  abort,      // "abort": 200, the generation ends early with finish "abort" and partial tokens
  status_429,    // "429": too many requests, with a Retry-After header (fault_config::retry_after)
  status_500,    // "500": an internal error (an engine that died; clients do not retry it)
  status_502,    // "502"
  status_503,    // "503"
  status_504,    // "504"
  no_token_ids,  // "no_token_ids": 200 without token ids (a vLLM that ignores return_token_ids)
  context_too_long,  // "context_too_long": 400 in the engine's context-length wording
  bad_request,       // "bad_request": 400 for a sampling parameter the engine refuses
  // "hold": 200, but the generation waits after its hold_tokens-th token until it is aborted (a
  // pause in abort mode, the client leaving), the server stops, the served weight version changes
  // or hold_duration passes, then goes on (a slow generation that a weight sync lands in)
  hold,
};

// How many kinds there are (for per-kind tables).
inline constexpr std::size_t fault_kind_count = 16;

[[nodiscard]] const char* to_string(fault_kind kind);

struct fault_config {
  // Probabilities per generation request; they must add up to at most 1. Default: all 0.
  double drop = 0.0;
  double http_5xx = 0.0;
  double stall = 0.0;
  double malformed = 0.0;
  double truncate = 0.0;
  double abort = 0.0;
  double status_429 = 0.0;
  double status_500 = 0.0;
  double status_502 = 0.0;
  double status_503 = 0.0;
  double status_504 = 0.0;
  double no_token_ids = 0.0;
  double context_too_long = 0.0;
  double bad_request = 0.0;
  double hold = 0.0;
  // The faults of the first generation arrivals, in order (none: that arrival is served); the
  // probabilities apply from arrival script.size() on. Default: empty.
  std::vector<fault_kind> script;
  // How long a stalled reply is held. Default: 30 s.
  std::chrono::milliseconds stall_duration{30000};
  // How many tokens an aborted generation keeps (at most: it may end on its own first).
  // Default: 0, drawn per request in 1..8.
  std::size_t abort_tokens = 0;
  // After how many generated tokens a held generation waits (it is not held when it ends first).
  // Default: 1.
  std::size_t hold_tokens = 1;
  // The longest a held generation waits. Default: 60 s.
  std::chrono::milliseconds hold_duration{60000};
  // The Retry-After header of a 429, in seconds. Default: 1.
  std::chrono::seconds retry_after{1};
  // Default: 0.
  std::uint64_t seed = 0;

  [[nodiscard]] bool any() const;
};

// Parses "drop=0.05,5xx=0.05,stall=0.02,malformed=0.02,truncate=0.02,abort=0.05,429=0.01,500=0.01,
// 502=0,503=0,504=0,no_token_ids=0,context_too_long=0,bad_request=0,hold=0,
// script=503:drop:none:abort:hold,stall_ms=30000,abort_tokens=2,hold_tokens=4,hold_ms=60000,
// retry_after_s=1,seed=7". Every key is optional; "" and "none" mean
// no faults. `script` lists kinds by their spec names, separated by ':'. Errors name the bad key or
// value and what is accepted. Pure.
[[nodiscard]] result<fault_config> parse_fault_spec(std::string_view spec);

struct fault_decision {
  fault_kind kind = fault_kind::none;
  int http_status = 0;       // the status of an HTTP error fault (429, 5xx, 400), else 0
  std::uint64_t detail = 0;  // spare randomness for the fault's shape (where to cut, abort)
};

// The fault for the generation request that arrived `serial`-th (0-based). Pure.
[[nodiscard]] fault_decision decide_fault(const fault_config& config, std::uint64_t serial);

}  // namespace leap::policy

// ==== server_backend (server_backend.cpp) ================================
// What the policy server asks of a model: one interface, so that the scripted backend (a task
// suite's known answers) and the LibTorch backend (a real model, built in the learner issue) plug
// into the same HTTP server. The server owns stopping rules (max tokens, stop strings, stop ids),
// pausing and aborts; a backend only produces tokens and honours its generation_control.

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

// ==== scripted_backend (scripted_backend.cpp) ============================
// The scripted backend: a policy that answers a task suite's prompts with the suite's own known
// good and known wrong solutions, at a configurable pass rate and speed. It is the load generator
// for benchmarks and the policy of CPU end-to-end tests; it knows tasks as plain data, not the
// sandbox.
//
// How it answers (every choice a pure function of the server seed, the request and the prompt):
//  - Task: the first user message of the conversation (for a prompt that is not ChatML, the whole
//    prompt text) is matched against the registered task prompts: first exactly (surrounding
//    whitespace ignored), else the longest registered prompt that occurs inside it (ties: the
//    smaller task id). No match: a fixed sentence without code ("unknown task").
//  - Turn: 1 + the number of assistant messages before the one being generated. Turn 1 answers
//    the solution with the task's first-turn pass probability, else one of its wrong candidates.
//    A later turn (a debug turn: feedback follows an earlier answer) answers the solution with the
//    fix probability, else a wrong candidate; an earlier correct answer is simply repeated.
//  - Answer text: one short sentence, a blank line, then the code in a ```<language> fence; the
//    model then ends its turn with <|im_end|>.
//  - Randomness: keyed on (seed, the prompt up to the assistant message being generated, the
//    request's seed, the sample index). Without a request seed, the server's arrival number for
//    the request stands in, so repeated calls sample anew as a real sampler does; temperature 0
//    ignores both (greedy: always the same answer for a prompt).
//  - Resume: a prompt that ends inside an assistant message (a client resuming after an abort)
//    continues the answer it would have given, from where the prompt stops.
//  - Log-probs: deterministic negative floats, mostly near 0, keyed on the context and position
//    (not on the request seed), so the same answer text always reports the same log-probs.
//  - Latency: time to first token, then tokens at tokens_per_s, both scaled by one per-request
//    jitter factor in [1 - jitter, 1 + jitter]; slept on the request's worker thread, in slices of
//    at least 10 ms, pausable and abortable through generation_control.

namespace leap::policy {

struct scripted_wrong_answer {
  std::string label;  // the bug it shows: compile_error, off_by_one, race, ...
  std::string code;
};

struct scripted_task {
  std::string id;        // "cuda/vector_add"
  std::string prompt;    // the text the model is asked
  std::string language;  // the fence tag: "cuda", "cpp", "python"
  std::string solution;  // a correct answer's code
  std::vector<scripted_wrong_answer> wrong;
  int difficulty = 2;  // 1 (easy) .. 3 (hard)
  // Overrides the difficulty's first-turn pass probability when set.
  std::optional<double> first_turn_pass;
};

struct latency_model {
  double ttft_ms = 0.0;       // Default: 0 (no wait before the first token)
  double tokens_per_s = 0.0;  // Default: 0 (unlimited: every token at once)
  double jitter = 0.0;        // Default: 0; in [0, 1): per-request scale in [1 - j, 1 + j]
};

struct scripted_config {
  std::uint64_t seed = 0;  // Default: 0
  // First-turn pass probability for difficulty 1, 2, 3. Default: 0.7, 0.45, 0.2.
  std::array<double, 3> first_turn_pass{0.7, 0.45, 0.2};
  // Probability that a debug turn fixes a wrong answer. Default: 0.5.
  double fix_probability = 0.5;
  latency_model latency;
  std::vector<scripted_task> tasks;
};

// What the backend decided to answer, for tests and logs.
struct scripted_answer {
  const scripted_task* task = nullptr;  // null: unknown task
  int turn = 1;
  bool correct = false;
  std::string label;  // "solution", a wrong candidate's label, or "unknown"
  std::string text;   // the whole answer text (without the closing <|im_end|>)
};

class scripted_backend final : public policy_backend {
 public:
  // Validates the configuration: unique, non-empty task ids and prompts, a solution per task,
  // probabilities in [0, 1], difficulty in 1..3, non-negative latency, jitter in [0, 1). Errors
  // name the task and field.
  static result<std::shared_ptr<scripted_backend>> create(scripted_config config);

  [[nodiscard]] std::string name() const override { return "scripted"; }
  status generate(const backend_request& request, generation_control& control,
                  const token_sink& sink) override;
  // Accepts any path: there are no weights; the version is only remembered.
  status load_weights(const std::string& path, std::int64_t version) override;
  // A LoRA adapter is a version change like any weight load: the answers stay the suite's.
  [[nodiscard]] bool supports_adapters() const override { return true; }
  status load_adapter(const std::string& name, const std::string& path,
                      std::int64_t version) override;

  // The answer `generate` would give for this request, without latency. Pure, thread-safe.
  [[nodiscard]] scripted_answer plan(const backend_request& request) const;
  // The task a prompt text asks for (the matching rule above), or null.
  [[nodiscard]] const scripted_task* find_task(const std::string& user_text) const;
  // The first-turn pass probability that applies to a task.
  [[nodiscard]] double pass_probability(const scripted_task& task) const;

 private:
  explicit scripted_backend(scripted_config config);

  scripted_config config_;
  std::unordered_map<std::string, const scripted_task*> by_prompt_;  // trimmed prompt -> task
  std::vector<const scripted_task*> by_length_;  // longest prompt first, for substring matching
};

// The answer text for a piece of code: a sentence, then the code in a fence of the language.
[[nodiscard]] std::string render_scripted_answer(const std::string& sentence,
                                                 const std::string& language,
                                                 const std::string& code);

// The last fenced code block of a text ("" when none): how the backend reads its own earlier
// answer back on a debug turn.
[[nodiscard]] std::string last_fenced_block(const std::string& text);

}  // namespace leap::policy

// ==== server (server.cpp) ================================================
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
  // Retry-After: 1 (policy/http/http.hpp). Above `threads`, whole requests may wait for a
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
