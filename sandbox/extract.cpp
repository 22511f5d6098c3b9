#include "sandbox/extract.hpp"

#include "sandbox/kinds.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace leap::sandbox {
namespace {

struct block {
  std::string language;
  std::string code;
  int first_line = 0;
  bool closed = false;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

// Returns the info string when `line` opens or closes a fence, nullopt otherwise.
bool is_fence(std::string_view line, std::string* info) {
  std::size_t indent = 0;
  while (indent < line.size() && indent < 4 && line[indent] == ' ') {
    ++indent;
  }
  if (indent > 3) {
    return false;
  }
  line.remove_prefix(indent);
  if (line.substr(0, 3) != "```") {
    return false;
  }
  std::size_t ticks = 3;
  while (ticks < line.size() && line[ticks] == '`') {
    ++ticks;
  }
  std::string_view rest = trim(line.substr(ticks));
  // The language is the first word of the info string ("cuda title=x" -> "cuda").
  const auto space = rest.find_first_of(" \t{");
  rest = rest.substr(0, space);
  info->assign(rest);
  std::transform(info->begin(), info->end(), info->begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return true;
}

// Whether a block labelled `lang` holds the kind's code (an empty list: any block does).
bool language_matches(const kind_traits& kind, const std::string& lang) {
  const auto& accepted = kind.fence_languages;
  return accepted.empty() || std::find(accepted.begin(), accepted.end(), lang) != accepted.end();
}

}  // namespace

result<extracted_code> extract_code(std::string_view answer, task_kind kind) {
  std::vector<block> blocks;
  block* open = nullptr;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos <= answer.size()) {
    const auto end = answer.find('\n', pos);
    std::string_view line =
        answer.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    ++line_no;
    std::string info;
    if (open == nullptr) {
      if (is_fence(line, &info)) {
        blocks.push_back({info, "", line_no + 1, false});
        open = &blocks.back();
      }
    } else if (is_fence(line, &info) && info.empty()) {
      open->closed = true;
      open = nullptr;
    } else {
      open->code.append(line);
      open->code.push_back('\n');
    }
    if (end == std::string_view::npos) {
      break;
    }
    pos = end + 1;
  }

  const kind_traits& traits = traits_of(kind);
  const std::string hint = "```" + std::string(traits.fence);
  if (blocks.empty()) {
    return error{"No fenced code block found in the answer. Put the complete code in one block: " +
                 hint + " ... ```"};
  }
  const block* chosen = nullptr;
  for (const auto& b : blocks) {
    if (language_matches(traits, b.language)) {
      chosen = &b;
    }
  }
  if (chosen == nullptr) {
    for (const auto& b : blocks) {
      if (b.language.empty()) {
        chosen = &b;
      }
    }
  }
  if (chosen == nullptr) {
    std::string seen;
    for (const auto& b : blocks) {
      if (seen.find("'" + b.language + "'") == std::string::npos) {
        seen += (seen.empty() ? "'" : ", '") + b.language + "'";
      }
    }
    return error{"The answer has code blocks only in " + seen + "; this task needs a " + hint +
                 " block."};
  }
  if (!chosen->closed) {
    return error{"The code block opened at line " + std::to_string(chosen->first_line - 1) +
                 " of the answer is never closed with ``` (was the answer cut off?)."};
  }
  if (trim(chosen->code).empty()) {
    return error{"The code block at line " + std::to_string(chosen->first_line - 1) +
                 " of the answer is empty."};
  }
  return extracted_code{chosen->code, chosen->language, chosen->first_line};
}

}  // namespace leap::sandbox
