// How a run's stages are scheduled: the config key schedule.mode (orchestrator/config, the
// experiment actor, the launcher).
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class schedule_mode : std::uint8_t {
  streaming,  // each stage starts when its input arrives
  barrier,    // each stage waits for the whole batch (timing baseline)
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(schedule_mode v) {
  switch (v) {
    case schedule_mode::streaming:
      return "streaming";
    case schedule_mode::barrier:
      return "barrier";
  }
  return {};
}

// "streaming", "barrier"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(schedule_mode v) { return enum_names::to_string(v); }

}  // namespace leap
