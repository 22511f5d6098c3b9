// The life of one group, as pure state: which turn of which rollout to request next, when the DCP
// gate decides, and when the group is finished. The actors drive it with verdicts as they arrive
// and carry out the actions it returns; it never waits for anything itself, so it is tested
// without threads.
//
// Turn t of a rollout is requested once turn t-1 failed, only in a group whose gate opened (or a
// probe group), and while t < max_turns. A turn that was cut off (finish_reason length) or got no
// answer ends its rollout: there is nothing to debug in a truncated answer.
//
// Optimisation turns (gate.optimise, off by default): when the gate decides, decide_optimise()
// rules on the first-turn passes; when it opens, every rollout whose first turn passed gets turn
// 2 (an optimisation turn), and more while continue_optimising() allows. With optimisation off
// the flow is exactly the DCP flow: a first turn that passed is done at once.
#pragma once

#include "orchestrator/advantage.hpp"
#include "orchestrator/gate.hpp"
#include "orchestrator/reward.hpp"
#include "orchestrator/trajectory.hpp"

#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace leap {

// What the caller must do after an event.
struct flow_actions {
  // Rollouts whose next turn (rollout_turns(i) is its index) must now be generated.
  std::vector<std::uint32_t> request_turn;
  // Set once, by the event that completed the first turns: the gate's decision, and the
  // optimisation decision taken with it.
  std::optional<gate_decision> gate;
  std::optional<optimise_decision> optimise;
  // Set once, by the event that finished the last rollout: score and hand the group on.
  bool finished = false;
};

// The outcome of one verified turn, as the flow needs it.
struct turn_result {
  bool passed = false;
  // The answer was cut off or missing (finish_reason length, abort after retries, error).
  bool ended_rollout = false;
  // The measured speedup of a timed pass over the reference; 0 when not measured.
  double speedup = 0.0;
};

class group_flow {
 public:
  // decide(n_fail, group_size) gives the gate decision; it is called once, when the G-th first-turn
  // result arrives (the stateful dcp_adaptive gate lives with the caller). With probe_if_closed a
  // closed group's failed rollouts still run their debug turns, for measurement only. `optimise`
  // rules optimisation turns (default: off).
  group_flow(int group_size, int max_turns, std::function<gate_decision(int, int)> decide,
             bool probe_if_closed = false, optimise_config optimise = {});

  // The first turns of every rollout: request all of them at once.
  [[nodiscard]] flow_actions start();

  // Records the result of the current turn of `rollout`. Precondition: that turn was requested
  // and has no result yet (a duplicate or unknown result is ignored and returns no action, so a
  // retried message can never double-count).
  [[nodiscard]] flow_actions on_result(std::uint32_t rollout, const turn_result& result);

  [[nodiscard]] int rollout_turns(std::uint32_t rollout) const;  // turns requested so far
  [[nodiscard]] bool finished() const { return finished_; }
  [[nodiscard]] std::optional<gate_decision> gate() const { return gate_; }
  [[nodiscard]] bool probe() const { return probe_; }
  [[nodiscard]] int n_fail() const { return n_fail_; }
  [[nodiscard]] std::optional<optimise_decision> optimise() const { return optimise_; }
  // Whether `rollout`'s turns after the first are optimisation turns (its first turn passed in a
  // group opened for them), as opposed to debug turns.
  [[nodiscard]] bool optimising(std::uint32_t rollout) const;

 private:
  struct rollout_state {
    int requested = 0;  // turns requested
    int answered = 0;   // turns with a result
    bool done = false;
    bool first_failed = false;
    bool first_ended = false;
    bool optimising = false;
  };

  [[nodiscard]] bool may_debug(const rollout_state& r) const;
  void finish_if_done(flow_actions& actions);

  int group_size_;
  int max_turns_;
  std::function<gate_decision(int, int)> decide_;
  bool probe_if_closed_;
  optimise_config optimise_config_;
  std::vector<rollout_state> rollouts_;
  std::vector<double> first_speedups_;  // per rollout: its first turn's measured speedup
  int first_turns_answered_ = 0;
  int n_fail_ = 0;
  std::optional<gate_decision> gate_;
  std::optional<optimise_decision> optimise_;
  bool probe_ = false;
  bool finished_ = false;
};

// Fills each rollout's outcome, rank, reward and advantage from its turns, as training uses them:
// for a probe group only the first turn counts (its debug turns are measurement). Also sets
// `truncated`. Preconditions: every rollout has at least one turn; group.max_turns >= 1.
// Optimisation turns (the turns after a first-turn pass) are measurement unless
// `train_optimisation` (gate.optimise.train): then a first-turn pass of a group that is not a
// probe is scored with the speed of its kept turn (kept_turn()), its rank stays that of a pass at
// turn 1, and its outcome's generated_turns counts the turns up to the kept one (the turns its own
// training sequence holds). Default: off (the first turn's speed, generated_turns 1).
// `profiles`: the profiles at hand of the group's turns (matched by rollout index and turn); with
// reward.structural on, a pass gains the structural term of its paid turn's profile (the kept turn
// when trained on, else its passing turn), added to its reward before the advantages.
void score_group(group_record& group, const reward_config& reward,
                 const advantage_config& advantage, bool train_optimisation = false,
                 std::span<const turn_profile_record> profiles = {});

// ---- Training on optimisation turns (gate.optimise.train) -------------------------------------
//
// A rollout whose first turn passed and that ran optimisation turns trains on its turns up to the
// kept one, with the per-turn discount (token_advantages), so the turn that produced the kept speed
// gets the rollout's advantage and earlier turns the discounted one. Each optimisation turn after
// the kept one broke a working kernel (it failed after a pass: wrong, or no longer compiling); it
// trains as a sequence of its own with broken_turn_advantage(), so the policy is pushed away from
// breaking what worked, while the rollout's own sequence is not blamed for it.

// The 0-based index of the turn a user would keep of a rollout whose first turn passed: its last
// passing turn. None when the first turn did not pass (or there is none).
[[nodiscard]] std::optional<std::size_t> kept_turn(const rollout_record& rollout);

// The optimisation turns after the kept turn (all failed, by its definition), 0-based and in
// order; empty when the first turn did not pass. The group flow ends a rollout at its first failed
// optimisation turn, so there is at most one, its last.
[[nodiscard]] std::vector<std::size_t> broken_optimisation_turns(const rollout_record& rollout);

// What the verifier measured of the kept turn (speed_of() for that turn); nothing when the first
// turn did not pass or the kept turn was not timed.
[[nodiscard]] pass_speed kept_speed_of(const rollout_record& rollout);

// The advantage a broken optimisation turn of `group` trains with: min(0, the group's failure
// advantage), where the failure advantage is the lowest advantage of a rollout whose outcome is a
// failure, or, when none failed, the group's lowest advantage (a failure would rank below every
// rollout of it). 0 for a group without rollouts. Never positive.
[[nodiscard]] double broken_turn_advantage(const group_record& group);

}  // namespace leap
