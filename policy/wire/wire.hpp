// What policy/wire offers, its one public header: the formats both sides of the HTTP API speak, as
// pure functions, with no sockets and no threads.
//  - wire: vLLM's and SGLang's requests parsed into typed requests, sequences rendered as their
//    responses, and `render_error`, the one error shape (wire.cpp);
//  - sse: server-sent events, framing and reading (sse.cpp);
//  - bounded_json: parsing of untrusted JSON with its nesting bounded first (bounded_json.cpp);
//  - json_cursor: the forward-only JSON cursor of the client's fast readers (json_cursor.cpp).
#pragma once

#include "common/enums/finish_reason.hpp"
#include "common/result.hpp"
#include "policy/chat/chat.hpp"

#include <climits>
#include <nlohmann/json_fwd.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

// ==== wire (wire.cpp) ====================================================
// The server side of the wire: pure functions from request JSON to typed requests (with errors a
// user can act on), and from generated sequences to response JSON shaped as vLLM's
// OpenAI-compatible server and SGLang's native /generate document them. No sockets, no threads.
//
// Shapes followed:
//   POST /v1/completions       vLLM CompletionRequest / CompletionResponse (+ return_token_ids:
//                               choices[i].token_ids and choices[i].prompt_token_ids)
//   POST /v1/chat/completions  vLLM ChatCompletionRequest / ChatCompletionResponse (+
//   return_token_ids:
//                               top-level prompt_token_ids, choices[i].token_ids)
//   POST /generate             SGLang GenerateReqInput; response {text, output_ids, meta_info{id,
//                               finish_reason{type,...}, prompt_tokens, completion_tokens,
//                               cached_tokens, output_token_logprobs [[logprob, id, text|null]],
//                               weight_version, e2e_latency}}
//   POST /tokenize, /detokenize vLLM's shapes (detokenize also answers SGLang's "text" key)
// Every OpenAI-style response also carries "weight_version" (an integer, our extension); SGLang's
// meta_info.weight_version is a string, as SGLang reports it.

