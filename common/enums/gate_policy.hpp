// Which groups enter debug turns: the config key gate.policy (orchestrator/gate, the experiment
// actor, `leap replay --gate`). The rules are orchestrator/gate.hpp's.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class gate_policy : std::uint8_t {
  none,          // never (single-turn GRPO)
  full,          // whenever N_fail >= 1
  dcp,           // when tau_min <= N_fail <= tau_max (Difficulty-Conditioned Pruning)
  dcp_adaptive,  // as dcp, thresholds from the running failure-count quantiles
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(gate_policy v) {
  switch (v) {
    case gate_policy::none:
      return "none";
    case gate_policy::full:
      return "full";
    case gate_policy::dcp:
      return "dcp";
    case gate_policy::dcp_adaptive:
      return "dcp_adaptive";
  }
  return {};
}

// What the policy does, as the config reference's gate.policy line says it. Empty for a byte
// outside the enum.
constexpr std::string_view meaning_of(gate_policy v) {
  switch (v) {
    case gate_policy::none:
      return "single-turn GRPO";
    case gate_policy::full:
      return "any failure";
    case gate_policy::dcp:
      return "tau_min <= N_fail <= tau_max";
    case gate_policy::dcp_adaptive:
      return "thresholds follow quantiles";
  }
  return {};
}

// "none", "full", "dcp", "dcp_adaptive"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(gate_policy v) { return enum_names::to_string(v); }

}  // namespace leap
