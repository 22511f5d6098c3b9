// Whether a group's passing rollouts are asked for faster versions, and why not
// (orchestrator/gate's decide_optimise). Decided when the DCP gate decides, from the first-turn
// passes.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in exports and logs: never rename a value.
enum class optimise_decision : std::uint8_t {
  off,             // gate.optimise.speedup is 0
  closed_no_pass,  // nothing passed: there is nothing to speed up
  closed_untimed,  // some pass has no measured speedup: no claim about speed can be made
  closed_fast,     // some pass beats the factor already
  closed_budget,   // no turn left (rollout.max_turns or gate.optimise.max_turns)
  open,            // every pass is timed and none beats the factor: optimisation turns follow
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(optimise_decision v) {
  switch (v) {
    case optimise_decision::off:
      return "off";
    case optimise_decision::closed_no_pass:
      return "closed_no_pass";
    case optimise_decision::closed_untimed:
      return "closed_untimed";
    case optimise_decision::closed_fast:
      return "closed_fast";
    case optimise_decision::closed_budget:
      return "closed_budget";
    case optimise_decision::open:
      return "open";
  }
  return {};
}

// "off", "closed_no_pass", "closed_untimed", "closed_fast", "closed_budget", "open"; "unknown(N)"
// for a byte outside the enum.
[[nodiscard]] inline std::string to_string(optimise_decision v) { return enum_names::to_string(v); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<optimise_decision> parse_optimise_decision(std::string_view name) {
  return enum_names::parse<optimise_decision>(name, "optimise decision");
}

}  // namespace leap
