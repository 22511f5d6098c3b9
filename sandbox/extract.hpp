// Pulling the candidate's code out of a model answer: fenced blocks as a chat model writes them.
#pragma once

#include "common/result.hpp"
#include "sandbox/task.hpp"

#include <string>
#include <string_view>

namespace leap::sandbox {

struct extracted_code {
  std::string code;
  std::string fence_language;  // the block's info string, lower-case ("" for a bare ```)
  int first_line = 0;          // 1-based line in the answer of the block's first code line
};

// Picks the code of `kind` from `answer`. Convention (see the suite format): blocks are opened by a
// line starting with ``` (up to 3 spaces of indent, optional info string) and closed by a line of
// ``` alone. The LAST block whose language belongs to the kind wins
// (traits_of(kind).fence_languages: cuda: cuda, cu, cuh and the C++ names; cpp: c++, cpp, cxx, cc,
// c, h, hpp; python and kernelbench: python, py, python3); when no block is labelled so, the last
// unlabelled block wins. Errors (the `format` verdict, the message is feedback for the model): no
// block at all, only blocks of other languages, an unclosed block, or an empty block.
result<extracted_code> extract_code(std::string_view answer, task_kind kind);

}  // namespace leap::sandbox