namespace leap::policy {

class model_vocabulary;  // policy/chat/chat.hpp

// Sampling and stopping, as the three generation routes accept them (names differ per route; the
// parsers map them here).
struct sampling_params {
  int n = 1;                      // Default: 1 (at most 128)
  std::optional<int> max_tokens;  // Default: per route (completions 16, chat: the rest of the
                                  // context, /generate 128), as vLLM and SGLang document
  int min_tokens = 0;             // Default: 0
  double temperature = 1.0;       // Default: 1.0; 0 means greedy
  double top_p = 1.0;             // Default: 1.0, in (0, 1]
  int top_k = -1;                 // Default: -1 (disabled; 0 also disables)
  std::optional<std::int64_t> seed;
  std::vector<std::string> stop;
  std::vector<token_id> stop_token_ids;
  bool ignore_eos = false;                  // Default: false
  bool skip_special_tokens = true;          // Default: true
  bool include_stop_str_in_output = false;  // Default: false (SGLang: no_stop_trim)
};

// One prompt: text (tokenized by the server) or token ids (used as they are).
struct prompt_input {
  std::optional<std::string> text;
  std::vector<token_id> ids;
};

struct completion_request {
  std::optional<std::string> model;
  std::vector<prompt_input> prompts;  // a batch; choices are prompt-major: index = p * n + j
  sampling_params sampling;
  std::optional<int> logprobs;  // alternatives per token, 0..20; 0 = only the sampled token
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool return_token_ids = false;
  bool return_tokens_as_token_ids = false;
};

struct chat_request {
  std::optional<std::string> model;
  std::vector<chat_message> messages;
  sampling_params sampling;
  bool logprobs = false;
  int top_logprobs = 0;  // 0..20, needs logprobs
  bool stream = false;
  bool include_usage = false;
  bool return_token_ids = false;
  bool return_tokens_as_token_ids = false;
  chat_render_options render;
};

// SGLang's /generate.
struct generate_request {
  std::vector<prompt_input> prompts;
  bool batch = false;  // the input was a list of prompts: the response is a list
  sampling_params sampling;
  bool return_logprob = false;
  int top_logprobs_num = 0;
  bool return_text_in_logprobs = false;
  bool stream = false;
  std::optional<std::string> rid;
};

struct tokenize_request {
  std::optional<std::string> model;
  std::optional<std::string> prompt;  // exactly one of prompt and messages
  std::optional<std::vector<chat_message>> messages;
  chat_render_options render;
  bool return_token_strs = false;
};

struct detokenize_request {
  std::vector<token_id> tokens;
};

// SGLang's /update_weights_from_disk: {"model_path": "...", "weight_version": "N"} (version
// optional: absent means the current version + 1).
struct update_weights_request {
  std::optional<std::int64_t> version;
  std::string path;
};

enum class pause_mode : std::uint8_t {
  abort,     // in-flight generations end now with finish_reason "abort" (SGLang's default)
  in_place,  // in-flight generations freeze until resume (SGLang "in_place"/"retract")
  wait,      // the pause call returns once in-flight generations have finished (drain)
};

struct pause_request {
  pause_mode mode = pause_mode::abort;
};

// vLLM's sleep mode. POST /sleep?level=1|2[&mode=abort|wait|keep]: level 1 offloads the weights
// and drops the KV cache, level 2 discards both (Default: 1); `mode` says what happens to running
// generations, as vLLM's pause modes (abort: they end with finish_reason "abort", wait: the call
// returns once they finished, keep: they freeze until wake-up; Default: abort).
struct sleep_request {
  int level = 1;
  pause_mode mode = pause_mode::abort;
};

// POST /wake_up?tags=weights&tags=kv_cache (a comma-separated list works too); no tags wakes both.
struct wake_up_request {
  bool weights = false;
  bool kv_cache = false;
};

// POST /collective_rpc {"method", "args"?, "kwargs"?, "timeout"?}. Only "reload_weights" is
// served; `kwargs.weights_path` (our extension) names the folder to reload from instead of the
// served model's.
struct collective_rpc_request {
  std::string method;
  std::optional<std::string> weights_path;
};

// vLLM's weight-transfer engine (`vllm serve --weight-transfer-config '{"backend": B}'`), as in
// vllm-project/vllm vllm/entrypoints/serve/dev/rlhf/api_router.py at commit
// 6fbea1171830682c53ecb7d3ae67495fa799e62f:
//   POST /init_weight_transfer_engine {"init_info": {...}}  (the backend's rendezvous)
//   POST /start_weight_update [{"include_draft"?, "is_checkpoint_format"?}]  (body optional)
//   POST /update_weights {"update_info": {...}}  (one or more per update)
//   POST /finish_weight_update [{"weight_version"?}]  (vLLM reads no body; ours takes the version
//     the update makes, as an integer or its decimal string; absent: the current one + 1)
// A missing init_info / update_info is refused with vLLM's message ("Missing 'update_info' in
// request body"); the info must be an object, read by the engine's backend.
// `info` is behind a pointer so that this header needs only nlohmann/json_fwd.hpp: the whole
// json.hpp costs every includer about 2 CPU-s to parse (docs/benchmarks.md). Never null.
struct weight_transfer_request {
  std::shared_ptr<const nlohmann::json> info;  // init_info or update_info
};

struct finish_weight_update_request {
  std::optional<std::int64_t> version;
};

// The disk backend's update_info (vLLM's DiskWeightTransferUpdateInfo, vllm/distributed/
// weight_transfer/disk_engine.py at 3b98defb1248fa873096121529d457c0f5124905): {"path": an absolute
// folder of safetensors}. The folder itself is checked by the loading backend.
struct disk_update_info {
  std::string path;
};

// The nccl backend's infos (vLLM's NCCLWeightTransferInitInfo / NCCLWeightTransferUpdateInfo,
// vllm/distributed/weight_transfer/nccl_engine.py at 04b06efe2a8eca78e3ce13cd80992f7f440c928a).
// init_info {"master_address", "master_port", "rank_offset", "world_size"}: all required;
// update_info {"names", "dtype_names", "shapes", "packed"?}: three arrays of one length; packed
// broadcasts (vLLM's batched buffers) are refused here, the sender must send one tensor each.
struct nccl_init_info {
  std::string master_address;
  int master_port = 0;
  int rank_offset = 1;
  int world_size = 2;
};

// A delta (learner/weight_delta.hpp) adds vLLM's sparse_nccl fields
// (SparseNCCLWeightTransferUpdateInfo, vllm/distributed/weight_transfer/sparse_nccl_engine.py at
// 8f5ec677c95d286a310bb0f90fefa1df056091cb: "num_updates_list", per name the entries broadcast as
// int32 indices then values) and the project's extension, which vLLM has no fields for:
// "encodings" (per name "sparse", or "full": `count` = the tensor's elements, broadcast whole),
// "checksums" (per name, 16 hex digits, of the tensor after applying) and "base_version" (the
// weight version the delta applies to). A delta needs all four; only this project's server takes
// it.
struct nccl_delta_fields {
  std::vector<std::int64_t> num_updates_list;
  std::vector<std::string> encodings;
  std::vector<std::string> checksums;
  std::int64_t base_version = 0;
};

struct nccl_update_info {
  std::vector<std::string> names;
  std::vector<std::string> dtype_names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::optional<nccl_delta_fields> delta;  // Default: none (every name whole, in order)
};

// POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace"?} and
// POST /v1/unload_lora_adapter {"lora_name"} (path unused).
struct lora_adapter_request {
  std::string name;
  std::string path;
  bool load_inplace = false;
};

// Each returns the typed request, or an error naming the offending key and what would be accepted
// ("'prompt' is required", "'top_p' must be in (0, 1] (got 0)"). Unknown keys are ignored, as
// vLLM and SGLang do. Token ids are checked against the vocabulary later, by the server. Pure.
[[nodiscard]] result<completion_request> parse_completion_request(const nlohmann::json& body);
[[nodiscard]] result<chat_request> parse_chat_request(const nlohmann::json& body);
[[nodiscard]] result<generate_request> parse_generate_request(const nlohmann::json& body);
[[nodiscard]] result<tokenize_request> parse_tokenize_request(const nlohmann::json& body);
[[nodiscard]] result<detokenize_request> parse_detokenize_request(const nlohmann::json& body);
// `key` is "init_info" or "update_info".
[[nodiscard]] result<weight_transfer_request> parse_weight_transfer_request(
    const nlohmann::json& body, const char* key);
[[nodiscard]] result<finish_weight_update_request> parse_finish_weight_update_request(
    const nlohmann::json& body);
[[nodiscard]] result<disk_update_info> parse_disk_update_info(const nlohmann::json& update_info);
[[nodiscard]] result<nccl_init_info> parse_nccl_init_info(const nlohmann::json& init_info);
[[nodiscard]] result<nccl_update_info> parse_nccl_update_info(const nlohmann::json& update_info);
// The update_info body the learner sends for `info` (packed: false). Pure.
[[nodiscard]] nlohmann::json render_nccl_update_info(const nccl_update_info& info);
[[nodiscard]] result<update_weights_request> parse_sglang_update_weights_request(
    const nlohmann::json& body);
[[nodiscard]] result<pause_request> parse_pause_request(const nlohmann::json& body);
// From the query parameters (absent ones: nullopt / empty).
// vLLM's POST /pause?mode=abort|wait|keep[&clear_cache=bool] (Default: abort; keep freezes the
// running requests, as SGLang's in_place; clear_cache is checked and has nothing to clear here).
[[nodiscard]] result<pause_request> parse_vllm_pause_request(
    const std::optional<std::string>& mode, const std::optional<std::string>& clear_cache);
[[nodiscard]] result<sleep_request> parse_sleep_request(std::optional<std::string> level,
                                                        const std::optional<std::string>& mode);
[[nodiscard]] result<wake_up_request> parse_wake_up_request(const std::vector<std::string>& tags);
[[nodiscard]] result<collective_rpc_request> parse_collective_rpc_request(
    const nlohmann::json& body);
[[nodiscard]] result<lora_adapter_request> parse_load_lora_request(const nlohmann::json& body);
[[nodiscard]] result<lora_adapter_request> parse_unload_lora_request(const nlohmann::json& body);

// The body as JSON, or an error saying where it stopped parsing. An empty body parses as {} (the
// control routes take optional bodies). A body nesting deeper than max_json_depth
// (bounded_json, below) is an error, found before parsing. Pure.
[[nodiscard]] result<nlohmann::json> parse_json_body(const std::string& body);

// ---------------------------------------------------------------------------------------------
// Responses.

struct top_logprob {
  token_id id = 0;
  double logprob = 0.0;
};

// One generated sequence (a choice), or, while streaming, the part of it not yet sent.
struct sequence_output {
  int index = 0;  // the choice index
  std::vector<token_id> prompt_ids;
  std::vector<token_id> token_ids;
  std::vector<double> logprobs;                        // one per token id
  std::vector<std::vector<top_logprob>> top_logprobs;  // one per token id when asked
  std::string text;  // what the request asked to see: specials skipped, stop string trimmed
  // Where `text` starts within the whole generated text (non-zero for streaming deltas).
  std::size_t text_offset = 0;
  std::optional<finish_reason> finish;  // unset while a stream goes on
  // What ended the sequence with finish "stop": the stop token id or stop string that matched
  // (vLLM's stop_reason; null when the model's end-of-sequence token ended it).
  std::optional<token_id> stop_token;
  std::optional<std::string> stop_string;
  // The end-of-sequence token that ended it (SGLang reports it as finish_reason.matched).
  std::optional<token_id> eos_token;
  std::string abort_message;
};

// What every response of one request shares.
struct response_meta {
  std::string id;  // "cmpl-...", "chatcmpl-...", or the SGLang rid
  std::int64_t created = 0;
  std::string model;
  std::int64_t weight_version = 0;
  double e2e_latency_s = 0.0;  // SGLang's meta_info.e2e_latency
  // The served vocabulary, for token texts in log-probs. Default: null, the byte-level tokenizer.
  // Not owned.
  const model_vocabulary* vocab = nullptr;
};

struct usage_counts {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
};

// How token strings are shown in logprobs: the token's text, or "token_id:N" (vLLM's
// return_tokens_as_token_ids).
struct logprob_style {
  bool as_token_ids = false;
  int top = -1;                             // alternatives to show; -1 = no logprobs at all
  const model_vocabulary* vocab = nullptr;  // token texts; null: the byte-level tokenizer
};

[[nodiscard]] nlohmann::json render_completion_response(const response_meta& meta,
                                                        const std::vector<sequence_output>& choices,
                                                        const completion_request& request);
// One streamed chunk ("object": "text_completion", a single choice with its delta).
[[nodiscard]] nlohmann::json render_completion_chunk(const response_meta& meta,
                                                     const sequence_output& delta,
                                                     const completion_request& request,
                                                     bool first_of_choice);
[[nodiscard]] nlohmann::json render_chat_response(const response_meta& meta,
                                                  const std::vector<sequence_output>& choices,
                                                  const chat_request& request);
// One streamed chunk ("object": "chat.completion.chunk"); the first chunk of a choice carries
// delta.role = "assistant".
[[nodiscard]] nlohmann::json render_chat_chunk(const response_meta& meta,
                                               const sequence_output& delta,
                                               const chat_request& request, bool first_of_choice);
// The final usage-only chunk of a stream with stream_options.include_usage (choices: []).
[[nodiscard]] nlohmann::json render_usage_chunk(const response_meta& meta, const char* object,
                                                const usage_counts& usage);
// SGLang's /generate object for one sequence. While streaming, `sequence` is cumulative (SGLang's
// default), and finish_reason is null until the end.
[[nodiscard]] nlohmann::json render_generate_response(const response_meta& meta,
                                                      const sequence_output& sequence,
                                                      const generate_request& request);

// ---------------------------------------------------------------------------------------------
// Errors.

// An HTTP error: 400 for a request the user can fix, 404 for an unknown model, 5xx otherwise.
struct http_error {
  int status = 500;
  std::string message;
};

// The single place error bodies are built: OpenAI's shape, as vLLM fills it:
//   {"error": {"message": "...", "type": "BadRequestError", "param": null, "code": 400}}
[[nodiscard]] nlohmann::json render_error(const http_error& error);

// JSON text for a response body. Invalid UTF-8 (a cut multi-byte character) becomes U+FFFD
// instead of failing. Pure.
[[nodiscard]] std::string dump_json(const nlohmann::json& value);

}  // namespace leap::policy

