// How a group's outcomes become rewards: the config key reward.kind and `leap replay --reward`.
// The formulas are orchestrator/reward.hpp's.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class reward_kind : std::uint8_t {
  rank,           // the paper's tournament of (pass turn, failure) ranks
  static_scalar,  // reward.static_rewards per turn (spelled "static", a C++ keyword)
  binary,         // 1 for a pass, reward.failure_reward otherwise
  rank_speed,     // rank's tournament, passes at the same turn also ranked by speedup
  prime_echo,     // first-turn-anchored: a mix of the first-turn and final tournaments
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(reward_kind v) {
  switch (v) {
    case reward_kind::rank:
      return "rank";
    case reward_kind::static_scalar:
      return "static";
    case reward_kind::binary:
      return "binary";
    case reward_kind::rank_speed:
      return "rank_speed";
    case reward_kind::prime_echo:
      return "prime_echo";
  }
  return {};
}

// "rank", "static", "binary", "rank_speed", "prime_echo"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(reward_kind v) { return enum_names::to_string(v); }

}  // namespace leap
