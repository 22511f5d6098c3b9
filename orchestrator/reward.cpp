#include "orchestrator/reward.hpp"

#include <algorithm>
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

std::vector<double> compute_rewards(const reward_config& config,
                                    std::span<const rollout_outcome> outcomes, int max_turns) {
  switch (config.kind) {
    case reward_kind::rank:
      return rank_rewards(outcomes, max_turns);
    case reward_kind::static_scalar: {
      std::vector<double> rewards;
      rewards.reserve(outcomes.size());
      for (const rollout_outcome& o : outcomes) {
        rewards.push_back(static_reward(config, o, max_turns));
      }
      return rewards;
    }
    case reward_kind::binary: {
      std::vector<double> rewards;
      rewards.reserve(outcomes.size());
      for (const rollout_outcome& o : outcomes) {
        rewards.push_back(o.passed() ? 1.0 : config.failure_reward);
      }
      return rewards;
    }
  }
  return std::vector<double>(outcomes.size(), 0.0);
}

std::string to_string(reward_kind k) {
  switch (k) {
    case reward_kind::rank:
      return "rank";
    case reward_kind::static_scalar:
      return "static";
    case reward_kind::binary:
      return "binary";
  }
  return "unknown";
}

std::optional<reward_kind> parse_reward_kind(const std::string& name) {
  for (const reward_kind k : {reward_kind::rank, reward_kind::static_scalar, reward_kind::binary}) {
    if (to_string(k) == name) {
      return k;
    }
  }
  return std::nullopt;
}

}  // namespace leap
