// What kind of task a candidate solves, as the suite format's "kind" and the config's
// data.task_kinds name it. What the sandbox does with each kind is its row in sandbox/kinds.cpp.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in suite files and configs: never rename a value.
enum class task_kind : std::uint8_t {
  cuda,         // a CUDA kernel behind `void solve(...)`, compiled by nvcc
  cpp,          // C++ behind `void solve(...)`, compiled by g++
  python,       // a Python `solve(...)`
  kernelbench,  // a KernelBench PyTorch module (ModelNew) against its reference Model
  // The toy family a tiny model learns from scratch (write digits whose sum is `target`), judged
  // in-process by sandbox/digits.hpp; no program is compiled or run.
  digits,
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(task_kind k) {
  switch (k) {
    case task_kind::cuda:
      return "cuda";
    case task_kind::cpp:
      return "cpp";
    case task_kind::python:
      return "python";
    case task_kind::kernelbench:
      return "kernelbench";
    case task_kind::digits:
      return "digits";
  }
  return {};
}

// "cuda", "cpp", "python", "kernelbench", "digits"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(task_kind k) { return enum_names::to_string(k); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<task_kind> parse_task_kind(std::string_view name) {
  return enum_names::parse<task_kind>(name, "task kind");
}

}  // namespace leap
