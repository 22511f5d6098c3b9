#include "policy/client/detail/client_protocol.hpp"

#include "policy/client/detail/dialect.hpp"
#include "policy/client/detail/dialect_parts.hpp"
#include "policy/wire/wire.hpp"

#include <climits>
#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace leap::policy {

namespace {

using json = nlohmann::json;

// Why a body that is not JSON was refused, when it is its nesting.
std::string too_deep_note(std::string_view body) {
  return json_nesting_depth(body) > max_json_depth
             ? ", nested deeper than " + std::to_string(max_json_depth) + " levels"
             : std::string{};
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::optional<std::string> header_version_of(std::string_view weight_version_header) {
  if (weight_version_header.empty()) {
    return std::nullopt;
  }
  return std::string(weight_version_header);
}

}  // namespace

std::string build_generate_body(wire_flavour flavour, std::string_view model,
                                std::span<const token_id> prompt,
                                std::span<const token_id> continuation,
                                const sampling_config& sampling, int max_tokens,
                                std::string_view wire_id, bool stream) {
  std::string out;
  out.reserve(256 + 8 * (prompt.size() + continuation.size()));
  dialect_of(flavour).write_generate_body(out, model, prompt, continuation, sampling, max_tokens,
                                          wire_id, stream);
  return out;
}

parsed_choices parse_generate_response_reference(wire_flavour flavour, std::string_view body,
                                                 std::string_view weight_version_header,
                                                 std::span<const token_id> prompt) {
  json root = parse_bounded_json(body);
  if (root.is_discarded()) {
    return {parse_problem::malformed,
            "response body is not JSON (" + std::to_string(body.size()) + " bytes" +
                too_deep_note(body) + ")",
            {}};
  }
  return dialect_of(flavour).parse_body(root, header_version_of(weight_version_header), prompt);
}

parsed_choices parse_generate_response(wire_flavour flavour, std::string_view body,
                                       std::string_view weight_version_header,
                                       std::span<const token_id> prompt) {
  auto quick =
      dialect_of(flavour).parse_body_fast(body, header_version_of(weight_version_header), prompt);
  if (quick) {
    return std::move(*quick);
  }
  return parse_generate_response_reference(flavour, body, weight_version_header, prompt);
}

parsed_choices check_choices(std::vector<generated_turn> choices, int n, int vocab_size) {
  if (static_cast<int>(choices.size()) != n) {
    return {parse_problem::invalid,
            std::to_string(choices.size()) + " choices in the reply, " + std::to_string(n) +
                " asked for",
            {}};
  }
  if (vocab_size > 0) {
    for (std::size_t c = 0; c < choices.size(); ++c) {
      for (const token_id id : choices[c].ids) {
        if (id < 0 || id >= vocab_size) {
          return {parse_problem::invalid,
                  "choice " + std::to_string(c) + ": token id " + std::to_string(id) +
                      " is outside the vocabulary (vocab_size " + std::to_string(vocab_size) + ")",
                  {}};
        }
      }
    }
  }
  return {parse_problem::none, {}, std::move(choices)};
}

std::string error_message(std::string_view body) {
  constexpr std::size_t limit = 300;
  json root = parse_bounded_json(body);
  if (!root.is_discarded() && root.is_object()) {
    if (auto it = root.find("error"); it != root.end()) {
      if (it->is_object()) {
        if (auto m = it->find("message"); m != it->end() && m->is_string()) {
          return m->get<std::string>();
        }
      } else if (it->is_string()) {
        if (auto m = root.find("message"); m != root.end() && m->is_string()) {
          return it->get<std::string>() + ": " + m->get<std::string>();
        }
        return it->get<std::string>();
      }
    }
    if (auto m = root.find("message"); m != root.end() && m->is_string()) {
      return m->get<std::string>();
    }
    if (auto d = root.find("detail"); d != root.end()) {
      // FastAPI's validation errors are lists of objects; the depth bound keeps dump() shallow.
      return d->is_string() ? d->get<std::string>() : shorten(d->dump(), limit);
    }
  }
  std::string text(body.substr(0, limit));
  if (body.size() > limit) {
    text += "...";
  }
  return text.empty() ? "(empty body)" : text;
}

bool is_context_length_error(std::string_view message) {
  const std::string m = lower(message);
  for (const char* needle : {"context length", "context window", "maximum context", "max_model_len",
                             "too long", "longer than", "exceeds the max", "context_length"}) {
    if (m.find(needle) != std::string::npos) {
      return true;
    }
  }
  return false;
}

attempt_verdict classify_http_status(long status, std::string_view body,
                                     const retry_config& retry) {
  attempt_verdict v;
  v.message = "HTTP " + std::to_string(status) + ": " + error_message(body);
  if (status == 400) {
    v.kind = is_context_length_error(v.message) ? attempt_kind::truncated : attempt_kind::rejected;
    return v;
  }
  if (std::find(retry.retry_statuses.begin(), retry.retry_statuses.end(), status) !=
      retry.retry_statuses.end()) {
    v.kind = attempt_kind::retry;
    // A full queue says the server is alive and busy, not that it is failing.
    v.endpoint_fault = status != 429;
    return v;
  }
  v.kind = attempt_kind::rejected;
  v.endpoint_fault = status >= 500;
  return v;
}

std::chrono::milliseconds backoff_delay(const retry_config& retry, int retry_number,
                                        double unit_random) {
  const double base = static_cast<double>(retry.base_backoff.count());
  const double cap = static_cast<double>(retry.max_backoff.count());
  const int exponent = std::clamp(retry_number - 1, 0, 62);
  const double d = std::min(cap, base * std::ldexp(1.0, exponent));
  const double u = std::clamp(unit_random, 0.0, 1.0);
  const double delay = d * (1.0 - retry.jitter * u);
  return std::chrono::milliseconds(static_cast<long long>(std::llround(delay)));
}

std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
    value.remove_prefix(1);
  }
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r' ||
                            value.back() == '\n')) {
    value.remove_suffix(1);
  }
  if (value.empty()) {
    return std::nullopt;
  }
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // delay-seconds; a number too long to hold is a wait past any cap.
    constexpr long long most = 1'000'000'000;
    long long seconds = 0;
    for (const char c : value) {
      seconds = std::min(most, seconds * 10 + (c - '0'));
    }
    return std::chrono::seconds(seconds);
  }
  // An HTTP-date: curl_getdate is pure (no handle, no I/O) and reads IMF-fixdate and the two
  // obsolete forms RFC 9110 still asks recipients to accept.
  const std::string date(value);
  const time_t when = curl_getdate(date.c_str(), nullptr);
  if (when == -1) {
    return std::nullopt;
  }
  const auto wait = std::chrono::system_clock::from_time_t(when) - now;
  return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(wait));
}

