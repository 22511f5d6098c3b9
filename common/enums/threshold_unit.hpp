// Whether gate.tau_min and gate.tau_max count failures or give them as a fraction of the group:
// the config key gate.unit and `leap replay --unit`.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class threshold_unit : std::uint8_t { count, fraction };

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(threshold_unit v) {
  switch (v) {
    case threshold_unit::count:
      return "count";
    case threshold_unit::fraction:
      return "fraction";
  }
  return {};
}

// "count", "fraction"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(threshold_unit v) { return enum_names::to_string(v); }

}  // namespace leap
