// How the learner's token losses become the batch loss: the config key learner.loss_aggregation
// (orchestrator/config) and the loss itself (learner/loss) read this one type.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class loss_aggregation : std::uint8_t {
  token_mean,           // every generated token of the batch weighs the same
  seq_mean_token_mean,  // mean over rollouts of each rollout's token mean (the paper's sample-level
                        // loss)
  seq_mean_token_sum,   // mean over rollouts of each rollout's token sum
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(loss_aggregation a) {
  switch (a) {
    case loss_aggregation::token_mean:
      return "token_mean";
    case loss_aggregation::seq_mean_token_mean:
      return "seq_mean_token_mean";
    case loss_aggregation::seq_mean_token_sum:
      return "seq_mean_token_sum";
  }
  return {};
}

// "token_mean", "seq_mean_token_mean", "seq_mean_token_sum"; "unknown(N)" outside the enum.
[[nodiscard]] inline std::string to_string(loss_aggregation a) { return enum_names::to_string(a); }

}  // namespace leap
