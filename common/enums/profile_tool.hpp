// What profiles a selected verdict: the config key verifier.profile_tool (orchestrator/config)
// and the sandbox's engine (sandbox/engine.hpp) read this one type.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class profile_tool : std::uint8_t {
  automatic,  // "auto": Nsight Compute; once it says GPU counters are not permitted, the same
              // candidate again and every later one from kernel events
  ncu,        // Nsight Compute only
  events,     // kernel activity records only (no counters needed; never paid as a reward)
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(profile_tool t) {
  switch (t) {
    case profile_tool::automatic:
      return "auto";
    case profile_tool::ncu:
      return "ncu";
    case profile_tool::events:
      return "events";
  }
  return {};
}

// "auto", "ncu", "events"; "unknown(N)" outside the enum.
[[nodiscard]] inline std::string to_string(profile_tool t) { return enum_names::to_string(t); }

}  // namespace leap
