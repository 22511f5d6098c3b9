#include "policy/client/detail/dialect.hpp"

#include "policy/client/detail/dialect_parts.hpp"

#include <climits>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdint>

namespace leap::policy {

// Each dialect's singleton, defined in its own file.
const wire_dialect& vllm_dialect();    // dialect_vllm.cpp
const wire_dialect& sglang_dialect();  // dialect_sglang.cpp

const wire_dialect& dialect_of(wire_flavour flavour) {
  switch (flavour) {
    case wire_flavour::vllm:
      return vllm_dialect();
    case wire_flavour::sglang:
      return sglang_dialect();
  }
  // Only a byte outside the enum (a cast from corrupt data) gets here.
  return vllm_dialect();
}

weight_sync_plan disk_sync_plan(server_flavour flavour, bool pause) {
  switch (reload_routes_of(flavour)) {
    case wire_flavour::vllm:
      return vllm_disk_plan(pause);
    case wire_flavour::sglang:
      return sglang_disk_plan(pause);
  }
  return sglang_disk_plan(pause);
}

// ---- request bodies -------------------------------------------------------------------------

using json = nlohmann::json;

void put_int(std::string& out, long long value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, end);
}

void put_double(std::string& out, double value) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, end);
}

void put_string(std::string& out, std::string_view value) { out += json(value).dump(); }

void put_ids(std::string& out, std::span<const token_id> a, std::span<const token_id> b) {
  out += '[';
  bool first = true;
  for (auto span : {a, b}) {
    for (token_id id : span) {
      if (!first) {
        out += ',';
      }
      first = false;
      put_int(out, id);
    }
  }
  out += ']';
}

void put_strings(std::string& out, const std::vector<std::string>& values) {
  out += '[';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    put_string(out, values[i]);
  }
  out += ']';
}

namespace {

void put_key(std::string& out, std::string_view key) {
  out += '"';
  out += key;
  out += "\":";
}

}  // namespace

void put_sampling(std::string& out, const sampling_config& s, const sampling_names& names,
                  int max_tokens) {
  put_key(out, names.max_tokens);
  put_int(out, max_tokens);
  out += ",\"n\":";
  put_int(out, s.n);
  out += ",\"temperature\":";
  put_double(out, s.temperature);
  out += ",\"top_p\":";
  put_double(out, s.top_p);
  if (s.top_k > 0) {
    out += ",\"top_k\":";
    put_int(out, s.top_k);
  }
  if (s.seed) {
    out += ',';
    put_key(out, names.seed);
    put_int(out, static_cast<long long>(*s.seed));
  }
  if (!s.stop.empty()) {
    out += ",\"stop\":";
    put_strings(out, s.stop);
  }
  if (!s.stop_token_ids.empty()) {
    out += ",\"stop_token_ids\":";
    put_ids(out, s.stop_token_ids, {});
  }
  out += ",\"skip_special_tokens\":false";
}

json tokenize_messages(std::string_view model, const std::vector<chat_message>& messages) {
  json body;
  if (!model.empty()) {
    body["model"] = model;
  }
  json list = json::array();
  for (const auto& m : messages) {
    list.push_back({{"role", m.role}, {"content", m.content}});
  }
  body["messages"] = std::move(list);
  return body;
}

// ---- responses ------------------------------------------------------------------------------

std::optional<std::string> version_string(const json& v) {
  if (v.is_string()) {
    return v.get<std::string>();
  }
  if (v.is_number_integer()) {
    return std::to_string(v.get<long long>());
  }
  if (v.is_number()) {
    return v.dump();
  }
  return std::nullopt;
}

finish_reason finish_from_string(std::string_view s) {
  const auto f = parse_finish_reason(s);
  if (!f) {
    return finish_reason::other;
  }
  switch (*f) {
    case finish_reason::stop:
    case finish_reason::length:
    case finish_reason::abort:
      return *f;
    case finish_reason::error:
    case finish_reason::other:
      return finish_reason::other;
  }
  return finish_reason::other;
}

bool read_finish(json_cursor& c, finish_reason& out) {
  if (c.at('"')) {
    std::string s;
    if (!c.text(s)) {
      return false;
    }
    out = finish_from_string(s);
    return true;
  }
  out = finish_reason::other;
  return c.skip();
}

parse_problem read_id(const json& v, token_id& out) {
  if (!v.is_number_integer()) {
    return parse_problem::schema;
  }
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > INT32_MAX
                             : (v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX)) {
    return parse_problem::invalid;
  }
  out = static_cast<token_id>(v.get<std::int64_t>());
  return parse_problem::none;
}

std::string bad_id_message(const json& v) {
  return "token id " + shorten(v.dump(), 40) + " is not an id (ids are integers in [0, 2^31))";
}

parse_problem read_ids(const json& array, std::vector<token_id>& out, std::string& why) {
  if (!array.is_array()) {
    return parse_problem::schema;
  }
  out.reserve(array.size());
  for (const auto& v : array) {
    token_id id = 0;
    const auto problem = read_id(v, id);
    if (problem != parse_problem::none) {
      if (problem == parse_problem::invalid) {
        why = bad_id_message(v);
      }
      return problem;
    }
    out.push_back(id);
  }
  return parse_problem::none;
}

bool same_ids(const json& echoed, std::span<const token_id> sent) {
  bool same = echoed.size() == sent.size();
  for (std::size_t k = 0; same && k < sent.size(); ++k) {
    same = echoed[k].is_number_integer() && echoed[k].get<std::int64_t>() == sent[k];
  }
  return same;
}

parsed_choices schema_error(std::string message) {
  return {parse_problem::schema, std::move(message), {}};
}

std::string shorten(std::string text, std::size_t limit) {
  if (text.size() > limit) {
    text.resize(limit);
    text += "...";
  }
  return text;
}

// ---- streams --------------------------------------------------------------------------------

bool stream_state::fail(parse_problem why, std::string message) {
  stopped = true;
  if (why != parse_problem::malformed) {
    problem = why;
  }
  cut = std::move(message);
  return false;
}

std::optional<std::size_t> stream_state::slot_of(const json& event, const std::string& what) {
  long long index = 0;  // a single completion's events may leave it out
  if (auto it = event.find("index"); it != event.end() && it->is_number_integer()) {
    index = it->get<long long>();
  }
  if (index < 0 || static_cast<std::size_t>(index) >= turns.size()) {
    fail(parse_problem::invalid, what + " " + std::to_string(index) + " out of range (n = " +
                                     std::to_string(turns.size()) + " asked for)");
    return std::nullopt;
  }
  return static_cast<std::size_t>(index);
}

}  // namespace leap::policy
