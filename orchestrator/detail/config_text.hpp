// Internal to orchestrator/config: the text of values and keys, as the config file, its messages
// and its documentation spell them. Not a public header; nothing outside orchestrator/ includes it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace leap::config_detail {

// Shortest text that parses back to exactly `v`, spelled as a YAML float (1.0, 1.0e-06), so that
// other YAML readers see a float too.
[[nodiscard]] std::string format_real(double v);

// For messages: the shortest text, without the ".0" a YAML float needs.
[[nodiscard]] std::string show_number(double v);

template <class T>
[[nodiscard]] std::string show(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return show_number(v);
  } else {
    return std::to_string(v);
  }
}

// `s` as a double-quoted YAML scalar, escapes included.
[[nodiscard]] std::string quote(const std::string& s);

template <class Container, class Format>
[[nodiscard]] std::string join(const Container& items, const std::string& separator,
                               Format format) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) {
      out += separator;
    }
    first = false;
    out += format(item);
  }
  return out;
}

// "rollout.sampling.top_k" -> {"rollout", "sampling", "top_k"}.
[[nodiscard]] std::vector<std::string> split_key(const std::string& key);

// User text shown in a message: on one line, and short, since a broken indentation can fold many
// lines into one scalar.
[[nodiscard]] std::string excerpt(const std::string& text);

// Levenshtein distance, ignoring case.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

// Closest name by edit distance, for "did you mean"; nullopt when nothing is close.
[[nodiscard]] std::optional<std::string> closest(const std::string& name,
                                                 const std::vector<std::string>& candidates);

}  // namespace leap::config_detail
