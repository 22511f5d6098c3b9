#include "orchestrator/simulation.hpp"

#include "orchestrator/group_flow.hpp"
#include "orchestrator/trajectory.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <string>

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

constexpr std::size_t family_count = structural_families.size();
using family_values = std::array<double, family_count>;

// The third random stream: the profiles' kernels. Seeded apart from the other two so that
// profiling never moves which rollouts pass nor how fast they are.
struct structure_stream {
  explicit structure_stream(std::uint64_t seed) : rng(seed ^ 0xc2b2ae3d27d4eb4fULL) {}
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); }
  double exponential() { return std::exponential_distribution<double>(1.0)(rng); }

  std::mt19937_64 rng;
};

// b ~ Beta(mean * concentration, (1 - mean) * concentration), with its point masses at the ends.
double sample_clean_base(std::mt19937_64& rng, double mean, double concentration) {
  if (mean <= 0.0) {
    return 0.0;
  }
  if (mean >= 1.0) {
    return 1.0;
  }
  return sample_beta(rng, mean * concentration, (1.0 - mean) * concentration);
}

// sigmoid(logit(base) + skill), exactly 0 or 1 at the ends: no skill moves a point mass, and a
// task whose kernels are always clean stays so (logit's clamp would make it 1 - 1e-6).
double clean_probability(double base, double skill) {
  if (base <= 0.0) {
    return 0.0;
  }
  if (base >= 1.0) {
    return 1.0;
  }
  return sigmoid(std::log(base / (1.0 - base)) + skill);
}

// What the simulator drew for one turn, beside the turn_record the store would hold.
struct drawn_turn {
  bool kernel_drawn = false;  // a passing first or debug turn: its speed came from the policy
  double draw = 0.0;          // speedup_spread * z of that kernel (the REINFORCE sample)
  std::optional<optimise_choice> choice;  // an optimisation turn's choice
  // A profiled pass: its kernels, and per family the sum over them of (clean - c_{k,f}) (the
  // REINFORCE sample of each kernel's Bernoulli choice).
  std::size_t profiled_kernels = 0;
  family_values clean_residual{};
};

// A passing turn's synthetic profile (the file comment's model): kernels with uniform time shares,
// each carrying the first finding of every family it is not clean of. Adds the turn's clean shares
// to `clean_share` and its REINFORCE samples to `d`.
turn_profile_record draw_profile(structure_stream& rng, const family_values& clean_p, int kernels,
                                 std::uint32_t rollout, std::uint32_t turn, drawn_turn& d,
                                 family_values& clean_share) {
  turn_profile_record profile;
  profile.turn.rollout = rollout;
  profile.turn.turn = turn;
  const auto n = static_cast<std::size_t>(std::max(kernels, 1));
  std::vector<double> durations(n);
  double total = 0.0;
  for (double& t : durations) {
    // Exponential durations give shares uniform on the simplex; never 0, which the score reads as
    // a kernel without a measured time.
    t = std::max(rng.exponential(), 1e-9);
    total += t;
  }
  family_values clean_time{};
  for (std::size_t j = 0; j < n; ++j) {
    kernel_profile k;
    k.name = "kernel_" + std::to_string(j);
    k.duration_ns = 1e5 * durations[j];
    k.bottleneck = "unknown";
    for (std::size_t f = 0; f < family_count; ++f) {
      const bool clean = rng.uniform() < clean_p[f];
      if (clean) {
        clean_time[f] += durations[j];
      } else {
        k.findings.emplace_back(structural_families[f].findings[0]);
      }
      d.clean_residual[f] += (clean ? 1.0 : 0.0) - clean_p[f];
    }
    profile.kernels.push_back(std::move(k));
  }
  d.profiled_kernels = n;
  for (std::size_t f = 0; f < family_count; ++f) {
    clean_share[f] += clean_time[f] / total;
  }
  return profile;
}

// The profile score_group paid rollout `r` from (its passing turn; a first-turn pass's kept turn
// when optimisation turns are trained on), if it has one.
const turn_profile_record* paid_profile(const rollout_record& r, bool train_optimisation,
                                        std::span<const turn_profile_record> profiles) {
  const rollout_outcome& o = r.outcome;
  if (!o.passed()) {
    return nullptr;
  }
  const std::size_t turn = o.passed_at_turn == 1
                               ? (train_optimisation ? kept_turn(r).value_or(0) : 0)
                               : static_cast<std::size_t>(o.passed_at_turn - 1);
  for (const auto& p : profiles) {
    if (p.turn.rollout == r.index && p.turn.turn == turn) {
      return &p;
    }
  }
  return nullptr;
}

