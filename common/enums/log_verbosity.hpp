// How much the programs log: the config key experiment.log_level (orchestrator/config) and the
// log itself (common/log.hpp) read this one type.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value. Ordered from the most to the least
// verbose: a level prints its own lines and every more severe one.
enum class log_verbosity : std::uint8_t {
  trace,  // as debug: no line is written below debug yet
  debug,  // as info: no line is written below info yet
  info,   // events (a step started, groups resumed, a verifier node lost) and everything below
  warn,   // warnings (lost writes, a signal, a metrics file not written) and errors
  error,  // errors only
  off,    // nothing
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(log_verbosity v) {
  switch (v) {
    case log_verbosity::trace:
      return "trace";
    case log_verbosity::debug:
      return "debug";
    case log_verbosity::info:
      return "info";
    case log_verbosity::warn:
      return "warn";
    case log_verbosity::error:
      return "error";
    case log_verbosity::off:
      return "off";
  }
  return {};
}

// "trace", "debug", "info", "warn", "error", "off"; "unknown(N)" outside the enum.
[[nodiscard]] inline std::string to_string(log_verbosity v) { return enum_names::to_string(v); }

}  // namespace leap
