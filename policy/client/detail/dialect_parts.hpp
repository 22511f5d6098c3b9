// Internal to policy/: the building blocks the wire dialects (dialect_*.cpp) and
// client_protocol.cpp share: writers of request-body fragments, readers of ids, versions and finish
// reasons, and the state a stream accumulates. Defined in dialect.cpp.
#pragma once

#include "policy/client/detail/dialect.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

// ---- request bodies -------------------------------------------------------------------------
// Request bodies carry thousands of ids; writing them by hand is several times cheaper than
// building a json object and dumping it, and the client's CPU per request is a budgeted number.
void put_int(std::string& out, long long value);
// The shortest form that reads back (0.7, 1).
void put_double(std::string& out, double value);
// Quoted and escaped as nlohmann::json dumps it.
void put_string(std::string& out, std::string_view value);
// [a..., b...]
void put_ids(std::string& out, std::span<const token_id> a, std::span<const token_id> b);
void put_strings(std::string& out, const std::vector<std::string>& values);

// What a dialect calls two sampling fields that both servers have.
struct sampling_names {
  std::string_view max_tokens;  // vLLM: max_tokens; SGLang: max_new_tokens
  std::string_view seed;        // vLLM: seed; SGLang: sampling_seed
};
// The sampling fields, comma-separated without braces: max tokens, n, temperature, top_p, then
// top_k, seed, stop and stop_token_ids when set, and skip_special_tokens: false (special tokens
// stay in the text so that it matches the ids, which are what trains).
void put_sampling(std::string& out, const sampling_config& s, const sampling_names& names,
                  int max_tokens);

// {"model"? , "messages": [{"role", "content"}...]}: what both servers' /tokenize share.
[[nodiscard]] nlohmann::json tokenize_messages(std::string_view model,
                                               const std::vector<chat_message>& messages);

// ---- responses ------------------------------------------------------------------------------
// A weight version as servers write it: a string, or a number written as its decimal text.
[[nodiscard]] std::optional<std::string> version_string(const nlohmann::json& v);

// A server's finish_reason name: `error` and `other` are the client's own words, not a server's,
// and read as `other`, as does any name the client does not know.
[[nodiscard]] finish_reason finish_from_string(std::string_view s);

// The fast path's finish reason: a string, read as finish_from_string does; any other value is
// skipped and reads as `other`.
[[nodiscard]] bool read_finish(json_cursor& c, finish_reason& out);

// A token id as sent: a JSON integer in [0, 2^31). Anything else is refused rather than converted,
// since a conversion would store another token than the one the server named (2^32 + 65 as 65):
// schema when it is not an integer, invalid when it is out of range.
[[nodiscard]] parse_problem read_id(const nlohmann::json& v, token_id& out);
// Reads an array of ids into `out`: schema when it is not one, invalid when an id is out of range
// (`why` then says which).
[[nodiscard]] parse_problem read_ids(const nlohmann::json& array, std::vector<token_id>& out,
                                     std::string& why);
// "token id X is not an id (...)", for an id read_id refused as invalid.
[[nodiscard]] std::string bad_id_message(const nlohmann::json& v);

// Whether an echoed prompt (a JSON array) holds exactly the ids sent.
[[nodiscard]] bool same_ids(const nlohmann::json& echoed, std::span<const token_id> sent);

[[nodiscard]] parsed_choices schema_error(std::string message);

// `text` cut to `limit` bytes, "..." appended when cut.
[[nodiscard]] std::string shorten(std::string text, std::size_t limit);

// ---- streams --------------------------------------------------------------------------------
// What a stream_accumulator has read so far; the dialect's on_stream_event folds each event in.
struct stream_state {
  std::vector<token_id> prompt;        // the ids sent, checked against an echo; empty: not checked
  std::vector<generated_turn> turns;   // one per expected completion (n), in index order
  std::vector<bool> finished;          // per turn: its finish reason arrived
  std::optional<std::string> version;  // the newest weight version an event carried
  parse_problem problem = parse_problem::none;  // none or schema/invalid (malformed is not kept)
  std::string cut;                              // why the stream stopped, when it did
  bool stopped = false;
  bool done = false;  // `data: [DONE]` arrived
  std::size_t events = 0;

  // Stops the stream: later bytes are ignored. Returns false, for `return state.fail(...)`.
  bool fail(parse_problem why, std::string message);
  // The event's "index" (absent: 0) as a slot of `turns`; out of range fails the stream with
  // `what` in the message.
  std::optional<std::size_t> slot_of(const nlohmann::json& event, const std::string& what);
};

}  // namespace leap::policy
