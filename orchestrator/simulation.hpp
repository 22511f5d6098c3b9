// An offline simulator of LEAP's gate, reward and advantage math with a synthetic policy: no model,
// no server, no verifier. It answers "what will this config cost and reward?" before GPU time is
// spent: how many groups the gate opens, how many verifications a step needs, and how the
// per-turn advantages move a policy's first-turn and debugging skill.
//
// The synthetic policy: task k passes on its first turn with probability p_k (drawn once from
// Beta(alpha, beta)); a failed rollout in an opened group is fixed on each debug turn with a global
// probability q. Learning is REINFORCE on these Bernoulli choices in logit space, driven by exactly
// the token advantages the learner would see: the first turn's advantage moves logit(p_k) by
// skill_gain * a_{i,0} * (x_i - p_k), and each debug turn's advantage moves logit(q) likewise.
// Buffered retry (gate.retry): all-failed groups are sampled again as orchestrator/retry.hpp says,
// with extra rollouts and turns; without it the random stream is the one it always was.
// Deterministic for a seed.
#pragma once

#include "orchestrator/advantage.hpp"
#include "orchestrator/gate.hpp"
#include "orchestrator/metrics.hpp"
#include "orchestrator/retry.hpp"
#include "orchestrator/reward.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace leap {

struct simulation_params {
  int steps = 20;
  int batch_size = 32;
  int group_size = 8;
  int max_turns = 3;
  std::uint64_t seed = 0;
  int tasks = 256;
  double difficulty_alpha = 1.0;
  double difficulty_beta = 1.0;
  double debug_fix_probability = 0.3;
  double skill_gain = 0.5;
  gate_config gate;
  reward_config reward;
  advantage_config advantage;
};

struct simulation_step {
  int step = 0;                             // 1-based
  std::vector<double> cumulative_accuracy;  // on the step's batch, index m-1
  double activated_fraction = 0.0;
  recovery_rates recovery;
  double turns_per_pass = 0.0;
  std::size_t verifications = 0;              // candidates compiled and run this step
  double expected_first_turn_accuracy = 0.0;  // mean p_k over all tasks after the step's update
  double debug_fix_probability = 0.0;         // q after the step's update
  std::vector<group_summary> groups;          // the step's groups, for composition tables
  // Groups with a non-zero advantage (training signal), and buffered retry (gate.retry): the
  // step's retried groups, those of them with a pass, the verifications they cost, the settling's
  // counts and the buffer's size after it.
  std::size_t signal_groups = 0;
  std::size_t retried = 0;
  std::size_t recovered = 0;
  std::size_t retry_verifications = 0;
  retry_counts retry;
  std::size_t buffered = 0;
};

// Runs the simulation; calls on_step after each step (for progress), then returns every step.
// Preconditions: the params passed config validation (group_size >= 2, max_turns >= 1, ...).
std::vector<simulation_step> simulate(
    const simulation_params& params,
    const std::function<void(const simulation_step&)>& on_step = {});

}  // namespace leap
