// Reading a task suite from disk into the scripted backend's plain task list. The layout is the
// suite format shared with the sandbox (sandbox/suite/<kind>/<name>/ with task.json,
// solution.<ext> and wrong/<label>.<ext>); this reader needs only nlohmann JSON and the files, so
// policy/ does not depend on sandbox/.
#pragma once

#include "common/result.hpp"
#include "policy/scripted_backend.hpp"

#include <string>
#include <vector>

namespace leap::policy {

// Every folder under `root` (at any depth) that holds a task.json is one task, in path order:
//   id, prompt (required), kind ("cuda" | "cpp" | "python", required; it is also the fence
//   language), difficulty (1..3; Default: 2); the solution from solution.cu / solution.cpp /
//   solution.py by kind (required); wrong candidates from wrong/* (label = file name without its
//   extension, in name order; none is allowed).
// Errors name the file and key ("<dir>/task.json: 'prompt' is required", "<dir>: no
// solution.cu"), and an empty tree is an error. Reads files only; thread-safe.
[[nodiscard]] result<std::vector<scripted_task>> load_scripted_suite(const std::string& root);

}  // namespace leap::policy
