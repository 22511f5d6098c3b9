// Internal to the sandbox: small pieces the engine's pipelines (engine.cpp and
// engine_kernelbench.cpp) share. Not part of the module's public header.
#pragma once

#include "sandbox/engine.hpp"

#include <cstddef>
#include <string>

namespace leap::sandbox::detail {

// The most a judge or harness may print as its result record.
inline constexpr std::size_t k_max_result_json_bytes = 1 << 20;

// The PATH a sandboxed tool gets: the system's directories, after extra_dir when one is given.
std::string base_path(const std::string& extra_dir);
// The directory of a program's path; empty for a bare name.
std::string dir_of(const std::string& program);
std::string memory_feedback(const resource_limits& l);
verdict make_verdict(verdict_category c, std::string feedback);

}  // namespace leap::sandbox::detail