std::chrono::milliseconds retry_wait(const retry_config& retry, std::chrono::milliseconds own,
                                     std::optional<std::chrono::milliseconds> retry_after) {
  if (!retry_after) {
    return own;
  }
  return std::max(own, std::min(*retry_after, retry.max_backoff));
}

result<std::string> build_tokenize_body(wire_flavour flavour, std::string_view model,
                                        const std::vector<chat_message>& messages,
                                        bool add_generation_prompt) {
  return dialect_of(flavour).tokenize_body(model, messages, add_generation_prompt);
}

result<std::vector<token_id>> parse_tokenize_response(std::string_view body) {
  json root = parse_bounded_json(body);
  if (root.is_discarded() || !root.is_object()) {
    return error{"/tokenize response is not a JSON object"};
  }
  auto it = root.find("tokens");
  std::vector<token_id> ids;
  std::string why;
  if (it == root.end()) {
    return error{"/tokenize response has no 'tokens' list of ids"};
  }
  const auto problem = read_ids(*it, ids, why);
  if (problem == parse_problem::invalid) {
    return error{"/tokenize response: " + why};
  }
  if (problem != parse_problem::none) {
    return error{"/tokenize response has no 'tokens' list of ids"};
  }
  return ids;
}

result<models_listing> parse_models_response(std::string_view body) {
  json root = parse_bounded_json(body);
  if (root.is_discarded() || !root.is_object()) {
    return error{"not a JSON object"};
  }
  auto data = root.find("data");
  if (data == root.end() || !data->is_array()) {
    return error{"no 'data' list of models"};
  }
  models_listing out;
  const auto positive = [](const json& entry, const char* key) {
    auto it = entry.find(key);
    return it != entry.end() && it->is_number_integer() && it->get<std::int64_t>() > 0 &&
                   it->get<std::int64_t>() <= INT32_MAX
               ? static_cast<int>(it->get<std::int64_t>())
               : 0;
  };
  for (const auto& entry : *data) {
    if (!entry.is_object()) {
      return error{"a 'data' entry is not an object"};
    }
    auto id = entry.find("id");
    if (id == entry.end() || !id->is_string()) {
      return error{"a 'data' entry has no 'id'"};
    }
    out.models.push_back(id->get<std::string>());
    if (out.max_model_len == 0) {
      out.max_model_len = positive(entry, "max_model_len");
    }
    if (out.vocab_size == 0) {
      out.vocab_size = positive(entry, "vocab_size");
    }
  }
  return out;
}

