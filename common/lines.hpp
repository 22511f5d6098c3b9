// Text split into lines, shared by the sandbox (compiler output, candidate code) and the tests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace leap {

// `text` split at '\n', a trailing '\r' dropped from each line; no empty last line for a final
// '\n', and no line at all for empty text ("a\r\n\nb\n" -> {"a", "", "b"}). Pure.
[[nodiscard]] inline std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    std::string line(text.substr(pos, end - pos));
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    lines.push_back(std::move(line));
    pos = end + 1;
  }
  return lines;
}

}  // namespace leap
