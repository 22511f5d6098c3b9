#include "orchestrator/reward.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace leap {
namespace {

// N_worse - N_better for every rollout at once: with the ranks sorted, the peers strictly worse
// than rank r are those before lower_bound(r) and the strictly better ones those from
// upper_bound(r) on. O(G log G) instead of the G^2 pairwise loop; ties count for neither side.
std::vector<double> rank_rewards(std::span<const rollout_outcome> outcomes, int max_turns) {
  const std::size_t g = outcomes.size();
  std::vector<double> rewards(g, 0.0);
  if (g < 2) {
    return rewards;
  }
  std::vector<int> ranks(g);
  for (std::size_t i = 0; i < g; ++i) {
    ranks[i] = outcome_rank(outcomes[i], max_turns);
  }
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  const auto peers = static_cast<double>(g - 1);
  for (std::size_t i = 0; i < g; ++i) {
    const auto worse = std::lower_bound(sorted.begin(), sorted.end(), ranks[i]) - sorted.begin();
    const auto better = sorted.end() - std::upper_bound(sorted.begin(), sorted.end(), ranks[i]);
    rewards[i] = static_cast<double>(worse - better) / peers;
  }
  return rewards;
}

// prime_echo: both tournaments sum to 0 and lie in [-1, 1], so their convex mix does too. The
// first-turn one is the rank tournament with every later pass folded into the failures.
std::vector<double> prime_echo_rewards(double echo, std::span<const rollout_outcome> outcomes,
                                       int max_turns) {
  std::vector<double> rewards = rank_rewards(outcomes, max_turns);
  // A first-turn pass has the top rank M (clamping included, so max_turns = 1 folds nothing).
  const int top = std::max(max_turns, 1);
  std::vector<rollout_outcome> first(outcomes.begin(), outcomes.end());
  for (rollout_outcome& o : first) {
    o.passed_at_turn = outcome_rank(o, max_turns) == top ? 1 : 0;
  }
  const std::vector<double> prime = rank_rewards(first, 1);
  // NaN fails both comparisons of a clamp; it counts as the default.
  const double e = std::isnan(echo) ? 0.5 : std::clamp(echo, 0.0, 1.0);
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    rewards[i] = (1.0 - e) * prime[i] + e * rewards[i];
  }
  return rewards;
}

pass_speed speed_at(std::span<const pass_speed> speeds, std::size_t i) {
  return i < speeds.size() ? speeds[i] : pass_speed{};
}

// rank_speed: the tournament over (rank, speed) with a tie margin. The margin makes "faster" not
// transitive (a ~ b, b ~ c, a > c), so the pairs are counted one by one rather than from a sort.
std::vector<double> rank_speed_rewards(const reward_config& config,
                                       std::span<const rollout_outcome> outcomes, int max_turns,
                                       std::span<const pass_speed> speeds) {
  const std::size_t g = outcomes.size();
  std::vector<double> rewards(g, 0.0);
  if (g < 2) {
    return rewards;
  }
  std::vector<int> ranks(g);
  std::vector<pass_speed> speed(g);
  for (std::size_t i = 0; i < g; ++i) {
    ranks[i] = outcome_rank(outcomes[i], max_turns);
    if (ranks[i] > 0) {
      speed[i] = speed_at(speeds, i);
      if (!measured_speedup(speed[i].speedup)) {
        speed[i] = {};
      }
    }
  }
  // An untimed pass stands in as its turn's slowest timed pass (speedup and noise), so it ties
  // with that one and loses to every pass clearly faster than it.
  std::vector<pass_speed> effective = speed;
  for (std::size_t i = 0; i < g; ++i) {
    if (ranks[i] == 0 || speed[i].speedup) {
      continue;
    }
    for (std::size_t j = 0; j < g; ++j) {
      if (ranks[j] == ranks[i] && speed[j].speedup &&
          (!effective[i].speedup || *speed[j].speedup < *effective[i].speedup)) {
        effective[i] = speed[j];
      }
    }
  }
  const auto faster = [&](std::size_t a, std::size_t b) {
    const pass_speed& x = effective[a];
    const pass_speed& y = effective[b];
    if (!x.speedup || !y.speedup) {
      return false;
    }
    const double margin =
        x.noise && y.noise ? std::max(*x.noise, 0.0) + std::max(*y.noise, 0.0) : config.speed_tie;
    return *x.speedup > *y.speedup * (1.0 + margin);
  };
  const auto peers = static_cast<double>(g - 1);
  for (std::size_t i = 0; i < g; ++i) {
    int net = 0;
    for (std::size_t j = 0; j < g; ++j) {
      if (i == j) {
        continue;
      }
      if (ranks[i] != ranks[j]) {
        net += ranks[i] > ranks[j] ? 1 : -1;
      } else if (ranks[i] > 0) {
        net += faster(i, j) ? 1 : (faster(j, i) ? -1 : 0);
      }
    }
    rewards[i] = static_cast<double>(net) / peers;
  }
  return rewards;
}

// Adds the speed bonus to the passes of a scalar reward (see the header).
void add_speed_bonus(const speed_bonus_config& config, std::span<const rollout_outcome> outcomes,
                     std::span<const pass_speed> speeds, std::vector<double>& rewards) {
  if (config.weight <= 0) {
    return;
  }
  double lowest = 0.0;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const auto s = speed_at(speeds, i).speedup;
    if (outcomes[i].passed() && measured_speedup(s)) {
      lowest = std::min(lowest, speed_bonus(config, *s));
    }
  }
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    if (!outcomes[i].passed()) {
      continue;
    }
    const auto s = speed_at(speeds, i).speedup;
    rewards[i] += measured_speedup(s) ? speed_bonus(config, *s) : lowest;
  }
}

