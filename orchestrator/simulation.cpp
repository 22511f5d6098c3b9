#include "orchestrator/simulation.hpp"

#include <algorithm>
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

// What one rollout did, turn by turn: passed[t] for every generated turn t.
struct simulated_rollout {
  std::vector<bool> passed;
};

}  // namespace

std::vector<simulation_step> simulate(const simulation_params& params,
                                      const std::function<void(const simulation_step&)>& on_step) {
  std::mt19937_64 rng(params.seed);
  std::vector<double> task_skill(static_cast<std::size_t>(std::max(params.tasks, 1)));
  for (double& p : task_skill) {
    p = sample_beta(rng, params.difficulty_alpha, params.difficulty_beta);
  }
  double fix_skill = params.debug_fix_probability;
  adaptive_gate adaptive(params.gate);
  const bool use_adaptive = params.gate.policy == gate_policy::dcp_adaptive;
  std::uniform_int_distribution<std::size_t> pick_task(0, task_skill.size() - 1);
  const auto g = static_cast<std::size_t>(params.group_size);
  retry_buffer buffer;

  std::vector<simulation_step> steps;
  for (int step = 1; step <= params.steps; ++step) {
    simulation_step report;
    report.step = step;
    std::vector<double> task_gradient(task_skill.size(), 0.0);
    double fix_gradient = 0.0;
    std::size_t debug_turns = 0;

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
      std::vector<simulated_rollout> rollouts(group_size);
      int n_fail = 0;
      for (auto& r : rollouts) {
        r.passed.push_back(bernoulli(rng, p));
        n_fail += r.passed.back() ? 0 : 1;
      }
      report.verifications += group_size;

      const int n = static_cast<int>(group_size);
      const gate_decision decision =
          use_adaptive ? adaptive.decide_and_record(n_fail, n) : decide(params.gate, n_fail, n);
      if (is_open(decision)) {
        for (auto& r : rollouts) {
          while (!r.passed.back() && static_cast<int>(r.passed.size()) < max_turns) {
            r.passed.push_back(bernoulli(rng, fix_skill));
            ++report.verifications;
          }
        }
      }

      group_summary summary;
      summary.gate = decision;
      for (const auto& r : rollouts) {
        rollout_outcome o;
        o.generated_turns = static_cast<int>(r.passed.size());
        o.passed_at_turn = r.passed.back() ? o.generated_turns : 0;
        summary.outcomes.push_back(o);
      }
      const auto rewards = compute_rewards(params.reward, summary.outcomes, max_turns);
      summary.advantages = compute_advantages(params.advantage, rewards);
      const bool all_failed = std::none_of(rollouts.begin(), rollouts.end(),
                                           [](const auto& r) { return r.passed.back(); });
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

      // One "token" per generated turn is enough: every token of a turn shares its advantage.
      for (std::size_t i = 0; i < group_size; ++i) {
        const auto& r = rollouts[i];
        std::vector<int> token_turn(r.passed.size());
        for (std::size_t t = 0; t < token_turn.size(); ++t) {
          token_turn[t] = static_cast<int>(t);
        }
        const auto per_turn =
            token_advantages(token_turn, summary.advantages[i], params.advantage.gamma);
        task_gradient[task] +=
            per_turn[0] * ((r.passed[0] ? 1.0 : 0.0) - p) / static_cast<double>(group_size);
        for (std::size_t t = 1; t < per_turn.size(); ++t) {
          fix_gradient += per_turn[t] * ((r.passed[t] ? 1.0 : 0.0) - fix_skill);
          ++debug_turns;
        }
      }
      report.groups.push_back(std::move(summary));
    }
    report.retry = settle(buffer, params.gate.retry, static_cast<std::uint64_t>(step), outcomes);
    report.buffered = buffer.entries.size();

    for (std::size_t k = 0; k < task_skill.size(); ++k) {
      if (task_gradient[k] != 0.0) {
        task_skill[k] = sigmoid(logit(task_skill[k]) + params.skill_gain * task_gradient[k]);
      }
    }
    if (debug_turns > 0) {
      fix_skill = sigmoid(logit(fix_skill) +
                          params.skill_gain * fix_gradient / static_cast<double>(debug_turns));
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
    if (on_step) {
      on_step(report);
    }
    steps.push_back(std::move(report));
  }
  return steps;
}

}  // namespace leap
