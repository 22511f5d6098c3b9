#include "orchestrator/simulation.hpp"

#include "orchestrator/group_flow.hpp"
#include "orchestrator/trajectory.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

namespace leap {
namespace {

double logit(double p) {
  // Clamped so that a skill that reached 0 or 1 can still move back.
  const double c = std::clamp(p, 1e-6, 1.0 - 1e-6);
  return std::log(c / (1.0 - c));
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double sample_beta(std::mt19937_64& rng, double alpha, double beta) {
  std::gamma_distribution<double> ga(alpha, 1.0);
  std::gamma_distribution<double> gb(beta, 1.0);
  const double x = ga(rng);
  const double y = gb(rng);
  return x + y > 0.0 ? x / (x + y) : 0.5;
}

bool bernoulli(std::mt19937_64& rng, double p) {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p;
}

// The optimisation turn's choices, in the order of the softmax's logits.
enum optimise_choice : std::size_t { improve = 0, same = 1, breaks = 2 };
using choice_probabilities = std::array<double, 3>;

choice_probabilities softmax(const choice_probabilities& logits) {
  const double top = std::max({logits[0], logits[1], logits[2]});
  choice_probabilities p{};
  double sum = 0.0;
  for (std::size_t c = 0; c < p.size(); ++c) {
    p[c] = std::exp(logits[c] - top);
    sum += p[c];
  }
  for (double& x : p) {
    x /= sum;
  }
  return p;
}

// The second random stream: speeds and optimisation turns. Seeded apart from the pass/fail stream
// so that drawing speeds never moves which rollouts pass.
struct speed_stream {
  explicit speed_stream(std::uint64_t seed) : rng(seed ^ 0x9e3779b97f4a7c15ULL) {}
  double normal() { return unit(rng); }
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); }

  std::mt19937_64 rng;
  std::normal_distribution<double> unit{0.0, 1.0};
};

// What the simulator drew for one turn, beside the turn_record the store would hold.
struct drawn_turn {
  bool kernel_drawn = false;  // a passing first or debug turn: its speed came from the policy
  double draw = 0.0;          // speedup_spread * z of that kernel (the REINFORCE sample)
  std::optional<optimise_choice> choice;  // an optimisation turn's choice
};

}  // namespace