// ==== sse (sse.cpp) ======================================================
// Server-sent events as OpenAI-compatible servers stream them: each event is `data: <json>\n\n`,
// and the stream ends with `data: [DONE]\n\n`. Framing lives here and nowhere else.

namespace leap::policy {

// One event carrying `data`. A payload with newlines becomes several `data:` lines, as the SSE
// specification requires (a reader joins them back with '\n'). Pure, thread-safe.
[[nodiscard]] std::string sse_event(std::string_view data);

// The end-of-stream marker of OpenAI's streaming APIs: "data: [DONE]\n\n".
[[nodiscard]] std::string sse_done();

// Incremental reader: feed bytes as they arrive, get the data payloads of the events completed so
// far. Handles "\n" and "\r\n" line ends, multi-line data, comments (":...") and fields other than
// data (ignored). An event is complete at its blank line; an unterminated last event is pending
// (is_partial) and never returned, which is how a truncated stream shows. Not thread-safe.
class sse_reader {
 public:
  [[nodiscard]] std::vector<std::string> feed(std::string_view bytes);
  // True when bytes of an event without its terminating blank line are buffered.
  [[nodiscard]] bool is_partial() const;

 private:
  std::string buffer_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace leap::policy

// ==== bounded_json (bounded_json.cpp) ====================================
// Parsing of JSON that comes from outside the process (a server's reply, an SSE event, a request
// body) with its nesting bounded first. nlohmann's parser is iterative, but copying, comparing and
// dumping a value recurse once per level, so a body of 100,000 nested brackets overflows the stack
// of whoever touches it next (building an error message, a result<json> copy). Every parse of
// untrusted JSON in policy/ goes through these functions. Pure and thread-safe.

namespace leap::policy {

// The deepest nesting accepted: far above any shape the OpenAI, vLLM or SGLang APIs use (a chat
// request with content parts is 5 levels deep), far below what a thread's stack can recurse.
inline constexpr int max_json_depth = 64;

// The nesting depth of arrays and objects in `text` (brackets inside strings do not count),
// counted up to limit + 1: a text deeper than `limit` gives limit + 1 without being read further.
// Works on any bytes, JSON or not.
[[nodiscard]] int json_nesting_depth(std::string_view text, int limit = max_json_depth);

// nlohmann::json::parse(text) without exceptions: a discarded value when `text` is not JSON or
// nests deeper than `limit`.
[[nodiscard]] nlohmann::json parse_bounded_json(std::string_view text, int limit = max_json_depth);

}  // namespace leap::policy

// ==== json_cursor (json_cursor.cpp) ======================================
// The JSON fast path of the client's response readers: a forward-only cursor over a body that
// reads only the fields a turn needs, without building a DOM. A generation response carries
// thousands of numbers (prompt echo, ids, log-probs); a nlohmann::json DOM for it costs more than
// everything else the client does per turn (README, "Tests and benchmark").
//
// Contract: every reader answers false for anything but well-formed JSON of the expected kind (and
// for shapes it chooses not to take: an escaped key, an integer of more than 18 digits, nesting
// deeper than 64 levels). A false is never an error to report: the caller then reads the whole body
// with the DOM parser (parse_bounded_json), which names what is wrong; so the fast path only has to
// be right on the bodies it accepts. After a false the cursor's position is unspecified.
// Not thread-safe (one per body); the body must outlive the cursor.

namespace leap::policy {

struct json_cursor {
  const char* p;  // next byte
  const char* e;  // end of the body

