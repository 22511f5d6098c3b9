#include "orchestrator/detail/config_text.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace leap::config_detail {

std::string format_real(double v) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  std::string text(buffer, end);
  if (text.find_first_of(".en") == std::string::npos) {
    text += ".0";
  } else if (text.find('.') == std::string::npos && text.find('e') != std::string::npos) {
    text.insert(text.find('e'), ".0");
  }
  return text;
}

std::string show_number(double v) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return {buffer, end};
}

std::string quote(const std::string& s) {
  YAML::Emitter emitter;
  emitter << YAML::DoubleQuoted << s;
  return emitter.c_str();
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) {
      return parts;
    }
    start = dot + 1;
  }
}

std::string excerpt(const std::string& text) {
  constexpr std::size_t limit = 60;
  std::string out;
  for (const char ch : text.substr(0, limit)) {
    out += ch == '\n' || ch == '\r' || ch == '\t' ? ' ' : ch;
  }
  return text.size() > limit ? out + "..." : out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above_cell = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above_cell;
    }
  }
  return row[b.size()];
}

std::optional<std::string> closest(const std::string& name,
                                   const std::vector<std::string>& candidates) {
  const std::size_t limit = name.size() <= 3 ? 1 : name.size() <= 6 ? 2 : 3;
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_distance && d < candidate.size()) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace leap::config_detail
