#include "sandbox/digits.hpp"

#include <string>

namespace leap::sandbox {
namespace {

// The text between the last ``` fence pair, or the whole answer when there is none. (Fence rules
// are looser than extract_code's: any info string, and an unclosed last fence takes the rest.)
std::string_view candidate_text(std::string_view answer) {
  const auto close = answer.rfind("```");
  if (close == std::string_view::npos) {
    return answer;
  }
  const auto open = close == 0 ? std::string_view::npos : answer.rfind("```", close - 1);
  if (open == std::string_view::npos) {
    // One fence only: what follows it (an answer cut off inside its block).
    auto rest = answer.substr(close + 3);
    const auto eol = rest.find('\n');
    return eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
  }
  auto inner = answer.substr(open + 3, close - open - 3);
  const auto eol = inner.find('\n');  // the info string's line
  return eol == std::string_view::npos ? inner : inner.substr(eol + 1);
}

}  // namespace

verdict judge_digit_sum(int target, std::string_view answer) {
  verdict v;
  long long sum = 0;
  int digits = 0;
  for (const char c : candidate_text(answer)) {
    if (c >= '0' && c <= '9') {
      sum += c - '0';
      ++digits;
    }
  }
  const std::string n = std::to_string(target);
  if (digits == 0) {
    v.category = verdict_category::format;
    v.feedback = "Your answer has no digits. Write digits whose sum is " + n + ".";
  } else if (sum == target) {
    v.passed = true;
    v.category = verdict_category::pass;
  } else {
    v.category = verdict_category::wrong_answer;
    v.feedback = "Your digits sum to " + std::to_string(sum) + ", not " + n + ". " +
                 (sum > target ? "Use smaller digits or fewer of them."
                               : "Use larger digits or more of them.");
  }
  return v;
}

}  // namespace leap::sandbox