  explicit json_cursor(std::string_view body) : p(body.data()), e(body.data() + body.size()) {}

  // Skips JSON whitespace.
  void ws() {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
      ++p;
    }
  }
  // Consumes `c` (after whitespace) when it is next.
  bool eat(char c) {
    ws();
    if (p < e && *p == c) {
      ++p;
      return true;
    }
    return false;
  }
  // Whether `c` is next (after whitespace); consumes nothing but the whitespace.
  bool at(char c) {
    ws();
    return p < e && *p == c;
  }
  // Whether the rest of the body is whitespace.
  bool at_end() {
    ws();
    return p == e;
  }
  // Consumes `word` (true, false, null) when it is next.
  bool literal(std::string_view word) {
    ws();
    if (static_cast<std::size_t>(e - p) >= word.size() &&
        std::string_view(p, word.size()) == word) {
      p += word.size();
      return true;
    }
    return false;
  }
  // The raw contents of a string (no quotes, escapes left as written); `escaped` tells whether it
  // holds any. Refuses raw control characters, as JSON does.
  bool string(std::string_view& out, bool& escaped) {
    ws();
    if (p >= e || *p != '"') {
      return false;
    }
    const char* start = ++p;
    escaped = false;
    while (p < e) {
      const char c = *p;
      if (c == '"') {
        out = std::string_view(start, static_cast<std::size_t>(p - start));
        ++p;
        return true;
      }
      if (c == '\\') {
        escaped = true;
        p += 2;
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return false;
      }
      ++p;
    }
    return false;
  }
  // Whether a JSON number starts here: an optional minus, then a digit, and no leading zero.
  bool number_start() {
    ws();
    if (p >= e) {
      return false;
    }
    const char* q = *p == '-' ? p + 1 : p;
    if (q >= e || *q < '0' || *q > '9') {
      return false;
    }
    // JSON allows no leading zeros ("01").
    return !(*q == '0' && q + 1 < e && q[1] >= '0' && q[1] <= '9');
  }
  // An integer of at most 18 digits (no fraction, no exponent). Ids are most of a body: a plain
  // digit loop is several times cheaper than from_chars here.
  bool integer(long long& v) {
    if (!number_start()) {
      return false;
    }
    const char* q = p;
    const bool negative = *q == '-';
    if (negative) {
      ++q;
    }
    long long x = 0;
    int digits = 0;
    while (q < e && *q >= '0' && *q <= '9') {
      if (++digits > 18) {
        return false;  // out of any id's range: the DOM parser decides
      }
      x = x * 10 + (*q - '0');
      ++q;
    }
    if (q < e && (*q == '.' || *q == 'e' || *q == 'E')) {
      return false;
    }
    v = negative ? -x : x;
    p = q;
    return true;
  }
  // Any JSON number.
  bool number(double& v) {
    if (!number_start()) {
      return false;
    }
    auto [q, ec] = std::from_chars(p, e, v);
    if (ec != std::errc()) {
      return false;
    }
    p = q;
    return true;
  }
  // Consumes one value of any kind, nested at most 64 levels below `depth`.
  bool skip(int depth = 0);
  // Iterates an object's keys: `on_key(key)` must consume the value. False on malformed input, on
  // an escaped key, or when `on_key` says so (a shape the fast path does not take).
  template <class F>
  bool object(F&& on_key) {
    if (!eat('{')) {
      return false;
    }
    if (eat('}')) {
      return true;
    }
    do {
      std::string_view key;
      bool escaped;
      if (!string(key, escaped) || escaped || !eat(':') || !on_key(key)) {
        return false;
      }
    } while (eat(','));
    return eat('}');
  }
  // Iterates an array: `on_item()` must consume one value.
  template <class F>
  bool array(F&& on_item) {
    if (!eat('[')) {
      return false;
    }
    if (eat(']')) {
      return true;
    }
    do {
      if (!on_item()) {
        return false;
      }
    } while (eat(','));
    return eat(']');
  }
  // An array of token ids, appended to `out`: integers in [0, 2^31). Out of range is a false: the
  // DOM parser then names the id.
  bool ids(std::vector<token_id>& out) {
    return array([&] {
      long long v;
      if (!integer(v) || v < 0 || v > INT32_MAX) {
        return false;
      }
      out.push_back(static_cast<token_id>(v));
      return true;
    });
  }
  // A string's value, escapes decoded.
  bool text(std::string& out);
  // A string, or an integer written in decimal; null leaves `out` as it is. (Weight versions come
  // as either.)
  bool string_or_integer(std::optional<std::string>& out);
};

}  // namespace leap::policy
