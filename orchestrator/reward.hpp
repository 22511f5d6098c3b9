// Rewards of a group's rollouts from their outcomes.
//
//   rank    the paper's tournament (Sec. 3.2): a pass at turn m has rank M - m + 1, a failure 0;
//           R_i = (N_worse(i) - N_better(i)) / (G - 1), in [-1, 1], summing to 0 over the group.
//   static  a configured scalar per turn of success (static_rewards[m-1] for a pass at turn m),
//           `failure_reward` for a failure.
//   binary  1 for a pass at any turn, 0 for a failure.
// G = 1: the tournament has no peer, so rank gives 0 (no signal rather than a division by zero).
#pragma once

#include "orchestrator/vocabulary.hpp"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace leap {

enum class reward_kind : std::uint8_t { rank, static_scalar, binary };

struct reward_config {
  reward_kind kind = reward_kind::rank;     // Default: rank
  // static: reward of a pass at turn m is static_rewards[m-1]; must hold max_turns values.
  // Default: {1.0, 0.5, 0.25}
  std::vector<double> static_rewards = {1.0, 0.5, 0.25};
  double failure_reward = 0.0;              // Default: 0 (static and binary)
};

// The rank of an outcome with at most `max_turns` turns: M - m + 1 for a pass at turn m, 0 else.
[[nodiscard]] int outcome_rank(const rollout_outcome& outcome, int max_turns);

// One reward per outcome, in the same order. Requires every passed_at_turn <= max_turns.
[[nodiscard]] std::vector<double> compute_rewards(const reward_config& config,
                                                  std::span<const rollout_outcome> outcomes,
                                                  int max_turns);

[[nodiscard]] std::string to_string(reward_kind k);
[[nodiscard]] std::optional<reward_kind> parse_reward_kind(const std::string& name);

}  // namespace leap
