// Rewards of a group's rollouts from their outcomes.
//
//   rank    the paper's tournament (Sec. 3.2): a pass at turn m has rank M - m + 1, a failure 0;
//           R_i = (N_worse(i) - N_better(i)) / (G - 1), in [-1, 1], summing to 0 over the group.
//           Equal ranks neither win nor lose against each other.
//   static  a configured scalar per turn of success (static_rewards[m-1] for a pass at turn m),
//           `failure_reward` for a failure.
//   binary  1 for a pass at any turn, `failure_reward` (default 0) for a failure.
//   rank_speed  rank's tournament, where two passes at the same turn are also compared by speed:
//           the faster wins when its speedup exceeds the other's by more than the pair's noise
//           (the sum of both relative noises when both verdicts state one, else `speed_tie`);
//           otherwise they tie. A pass without a measured speedup (timing off, failed or
//           uncertain) is compared as if it had the slowest measured speedup of its turn: it ties
//           with the slowest and never ranks above a timed pass. Pairwise, O(G^2); still in
//           [-1, 1] and summing to 0.
//   prime_echo  first-turn-anchored (MusaCoder's PrimeEcho as we read it; its definition is not
//           public): R_i = (1 - echo) * P_i + echo * rank_i, where P_i is the first-turn
//           tournament (a pass at turn 1 beats everything else; a later pass ties with a failure)
//           and rank_i the rank tournament above. In [-1, 1], summing to 0; a first-turn pass
//           never earns less than a later pass, nor a later pass less than a failure.
//           echo = 1 is rank; echo = 0 pays nothing for a debug-turn pass; max_turns = 1 is rank.
// G = 1: the tournament has no peer, so rank gives 0 (no signal rather than a division by zero).
//
// The speed bonus (speed_bonus.weight > 0) applies to the scalar kinds, static and binary: a
// passing rollout's reward gains weight * clamp(ln(speedup), -clip, clip); failures are untouched.
// A pass without a measured speedup gains min(0, the lowest bonus of the group's timed passes), so
// uncertain timing never pays more than a plain pass nor more than a slow timed one.
// A speedup that is not finite or not > 0 counts as not measured.
//
// Out-of-contract input has a defined answer rather than undefined behaviour (clamping):
//   - passed_at_turn <= 0 is a failure;
//   - max_turns < 1 is taken as 1;
//   - passed_at_turn > max_turns counts as a pass at turn max_turns (the least preferred pass):
//     it did pass, so it never ranks below a failure, and it never outranks an in-budget pass;
//   - static: a pass at a turn beyond static_rewards' length gets its last value; an empty
//     static_rewards gives every pass 1 (the binary reward).
// All functions are pure and thread-safe.
#pragma once

#include "common/enums/reward_kind.hpp"
#include "orchestrator/vocabulary.hpp"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace leap {

// reward_kind and its names ("static" for static_scalar) are common/enums'.

struct speed_bonus_config {
  double weight = 0.0;  // Default: 0 (no bonus)
  double clip = 0.7;    // Default: 0.7 (|ln speedup| capped there: about 2x either way)
};

struct reward_config {
  reward_kind kind = reward_kind::rank;  // Default: rank
  // static: reward of a pass at turn m is static_rewards[m-1]; must hold max_turns values.
  // Default: {1.0, 0.5, 0.25}
  std::vector<double> static_rewards = {1.0, 0.5, 0.25};
  double failure_reward = 0.0;  // Default: 0 (static and binary)
  // rank_speed: relative margin within which two speedups tie when the verdicts state no noise.
  double speed_tie = 0.05;  // Default: 0.05 (speedups within 5% tie)
  // prime_echo: the share of the reward that the final outcome's rank tournament decides; the
  // rest, 1 - echo, is the first-turn tournament's. Taken as clamped to [0, 1].
  double echo = 0.5;  // Default: 0.5
  speed_bonus_config speed_bonus;
};

// Whether `reward` pays more for a faster pass: rank_speed, or a speed bonus on a scalar kind
// (the tournament kinds refuse a bonus). Training on optimisation turns needs it.
[[nodiscard]] bool pays_for_speed(const reward_config& reward);

// What the verifier measured of a rollout's passing candidate: its speedup over the reference
// (reference median / candidate median) and that figure's relative noise, each when known.
struct pass_speed {
  std::optional<double> speedup;
  std::optional<double> noise;
};

// The rank of an outcome with at most `max_turns` turns: M - m + 1 for a pass at turn m, 0 else
// (clamped as the file comment says, so always in [0, max(max_turns, 1)]).
[[nodiscard]] int outcome_rank(const rollout_outcome& outcome, int max_turns);

// One reward per outcome, in the same order; empty input gives an empty vector. Intended for
// every passed_at_turn <= max_turns; beyond it, clamped as the file comment says. `speeds`, when
// not empty, holds one entry per outcome (a missing entry counts as not measured); only rank_speed
// and the speed bonus read it.
[[nodiscard]] std::vector<double> compute_rewards(const reward_config& config,
                                                  std::span<const rollout_outcome> outcomes,
                                                  int max_turns,
                                                  std::span<const pass_speed> speeds = {});

// The speed bonus of one timed pass: weight * clamp(ln(speedup), -clip, clip); 0 when the speedup
// is not finite or not > 0, or the weight is 0.
[[nodiscard]] double speed_bonus(const speed_bonus_config& config, double speedup);

// Whether a stated speedup counts as measured: finite and > 0.
[[nodiscard]] bool measured_speedup(const std::optional<double>& speedup);

}  // namespace leap
