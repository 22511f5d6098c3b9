// The client's side of the wire, as pure functions: request bodies for vLLM and SGLang, parsing of
// their responses into generated turns, the classification of a failed attempt, and the backoff
// schedule. No I/O, no state; all thread-safe. Each function taking a wire_flavour hands the
// flavour's part to its dialect (dialect.hpp: one implementation per flavour).
//
// Response shapes read (non-streaming):
//   vLLM  /v1/completions: {"choices": [{"index", "text", "token_ids": [..], "finish_reason",
//         "logprobs": {"token_logprobs": [..], "tokens": [..], ...}, "prompt_token_ids": [..]}],
//         ...}
//   SGLang /generate: {"text", "output_ids": [..], "meta_info": {"finish_reason": {"type":
//         "stop"|"length"|"abort", ...}, "output_token_logprobs": [[logprob, id, text], ..],
//         "weight_version", ...}}, or an array of those when n > 1.
// SGLang's logprob triples are authoritative for the sampled ids (they pair each id with its
// log-prob); output_ids is read only when the triples are missing, which is an error anyway.
#pragma once

#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

class wire_dialect;   // dialect.hpp: what differs per flavour
struct stream_state;  // dialect_parts.hpp

// The JSON body of one generation request. `prompt` followed by `continuation` (ids already
// received from an aborted attempt) is sent as the prompt; `max_tokens` is what is still wanted.
// `wire_id` is sent as vLLM's request_id / SGLang's rid. `stream` asks for an SSE response.
[[nodiscard]] std::string build_generate_body(wire_flavour flavour, std::string_view model,
                                              std::span<const token_id> prompt,
                                              std::span<const token_id> continuation,
                                              const sampling_config& sampling, int max_tokens,
                                              std::string_view wire_id, bool stream = false);

enum class parse_problem : std::uint8_t {
  none,
  malformed,  // not JSON, or cut short: a transport fault, worth retrying
  schema,     // JSON, but not what the flavour promises (e.g. no token ids): a configuration fault
  // In the flavour's shape, but with values no correct reply has: a negative token id or one
  // beyond 32 bits, an id outside the vocabulary, more choices than asked for. A faulty reply,
  // never stored: retried as a transient fault, and named in the turn's message if retries run out.
  invalid,
};

struct parsed_choices {
  parse_problem problem = parse_problem::none;
  std::string message;                  // when problem != none
  std::vector<generated_turn> choices;  // when problem == none: one per completion (n)
};

// Parses a 2xx generation response. A single-pass reader takes the expected shape; anything else
// (errors included) goes through parse_generate_response_reference, the JSON-DOM parser, so that
// both give the same answer for every body. `weight_version_header` is the x-weight-version header
// ("" when absent); a version in the body wins. When `prompt` is not empty and the server echoes
// the prompt ids (vLLM's prompt_token_ids), they must equal it: a server that re-tokenised the
// prompt is a schema error.
[[nodiscard]] parsed_choices parse_generate_response(wire_flavour flavour, std::string_view body,
                                                     std::string_view weight_version_header,
                                                     std::span<const token_id> prompt);

// Checks what a parser cannot know alone: exactly `n` choices (a server that sends more has
// answered another request; none may be dropped silently), and every id below `vocab_size` when it
// is known (> 0). Returns the problem (invalid) and its message, or none.
[[nodiscard]] parsed_choices check_choices(std::vector<generated_turn> choices, int n,
                                           int vocab_size);

// The same with a JSON DOM (nlohmann::json) only: the reference the fast path is tested against.
[[nodiscard]] parsed_choices parse_generate_response_reference(
    wire_flavour flavour, std::string_view body, std::string_view weight_version_header,
    std::span<const token_id> prompt);

// What to do after an attempt that got an HTTP status outside 2xx.
enum class attempt_kind : std::uint8_t {
  retry,      // transient: back off and try again
  truncated,  // 400 because the context is too long: the turn ends `truncated`
  rejected,   // any other status not listed for retry (400 above all): the turn ends `rejected`
};

struct attempt_verdict {
  attempt_kind kind = attempt_kind::rejected;
  bool endpoint_fault = false;  // counts towards marking the endpoint down
  std::string message;
};

[[nodiscard]] attempt_verdict classify_http_status(long status, std::string_view body,
                                                   const retry_config& retry);

// The message of an error body in any of the shapes servers use: OpenAI's {"error": {"message"}},
// vLLM's {"object": "error", "message"}, FastAPI's {"detail"}; else the body itself, shortened.
[[nodiscard]] std::string error_message(std::string_view body);

// Whether an error message says the prompt does not fit the model's context window.
[[nodiscard]] bool is_context_length_error(std::string_view message);

// The wait before retry `retry_number` (1 for the first retry); `unit_random` in [0, 1).
[[nodiscard]] std::chrono::milliseconds backoff_delay(const retry_config& retry, int retry_number,
                                                      double unit_random);

