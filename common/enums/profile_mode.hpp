// Which verdicts are profiled after they are known: the config key verifier.profile
// (orchestrator/config) and the sandbox's engine (sandbox/engine.hpp) read this one type.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class profile_mode : std::uint8_t {
  off,           // nothing is profiled
  passing,       // the passing verdicts of the cuda and kernelbench kinds
  all_compiled,  // every one of those whose candidate compiled and ran
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(profile_mode m) {
  switch (m) {
    case profile_mode::off:
      return "off";
    case profile_mode::passing:
      return "passing";
    case profile_mode::all_compiled:
      return "all_compiled";
  }
  return {};
}

// "off", "passing", "all_compiled"; "unknown(N)" outside the enum.
[[nodiscard]] inline std::string to_string(profile_mode m) { return enum_names::to_string(m); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<profile_mode> parse_profile_mode(std::string_view name) {
  return enum_names::parse<profile_mode>(name, "profile mode");
}

}  // namespace leap
