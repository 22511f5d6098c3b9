// Parsing of JSON that comes from outside the process (a server's reply, an SSE event, a request
// body) with its nesting bounded first. nlohmann's parser is iterative, but copying, comparing and
// dumping a value recurse once per level, so a body of 100,000 nested brackets overflows the stack
// of whoever touches it next (building an error message, a result<json> copy). Every parse of
// untrusted JSON in policy/ goes through these functions. Pure and thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

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
