#include "orchestrator/group_flow.hpp"

#include <algorithm>
#include <utility>

namespace leap {

group_flow::group_flow(int group_size, int max_turns, std::function<gate_decision(int, int)> decide,
                       bool probe_if_closed, optimise_config optimise)
    : group_size_(group_size),
      max_turns_(max_turns),
      decide_(std::move(decide)),
      probe_if_closed_(probe_if_closed),
      optimise_config_(optimise),
      rollouts_(static_cast<std::size_t>(group_size)),
      first_speedups_(static_cast<std::size_t>(group_size), 0.0) {}

flow_actions group_flow::start() {
  flow_actions actions;
  for (std::uint32_t i = 0; i < rollouts_.size(); ++i) {
    if (rollouts_[i].requested == 0) {
      rollouts_[i].requested = 1;
      actions.request_turn.push_back(i);
    }
  }
  return actions;
}

int group_flow::rollout_turns(std::uint32_t rollout) const {
  return rollout < rollouts_.size() ? rollouts_[rollout].requested : 0;
}

bool group_flow::optimising(std::uint32_t rollout) const {
  return rollout < rollouts_.size() && rollouts_[rollout].optimising;
}

bool group_flow::may_debug(const rollout_state& r) const {
  return r.first_failed && !r.first_ended && max_turns_ > 1 && (is_open(*gate_) || probe_);
}

flow_actions group_flow::on_result(std::uint32_t rollout, const turn_result& result) {
  flow_actions actions;
  if (rollout >= rollouts_.size()) {
    return actions;
  }
  rollout_state& r = rollouts_[rollout];
  if (r.done || r.answered >= r.requested) {
    return actions;  // duplicate or unrequested
  }
  ++r.answered;

  if (r.answered == 1) {
    r.first_failed = !result.passed;
    r.first_ended = result.ended_rollout;
    n_fail_ += result.passed ? 0 : 1;
    ++first_turns_answered_;
    first_speedups_[rollout] = result.speedup;
    // Until the gate decides, a first turn that failed waits; one that passed is done, unless
    // optimisation turns may follow it.
    const bool may_optimise = optimise_config_.speedup > 0.0;
    r.done = (result.passed && !may_optimise) || result.ended_rollout || max_turns_ == 1;
    if (first_turns_answered_ == group_size_) {
      gate_ = decide_(n_fail_, group_size_);
      actions.gate = gate_;
      probe_ = !is_open(*gate_) && probe_if_closed_ && n_fail_ > 0;
      std::vector<double> pass_speedups;
      for (std::uint32_t i = 0; i < rollouts_.size(); ++i) {
        if (!rollouts_[i].first_failed) {
          pass_speedups.push_back(first_speedups_[i]);
        }
      }
      optimise_ = decide_optimise(optimise_config_, pass_speedups, max_turns_ - 1);
      actions.optimise = optimise_;
      for (std::uint32_t i = 0; i < rollouts_.size(); ++i) {
        rollout_state& other = rollouts_[i];
        if (other.done) {
          continue;
        }
        if (!other.first_failed) {
          other.optimising = *optimise_ == optimise_decision::open;
          other.done = !other.optimising;
          if (other.optimising) {
            other.requested = 2;
            actions.request_turn.push_back(i);
          }
          continue;
        }
        if (may_debug(other)) {
          other.requested = 2;
          actions.request_turn.push_back(i);
        } else {
          other.done = true;
        }
      }
    }
  } else if (r.optimising) {
    // Optimisation turn r.answered - 1 of this rollout just finished.
    if (!result.ended_rollout &&
        continue_optimising(optimise_config_, result.passed, result.speedup, r.answered - 1,
                            max_turns_ - r.answered)) {
      ++r.requested;
      actions.request_turn.push_back(rollout);
    } else {
      r.done = true;
    }
  } else {
    if (result.passed || result.ended_rollout || r.answered >= max_turns_) {
      r.done = true;
    } else {
      ++r.requested;
      actions.request_turn.push_back(rollout);
    }
  }
  finish_if_done(actions);
  return actions;
}

void group_flow::finish_if_done(flow_actions& actions) {
  if (finished_ || !gate_) {
    return;
  }
  for (const auto& r : rollouts_) {
    if (!r.done) {
      return;
    }
  }
  finished_ = true;
  actions.finished = true;
}

namespace {

// The structural score of the turn a pass is paid for (0-based `turn`): from its profile, if any.
double paid_turn_score(const structural_config& config, std::uint32_t rollout, int turn,
                       std::span<const turn_profile_record> profiles) {
  for (const auto& p : profiles) {
    if (p.turn.rollout == rollout && static_cast<int>(p.turn.turn) == turn) {
      return paid_structural_score(config, p);
    }
  }
  return 0.0;
}

}  // namespace

void score_group(group_record& group, const reward_config& reward,
                 const advantage_config& advantage, bool train_optimisation,
                 std::span<const turn_profile_record> profiles) {
  const bool structural = reward.structural.enabled() && !profiles.empty();
  std::vector<double> scores;
  std::vector<rollout_outcome> outcomes;
  std::vector<pass_speed> speeds;
  outcomes.reserve(group.rollouts.size());
  speeds.reserve(group.rollouts.size());
  for (auto& r : group.rollouts) {
    rollout_outcome o = outcome_from_turns(r);
    if (group.probe) {
      // Debug turns of a probe group are measurement only: train on the first turn alone.
      o.generated_turns = 1;
      o.passed_at_turn = o.passed_at_turn == 1 ? 1 : 0;
    }
    pass_speed speed;
    if (o.passed_at_turn == 1) {
      // Turns after a first-turn pass are optimisation turns: measurement, unless trained on.
      // Trained on, the rollout is paid for the kernel it ends with (its last pass), and its
      // rank stays a pass at turn 1: a broken optimisation turn is not the rollout's (it
      // trains on its own), so it never raises nor lowers what the kept pass earns.
      const auto kept = train_optimisation && !group.probe ? kept_turn(r) : std::nullopt;
      o.generated_turns = kept ? static_cast<int>(*kept) + 1 : 1;
      speed = kept ? kept_speed_of(r) : speed_of(r, o);
      if (structural) {
        scores.push_back(paid_turn_score(reward.structural, r.index,
                                         kept ? static_cast<int>(*kept) : 0, profiles));
      }
    } else {
      speed = speed_of(r, o);
      if (structural) {
        scores.push_back(
            o.passed() ? paid_turn_score(reward.structural, r.index, o.passed_at_turn - 1, profiles)
                       : 0.0);
      }
    }
    r.outcome = o;
    r.rank = outcome_rank(o, group.max_turns);
    r.truncated = false;
    for (const auto& t : r.turns) {
      r.truncated = r.truncated || t.finish == finish_reason::length;
    }
    outcomes.push_back(o);
    speeds.push_back(speed);
  }
  auto rewards = compute_rewards(reward, outcomes, group.max_turns, speeds);
  if (structural) {
    const auto terms = structural_terms(outcomes, rewards, scores);
    for (std::size_t i = 0; i < rewards.size(); ++i) {
      rewards[i] += terms[i];
    }
  }
  const auto advantages = compute_advantages(advantage, rewards);
  for (std::size_t i = 0; i < group.rollouts.size(); ++i) {
    group.rollouts[i].reward = rewards[i];
    group.rollouts[i].advantage = advantages[i];
  }
}

std::optional<std::size_t> kept_turn(const rollout_record& rollout) {
  if (rollout.turns.empty() || !rollout.turns.front().passed) {
    return std::nullopt;
  }
  std::size_t kept = 0;
  for (std::size_t i = 1; i < rollout.turns.size(); ++i) {
    if (rollout.turns[i].passed) {
      kept = i;
    }
  }
  return kept;
}

std::vector<std::size_t> broken_optimisation_turns(const rollout_record& rollout) {
  std::vector<std::size_t> broken;
  if (const auto kept = kept_turn(rollout)) {
    for (std::size_t i = *kept + 1; i < rollout.turns.size(); ++i) {
      broken.push_back(i);
    }
  }
  return broken;
}

pass_speed kept_speed_of(const rollout_record& rollout) {
  const auto kept = kept_turn(rollout);
  if (!kept) {
    return {};
  }
  const int turn = static_cast<int>(*kept) + 1;
  return speed_of(rollout, rollout_outcome{.passed_at_turn = turn, .generated_turns = turn});
}

double broken_turn_advantage(const group_record& group) {
  // A broken kernel is a failure, so it trains with what this group's own normalisation paid a
  // failure: the same scale as every other sequence of the group, and computable from the scored
  // group alone (the learner has no reward config). -|A| of the rollout would instead tie the
  // penalty to how well the kept pass did (a break of the group's median pass, A near 0, would
  // teach nothing; one of its fastest the most). Capped at 0 so that a break is never paid
  // (advantage.kind none with non-negative rewards). A group whose rewards all tie has no
  // failure and all advantages 0: the break then carries no signal either, like the group.
  std::optional<double> failure;
  std::optional<double> lowest;
  for (const auto& r : group.rollouts) {
    lowest = std::min(lowest.value_or(r.advantage), r.advantage);
    if (!r.outcome.passed()) {
      failure = std::min(failure.value_or(r.advantage), r.advantage);
    }
  }
  return std::min(0.0, failure.value_or(lowest.value_or(0.0)));
}

}  // namespace leap