double static_reward(const reward_config& config, const rollout_outcome& outcome, int max_turns) {
  if (!outcome.passed()) {
    return config.failure_reward;
  }
  if (config.static_rewards.empty()) {
    return 1.0;
  }
  const int turn = std::min(outcome.passed_at_turn, std::max(max_turns, 1));
  const auto index = std::min(static_cast<std::size_t>(turn - 1), config.static_rewards.size() - 1);
  return config.static_rewards[index];
}

}  // namespace

int outcome_rank(const rollout_outcome& outcome, int max_turns) {
  if (!outcome.passed()) {
    return 0;
  }
  const int m = std::max(max_turns, 1);
  return m - std::min(outcome.passed_at_turn, m) + 1;
}

bool measured_speedup(const std::optional<double>& speedup) {
  return speedup && std::isfinite(*speedup) && *speedup > 0;
}

double speed_bonus(const speed_bonus_config& config, double speedup) {
  if (config.weight <= 0 || !std::isfinite(speedup) || speedup <= 0) {
    return 0.0;
  }
  const double clip = std::max(config.clip, 0.0);
  return config.weight * std::clamp(std::log(speedup), -clip, clip);
}

std::vector<double> compute_rewards(const reward_config& config,
                                    std::span<const rollout_outcome> outcomes, int max_turns,
                                    std::span<const pass_speed> speeds) {
  switch (config.kind) {
    case reward_kind::rank:
      return rank_rewards(outcomes, max_turns);
    case reward_kind::rank_speed:
      return rank_speed_rewards(config, outcomes, max_turns, speeds);
    case reward_kind::prime_echo:
      return prime_echo_rewards(config.echo, outcomes, max_turns);
    case reward_kind::static_scalar: {
      std::vector<double> rewards;
      rewards.reserve(outcomes.size());
      for (const rollout_outcome& o : outcomes) {
        rewards.push_back(static_reward(config, o, max_turns));
      }
      add_speed_bonus(config.speed_bonus, outcomes, speeds, rewards);
      return rewards;
    }
    case reward_kind::binary: {
      std::vector<double> rewards;
      rewards.reserve(outcomes.size());
      for (const rollout_outcome& o : outcomes) {
        rewards.push_back(o.passed() ? 1.0 : config.failure_reward);
      }
      add_speed_bonus(config.speed_bonus, outcomes, speeds, rewards);
      return rewards;
    }
  }
  return std::vector<double>(outcomes.size(), 0.0);
}

bool structural_config::enabled() const {
  return std::any_of(weights.begin(), weights.end(), [](double w) { return w > 0; });
}

double structural_score(const structural_config& config, std::span<const kernel_profile> kernels) {
  if (!config.enabled() || kernels.empty() || !(config.bound > 0)) {
    return 0.0;
  }
  double total = 0.0;
  for (const kernel_profile& k : kernels) {
    total += std::isfinite(k.duration_ns) && k.duration_ns > 0 ? k.duration_ns : 0.0;
  }
  // Time-weighted, so that a tiny clean kernel added beside a slow flawed one buys almost nothing.
  const auto share = [&](const kernel_profile& k) {
    if (total <= 0) {
      return 1.0 / static_cast<double>(kernels.size());
    }
    return std::isfinite(k.duration_ns) && k.duration_ns > 0 ? k.duration_ns / total : 0.0;
  };
  double score = 0.0;
  for (std::size_t f = 0; f < structural_families.size(); ++f) {
    const double w = config.weights[f];
    if (!(w > 0)) {
      continue;
    }
    double clean = 0.0;
    for (const kernel_profile& k : kernels) {
      const bool fired = std::any_of(k.findings.begin(), k.findings.end(), [&](const auto& name) {
        const auto& family = structural_families[f].findings;
        return std::find(family.begin(), family.end(), name) != family.end() && !name.empty();
      });
      clean += fired ? 0.0 : share(k);
    }
    score += w * clean;
  }
  return std::min(score, config.bound);
}

double paid_structural_score(const structural_config& config, const turn_profile_record& profile) {
  if (profile.source != "ncu") {
    return 0.0;
  }
  return structural_score(config, profile.kernels);
}

std::vector<double> structural_terms(std::span<const rollout_outcome> outcomes,
                                     std::span<const double> rewards,
                                     std::span<const double> scores) {
  std::vector<double> terms(outcomes.size(), 0.0);
  for (std::size_t i = 0; i < outcomes.size() && i < rewards.size(); ++i) {
    const double score = i < scores.size() ? scores[i] : 0.0;
    if (!outcomes[i].passed() || !std::isfinite(score) || score <= 0) {
      continue;
    }
    // Half the gap keeps the sum strictly below the next reward, which gains >= 0 itself.
    double cap = score;
    for (std::size_t j = 0; j < rewards.size(); ++j) {
      if (rewards[j] > rewards[i]) {
        cap = std::min(cap, (rewards[j] - rewards[i]) / 2.0);
      }
    }
    terms[i] = cap;
  }
  return terms;
}

bool takes_speed_bonus(reward_kind kind) {
  return kind == reward_kind::static_scalar || kind == reward_kind::binary;
}

bool pays_for_speed(const reward_config& reward) {
  return reward.kind == reward_kind::rank_speed ||
         (reward.speed_bonus.weight > 0 && takes_speed_bonus(reward.kind));
}

}  // namespace leap
