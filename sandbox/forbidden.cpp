#include "sandbox/forbidden.hpp"

#include <algorithm>
#include <cctype>

namespace leap::sandbox {
namespace {

// Blanks comments (keeping newlines so line numbers stay right). String literals are kept: a
// forbidden name in a string is suspicious enough (dlopen("libcublas.so")).
std::string strip_comments(std::string_view code, bool python) {
  std::string out(code);
  enum { normal, line_comment, block_comment, string_lit, char_lit } state = normal;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const char next = i + 1 < out.size() ? out[i + 1] : '\0';
    switch (state) {
      case normal:
        if (python && c == '#') {
          state = line_comment;
          out[i] = ' ';
        } else if (!python && c == '/' && next == '/') {
          state = line_comment;
          out[i] = ' ';
        } else if (!python && c == '/' && next == '*') {
          state = block_comment;
          out[i] = ' ';
          out[i + 1] = ' ';
          ++i;
        } else if (c == '"') {
          state = string_lit;
        } else if (c == '\'') {
          state = char_lit;
        }
        break;
      case line_comment:
        if (c == '\n') {
          state = normal;
        } else {
          out[i] = ' ';
        }
        break;
      case block_comment:
        if (c == '*' && next == '/') {
          out[i] = ' ';
          out[i + 1] = ' ';
          ++i;
          state = normal;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case string_lit:
        if (c == '\\') {
          ++i;
        } else if (c == '"' || c == '\n') {
          state = normal;
        }
        break;
      case char_lit:
        if (c == '\\') {
          ++i;
        } else if (c == '\'' || c == '\n') {
          state = normal;
        }
        break;
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto end = text.find('\n', pos);
    lines.push_back(text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return lines;
}

}  // namespace

std::optional<forbidden_hit> find_forbidden(std::string_view code, task_kind kind,
                                            const std::vector<std::string>& items) {
  const bool python = kind == task_kind::python || kind == task_kind::kernelbench;
  const std::string clean = strip_comments(code, python);
  const auto clean_lines = lines_of(clean);
  const auto raw_lines = lines_of(code);
  for (std::size_t i = 0; i < clean_lines.size(); ++i) {
    const std::string line = lower(clean_lines[i]);
    const std::string excerpt = i < raw_lines.size() ? trim(raw_lines[i]) : std::string{};
    if (!python) {
      const std::string t = trim(line);
      if (t.rfind("#", 0) == 0) {
        std::string directive = trim(std::string_view(t).substr(1));
        if (directive.rfind("include", 0) == 0) {
          const std::string target = trim(std::string_view(directive).substr(7));
          const bool angle = !target.empty() && target.front() == '<';
          if (!angle || target.find("..") != std::string::npos || (target.size() > 1 && target[1] == '/')) {
            return forbidden_hit{"#include", static_cast<int>(i + 1), excerpt,
                                 "Line " + std::to_string(i + 1) + ": `" + excerpt +
                                     "` is not allowed: include only system headers with <...>; the whole "
                                     "solution must be in this one file."};
          }
        }
      }
    }
    for (const auto& item : items) {
      if (item.empty()) continue;
      if (line.find(lower(item)) != std::string::npos) {
        return forbidden_hit{item, static_cast<int>(i + 1), excerpt,
                             "Line " + std::to_string(i + 1) + ": `" + excerpt + "` uses '" + item +
                                 "', which this task forbids. Write the computation yourself instead of "
                                 "calling a library."};
      }
    }
  }
  return std::nullopt;
}

}  // namespace leap::sandbox
