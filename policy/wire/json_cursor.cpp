#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

namespace leap::policy {

bool json_cursor::skip(int depth) {
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

bool json_cursor::text(std::string& out) {
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
  // Escapes are rare in generated text: nlohmann decodes them (\uXXXX pairs included).
  auto v = nlohmann::json::parse(std::string_view(start, static_cast<std::size_t>(p - start)),
                                 nullptr, false);
  if (!v.is_string()) {
    return false;
  }
  out = v.get<std::string>();
  return true;
}

bool json_cursor::string_or_integer(std::optional<std::string>& out) {
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

}  // namespace leap::policy