// A Retry-After header's value (RFC 9110 section 10.2.3) as a wait from `now`: delay-seconds
// ("120") or an HTTP-date ("Wed, 21 Oct 2026 07:28:00 GMT", and the obsolete forms libcurl's
// curl_getdate reads), a date in the past being a wait of 0. nullopt for anything else (empty,
// negative, "soon", trailing junk), which the caller ignores as if the header were absent.
[[nodiscard]] std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now);

// The wait before a retry: the client's own backoff, lengthened to the server's Retry-After when
// there is one, which is capped at retry.max_backoff so that a server cannot park a turn for
// longer than the client would wait on its own. Never shorter than `own`.
[[nodiscard]] std::chrono::milliseconds retry_wait(
    const retry_config& retry, std::chrono::milliseconds own,
    std::optional<std::chrono::milliseconds> retry_after);

// ---- streamed responses ----
// Stream shapes read (SSE `data:` events, then `data: [DONE]`):
//   vLLM  /v1/completions with stream: true: {"choices": [{"index", "text", "token_ids": [new ids],
//         "logprobs": {"token_logprobs": [new], ...}, "finish_reason": null|"stop"|..., and
//         "prompt_token_ids" in a choice's first chunk}], "weight_version"?}; a usage chunk has
//         "choices": []. Each chunk carries only the new tokens of one choice.
//   SGLang /generate with stream: true: one /generate object per event ("index" added when n > 1),
//         finish_reason null until the last. By default each event is cumulative (text,
//         output_ids and meta_info.output_token_logprobs hold everything so far); with
//         --incremental-streaming-output they hold only the new part. Which one an event is comes
//         from meta_info.completion_tokens (the whole count so far) when present, else from
//         whether the event's ids extend those already received.
//   Either may send {"error": {...}} as an event when a generation fails mid-way.

// What a streamed response gave: the choices received so far and whether they are whole.
struct streamed_choices {
  // none, or schema when an event was JSON but not in the flavour's shape (a configuration fault,
  // as for a whole body: no token ids, log-probs missing, an echoed prompt that differs).
  parse_problem problem = parse_problem::none;
  // schema: why. Not complete: what cut the stream (an event that is not JSON, an error event,
  // the end of the bytes before every choice finished).
  std::string message;
  // One per expected completion (n), in index order; each holds the ids, log-probs and text
  // received so far, and its finish reason once its last event arrived.
  std::vector<generated_turn> choices;
  bool complete = false;  // every choice arrived with its finish reason
  bool done = false;      // the stream's `data: [DONE]` arrived
};

// Reads a streamed generation response incrementally (policy/wire/wire.hpp's sse_reader frames the
// events). Not thread-safe: one per HTTP attempt.
class stream_accumulator {
 public:
  // `n`: completions expected. `prompt`: the ids sent (prompt and continuation), checked against
  // vLLM's echoed prompt_token_ids; empty skips the check.
  stream_accumulator(wire_flavour flavour, int n, std::vector<token_id> prompt);

  // Consumes bytes as they arrive. Returns false once the stream went bad (an event that is not
  // JSON, an error event, a schema fault); later bytes are ignored and what came before is kept.
  bool feed(std::string_view bytes);

  // The result so far. `weight_version_header` ("" when absent) stands in when no event carried
  // a weight version.
  [[nodiscard]] streamed_choices finish(std::string_view weight_version_header) const;

  // Events read so far (for tests and messages).
  [[nodiscard]] std::size_t events() const;

  stream_accumulator(const stream_accumulator&) = delete;
  stream_accumulator& operator=(const stream_accumulator&) = delete;
  ~stream_accumulator();

 private:
  bool on_event(const std::string& data);

  const wire_dialect* dialect_;  // reads the events of the flavour's shape
  sse_reader reader_;
  std::unique_ptr<stream_state> state_;  // what the events gave so far (dialect_parts.hpp)
};

// /tokenize with chat messages in the flavour's shape. vLLM: {"messages", "add_generation_prompt",
// "add_special_tokens": false}; the response is {"tokens": [...], ...}. SGLang (whose /tokenize
// takes exactly one of "prompt" and "messages", the latter read as a chat-completion request):
// {"model"?, "messages"}; SGLang always renders the generation prompt (its chat requests have no
// add_generation_prompt), so `add_generation_prompt == false` is an error for SGLang: render such
// turns with a local template.
[[nodiscard]] result<std::string> build_tokenize_body(wire_flavour flavour, std::string_view model,
                                                      const std::vector<chat_message>& messages,
                                                      bool add_generation_prompt);
[[nodiscard]] result<std::vector<token_id>> parse_tokenize_response(std::string_view body);

// GET /v1/models: {"object": "list", "data": [{"id", "max_model_len"?, "vocab_size"?}, ...]}
// (vLLM's and SGLang's shape; vocab_size is our server's extension). The lengths are those of
// the first entry that reports them (0: none does).
struct models_listing {
  std::vector<std::string> models;
  int max_model_len = 0;
  int vocab_size = 0;
};
[[nodiscard]] result<models_listing> parse_models_response(std::string_view body);

}  // namespace leap::policy
