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
// Structural terms (reward.structural, off by default): a pass whose kept turn was profiled gains
// what its kernels' profile says was done well, a weight per family of the profiler's findings
// (structural_families below), paid for the share of kernel time where none of the family's
// findings fired. The term is added after the reward kind above: it is at most `bound`, and at
// most half the gap to the next higher reward of the group, so it splits ties but never reorders
// two rollouts whose rewards differ (no pass climbs past the next rank, speed included). A failure,
// a pass without a profile (profiling off, failed, late, or no kernel of the candidate's own) gains
// 0: the infrastructure never costs a rollout anything. After it a tournament's rewards no longer
// sum to 0 and may exceed 1 by at most `bound`; the advantage's normalisation follows.
//
// All functions are pure and thread-safe.
#pragma once

#include "common/enums/reward_kind.hpp"
#include "orchestrator/turn_profile.hpp"
#include "orchestrator/vocabulary.hpp"

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap {

// reward_kind and its names ("static" for static_scalar) are common/enums'.

struct speed_bonus_config {
  double weight = 0.0;  // Default: 0 (no bonus)
  double clip = 0.7;    // Default: 0.7 (|ln speedup| capped there: about 2x either way)
};

// The structural families and the profiler's findings (sandbox/profile_analysers.cpp) each one
// stands for; a family is clean in a kernel where none of its findings fired. The analysers run
// only for the bottleneck classes they serve, so "clean" means "not diagnosed": a launch-bound
// kernel is never checked for coalescing. warp_stalls and fp32_pipes are diagnosis only.
struct structural_family {
  std::string_view name;                     // the config key's last part
  std::array<std::string_view, 2> findings;  // "" for an unused slot
};
inline constexpr std::array<structural_family, 5> structural_families = {{
    {"coalescing", {"uncoalesced_global", ""}},
    {"bank_conflicts", {"bank_conflicts", ""}},
    {"occupancy", {"low_occupancy", "register_pressure"}},
    {"parallelism", {"small_grid", "launch_overhead"}},
    {"dram_traffic", {"dram_traffic", ""}},
}};

struct structural_config {
  // Per family, in structural_families' order: what a pass whose kernels are all clean of it
  // gains. Default: all 0 (off)
  std::array<double, structural_families.size()> weights{};
  double bound = 0.1;  // Default: 0.1 (the most one pass gains from all families together)

  [[nodiscard]] bool enabled() const;
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
  structural_config structural;
};

// Whether `kind` pays a scalar per pass (static, binary), the only kinds a speed bonus applies to:
// the tournament kinds' rewards are ranks.
[[nodiscard]] bool takes_speed_bonus(reward_kind kind);

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

// The structural score of one profiled pass: min(bound, sum over families of weight * the share of
// kernel time (each kernel's duration_ns; equal shares when none is known) in kernels clean of
// that family). 0 when the config is off or `kernels` is empty.
[[nodiscard]] double structural_score(const structural_config& config,
                                      std::span<const kernel_profile> kernels);

// The structural score a stored profile may pay: structural_score of its kernels when Nsight
// Compute measured them (source "ncu"), 0 for any other source. The fall-back profile ("events",
// sandbox/README.md) has no counters, so no coalescing or bank-conflict finding can fire and every
// kernel would look clean; and it is written from inside the candidate's own process, which could
// forge it. Such a pass gets no structural term, as one without a profile.
[[nodiscard]] double paid_structural_score(const structural_config& config,
                                           const turn_profile_record& profile);

// The term each rollout gains (see the file comment): for a pass, min(scores[i], half the gap from
// rewards[i] to the next higher reward of the group) (no cap when none is higher); 0 for a
// failure, and for a missing entry of `scores`. `rewards` are the reward kind's, one per outcome.
// Negative or non-finite scores count as 0.
[[nodiscard]] std::vector<double> structural_terms(std::span<const rollout_outcome> outcomes,
                                                   std::span<const double> rewards,
                                                   std::span<const double> scores);

}  // namespace leap
