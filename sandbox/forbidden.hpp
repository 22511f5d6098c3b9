// The forbidden-use check: library calls where the task demands a kernel written from scratch, and
// includes that could reach outside the candidate's own source. Runs on the extracted code before
// anything is compiled.
#pragma once

#include "sandbox/task.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

struct forbidden_hit {
  std::string item;     // the forbidden entry that matched ("cublas"), or "#include"
  int line = 0;         // 1-based line in the candidate's code
  std::string excerpt;  // that line, trimmed
  std::string reason;   // feedback for the model
};

// Returns the first hit, or nullopt when the code is clean. Matching is a case-insensitive substring
// search on the code with comments removed ("cublas" catches cublasSgemm and <cublas_v2.h>). For
// cuda and cpp, an #include must name a system header in angle brackets without '..' or a leading
// '/': a quoted or absolute include could pull in the task's reference. Pure function.
std::optional<forbidden_hit> find_forbidden(std::string_view code, task_kind kind,
                                            const std::vector<std::string>& items);

}  // namespace leap::sandbox