// Counts what the structural terms paid a scored group: `plain` are the rewards score_group gave
// without profiles, so each pass's term is its reward less its plain reward; a term below the
// paid turn's score was capped by half the gap, a weighted sum above the bound by the bound.
void tally_terms(const group_record& group, std::span<const double> plain,
                 std::span<const turn_profile_record> profiles, const structural_config& config,
                 bool train_optimisation, double& term_sum, simulation_step& report) {
  structural_config unbounded = config;
  unbounded.bound = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < group.rollouts.size(); ++i) {
    const rollout_record& r = group.rollouts[i];
    const double term = r.reward - plain[i];
    term_sum += term;
    const turn_profile_record* profile = paid_profile(r, train_optimisation, profiles);
    if (profile == nullptr) {
      continue;
    }
    const double score = paid_structural_score(config, *profile);
    if (score <= 0.0) {
      continue;
    }
    ++report.scored_passes;
    report.capped_by_bound += paid_structural_score(unbounded, *profile) > config.bound ? 1 : 0;
    // The term is a difference of rewards: allow for its rounding.
    report.capped_by_gap += term < score - 1e-9 ? 1 : 0;
  }
}

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
  structure_stream structure_rng(params.seed);
  std::vector<family_values> clean_base(params.profiled ? task_skill.size() : 0);
  for (family_values& task : clean_base) {
    for (double& b : task) {
      b = sample_clean_base(structure_rng.rng, params.model.structural_clean,
                            params.model.structural_concentration);
    }
  }
  family_values structure_skill{};
  const auto clean_probabilities = [&](std::size_t task) {
    family_values c{};
    for (std::size_t f = 0; f < family_count; ++f) {
      c[f] = clean_probability(clean_base[task][f], structure_skill[f]);
    }
    return c;
  };
  const bool pays_structure = params.profiled && params.reward.structural.enabled();
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
    family_values structure_gradient{};
    std::size_t structure_kernels = 0;
    double term_sum = 0.0;
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
      const family_values clean_p = params.profiled ? clean_probabilities(task) : family_values{};
      std::vector<turn_profile_record> profiles;

      // The group's life is leap run's: group_flow asks for each turn and applies the DCP gate
      // and the optimisation decision; the simulator only answers.
      group_flow flow(static_cast<int>(group_size), max_turns, decide_gate, false,
                      params.gate.optimise);
      group_record record;
      record.max_turns = max_turns;
      record.rollouts.resize(group_size);
      for (std::size_t i = 0; i < group_size; ++i) {
        record.rollouts[i].index = static_cast<std::uint32_t>(i);
      }
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
        if (turn.passed && params.profiled) {
          if (structure_rng.uniform() < params.model.structural_missing) {
            ++report.missing_profiles;
          } else {
            profiles.push_back(draw_profile(structure_rng, clean_p, params.model.structural_kernels,
                                            i, static_cast<std::uint32_t>(rollout.turns.size()), d,
                                            report.clean_share));
            ++report.profiled_turns;
          }
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
      // With the terms paid, the group is also scored without profiles: what each pass gained
      // from them is the difference (score_group is the only implementation of the terms).
      std::vector<double> plain;
      if (pays_structure) {
        group_record unprofiled = record;
        score_group(unprofiled, params.reward, params.advantage, train_optimisation);
        for (const auto& r : unprofiled.rollouts) {
          plain.push_back(r.reward);
        }
      }
      score_group(record, params.reward, params.advantage, train_optimisation, profiles);
      if (pays_structure) {
        tally_terms(record, plain, profiles, params.reward.structural, train_optimisation, term_sum,
                    report);
      }
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
          for (std::size_t f = 0; f < family_count; ++f) {
            structure_gradient[f] += per_turn[t] * d.clean_residual[f];
          }
          structure_kernels += d.profiled_kernels;
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

        report.passes += r.outcome.passed() ? 1 : 0;
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
    if (structure_kernels > 0) {
      for (std::size_t f = 0; f < family_count; ++f) {
        structure_skill[f] += params.model.skill_gain * structure_gradient[f] /
                              static_cast<double>(structure_kernels);
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
    if (report.passes > 0) {
      report.structural_term = term_sum / static_cast<double>(report.passes);
    }
    if (params.profiled) {
      for (std::size_t f = 0; f < family_count; ++f) {
        if (report.profiled_turns > 0) {
          report.clean_share[f] /= static_cast<double>(report.profiled_turns);
        }
        double sum = 0.0;
        for (const family_values& base : clean_base) {
          sum += clean_probability(base[f], structure_skill[f]);
        }
        report.expected_clean_share[f] = sum / static_cast<double>(clean_base.size());
      }
    }
    if (on_step) {
      on_step(report);
    }
    steps.push_back(std::move(report));
  }
  return steps;
}

}  // namespace leap
