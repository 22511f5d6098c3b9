// The keys of the reward and advantage sections (how a group's rollouts are paid and compared)
// and the rules between reward keys.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::config_detail {
namespace {

// What the kernel time a structural family pays for is free of, in structural_families' order (the
// families' names, hence the keys, are said there).
constexpr std::array<std::string_view, structural_families.size()> structural_clean_of = {
    "uncoalesced global loads or stores",
    "shared-memory bank conflicts",
    "low occupancy or register pressure",
    "a grid too small for the GPU or launch overhead dominating",
    "excess DRAM traffic",
};

// The structural rule's keys: named by the section first, as any of its weights may be the one set,
// then each weight and verifier.profile.
std::vector<std::string> structural_keys() {
  std::vector<std::string> keys{"reward.structural"};
  for (const auto& family : structural_families) {
    keys.push_back("reward.structural." + std::string(family.name));
  }
  keys.emplace_back("verifier.profile");
  return keys;
}

}  // namespace

void add_reward_fields(std::vector<field_spec>& f) {
  // reward
  f.push_back(choice_field(
      "reward.kind", LEAP_FIELD(reward.kind),
      "rank: the paper's tournament of (pass turn, failure) ranks, in [-1, 1]; static: "
      "reward.static_rewards per turn; binary: 1 pass, 0 failure; rank_speed: rank's tournament, "
      "passes at the same turn also ranked by speedup (verifier.timing_reps must be > 0); "
      "prime_echo: first-turn-anchored, (1 - reward.echo) x the first-turn tournament + "
      "reward.echo x rank, in [-1, 1]."));
  f.push_back(
      real_list_field("reward.static_rewards", LEAP_FIELD(reward.static_rewards),
                      "static: reward of a pass at turn m is the m-th value; one value per turn "
                      "(rollout.max_turns)."));
  f.push_back(real_field("reward.failure_reward", LEAP_FIELD(reward.failure_reward), anything(),
                         "Reward of a rollout that never passed (static and binary)."));
  f.push_back(real_field(
      "reward.speed_tie", LEAP_FIELD(reward.speed_tie), closed(0, 10),
      "rank_speed: two passes at the same turn tie unless one's speedup exceeds the other's by "
      "more than this relative margin (used when the verdicts state no noise of their own), in "
      "[0, 10]; 0.05: within 5% is a tie."));
  f.push_back(real_field(
      "reward.echo", LEAP_FIELD(reward.echo), closed(0, 1),
      "prime_echo: weight of rank's tournament over final outcomes; 1 - echo goes to the "
      "first-turn tournament (a pass at turn 1 against everything else), in [0, 1]; 1 is rank, "
      "0 pays nothing for a debug-turn pass."));
  f.push_back(real_field(
      "reward.speed_bonus.weight", LEAP_FIELD(reward.speed_bonus.weight), closed(0, 10),
      "static and binary: a pass gains weight * clamp(ln(speedup), -clip, clip); an untimed pass "
      "gains min(0, the group's lowest bonus); failures none. 0 disables it; in [0, 10]."));
  f.push_back(real_field("reward.speed_bonus.clip", LEAP_FIELD(reward.speed_bonus.clip),
                         above(0, "a clip of 0 pays no bonus; use weight 0"),
                         "Bound of |ln(speedup)| in the speed bonus; > 0. 0.7: about 2x either "
                         "way."));
  for (std::size_t i = 0; i < structural_families.size(); ++i) {
    f.push_back(real_field(
        "reward.structural." + std::string(structural_families.at(i).name),
        [i](experiment_config & c) -> auto& { return c.reward.structural.weights.at(i); },
        closed(0, 10),
        std::string(i == 0 ? "Structural term (needs verifier.profile)" : "Structural term") +
            ": what a pass gains, times the share of its kernel time without " +
            std::string(structural_clean_of.at(i)) + "; 0 disables it; in [0, 10]."));
  }
  f.push_back(real_field(
      "reward.structural.bound", LEAP_FIELD(reward.structural.bound),
      above(0, "a bound of 0 pays nothing; set the weights to 0"),
      "Most one pass gains from the structural terms together; each is also kept below half the "
      "gap to the group's next higher reward, so it never reorders rollouts; > 0."));

  // advantage
  f.push_back(
      choice_field("advantage.kind", LEAP_FIELD(advantage.kind),
                   "grpo: (R - mean) / (std + epsilon); mean_only: R - mean (Dr.GRPO); none: R."));
  f.push_back(real_field("advantage.epsilon", LEAP_FIELD(advantage.epsilon),
                         above(0, "a group of equal rewards has std 0"),
                         "Added to the group's reward std before dividing (grpo); > 0."));
  f.push_back(
      real_field("advantage.gamma", LEAP_FIELD(advantage.gamma), open_closed(0, 1),
                 "Discount of earlier turns' tokens for a non-negative advantage, in (0, 1]; 1 "
                 "weighs every turn alike."));
}

void add_reward_checks(std::vector<cross_check>& checks) {
  checks.push_back({{"reward.static_rewards", "reward.kind", "rollout.max_turns"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.reward.kind == reward_kind::static_scalar &&
                          c.reward.static_rewards.size() !=
                              static_cast<std::size_t>(c.rollout.max_turns)) {
                        return "must hold one reward per turn, rollout.max_turns = " +
                               show(c.rollout.max_turns) + " values, got " +
                               show(c.reward.static_rewards.size());
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"reward.speed_bonus.weight", "reward.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.reward.speed_bonus.weight > 0 && !takes_speed_bonus(c.reward.kind)) {
           return "applies to the scalar rewards (reward.kind static or binary), not to '" +
                  to_string(c.reward.kind) +
                  "', whose rewards are ranks; use reward.kind rank_speed to rank by speed";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"reward.speed_bonus.weight", "reward.speed_bonus.clip", "reward.static_rewards",
        "reward.failure_reward"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.reward.speed_bonus.weight <= 0 || !takes_speed_bonus(c.reward.kind)) {
           return std::nullopt;
         }
         double least_pass = 1.0;
         if (c.reward.kind == reward_kind::static_scalar && !c.reward.static_rewards.empty()) {
           least_pass =
               *std::min_element(c.reward.static_rewards.begin(), c.reward.static_rewards.end());
         }
         const double most_penalty = c.reward.speed_bonus.weight * c.reward.speed_bonus.clip;
         if (least_pass - most_penalty <= c.reward.failure_reward) {
           return "weight * clip = " + show(most_penalty) +
                  " would let a slow pass earn no more than a failure (least pass reward " +
                  show(least_pass) + ", reward.failure_reward " + show(c.reward.failure_reward) +
                  "); lower the weight or the clip";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {structural_keys(), [](const experiment_config& c) -> std::optional<std::string> {
         if (c.reward.structural.enabled() && c.verifier.profile == profile_mode::off) {
           return "pays from the profiles of passing turns, but verifier.profile is off and none "
                  "is made; set verifier.profile: passing";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"reward.kind", "verifier.timing_reps"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (pays_for_speed(c.reward) && c.verifier.timing_reps == 0) {
           return "pays for speed, but verifier.timing_reps is 0 and no speedup is ever measured; "
                  "set verifier.timing_reps (e.g. 20)";
         }
         return std::nullopt;
       }});
}

}  // namespace leap::config_detail
