// How a group's rewards are normalised into advantages: the config key advantage.kind and
// `leap replay --advantage`. The formulas are orchestrator/advantage.hpp's.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class advantage_kind : std::uint8_t {
  grpo,       // (R - mean) / (std + epsilon)
  mean_only,  // R - mean (Dr.GRPO)
  none,       // R
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(advantage_kind v) {
  switch (v) {
    case advantage_kind::grpo:
      return "grpo";
    case advantage_kind::mean_only:
      return "mean_only";
    case advantage_kind::none:
      return "none";
  }
  return {};
}

// "grpo", "mean_only", "none"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(advantage_kind v) { return enum_names::to_string(v); }

}  // namespace leap
