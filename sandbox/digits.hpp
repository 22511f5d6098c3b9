// The digits task family: "write digits whose sum is N". Small enough for a byte-level model
// trained from scratch on a CPU to learn in minutes, with feedback a debug turn can act on ("your
// digits sum to 9, not 7"). Judged here, in-process: the answer is text, nothing of it is executed.
#pragma once

#include "sandbox/verdict.hpp"

#include <string_view>

namespace leap::sandbox {

// The answer's candidate text is its last fenced block when it has one, else the whole answer.
// Every decimal digit in it counts towards the sum; other characters are ignored (so a model that
// has not yet learnt the format still earns a pass when its digits are right).
//   no digit at all      -> format, "Your answer has no digits. ..."
//   sum == target        -> pass
//   otherwise            -> wrong_answer, "Your digits sum to X, not N. ..."
// Deterministic; the feedback names only the two sums.
[[nodiscard]] verdict judge_digit_sum(int target, std::string_view answer);

}  // namespace leap::sandbox
