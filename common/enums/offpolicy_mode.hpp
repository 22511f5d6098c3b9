// How the learner treats tokens sampled off its policy: the config key learner.offpolicy.mode
// (orchestrator/config) and the loss itself (learner/loss) read this one type.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class offpolicy_mode : std::uint8_t {
  off,             // no importance-ratio filter (the staleness cap still applies when set)
  drop_sequence,   // sequences whose geometric-mean ratio is outside [low, high] are dropped
  truncate_token,  // each token's importance ratio is capped at high (truncated IS)
  mask_token,      // tokens whose ratio is outside [low, high] are masked
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(offpolicy_mode m) {
  switch (m) {
    case offpolicy_mode::off:
      return "off";
    case offpolicy_mode::drop_sequence:
      return "drop_sequence";
    case offpolicy_mode::truncate_token:
      return "truncate_token";
    case offpolicy_mode::mask_token:
      return "mask_token";
  }
  return {};
}

// "off", "drop_sequence", "truncate_token", "mask_token"; "unknown(N)" outside the enum.
[[nodiscard]] inline std::string to_string(offpolicy_mode m) { return enum_names::to_string(m); }

}  // namespace leap
