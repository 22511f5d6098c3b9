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
#pragma once

#include "policy/chat/byte_tokenizer.hpp"

#include <climits>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

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
