// The kind of a rollout's outcome in the composition tables (orchestrator/metrics' kind_of,
// `leap replay`'s composition.csv columns).
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in exports and logs: never rename a value.
enum class outcome_kind : std::uint8_t {
  first_turn_pass,  // passed at turn 1
  debug_pass,       // passed at a later turn
  failure,          // never passed
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(outcome_kind v) {
  switch (v) {
    case outcome_kind::first_turn_pass:
      return "first_turn_pass";
    case outcome_kind::debug_pass:
      return "debug_pass";
    case outcome_kind::failure:
      return "failure";
  }
  return {};
}

// "first_turn_pass", "debug_pass", "failure"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(outcome_kind v) { return enum_names::to_string(v); }

}  // namespace leap
