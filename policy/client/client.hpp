// What policy/client offers, its one public header: the libcurl client of vLLM and SGLang servers.
//  - client_config: everything the client can be told, with its defaults (client_config.cpp);
//  - weight_sync: sync plans and the pure state machine that runs them (weight_sync.cpp), and
//    disk_sync_plan, each server flavour's preset (dialect.cpp);
//  - client: `policy_client`, its turns, tokenization and weight syncs (client.cpp and the
//    client_*.cpp beside it).
// The rest is the room's inside (detail/): the wire dialects (detail/dialect.hpp), the pure
// protocol functions (detail/client_protocol.hpp), endpoints, and the client's impl.
#pragma once

#include "common/enums/server_flavour.hpp"
#include "common/enums/wire_flavour.hpp"
#include "common/result.hpp"
#include "policy/chat/chat.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// ==== client_config (client_config.cpp) ==================================
// Everything the policy client can be told, with its default. Plain structs: the orchestrator's
// config loader fills them from the experiment config; validate_client_config says what is wrong
// before the client starts.

namespace leap::policy {

// wire_flavour (the server API the client speaks) and its names come from the shared vocabulary.

// Sampling parameters of one generation request.
struct sampling_config {
  int n = 1;                             // Default: 1 (completions per request)
  double temperature = 1.0;              // Default: 1.0
  double top_p = 1.0;                    // Default: 1.0
  int top_k = -1;                        // Default: -1 (disabled; not sent)
  int max_tokens = 1024;                 // Default: 1024 (new tokens per turn)
  std::optional<std::uint64_t> seed;     // Default: none (not sent)
  std::vector<std::string> stop;         // Default: none (stop strings)
  std::vector<token_id> stop_token_ids;  // Default: none (stop ids besides the model's EOS)
};

struct endpoint_config {
  std::string base_url;     // "http://host:port", no trailing path; required
  int max_in_flight = 256;  // Default: 256 (requests this client keeps open on the server at once)
};

struct retry_config {
  // Attempts per turn, the first included, for transient faults (connection errors, timeouts, the
  // statuses below, malformed or truncated bodies). Default: 6
  int max_attempts = 6;
  // Continuations of an aborted generation from the tokens already received. They do not count as
  // attempts. Default: 8
  int max_resumes = 8;
  // Backoff before retry k (1-based): d = min(max_backoff, base_backoff * 2^(k-1)), then drawn
  // uniformly from [(1 - jitter) * d, d] with the client's seeded generator. Default: 100 ms
  std::chrono::milliseconds base_backoff{100};
  // Also caps a server's Retry-After: a retried answer that carries one waits
  // max(backoff, min(Retry-After, max_backoff)). Default: 10 s
  std::chrono::milliseconds max_backoff{10'000};
  double jitter = 0.5;  // Default: 0.5
  // HTTP statuses retried. 429 (server queue full) is retried but never counts against the
  // endpoint's health. Default: 429, 502, 503, 504
  std::vector<int> retry_statuses{429, 502, 503, 504};
};

struct health_config {
  std::string path = "/health";               // Default: /health (GET; any 2xx passes)
  std::chrono::milliseconds interval{2'000};  // Default: 2 s between checks of each endpoint
  std::chrono::milliseconds timeout{2'000};   // Default: 2 s per check
  // Consecutive failures (requests or checks) after which an endpoint is marked down: no new
  // requests go there until a check passes. Default: 3
  int down_after_failures = 3;
};

struct client_config {
  wire_flavour flavour = wire_flavour::vllm;  // Default: vllm
  std::vector<endpoint_config> endpoints;     // at least one
  // The "model" field of vLLM requests. Default: "" (not sent: vLLM serves its only model)
  std::string model;
  // Generation route. Default: "" (the flavour's: /v1/completions or /generate)
  std::string generate_path;
  std::string tokenize_path = "/tokenize";  // Default: /tokenize
  // Ask for a streamed response (SSE: vLLM's `stream: true` completion chunks, SGLang's /generate
  // events) and read it as it arrives. A stream that is cut (connection dropped or truncated, an
  // event that is not JSON, an error event) keeps the tokens already received: the generation is
  // resumed from them exactly as an aborted one (prompt + received ids, max_tokens reduced), so
  // nothing is lost or generated twice. Default: false (one JSON body per request)
  bool stream = false;
  // Requests accepted but not yet sent (all endpoints at their in-flight limit, or down); beyond
  // that submit() answers busy. Default: 4096
  int max_pending = 4096;
  std::chrono::milliseconds connect_timeout{5'000};    // Default: 5 s per connection attempt
  std::chrono::milliseconds request_timeout{600'000};  // Default: 10 min per HTTP attempt
  // Whole life of a turn: waiting, attempts, backoff and resumptions; past it the turn ends
  // `unavailable`. Default: 30 min
  std::chrono::milliseconds turn_deadline{1'800'000};
  // The model's context window in tokens. When > 0, a prompt that fills it ends the turn
  // `truncated` without a request, and max_tokens is lowered to what still fits. Default: 0
  // (unknown)
  int max_context_tokens = 0;
  // The model's vocabulary size. When > 0, a reply with a token id at or above it is refused as a
  // faulty reply (retried); ids are always checked to be integers in [0, 2^31). Default: 0
  // (unknown)
  int vocab_size = 0;
  // The id bound where neither vocab_size nor any server's /v1/models (vLLM's and SGLang's report
  // none) gives one: the vocabulary known here, from the tokenizer prompts are rendered with
  // (policy.tokenizer). A server's report replaces it at the start-up check. Default: 0 (none)
  int fallback_vocab_size = 0;
  retry_config retry;
  health_config health;
  std::uint64_t seed = 0;  // Default: 0 (seeds the backoff jitter)
};

// The route a flavour generates on, unless config.generate_path overrides it.
[[nodiscard]] std::string generate_route(const client_config& config);

// Every field checked; the error names the field ("endpoints[1].base_url: ...").
[[nodiscard]] status validate_client_config(const client_config& config);

}  // namespace leap::policy

// ==== weight_sync (weight_sync.cpp) ======================================
// Weight sync of one policy server, as a state machine. A sync
//   1. stops admitting new turns to the server (they go to other endpoints, or wait);
//   2. waits until the turns in flight there have drained (plan.drain), or lets the plan's first
//      control call pause the server (SGLang /pause_generation in abort mode: in-flight turns come
//      back aborted with partial tokens and the client resumes them once an endpoint admits again);
//   3. runs the plan's control calls in order, each with its own deadline: pause, load (SGLang
//      /update_weights_from_disk, vLLM /v1/load_lora_adapter, vLLM sleep / reload / wake, or routes
//      named in the config), flush the prefix cache (/flush_cache, /reset_prefix_cache), resume;
//   4. checks /health until it passes (a bounded number of times); with plan.check_version, a
//      server that reports its weight version (the `x-weight-version` header, as the project's
//      server does) must report the requested one, else the sync fails at once: a server that
//      restarted mid-sync (back on its startup weights) or loaded something else is caught here;
//   5. records the new weight version and admits again.
// A drain that times out changes nothing on the server: the server admits again and the sync
// reports an error. A failed control call or health check leaves the server's weights unknown: it
// stays out of rotation (not admitting) until a later sync succeeds.
//
// The transition function is pure (tested as a table); policy_client drives it on its event loop.

namespace leap::policy {

// One HTTP control call. `path` and `body` may hold {version}, {path} and {lora_name}, replaced by
// the sync request's values (JSON-escaped in the body).
struct control_call {
  std::string name;                             // for messages: "load", "flush", ...
  std::string method = "POST";                  // Default: POST
  std::string path;                             // e.g. "/flush_cache"
  std::string body;                             // Default: "" (no body)
  std::chrono::milliseconds deadline{120'000};  // Default: 2 min for the whole call
  // The body sent instead while the sync tries a delta over a transfer engine (the request's
  // delta_update_info): {delta_update_info} in it is replaced by that function's text (JSON, not
  // escaped). When the call fails, it is sent again with `body` (the full weights), as a call
  // naming {path} is with the full folder. Default: "" (the call never carries a delta)
  std::string delta_body;
};

struct weight_sync_plan {
  // Wait for in-flight turns to finish before the first call. Default: true
  bool drain = true;
  std::chrono::milliseconds drain_timeout{600'000};  // Default: 10 min
  std::vector<control_call> calls;
  int health_attempts = 20;                           // Default: 20
  std::chrono::milliseconds health_retry_delay{500};  // Default: 500 ms between checks
  std::chrono::milliseconds health_timeout{5'000};    // Default: 5 s per check
  // Compare the health check's `x-weight-version` header, when the server sends one, with the
  // request's version (servers that send none, as vLLM and SGLang, are not checked). Only for
  // plans whose load call names the version. Default: false
  bool check_version = false;
};

struct weight_sync_request;

// The trainer's end of a control call, run alongside it: a transfer engine's server blocks in
// /init_weight_transfer_engine until the trainer has joined the group and in /update_weights until
// the trainer has sent the tensors, so those calls need the trainer's work at the same time. Called
// on the client's loop just before the call is sent, with the call and the sync's request; it must
// not block: it starts its work elsewhere (or has none for this call) and calls `done` exactly
// once, from any thread. The call counts as ok only when its HTTP answer and `done` both are.
using sync_companion =
    std::function<void(const control_call& call, const weight_sync_request& request,
                       std::function<void(status)> done)>;

struct weight_sync_request {
  std::string version;       // recorded on success and substituted for {version}
  std::string weights_path;  // substituted for {path}
  std::string lora_name;     // substituted for {lora_name}
  sync_companion companion;  // Default: none (every call is HTTP alone)
  // A delta folder of the same version (learner/weight_delta.hpp), tried first: {path} is this
  // until a call that names {path} fails (the server is not on the delta's base version: 409; a
  // checksum that does not match; anything else), then that call is sent again with
  // weights_path, and the sync goes on from there. Default: "" (full sync only)
  std::string delta_path;
  // The delta's update_info for a call with a delta_body (the broadcast path: vLLM's sparse_nccl
  // fields and ours, policy/wire/wire.hpp), asked on the client's loop when that call is sent; ""
  // (no delta for this version) sends the full `body`. The companion sees whether the call carries
  // the delta: the request it is handed holds this function only then. Must not block. Default:
  // none
  std::function<std::string()> delta_update_info;
  // Called on the client's loop when the delta was refused and the full folder is sent instead,
  // with the refusal. Must not block. Default: none
  std::function<void(const std::string& why)> on_delta_refused;
};

// Where the learner writes the delta that brings a server to weight `version`
// (policy.weight_sync_delta):
// `<dir>/v-NNNNNNNN`, so that the sync finds it from the version alone.
[[nodiscard]] std::string weight_delta_folder(const std::string& dir, std::uint64_t version);

// Presets. Deadlines: 10 min for loads, 1 min for everything else.
// SGLang: POST /update_weights_from_disk {"model_path", "weight_version"}, POST /flush_cache. With
// `pause`, no drain: POST /pause_generation {"mode": "abort"} first and POST /continue_generation
// last. Checks the version (check_version).
[[nodiscard]] weight_sync_plan sglang_disk_plan(bool pause = false);
// vLLM runtime LoRA: POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace": true},
// POST /reset_prefix_cache. (The server needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True.)
[[nodiscard]] weight_sync_plan vllm_lora_plan();
// vLLM sleep mode: POST /sleep?level=2, POST /wake_up?tags=weights, POST /collective_rpc
// {"method": "reload_weights"} (reloads from the served model's path, where the learner has written
// the new weights), POST /wake_up?tags=kv_cache, POST /reset_prefix_cache.
[[nodiscard]] weight_sync_plan vllm_sleep_reload_plan();
// vLLM full weights from disk, without sleep mode: drain, POST /collective_rpc
// {"method": "reload_weights", "kwargs": {"weights_path": "{path}"}} (every worker reloads in
// place from the learner's step folder and points its model config there), POST
// /reset_prefix_cache. vLLM serves /collective_rpc with VLLM_SERVER_DEV_MODE=1; the weights_path
// argument of the workers' reload_weights is in vLLM's main branch of 2026 (older vLLM: the
// folder the server was started on is reloaded, see vllm_sleep_reload_plan). With `pause`, no
// drain: POST /pause?mode=abort first (running requests end with finish "abort" and their tokens,
// which the client resumes under the new weights) and POST /resume last.
[[nodiscard]] weight_sync_plan vllm_disk_plan(bool pause = false);

// vLLM's weight-transfer engine with the disk backend (`vllm serve --weight-transfer-config
// '{"backend": "disk"}'`, served with VLLM_SERVER_DEV_MODE=1): drain, POST
// /init_weight_transfer_engine {"init_info": {}} (a no-op for disk; it also tells a server that
// restarted without the engine at once), POST /start_weight_update {}, POST /update_weights
// {"update_info": {"path": "{path}"}} (the learner's step folder, absolute), POST
// /finish_weight_update {"weight_version": "{version}"} (vLLM ignores the body; the project's
// server reports that version), POST /reset_prefix_cache. Checks the version (check_version).
[[nodiscard]] weight_sync_plan vllm_transfer_disk_plan();

// vLLM's weight-transfer engine with the nccl backend (`vllm serve --weight-transfer-config
// '{"backend": "nccl"}'`; the project's server: `leap serve-policy --model DIR
// --weight-transfer-config '{"backend": "nccl"}'`): drain, with `init_info` (a JSON object, vLLM's
// NCCLWeightTransferInitInfo) POST /init_weight_transfer_engine {"init_info": ...} first (the
// server joins the trainer's group; only the first sync of a run needs it: an empty `init_info`
// leaves the call out), POST /start_weight_update {}, POST /update_weights {"update_info":
// `update_info`} (vLLM's NCCLWeightTransferUpdateInfo: names, dtype_names, shapes; the trainer
// broadcasts meanwhile: the request's companion, on the calls named "init" and "load"), POST
// /finish_weight_update {"weight_version": "{version}"}, POST /reset_prefix_cache. Checks the
// version (check_version). With `delta` (policy.weight_sync_delta; only the project's server takes
// it), the "load" call first carries the request's delta_update_info (the changed tensors, the
// base version, a checksum each) and, refused (409: another base; a checksum), the full
// update_info again in the same session.
[[nodiscard]] weight_sync_plan vllm_transfer_nccl_plan(const std::string& init_info,
                                                       const std::string& update_info,
                                                       bool delta = false);

// The project's ipc weight-transfer backend (a server on the learner's GPU in another process;
// `leap serve-policy --model DIR --device cuda --weight-transfer-config '{"backend": "ipc"}'`;
// learner/weight_ipc.hpp: vLLM's routes, our update_info): drain, POST /init_weight_transfer_engine
// {"init_info": {}} (a no-op for ipc; a server that restarted without the engine refuses it at
// once), POST /start_weight_update {} (the learner copies the request's version into its exported
// buffer meanwhile: the request's companion, on the call named "start"), POST /update_weights
// {"update_info": `update_info`} (the buffer's handle and layout, the same every step; the server
// copies the weights out before answering), POST /finish_weight_update {"weight_version":
// "{version}"}, POST /reset_prefix_cache. Checks the version (check_version).
[[nodiscard]] weight_sync_plan vllm_transfer_ipc_plan(const std::string& update_info);

// Replaces {version}, {path} and {lora_name}; with `json_escape` the values are escaped for use
// inside a JSON string.
[[nodiscard]] std::string substitute_sync_fields(std::string_view text,
                                                 const weight_sync_request& request,
                                                 bool json_escape);

enum class sync_phase : std::uint8_t { idle, draining, calling, health_checking, failed };

struct sync_state {
  sync_phase phase = sync_phase::idle;
  std::size_t call_index = 0;  // the call in progress while phase == calling
  int health_checks = 0;       // checks done while phase == health_checking
};

enum class sync_event : std::uint8_t {
  start,          // a sync was requested
  drained,        // no turn of this client is in flight on the server
  drain_timeout,  // plan.drain_timeout passed while draining
  call_ok,        // the current control call answered 2xx (and no {"success": false})
  call_failed,    // it failed: error status, transport error, or its deadline passed
  health_ok,
  health_failed,
  version_mismatch,  // the health check passed but the server reports another weight version
};

enum class sync_action : std::uint8_t {
  none,
  wait_drain,    // stop admitting; wait for `drained` (now, if nothing is in flight) or the timeout
  send_call,     // stop admitting (if not yet); send plan.calls[next.call_index]
  check_health,  // send a health check now
  retry_health,  // send a health check after plan.health_retry_delay
  finish,        // record the version, mark up, admit again; report success
  abandon,       // admit again (nothing changed on the server); report the error
  fail,          // keep not admitting; report the error
  reject,        // the event makes no sense in this state (a second start, a late answer): ignore
};

struct sync_transition {
  sync_state next;
  sync_action action = sync_action::none;
};

[[nodiscard]] sync_transition next_sync_step(const sync_state& state, sync_event event,
                                             const weight_sync_plan& plan);

[[nodiscard]] std::string_view to_string(sync_phase phase);
[[nodiscard]] std::string_view to_string(sync_event event);
[[nodiscard]] std::string_view to_string(sync_action action);

// How a learner's step folder reaches the servers of `flavour` (a preset of the plans above, chosen
// by reload_routes_of(flavour) in dialect.cpp): vLLM reloads it (vllm_disk_plan); SGLang loads it
// (sglang_disk_plan); the embedded server takes the SGLang route,
// which its backend serves from the learner in memory when both share the process. With `pause` (a
// weight update in flight), the plan pauses the server in abort mode instead of draining it and
// resumes it last (vLLM's /pause, SGLang's /pause_generation); the client resumes the aborted turns
// under the new weights.
[[nodiscard]] weight_sync_plan disk_sync_plan(server_flavour flavour, bool pause = false);

}  // namespace leap::policy

// ==== client (client.cpp) ================================================
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

  // Runs a weight sync on `endpoint` (see weight_sync above). The callback gets ok, or an error
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
