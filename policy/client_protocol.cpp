#include "policy/client_protocol.hpp"

#include "policy/bounded_json.hpp"

#include <climits>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace leap::policy {

namespace {

using json = nlohmann::json;

// Request bodies carry thousands of ids; writing them by hand is several times cheaper than
// building a json object and dumping it, and the client's CPU per request is a budgeted number.
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

void put_sampling(std::string& out, const sampling_config& s, wire_flavour flavour,
                  int max_tokens) {
  out += flavour == wire_flavour::vllm ? "\"max_tokens\":" : "\"max_new_tokens\":";
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
    // SGLang names the per-request seed sampling_seed; vLLM names it seed.
    out += flavour == wire_flavour::vllm ? ",\"seed\":" : ",\"sampling_seed\":";
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
  // Special tokens stay in the text so that it matches the ids (the ids are what trains).
  out += ",\"skip_special_tokens\":false";
}

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

// A server's finish_reason name: `error` and `other` are the client's own words, not a server's.
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

std::string shorten(std::string text, std::size_t limit) {
  if (text.size() > limit) {
    text.resize(limit);
    text += "...";
  }
  return text;
}

// Why a body that is not JSON was refused, when it is its nesting.
std::string too_deep_note(std::string_view body) {
  return json_nesting_depth(body) > max_json_depth
             ? ", nested deeper than " + std::to_string(max_json_depth) + " levels"
             : std::string{};
}

parsed_choices schema_error(std::string message) {
  return {parse_problem::schema, std::move(message), {}};
}

// A token id as sent: a JSON integer in [0, 2^31). Anything else is refused rather than converted,
// since a conversion would store another token than the one the server named (2^32 + 65 as 65).
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

// Reads an array of ids: schema when it is not one, invalid when an id is out of range (`why`
// then says which).
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

parsed_choices parse_vllm(const json& root, std::optional<std::string> header_version,
                          std::span<const token_id> prompt) {
  if (!root.is_object()) {
    return schema_error("vLLM response: expected a JSON object");
  }
  auto choices_it = root.find("choices");
  if (choices_it == root.end() || !choices_it->is_array() || choices_it->empty()) {
    return schema_error("vLLM response: 'choices' missing or empty");
  }
  std::optional<std::string> version = std::move(header_version);
  if (auto it = root.find("weight_version"); it != root.end()) {
    if (auto v = version_string(*it)) {
      version = v;
    }
  }
  parsed_choices out;
  out.choices.resize(choices_it->size());
  std::vector<bool> seen(choices_it->size(), false);
  for (std::size_t i = 0; i < choices_it->size(); ++i) {
    const json& c = (*choices_it)[i];
    const std::string where = "vLLM response: choices[" + std::to_string(i) + "]";
    std::size_t slot = i;
    if (auto it = c.find("index"); it != c.end() && it->is_number_integer()) {
      auto index = it->get<long long>();
      if (index < 0 || static_cast<std::size_t>(index) >= out.choices.size() || seen[index]) {
        return schema_error(where + ": index " + std::to_string(index) +
                            " out of range or repeated");
      }
      slot = static_cast<std::size_t>(index);
    }
    seen[slot] = true;
    generated_turn& turn = out.choices[slot];
    auto ids_it = c.find("token_ids");
    if (ids_it == c.end() || ids_it->is_null()) {
      return schema_error(where +
                          ": no 'token_ids'; the server ignored return_token_ids (use a vLLM "
                          "that supports it, or the sglang flavour)");
    }
    std::string why;
    switch (read_ids(*ids_it, turn.ids, why)) {
      case parse_problem::none:
        break;
      case parse_problem::invalid:
        return {parse_problem::invalid, where + ": " + why, {}};
      default:
        return schema_error(where + ": 'token_ids' is not a list of ids");
    }
    auto lp_it = c.find("logprobs");
    if (lp_it != c.end() && lp_it->is_object()) {
      auto tl = lp_it->find("token_logprobs");
      if (tl == lp_it->end() || !tl->is_array()) {
        return schema_error(where + ": 'logprobs.token_logprobs' missing");
      }
      turn.logprobs.reserve(tl->size());
      for (const auto& v : *tl) {
        if (!v.is_number()) {
          return schema_error(where + ": a token log-prob is not a number");
        }
        turn.logprobs.push_back(v.get<float>());
      }
    } else if (!turn.ids.empty()) {
      return schema_error(where + ": no 'logprobs'; the server ignored logprobs: 0");
    }
    if (turn.logprobs.size() != turn.ids.size()) {
      return schema_error(where + ": " + std::to_string(turn.ids.size()) + " token ids but " +
                          std::to_string(turn.logprobs.size()) + " log-probs");
    }
    if (auto it = c.find("prompt_token_ids"); !prompt.empty() && it != c.end() && it->is_array()) {
      bool same = it->size() == prompt.size();
      for (std::size_t k = 0; same && k < prompt.size(); ++k) {
        same = (*it)[k].is_number_integer() && (*it)[k].get<std::int64_t>() == prompt[k];
      }
      if (!same) {
        return schema_error(where +
                            ": 'prompt_token_ids' differ from the ids sent; the server "
                            "re-tokenised the prompt");
      }
    }
    if (auto it = c.find("finish_reason"); it != c.end() && it->is_string()) {
      turn.finish = finish_from_string(it->get_ref<const std::string&>());
    } else {
      turn.finish = finish_reason::other;
    }
    if (auto it = c.find("text"); it != c.end() && it->is_string()) {
      turn.text = it->get<std::string>();
    }
    turn.weight_version = version;
  }
  return out;
}

parsed_choices parse_sglang_item(const json& item, std::optional<std::string> header_version,
                                 const std::string& where, generated_turn& turn) {
  if (!item.is_object()) {
    return schema_error(where + ": expected a JSON object");
  }
  auto meta_it = item.find("meta_info");
  if (meta_it == item.end() || !meta_it->is_object()) {
    return schema_error(where + ": no 'meta_info'");
  }
  const json& meta = *meta_it;
  auto lp_it = meta.find("output_token_logprobs");
  if (lp_it != meta.end() && lp_it->is_array()) {
    turn.ids.reserve(lp_it->size());
    turn.logprobs.reserve(lp_it->size());
    for (const auto& triple : *lp_it) {
      if (!triple.is_array() || triple.size() < 2 || !triple[0].is_number() ||
          !triple[1].is_number_integer()) {
        return schema_error(where +
                            ": 'meta_info.output_token_logprobs' entries must be "
                            "[logprob, token_id, text]");
      }
      token_id id = 0;
      if (read_id(triple[1], id) != parse_problem::none) {
        return {parse_problem::invalid, where + ": " + bad_id_message(triple[1]), {}};
      }
      turn.logprobs.push_back(triple[0].get<float>());
      turn.ids.push_back(id);
    }
  } else {
    auto ids_it = item.find("output_ids");
    std::string why;
    if (ids_it != item.end()) {
      const auto problem = read_ids(*ids_it, turn.ids, why);
      if (problem == parse_problem::invalid) {
        return {parse_problem::invalid, where + ": " + why, {}};
      }
      if (problem != parse_problem::none) {
        return schema_error(where + ": 'output_ids' is not a list of ids");
      }
    }
    if (!turn.ids.empty()) {
      return schema_error(where +
                          ": no 'meta_info.output_token_logprobs'; the server ignored "
                          "return_logprob");
    }
  }
  if (auto it = meta.find("finish_reason"); it != meta.end()) {
    if (it->is_object()) {
      auto type = it->find("type");
      turn.finish = type != it->end() && type->is_string()
                        ? finish_from_string(type->get_ref<const std::string&>())
                        : finish_reason::other;
    } else if (it->is_string()) {
      turn.finish = finish_from_string(it->get_ref<const std::string&>());
    } else {
      turn.finish = finish_reason::other;
    }
  } else {
    turn.finish = finish_reason::other;
  }
  if (auto it = item.find("text"); it != item.end() && it->is_string()) {
    turn.text = it->get<std::string>();
  }
  turn.weight_version = std::move(header_version);
  if (auto it = meta.find("weight_version"); it != meta.end()) {
    if (auto v = version_string(*it)) {
      turn.weight_version = v;
    }
  }
  if (auto it = item.find("weight_version"); it != item.end()) {
    if (auto v = version_string(*it)) {
      turn.weight_version = v;
    }
  }
  return {};
}

parsed_choices parse_sglang(const json& root, std::optional<std::string> header_version) {
  parsed_choices out;
  if (root.is_array()) {
    if (root.empty()) {
      return schema_error("SGLang response: empty list");
    }
    out.choices.resize(root.size());
    for (std::size_t i = 0; i < root.size(); ++i) {
      auto r = parse_sglang_item(root[i], header_version,
                                 "SGLang response[" + std::to_string(i) + "]", out.choices[i]);
      if (r.problem != parse_problem::none) {
        return r;
      }
    }
    return out;
  }
  out.choices.resize(1);
  auto r = parse_sglang_item(root, std::move(header_version), "SGLang response", out.choices[0]);
  if (r.problem != parse_problem::none) {
    return r;
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// ---- fast path ------------------------------------------------------------------------------
// A response carries thousands of numbers (prompt echo, ids, log-probs); building a JSON DOM for it
// costs more than everything else the client does per turn. This reader walks the body once and
// reads only the fields a turn needs. It accepts only the well-formed, expected shape and answers
// nullopt for anything else, which then goes through the DOM parser above: errors and odd shapes
// keep one implementation, and the two agree on every valid body (tested on the fixtures).
namespace fast {

struct cursor {
  const char* p;
  const char* e;

  void ws() {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
      ++p;
    }
  }
  bool eat(char c) {
    ws();
    if (p < e && *p == c) {
      ++p;
      return true;
    }
    return false;
  }
  bool at(char c) {
    ws();
    return p < e && *p == c;
  }
  bool literal(std::string_view word) {
    ws();
    if (static_cast<std::size_t>(e - p) >= word.size() &&
        std::string_view(p, word.size()) == word) {
      p += word.size();
      return true;
    }
    return false;
  }
  // The raw contents of a string (no quotes); `escaped` tells whether it needs unescaping.
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
  // Ids are most of a body: a plain digit loop is several times cheaper than from_chars here.
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
  bool skip(int depth = 0) {
    if (depth > 64) {
      return false;
    }
    ws();
    if (p >= e) {
      return false;
    }
    std::string_view s;
    bool escaped;
    switch (*p) {
      case '"':
        return string(s, escaped);
      case '{':
        ++p;
        if (eat('}')) {
          return true;
        }
        do {
          if (!string(s, escaped) || !eat(':') || !skip(depth + 1)) {
            return false;
          }
        } while (eat(','));
        return eat('}');
      case '[':
        ++p;
        if (eat(']')) {
          return true;
        }
        do {
          if (!skip(depth + 1)) {
            return false;
          }
        } while (eat(','));
        return eat(']');
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default: {
        double ignored;
        return number(ignored);
      }
    }
  }
  // Iterates an object's keys: `on_key(key)` must consume the value. False on malformed input or
  // when `on_key` says so (a shape the fast path does not take).
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
  bool ids(std::vector<token_id>& out) {
    return array([&] {
      long long v;
      // Out of range: the reference parser names the id.
      if (!integer(v) || v < 0 || v > INT32_MAX) {
        return false;
      }
      out.push_back(static_cast<token_id>(v));
      return true;
    });
  }
  bool text(std::string& out) {
    std::string_view raw;
    bool escaped;
    const char* start = (ws(), p);
    if (!string(raw, escaped)) {
      return false;
    }
    if (!escaped) {
      out.assign(raw);
      return true;
    }
    auto v =
        json::parse(std::string_view(start, static_cast<std::size_t>(p - start)), nullptr, false);
    if (!v.is_string()) {
      return false;
    }
    out = v.get<std::string>();
    return true;
  }
  // A weight version: a string or an integer (anything else: not the fast path).
  bool version(std::optional<std::string>& out) {
    if (at('"')) {
      std::string s;
      if (!text(s)) {
        return false;
      }
      out = std::move(s);
      return true;
    }
    if (at('n')) {
      return literal("null");
    }
    long long v;
    if (!integer(v)) {
      return false;
    }
    out = std::to_string(v);
    return true;
  }
  // A finish reason given as a string; anything but a string or null reads as `other`.
  bool finish_string(finish_reason& out) {
    if (at('"')) {
      std::string s;
      if (!text(s)) {
        return false;
      }
      out = finish_from_string(s);
      return true;
    }
    out = finish_reason::other;
    return skip();
  }
};

std::optional<parsed_choices> vllm(std::string_view body,
                                   const std::optional<std::string>& header_version,
                                   std::span<const token_id> prompt) {
  cursor c{body.data(), body.data() + body.size()};
  std::optional<std::string> version;
  std::vector<generated_turn> turns;
  std::vector<std::optional<long long>> indexes;
  bool seen_choices = false;
  bool seen_version = false;
  auto choice = [&]() {
    generated_turn turn;
    turn.finish = finish_reason::other;
    std::optional<long long> index;
    bool seen_ids = false, logprobs_object = false, seen_token_logprobs = false;
    std::uint32_t seen = 0;  // each key once: duplicates go to the DOM parser
    auto once = [&](std::uint32_t bit) {
      if ((seen & bit) != 0) {
        return false;
      }
      seen |= bit;
      return true;
    };
    bool ok = c.object([&](std::string_view key) {
      if (key == "index") {
        if (!once(1)) {
          return false;
        }
        if (c.at('-') || (c.p < c.e && *c.p >= '0' && *c.p <= '9')) {
          long long v;
          if (!c.integer(v)) {
            return false;
          }
          index = v;
          return true;
        }
        return c.skip();
      }
      if (key == "text") {
        if (!once(2)) {
          return false;
        }
        return c.at('"') ? c.text(turn.text) : c.skip();
      }
      if (key == "token_ids") {
        if (!once(4)) {
          return false;
        }
        seen_ids = true;
        return c.ids(turn.ids);
      }
      if (key == "logprobs") {
        if (!once(8)) {
          return false;
        }
        if (c.at('n')) {
          return c.literal("null");
        }
        logprobs_object = true;
        return c.object([&](std::string_view k) {
          if (k != "token_logprobs") {
            return c.skip();
          }
          if (seen_token_logprobs) {
            return false;
          }
          seen_token_logprobs = true;
          return c.array([&] {
            double v;
            if (!c.number(v)) {
              return false;
            }
            turn.logprobs.push_back(static_cast<float>(v));
            return true;
          });
        });
      }
      if (key == "finish_reason") {
        if (!once(16)) {
          return false;
        }
        return c.finish_string(turn.finish);
      }
      if (key == "prompt_token_ids") {
        if (!once(32)) {
          return false;
        }
        if (prompt.empty() || !c.at('[')) {
          return c.skip();
        }
        std::size_t k = 0;
        bool same = true;
        bool parsed = c.array([&] {
          long long v;
          if (!c.integer(v)) {
            return false;
          }
          same = same && k < prompt.size() && v == prompt[k];
          ++k;
          return true;
        });
        return parsed && same && k == prompt.size();
      }
      return c.skip();
    });
    if (!ok || !seen_ids) {
      return false;
    }
    if (logprobs_object ? !seen_token_logprobs : !turn.ids.empty()) {
      return false;
    }
    if (turn.logprobs.size() != turn.ids.size()) {
      return false;
    }
    indexes.push_back(index);
    turns.push_back(std::move(turn));
    return true;
  };
  bool ok = c.object([&](std::string_view key) {
    if (key == "choices") {
      if (seen_choices) {
        return false;
      }
      seen_choices = true;
      return c.array(choice);
    }
    if (key == "weight_version") {
      if (seen_version) {
        return false;
      }
      seen_version = true;
      return c.version(version);
    }
    return c.skip();
  });
  c.ws();
  if (!ok || c.p != c.e || turns.empty()) {
    return std::nullopt;
  }
  parsed_choices out;
  out.choices.resize(turns.size());
  std::vector<bool> placed(turns.size(), false);
  for (std::size_t i = 0; i < turns.size(); ++i) {
    std::size_t slot = i;
    if (indexes[i]) {
      const long long index = *indexes[i];
      if (index < 0 || static_cast<std::size_t>(index) >= turns.size() || placed[index]) {
        return std::nullopt;
      }
      slot = static_cast<std::size_t>(index);
    } else if (placed[slot]) {
      return std::nullopt;
    }
    placed[slot] = true;
    out.choices[slot] = std::move(turns[i]);
    out.choices[slot].weight_version = version ? version : header_version;
  }
  return out;
}

bool sglang_item(cursor& c, const std::optional<std::string>& header_version,
                 generated_turn& turn) {
  std::optional<std::string> meta_version, item_version;
  bool seen_meta = false, seen_triples = false, seen_text = false, seen_item_version = false;
  turn.finish = finish_reason::other;
  bool ok = c.object([&](std::string_view key) {
    if (key == "text") {
      if (seen_text) {
        return false;
      }
      seen_text = true;
      return c.at('"') ? c.text(turn.text) : c.skip();
    }
    if (key == "weight_version") {
      if (seen_item_version) {
        return false;
      }
      seen_item_version = true;
      return c.version(item_version);
    }
    if (key != "meta_info") {
      return c.skip();
    }
    if (seen_meta) {
      return false;
    }
    seen_meta = true;
    bool seen_finish = false, seen_version = false;
    return c.object([&](std::string_view k) {
      if (k == "output_token_logprobs") {
        if (seen_triples) {
          return false;
        }
        seen_triples = true;
        return c.array([&] {
          double lp;
          long long id;
          if (!c.eat('[') || !c.number(lp) || !c.eat(',') || !c.integer(id) || id < 0 ||
              id > INT32_MAX) {
            return false;
          }
          while (c.eat(',')) {
            if (!c.skip()) {
              return false;
            }
          }
          if (!c.eat(']')) {
            return false;
          }
          turn.logprobs.push_back(static_cast<float>(lp));
          turn.ids.push_back(static_cast<token_id>(id));
          return true;
        });
      }
      if (k == "finish_reason") {
        if (seen_finish) {
          return false;
        }
        seen_finish = true;
        if (!c.at('{')) {
          return c.finish_string(turn.finish);
        }
        bool seen_type = false;
        return c.object([&](std::string_view f) {
          if (f != "type") {
            return c.skip();
          }
          if (seen_type) {
            return false;
          }
          seen_type = true;
          return c.finish_string(turn.finish);
        });
      }
      if (k == "weight_version") {
        if (seen_version) {
          return false;
        }
        seen_version = true;
        return c.version(meta_version);
      }
      return c.skip();
    });
  });
  if (!ok || !seen_meta || !seen_triples) {
    return false;
  }
  turn.weight_version = item_version ? item_version : meta_version ? meta_version : header_version;
  return true;
}

std::optional<parsed_choices> sglang(std::string_view body,
                                     const std::optional<std::string>& header_version) {
  cursor c{body.data(), body.data() + body.size()};
  parsed_choices out;
  bool ok;
  if (c.at('[')) {
    ok = c.array([&] {
      out.choices.emplace_back();
      return sglang_item(c, header_version, out.choices.back());
    });
  } else {
    out.choices.emplace_back();
    ok = sglang_item(c, header_version, out.choices.back());
  }
  c.ws();
  if (!ok || c.p != c.e || out.choices.empty()) {
    return std::nullopt;
  }
  return out;
}

}  // namespace fast

}  // namespace

std::string build_generate_body(wire_flavour flavour, std::string_view model,
                                std::span<const token_id> prompt,
                                std::span<const token_id> continuation,
                                const sampling_config& sampling, int max_tokens,
                                std::string_view wire_id, bool stream) {
  std::string out;
  out.reserve(256 + 8 * (prompt.size() + continuation.size()));
  if (flavour == wire_flavour::vllm) {
    out += '{';
    if (!model.empty()) {
      out += "\"model\":";
      put_string(out, model);
      out += ',';
    }
    out += "\"prompt\":";
    put_ids(out, prompt, continuation);
    out += ',';
    put_sampling(out, sampling, flavour, max_tokens);
    out += ",\"logprobs\":0,\"return_token_ids\":true,\"stream\":";
    out += stream ? "true" : "false";
    out += ",\"request_id\":";
    put_string(out, wire_id);
    out += '}';
  } else {
    out += "{\"input_ids\":";
    put_ids(out, prompt, continuation);
    out += ",\"sampling_params\":{";
    put_sampling(out, sampling, flavour, max_tokens);
    out += "},\"return_logprob\":true,\"stream\":";
    out += stream ? "true" : "false";
    out += ",\"rid\":";
    put_string(out, wire_id);
    out += '}';
  }
  return out;
}

parsed_choices parse_generate_response_reference(wire_flavour flavour, std::string_view body,
                                                 std::string_view weight_version_header,
                                                 std::span<const token_id> prompt) {
  json root = parse_bounded_json(body);
  if (root.is_discarded()) {
    return {parse_problem::malformed, "response body is not JSON (" +
                                          std::to_string(body.size()) + " bytes" +
                                          too_deep_note(body) + ")",
            {}};
  }
  std::optional<std::string> header_version;
  if (!weight_version_header.empty()) {
    header_version = std::string(weight_version_header);
  }
  return flavour == wire_flavour::vllm ? parse_vllm(root, header_version, prompt)
                                       : parse_sglang(root, header_version);
}

parsed_choices parse_generate_response(wire_flavour flavour, std::string_view body,
                                       std::string_view weight_version_header,
                                       std::span<const token_id> prompt) {
  std::optional<std::string> header_version;
  if (!weight_version_header.empty()) {
    header_version = std::string(weight_version_header);
  }
  auto quick = flavour == wire_flavour::vllm ? fast::vllm(body, header_version, prompt)
                                             : fast::sglang(body, header_version);
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
                      " is outside the vocabulary (vocab_size " + std::to_string(vocab_size) +
                      ")",
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

namespace {

// {"model"? , "messages": [{"role", "content"}...]}: what both servers' /tokenize share.
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

}  // namespace

std::string build_tokenize_body(std::string_view model, const std::vector<chat_message>& messages,
                                bool add_generation_prompt) {
  json body = tokenize_messages(model, messages);
  body["add_generation_prompt"] = add_generation_prompt;
  body["add_special_tokens"] = false;
  return body.dump();
}

result<std::string> build_tokenize_body(wire_flavour flavour, std::string_view model,
                                        const std::vector<chat_message>& messages,
                                        bool add_generation_prompt) {
  if (flavour == wire_flavour::vllm) {
    return build_tokenize_body(model, messages, add_generation_prompt);
  }
  if (!add_generation_prompt) {
    return error{
        "SGLang's /tokenize always renders the generation prompt (its chat form has no "
        "add_generation_prompt); render a conversation without it through a local template"};
  }
  return tokenize_messages(model, messages).dump();
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
    : flavour_(flavour), prompt_(std::move(prompt)) {
  const auto count = static_cast<std::size_t>(std::max(1, n));
  turns_.resize(count);
  finished_.assign(count, false);
  for (auto& turn : turns_) {
    turn.finish = finish_reason::other;
  }
}

std::optional<std::size_t> stream_accumulator::slot_of(const nlohmann::json& event,
                                                        const std::string& what) {
  long long index = 0;  // a single completion's events may leave it out
  if (auto it = event.find("index"); it != event.end() && it->is_number_integer()) {
    index = it->get<long long>();
  }
  if (index < 0 || static_cast<std::size_t>(index) >= turns_.size()) {
    fail(parse_problem::invalid, what + " " + std::to_string(index) + " out of range (n = " +
                                     std::to_string(turns_.size()) + " asked for)");
    return std::nullopt;
  }
  return static_cast<std::size_t>(index);
}

bool stream_accumulator::fail(parse_problem problem, std::string message) {
  stopped_ = true;
  if (problem != parse_problem::malformed) {
    problem_ = problem;
  }
  cut_ = std::move(message);
  return false;
}

bool stream_accumulator::feed(std::string_view bytes) {
  if (stopped_) {
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
  ++events_;
  if (data == "[DONE]") {
    done_ = true;
    return true;
  }
  json root = parse_bounded_json(data);
  if (root.is_discarded()) {
    return fail(parse_problem::malformed, "stream event " + std::to_string(events_) +
                                              " is not JSON (" + std::to_string(data.size()) +
                                              " bytes" + too_deep_note(data) + ")");
  }
  if (!root.is_object()) {
    return fail(parse_problem::schema,
                "stream event " + std::to_string(events_) + ": expected a JSON object");
  }
  if (root.contains("error")) {
    return fail(parse_problem::malformed,
                "the server sent an error event mid-stream: " + error_message(data));
  }
  return flavour_ == wire_flavour::vllm ? on_vllm_event(root) : on_sglang_event(root);
}

bool stream_accumulator::on_vllm_event(const json& root) {
  const std::string where = "vLLM stream event " + std::to_string(events_);
  auto choices_it = root.find("choices");
  if (choices_it == root.end() || !choices_it->is_array()) {
    return fail(parse_problem::schema, where + ": no 'choices' list");
  }
  if (auto it = root.find("weight_version"); it != root.end()) {
    if (auto v = version_string(*it)) {
      version_ = v;
    }
  }
  for (const json& c : *choices_it) {
    if (!c.is_object()) {
      return fail(parse_problem::schema, where + ": a choice is not an object");
    }
    const auto found = slot_of(c, where + ": choice index");
    if (!found) return false;
    const std::size_t slot = *found;
    generated_turn& turn = turns_[slot];
    std::vector<token_id> ids;
    auto ids_it = c.find("token_ids");
    if (ids_it != c.end() && !ids_it->is_null()) {
      std::string why;
      const auto problem = read_ids(*ids_it, ids, why);
      if (problem == parse_problem::invalid) {
        return fail(parse_problem::invalid, where + ": " + why);
      }
      if (problem != parse_problem::none) {
        return fail(parse_problem::schema, where + ": 'token_ids' is not a list of ids");
      }
    }
    std::vector<float> logprobs;
    auto lp_it = c.find("logprobs");
    if (lp_it != c.end() && lp_it->is_object()) {
      auto tl = lp_it->find("token_logprobs");
      if (tl == lp_it->end() || !tl->is_array()) {
        return fail(parse_problem::schema, where + ": 'logprobs.token_logprobs' missing");
      }
      for (const auto& v : *tl) {
        if (!v.is_number()) {
          return fail(parse_problem::schema, where + ": a token log-prob is not a number");
        }
        logprobs.push_back(v.get<float>());
      }
    }
    std::string text;
    if (auto it = c.find("text"); it != c.end() && it->is_string()) {
      text = it->get<std::string>();
    }
    if ((ids_it == c.end() || ids_it->is_null()) && (!text.empty() || !logprobs.empty())) {
      return fail(parse_problem::schema,
                  where +
                      ": no 'token_ids'; the server ignored return_token_ids (use a vLLM that "
                      "supports it, or the sglang flavour)");
    }
    if (!ids.empty() && (lp_it == c.end() || !lp_it->is_object())) {
      return fail(parse_problem::schema, where + ": no 'logprobs'; the server ignored logprobs: 0");
    }
    if (ids.size() != logprobs.size()) {
      return fail(parse_problem::schema, where + ": " + std::to_string(ids.size()) +
                                             " token ids but " + std::to_string(logprobs.size()) +
                                             " log-probs");
    }
    if (auto it = c.find("prompt_token_ids"); !prompt_.empty() && it != c.end() && it->is_array()) {
      bool same = it->size() == prompt_.size();
      for (std::size_t k = 0; same && k < prompt_.size(); ++k) {
        same = (*it)[k].is_number_integer() && (*it)[k].get<std::int64_t>() == prompt_[k];
      }
      if (!same) {
        return fail(parse_problem::schema,
                    where +
                        ": 'prompt_token_ids' differ from the ids sent; the server re-tokenised "
                        "the prompt");
      }
    }
    if (finished_[slot] && !ids.empty()) {
      return fail(parse_problem::schema,
                  where + ": tokens for choice " + std::to_string(slot) + " after its finish");
    }
    turn.ids.insert(turn.ids.end(), ids.begin(), ids.end());
    turn.logprobs.insert(turn.logprobs.end(), logprobs.begin(), logprobs.end());
    turn.text += text;
    if (auto it = c.find("finish_reason"); it != c.end() && it->is_string()) {
      turn.finish = finish_from_string(it->get_ref<const std::string&>());
      finished_[slot] = true;
    }
  }
  return true;
}

bool stream_accumulator::on_sglang_event(const json& root) {
  const std::string where = "SGLang stream event " + std::to_string(events_);
  const auto found = slot_of(root, where + ": index");
  if (!found) return false;
  const std::size_t slot = *found;
  // The event read as a whole /generate object: the same checks and fields as a full body.
  generated_turn piece;
  auto parsed = parse_sglang_item(root, std::nullopt, where, piece);
  if (parsed.problem != parse_problem::none) {
    return fail(parsed.problem, parsed.message);
  }
  if (piece.weight_version) {
    version_ = piece.weight_version;
  }
  generated_turn& turn = turns_[slot];
  if (finished_[slot]) {
    if (piece.ids.size() > turn.ids.size() ||
        (piece.ids.size() < turn.ids.size() && !piece.ids.empty())) {
      return fail(parse_problem::schema,
                  where + ": tokens for choice " + std::to_string(slot) + " after its finish");
    }
    return true;
  }
  const std::size_t have = turn.ids.size();
  const std::size_t got = piece.ids.size();
  bool cumulative;
  std::optional<long long> total;
  if (auto meta = root.find("meta_info"); meta != root.end() && meta->is_object()) {
    if (auto ct = meta->find("completion_tokens"); ct != meta->end() && ct->is_number_integer()) {
      total = ct->get<long long>();
    }
  }
  const bool extends =
      got >= have && std::equal(turn.ids.begin(), turn.ids.end(), piece.ids.begin());
  if (total && static_cast<std::size_t>(*total) == got && (have == 0 || extends)) {
    cumulative = true;
  } else if (total && static_cast<std::size_t>(*total) == have + got) {
    cumulative = false;
  } else if (total) {
    return fail(parse_problem::schema, where + ": " + std::to_string(got) + " output tokens, " +
                                           std::to_string(have) +
                                           " received before, but meta_info.completion_tokens is " +
                                           std::to_string(*total));
  } else {
    cumulative = extends;
  }
  if (cumulative) {
    turn.ids = std::move(piece.ids);
    turn.logprobs = std::move(piece.logprobs);
    turn.text = std::move(piece.text);
  } else {
    turn.ids.insert(turn.ids.end(), piece.ids.begin(), piece.ids.end());
    turn.logprobs.insert(turn.logprobs.end(), piece.logprobs.begin(), piece.logprobs.end());
    turn.text += piece.text;
  }
  // finish_reason is null until the last event; parse_sglang_item reads null as `other`.
  if (auto meta = root.find("meta_info"); meta != root.end()) {
    if (auto fr = meta->find("finish_reason"); fr != meta->end() && !fr->is_null()) {
      turn.finish = piece.finish;
      finished_[slot] = true;
    }
  }
  return true;
}

streamed_choices stream_accumulator::finish(std::string_view weight_version_header) const {
  streamed_choices out;
  out.problem = problem_;
  out.choices = turns_;
  out.done = done_;
  std::optional<std::string> version = version_;
  if (!version && !weight_version_header.empty()) {
    version = std::string(weight_version_header);
  }
  for (auto& c : out.choices) {
    c.weight_version = version;
  }
  out.complete = problem_ == parse_problem::none &&
                 std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; });
  if (problem_ != parse_problem::none || !cut_.empty()) {
    out.message = cut_;
  } else if (!out.complete) {
    out.message = std::string("the stream ended before every choice finished") +
                  (done_ ? "" : " (no [DONE])") + " after " + std::to_string(events_) + " events";
  }
  return out;
}

}  // namespace leap::policy
