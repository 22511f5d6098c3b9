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
#pragma once

#include "common/result.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace leap::policy
