// The DCP gate's decision for a group, taken when its last first-turn verdict arrives
// (orchestrator/gate). Stored with every group (storage's codec as one byte, its JSON export by
// name), so values only grow at the end.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in exports and logs: never rename a value.
enum class gate_decision : std::uint8_t {
  closed_easy,      // too few failures: finished at once
  closed_hopeless,  // too many failures: finished at once
  closed_no_debug,  // the policy never debugs (single-turn GRPO), or nothing failed
  open,             // failed rollouts enter debug turns
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(gate_decision v) {
  switch (v) {
    case gate_decision::closed_easy:
      return "closed_easy";
    case gate_decision::closed_hopeless:
      return "closed_hopeless";
    case gate_decision::closed_no_debug:
      return "closed_no_debug";
    case gate_decision::open:
      return "open";
  }
  return {};
}

// "closed_easy", "closed_hopeless", "closed_no_debug", "open"; "unknown(N)" for a byte outside the
// enum.
[[nodiscard]] inline std::string to_string(gate_decision v) { return enum_names::to_string(v); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<gate_decision> parse_gate_decision(std::string_view name) {
  return enum_names::parse<gate_decision>(name, "gate decision");
}

}  // namespace leap
