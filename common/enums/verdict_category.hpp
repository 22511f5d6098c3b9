// Why a turn's candidate passed or failed: what the sandbox's verification says, and what the
// gate, the rewards, the metrics and the store read. One type for all of them.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Stored as one byte in trajectory records: append new values, never reorder.
enum class verdict_category : std::uint8_t {
  pass,
  format,        // no code could be extracted from the answer
  compile,       // the compiler (or Python's parser) rejected it
  forbidden,     // it used something the task forbids (library call, torch op, ...)
  runtime,       // crash, CUDA error, exception, illegal memory access, non-zero exit
  timeout,       // wall-clock or CPU limit reached
  wrong_answer,  // ran, but the output does not match the reference (or it wrote into an input)
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(verdict_category v) {
  switch (v) {
    case verdict_category::pass:
      return "pass";
    case verdict_category::format:
      return "format";
    case verdict_category::compile:
      return "compile";
    case verdict_category::forbidden:
      return "forbidden";
    case verdict_category::runtime:
      return "runtime";
    case verdict_category::timeout:
      return "timeout";
    case verdict_category::wrong_answer:
      return "wrong_answer";
  }
  return {};
}

// "pass", "format", ..., "wrong_answer"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(verdict_category v) { return enum_names::to_string(v); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<verdict_category> parse_verdict_category(std::string_view name) {
  return enum_names::parse<verdict_category>(name, "verdict");
}

}  // namespace leap
