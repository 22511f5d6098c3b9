#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

namespace leap::policy {

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > limit) {
            return limit + 1;
          }
        }
        break;
      case ']':
      case '}':
        // Unbalanced closers make the text invalid JSON; the parser reports that.
        depth = depth > 0 ? depth - 1 : 0;
        break;
      default:
        break;
    }
  }
  return deepest;
}

nlohmann::json parse_bounded_json(std::string_view text, int limit) {
  if (json_nesting_depth(text, limit) > limit) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace leap::policy