// ---- streamed responses ---------------------------------------------------------------------

stream_accumulator::stream_accumulator(wire_flavour flavour, int n, std::vector<token_id> prompt)
    : dialect_(&dialect_of(flavour)), state_(std::make_unique<stream_state>()) {
  const auto count = static_cast<std::size_t>(std::max(1, n));
  state_->prompt = std::move(prompt);
  state_->turns.resize(count);
  state_->finished.assign(count, false);
  for (auto& turn : state_->turns) {
    turn.finish = finish_reason::other;
  }
}

stream_accumulator::~stream_accumulator() = default;

std::size_t stream_accumulator::events() const { return state_->events; }

bool stream_accumulator::feed(std::string_view bytes) {
  if (state_->stopped) {
    return false;
  }
  for (const auto& data : reader_.feed(bytes)) {
    if (!on_event(data)) {
      return false;
    }
  }
  return true;
}

bool stream_accumulator::on_event(const std::string& data) {
  stream_state& s = *state_;
  ++s.events;
  if (data == "[DONE]") {
    s.done = true;
    return true;
  }
  json root = parse_bounded_json(data);
  if (root.is_discarded()) {
    return s.fail(parse_problem::malformed, "stream event " + std::to_string(s.events) +
                                                " is not JSON (" + std::to_string(data.size()) +
                                                " bytes" + too_deep_note(data) + ")");
  }
  if (!root.is_object()) {
    return s.fail(parse_problem::schema,
                  "stream event " + std::to_string(s.events) + ": expected a JSON object");
  }
  if (root.contains("error")) {
    return s.fail(parse_problem::malformed,
                  "the server sent an error event mid-stream: " + error_message(data));
  }
  return dialect_->on_stream_event(s, root);
}

streamed_choices stream_accumulator::finish(std::string_view weight_version_header) const {
  const stream_state& s = *state_;
  streamed_choices out;
  out.problem = s.problem;
  out.choices = s.turns;
  out.done = s.done;
  std::optional<std::string> version = s.version;
  if (!version && !weight_version_header.empty()) {
    version = std::string(weight_version_header);
  }
  for (auto& c : out.choices) {
    c.weight_version = version;
  }
  out.complete = s.problem == parse_problem::none &&
                 std::all_of(s.finished.begin(), s.finished.end(), [](bool f) { return f; });
  if (s.problem != parse_problem::none || !s.cut.empty()) {
    out.message = s.cut;
  } else if (!out.complete) {
    out.message = std::string("the stream ended before every choice finished") +
                  (s.done ? "" : " (no [DONE])") + " after " + std::to_string(s.events) + " events";
  }
  return out;
}

}  // namespace leap::policy
