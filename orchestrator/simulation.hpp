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
//
// Speed (issue 31), when `timed` (a config's verifier.timing_reps > 0): every passing candidate has
// a true speedup over the reference, ln s = ln(speedup_median) + o_k + shift + speedup_spread * z,
// with o_k ~ N(0, speedup_task_spread^2) drawn once per task, z ~ N(0, 1) per candidate, and
// `shift` the policy's speed skill (0 at the start), capped at speedup_ceiling (no kernel gets
// faster than the hardware allows: near the cap timed passes tie and the skill stops growing);
// the verifier measures s * exp(speedup_noise * z') and states speedup_noise as its relative noise
// (rank_speed's tie margin). The group's life
// is group_flow's, so the DCP gate and gate.optimise decide exactly as in `leap run`
// (decide_optimise, continue_optimising). An optimisation turn improves the kernel (true speedup
// times optimise_gain, within the ceiling) with probability pi_improve, breaks it (fails) with
// pi_break, and otherwise passes at the same true speed. Groups are scored by score_group
// (rank_speed, the speed bonus and gate.optimise.train's payment for the kept turn), and training
// sees what actors/learner.cpp's training_sequences gives the learner: the turns up to the kept
// one, discounted per turn, and each broken turn alone with broken_turn_advantage(). The speed
// skill learns like the pass skills, by natural-gradient REINFORCE on the Gaussian choice of z:
// shift += skill_gain * mean(a_t * speedup_spread * z) over the trained passing turns that drew a
// kernel (first and debug turns); the optimisation-turn choice {improve, same, break} is a softmax
// whose logits move by skill_gain * mean(a_t * (onehot - pi)) over the trained optimisation turns
// (only with gate.optimise.train). Speed and optimisation turns draw from a second random stream,
// so that the pass/fail stream is the one it always was, timed or not.
//
// Profiles and structural terms (issue 34), when `profiled` (a config's verifier.profile is not
// off): every passing turn (first, debug or optimisation) is profiled, unless with probability
// structural_missing its profile is missing (failed, late, no kernel of its own: it pays 0). A
// profile holds structural_kernels kernels whose time shares are uniform on the simplex (durations
// ~ Exp(1)); each kernel is clean of structural family f (reward.hpp: structural_families) with
// probability c_{k,f} = sigmoid(logit(b_{k,f}) + u_f), where b_{k,f} ~ Beta(structural_clean *
// structural_concentration, (1 - structural_clean) * structural_concentration) is drawn once per
// task and family (structural_clean 1 or 0: always or never clean, a policy that cannot move) and
// u_f is the policy's structural skill (0 at the start); a kernel that is not clean carries the
// family's first finding. The family's clean share of the turn is the time share of its clean
// kernels, as structural_score counts it. The profiles go to score_group, so with
// reward.structural on the terms are the run's own (bound, half the gap, the paid turn); with it
// off they pay nothing and the run is the unprofiled one. The skill learns by the pass skills'
// REINFORCE rule on each kernel's Bernoulli choice: u_f += skill_gain * mean(a_t * (x - c_{k,f}))
// over the kernels of the trained passing turns that have a profile. Failing turns are not
// profiled here (they gain 0 in any case). Profiles draw from a third random stream, so that the
// pass/fail and speed streams are the ones they were, profiled or not. Deterministic for a seed.
#pragma once

#include "orchestrator/advantage.hpp"
#include "orchestrator/config.hpp"
#include "orchestrator/gate.hpp"
#include "orchestrator/metrics.hpp"
#include "orchestrator/retry.hpp"
#include "orchestrator/reward.hpp"

#include <array>
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
  // The synthetic policy and its speeds (simulation.* keys; the file comment says how).
  simulation_section model;
  // Untimed (verifier.timing_reps 0), no speedup is measured and the model's speeds are not read.
  bool timed = false;
  // Without profiles (verifier.profile off) no structure is drawn and no structural term is paid.
  bool profiled = false;
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
  // Speed (timed only; empty summaries otherwise): fast_p and the geomean speedup of the trained
  // outcomes as `leap replay` counts them (a first-turn pass at its first turn's speed), and of the
  // kernels a user keeps (a first-turn pass's last passing turn: what optimisation turns bought).
  speed_summary speed;
  speed_summary kept_speed;
  // Optimisation turns (gate.optimise): groups opened for them, turns run, rollouts whose kept
  // kernel came from one, and turns that broke a working kernel.
  std::size_t optimised = 0;
  std::size_t optimise_turns = 0;
  std::size_t optimise_kept = 0;
  std::size_t optimise_broken = 0;
  // The policy after the step's update: the median first-turn speedup over tasks
  // (speedup_median * exp(shift), at most speedup_ceiling), and the optimisation turns' improve and
  // break probabilities.
  double expected_speedup = 0.0;
  double optimise_improve_probability = 0.0;
  double optimise_break_probability = 0.0;
  // Profiles and structural terms (profiled only; zero otherwise). Per family, in
  // structural_families' order: the mean clean share of the profiled turns' kernel time, and the
  // policy's expected clean share after the step's update (mean c_{k,f} over tasks).
  std::size_t profiled_turns = 0;    // passing turns with a profile
  std::size_t missing_profiles = 0;  // passing turns whose profile is missing
  std::array<double, structural_families.size()> clean_share{};
  std::array<double, structural_families.size()> expected_clean_share{};
  // The structural term score_group paid, as the mean over the passing rollouts (0 with
  // reward.structural off); and of the passes whose paid turn scored > 0, how many the bound
  // capped (the weighted sum exceeded reward.structural.bound) and how many half the gap to the
  // group's next higher reward capped (both may bite at once).
  std::size_t passes = 0;
  double structural_term = 0.0;
  std::size_t scored_passes = 0;
  std::size_t capped_by_bound = 0;
  std::size_t capped_by_gap = 0;
};

// Runs the simulation; calls on_step after each step (for progress), then returns every step.
// Preconditions: the params passed config validation (group_size >= 2, max_turns >= 1, ...).
std::vector<simulation_step> simulate(
    const simulation_params& params,
    const std::function<void(const simulation_step&)>& on_step = {});

}  // namespace leap
