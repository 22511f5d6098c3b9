// The client's side of the wire, as pure functions: request bodies for vLLM and SGLang, parsing of
// their responses into generated turns, the classification of a failed attempt, and the backoff
// schedule. No I/O, no state; all thread-safe.
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

#include "policy/client_config.hpp"
#include "policy/conversation.hpp"

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

// The JSON body of one generation request. `prompt` followed by `continuation` (ids already
// received from an aborted attempt) is sent as the prompt; `max_tokens` is what is still wanted.
// `wire_id` is sent as vLLM's request_id / SGLang's rid.
[[nodiscard]] std::string build_generate_body(wire_flavour flavour, std::string_view model,
                                              std::span<const token_id> prompt,
                                              std::span<const token_id> continuation,
                                              const sampling_config& sampling, int max_tokens,
                                              std::string_view wire_id);

enum class parse_problem : std::uint8_t {
  none,
  malformed,  // not JSON, or cut short: a transport fault, worth retrying
  schema,     // JSON, but not what the flavour promises (e.g. no token ids): a configuration fault
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

// What to do after an attempt that got an HTTP status outside 2xx.
// The same with a JSON DOM (nlohmann::json) only: the reference the fast path is tested against.
[[nodiscard]] parsed_choices parse_generate_response_reference(
    wire_flavour flavour, std::string_view body, std::string_view weight_version_header,
    std::span<const token_id> prompt);

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

// /tokenize with chat messages, vLLM's shape: {"messages", "add_generation_prompt",
// "add_special_tokens": false}. The response is {"tokens": [...], ...}.
[[nodiscard]] std::string build_tokenize_body(std::string_view model,
                                              const std::vector<chat_message>& messages,
                                              bool add_generation_prompt);
[[nodiscard]] result<std::vector<token_id>> parse_tokenize_response(std::string_view body);

}  // namespace leap::policy
