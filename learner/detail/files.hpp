// File-system helpers on plain string paths, with POSIX calls. learner/ avoids std::filesystem on
// purpose: LibTorch wheels from pip export std::filesystem symbols of their own toolchain, and a
// program whose calls bind to those copies crashes (seen with torch 2.11 and g++ 13). Internal to
// learner/; no LibTorch here. All functions are thread-safe. Files and renames that must survive a
// crash go through common/durable_file.hpp (write_file_durably, rename_durably).
#pragma once

#include "common/result.hpp"

#include <string>
#include <vector>

namespace leap::learner::detail {

// `dir` + "/" + `name` (no doubled slash).
[[nodiscard]] std::string join(const std::string& dir, const std::string& name);
[[nodiscard]] bool path_exists(const std::string& path);
// Like mkdir -p. Errors name the path and the reason.
[[nodiscard]] status make_directories(const std::string& path);
// Best effort, like rm -f / rm -rf: a missing path is fine, failures are ignored (callers use these
// for clean-up only).
void remove_file(const std::string& path);
void remove_tree(const std::string& path);
// The names in a directory, without "." and "..". Errors: it cannot be opened.
[[nodiscard]] result<std::vector<std::string>> list_directory(const std::string& path);

}  // namespace leap::learner::detail