std::vector<simulation_step> simulate(const simulation_params& params,
                                      const std::function<void(const simulation_step&)>& on_step) {
  std::mt19937_64 rng(params.seed);
  std::vector<double> task_skill(static_cast<std::size_t>(std::max(params.model.tasks, 1)));
  for (double& p : task_skill) {
    p = sample_beta(rng, params.model.difficulty_alpha, params.model.difficulty_beta);
  }
  speed_stream speed_rng(params.seed);
  std::vector<double> task_log_speed(task_skill.size());
  for (double& o : task_log_speed) {
    o = std::log(params.model.speedup_median) +
        params.model.speedup_task_spread * speed_rng.normal();
  }
  double speed_shift = 0.0;
  const double same_probability = std::max(0.0, 1.0 - params.model.optimise_improve_probability -
                                                    params.model.optimise_break_probability);
  choice_probabilities choice_logits = {
      std::log(std::max(params.model.optimise_improve_probability, 1e-6)),
      std::log(std::max(same_probability, 1e-6)),
      std::log(std::max(params.model.optimise_break_probability, 1e-6))};
  double fix_skill = params.model.debug_fix_probability;
  adaptive_gate adaptive(params.gate);
  const bool use_adaptive = params.gate.policy == gate_policy::dcp_adaptive;
  const auto decide_gate = [&](int n_fail, int n) {
    return use_adaptive ? adaptive.decide_and_record(n_fail, n) : decide(params.gate, n_fail, n);
  };
  std::uniform_int_distribution<std::size_t> pick_task(0, task_skill.size() - 1);
  const auto g = static_cast<std::size_t>(params.group_size);
  const bool train_optimisation = params.gate.optimise.train;
  retry_buffer buffer;

  std::vector<simulation_step> steps;
  for (int step = 1; step <= params.steps; ++step) {
    simulation_step report;
    report.step = step;
    std::vector<double> task_gradient(task_skill.size(), 0.0);
    double fix_gradient = 0.0;
    std::size_t debug_turns = 0;
    double shift_gradient = 0.0;
    std::size_t kernel_turns = 0;
    choice_probabilities choice_gradient{};
    std::size_t choice_turns = 0;
    const choice_probabilities choice_p = softmax(choice_logits);

    // The plan's fresh slots draw their task when they run (placeholders here), so that without
    // retries the random stream is the one it always was.
    const std::vector<std::size_t> fresh(static_cast<std::size_t>(std::max(params.batch_size, 0)));
    const auto plan = plan_step(buffer, params.gate.retry, static_cast<std::uint64_t>(step), fresh);
    std::vector<retry_outcome> outcomes;
    for (std::size_t b = 0; b < plan.tasks.size(); ++b) {
      const bool is_retry = plan.retries[b].has_value();
      const std::size_t task = is_retry ? plan.tasks[b] : pick_task(rng);
      const std::size_t group_size =
          g + (is_retry ? static_cast<std::size_t>(params.gate.retry.extra_rollouts) : 0);
      const int max_turns = params.max_turns + (is_retry ? params.gate.retry.extra_turns : 0);
      const std::size_t verifications_before = report.verifications;
      const double p = task_skill[task];

      // The group's life is leap run's: group_flow asks for each turn and applies the DCP gate
      // and the optimisation decision; the simulator only answers.
      group_flow flow(static_cast<int>(group_size), max_turns, decide_gate, false,
                      params.gate.optimise);
      group_record record;
      record.max_turns = max_turns;
      record.rollouts.resize(group_size);
      std::vector<std::vector<drawn_turn>> drawn(group_size);
      std::vector<double> true_log_speed(group_size, 0.0);
      const auto answer = [&](std::uint32_t i) {
        auto& rollout = record.rollouts[i];
        const bool first = rollout.turns.empty();
        drawn_turn d;
        turn_record turn;
        if (first) {
          turn.passed = bernoulli(rng, p);
        } else if (flow.optimising(i)) {
          const double u = speed_rng.uniform();
          d.choice = u < choice_p[improve]                    ? improve
                     : u < choice_p[improve] + choice_p[same] ? same
                                                              : breaks;
          turn.passed = *d.choice != breaks;
          if (*d.choice == improve) {
            true_log_speed[i] = std::min(true_log_speed[i] + std::log(params.model.optimise_gain),
                                         std::log(params.model.speedup_ceiling));
          }
        } else {
          turn.passed = bernoulli(rng, fix_skill);
        }
        turn.verdict = turn.passed ? verdict_category::pass : verdict_category::wrong_answer;
        if (turn.passed && params.timed) {
          if (!d.choice) {
            d.kernel_drawn = true;
            d.draw = params.model.speedup_spread * speed_rng.normal();
            true_log_speed[i] = std::min(task_log_speed[task] + speed_shift + d.draw,
                                         std::log(params.model.speedup_ceiling));
          }
          turn.speedup =
              std::exp(true_log_speed[i] + params.model.speedup_noise * speed_rng.normal());
          turn.speedup_noise = params.model.speedup_noise;
        }
        const double speedup = turn.speedup;
        const bool passed = turn.passed;
        rollout.turns.push_back(std::move(turn));
        drawn[i].push_back(d);
        ++report.verifications;
        return flow.on_result(
            i, turn_result{.passed = passed, .ended_rollout = false, .speedup = speedup});
      };
      // First turns in rollout order, then each rollout's later turns to its end, in rollout
      // order: the order the simulator always drew in.
      std::vector<std::uint32_t> later;
      for (const std::uint32_t i : flow.start().request_turn) {
        const auto actions = answer(i);
        later.insert(later.end(), actions.request_turn.begin(), actions.request_turn.end());
      }
      for (const std::uint32_t i : later) {
        for (bool more = true; more;) {
          const auto actions = answer(i);
          more = std::find(actions.request_turn.begin(), actions.request_turn.end(), i) !=
                 actions.request_turn.end();
        }
      }
      record.gate = flow.gate().value_or(gate_decision::closed_no_debug);
      record.n_fail = flow.n_fail();
      record.optimise = flow.optimise();
      score_group(record, params.reward, params.advantage, train_optimisation);
      group_summary summary = summarize(record);

      const bool all_failed =
          std::none_of(record.rollouts.begin(), record.rollouts.end(),
                       [](const auto& r) { return outcome_from_turns(r).passed(); });
      outcomes.push_back({task, plan.retries[b], all_failed});
      if (std::any_of(summary.advantages.begin(), summary.advantages.end(),
                      [](double a) { return a != 0.0; })) {
        ++report.signal_groups;
      }
      if (is_retry) {
        ++report.retried;
        report.recovered += all_failed ? 0 : 1;
        report.retry_verifications += report.verifications - verifications_before;
      }
      report.optimised += record.optimise == optimise_decision::open ? 1 : 0;

      // What the learner trains on (actors/learner.cpp's training_sequences): a first-turn pass's
      // turns up to its kept one with gate.optimise.train (its first turn alone without), every
      // turn of any other rollout; then each broken optimisation turn alone. One "token" per turn
      // is enough: every token of a turn shares its advantage.
      const double broken_advantage = train_optimisation ? broken_turn_advantage(record) : 0.0;
      for (std::size_t i = 0; i < group_size; ++i) {
        const auto& r = record.rollouts[i];
        const bool first_passed = r.turns.front().passed;
        const std::size_t keep = train_optimisation ? kept_turn(r).value_or(r.turns.size()) + 1 : 1;
        const std::size_t trained = first_passed ? std::min(keep, r.turns.size()) : r.turns.size();
        std::vector<int> token_turn(trained);
        for (std::size_t t = 0; t < token_turn.size(); ++t) {
          token_turn[t] = static_cast<int>(t);
        }
        const auto per_turn = token_advantages(token_turn, r.advantage, params.advantage.gamma);
        task_gradient[task] +=
            per_turn[0] * ((first_passed ? 1.0 : 0.0) - p) / static_cast<double>(group_size);
        for (std::size_t t = 0; t < trained; ++t) {
          const drawn_turn& d = drawn[i][t];
          if (d.kernel_drawn) {
            shift_gradient += per_turn[t] * d.draw;
            ++kernel_turns;
          }
          if (d.choice) {
            for (std::size_t c = 0; c < choice_gradient.size(); ++c) {
              choice_gradient[c] += per_turn[t] * ((c == *d.choice ? 1.0 : 0.0) - choice_p[c]);
            }
            ++choice_turns;
          } else if (t > 0) {
            fix_gradient += per_turn[t] * ((r.turns[t].passed ? 1.0 : 0.0) - fix_skill);
            ++debug_turns;
          }
        }
        const auto broken = broken_optimisation_turns(r);
        if (broken_advantage != 0.0) {
          for (std::size_t t = 0; t < broken.size(); ++t) {
            for (std::size_t c = 0; c < choice_gradient.size(); ++c) {
              choice_gradient[c] += broken_advantage * ((c == breaks ? 1.0 : 0.0) - choice_p[c]);
            }
            ++choice_turns;
          }
        }

        report.speed.add(r.outcome, speed_of(r, r.outcome));
        report.kept_speed.add(r.outcome, first_passed ? kept_speed_of(r) : speed_of(r, r.outcome));
        if (first_passed) {
          report.optimise_turns += r.turns.size() - 1;
          report.optimise_kept += kept_turn(r).value_or(0) > 0 ? 1 : 0;
          report.optimise_broken += broken.size();
        }
      }
      report.groups.push_back(std::move(summary));
    }
    report.retry = settle(buffer, params.gate.retry, static_cast<std::uint64_t>(step), outcomes);
    report.buffered = buffer.entries.size();

    for (std::size_t k = 0; k < task_skill.size(); ++k) {
      if (task_gradient[k] != 0.0) {
        task_skill[k] = sigmoid(logit(task_skill[k]) + params.model.skill_gain * task_gradient[k]);
      }
    }
    if (debug_turns > 0) {
      fix_skill = sigmoid(logit(fix_skill) + params.model.skill_gain * fix_gradient /
                                                 static_cast<double>(debug_turns));
    }
    if (kernel_turns > 0) {
      speed_shift += params.model.skill_gain * shift_gradient / static_cast<double>(kernel_turns);
    }
    if (choice_turns > 0) {
      for (std::size_t c = 0; c < choice_logits.size(); ++c) {
        choice_logits[c] +=
            params.model.skill_gain * choice_gradient[c] / static_cast<double>(choice_turns);
      }
    }

    report.cumulative_accuracy = cumulative_accuracy(report.groups, params.max_turns);
    report.activated_fraction = activated_group_fraction(report.groups);
    report.recovery = recovery(report.groups);
    report.turns_per_pass = turns_per_pass(report.groups);
    double sum = 0.0;
    for (double p : task_skill) {
      sum += p;
    }
    report.expected_first_turn_accuracy = sum / static_cast<double>(task_skill.size());
    report.debug_fix_probability = fix_skill;
    report.expected_speedup =
        std::min(params.model.speedup_median * std::exp(speed_shift), params.model.speedup_ceiling);
    const choice_probabilities after = softmax(choice_logits);
    report.optimise_improve_probability = after[improve];
    report.optimise_break_probability = after[breaks];
    if (on_step) {
      on_step(report);
    }
    steps.push_back(std::move(report));
  }
  return steps;
}

}  // namespace leap
