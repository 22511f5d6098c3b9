// The learner's loss options, said once: the config's learner section holds this type (its keys,
// learner.clip_low ... learner.offpolicy.max_staleness, bind to these members in
// orchestrator/detail/schema_learner.cpp) and the LibTorch learner computes with it
// (learner/loss.hpp has the formulas). It lives here because the orchestrator and the learner may
// not know each other, and both know common/.
//
// A new option is added in three places: its member (with its default) and its entry in fields()
// below, its range in validate() below, and its config key in the schema; the loss math uses it.
// Every other form the options take is derived from fields() (common/field_list.hpp, the same
// list the stored records use): the data-parallel learner's wire (learner/detail/loss_json.hpp),
// enums there by their names.
#pragma once

#include "common/enums/loss_aggregation.hpp"
#include "common/enums/offpolicy_mode.hpp"
#include "common/field_list.hpp"
#include "common/result.hpp"

#include <cmath>
#include <string>
#include <tuple>

namespace leap {

// Off-policy filtering: see learner/loss.hpp for what each mode does.
struct offpolicy_options {
  offpolicy_mode mode = offpolicy_mode::off;  // Default: off
  double low = 0.5;   // lower end of the ratio band (drop_sequence, mask_token). Default: 0.5
  double high = 2.0;  // upper end of the band, and truncate_token's cap. Default: 2
  // Tokens whose sampling weights are more than this many versions behind the learner's are
  // masked; -1 = no cap. Default: -1
  int max_staleness = -1;

  friend bool operator==(const offpolicy_options&, const offpolicy_options&) = default;
};

struct loss_options {
  double clip_low = 0.2;    // the ratio is floored at 1 - clip_low. Default: 0.2
  double clip_high = 0.28;  // the ratio is capped at 1 + clip_high (DAPO). Default: 0.28
  double kl_coef = 0.0;     // weight of the k3 KL to the reference; 0 = no reference. Default: 0
  loss_aggregation aggregation =
      loss_aggregation::seq_mean_token_mean;  // Default: seq_mean_token_mean
  offpolicy_options offpolicy;                // Default: off, no staleness cap

  friend bool operator==(const loss_options&, const loss_options&) = default;
};

// Each struct's members, listed once (common/field_list.hpp), in their declaration order.
template <maybe_const<offpolicy_options> X>
constexpr auto fields(X& o) {
  return std::tuple{field("mode", o.mode), field("low", o.low), field("high", o.high),
                    field("max_staleness", o.max_staleness)};
}

template <maybe_const<loss_options> X>
constexpr auto fields(X& o) {
  return std::tuple{field("clip_low", o.clip_low), field("clip_high", o.clip_high),
                    field("kl_coef", o.kl_coef), field("aggregation", o.aggregation),
                    field("offpolicy", o.offpolicy)};
}

// Checks the ranges: clip_low in [0, 1), clip_high >= 0, kl_coef >= 0 (all finite); offpolicy:
// 0 <= low <= 1 <= high (finite), max_staleness >= -1. The error names the member
// ("'clip_low' must be in [0, 1) (got 1.000000)"). The config checks the same ranges with its
// own messages (file, line and key); this guards options built in code.
[[nodiscard]] inline status validate(const loss_options& o) {
  if (!std::isfinite(o.clip_low) || o.clip_low < 0 || o.clip_low >= 1) {
    return error{"'clip_low' must be in [0, 1) (got " + std::to_string(o.clip_low) + ")"};
  }
  if (!std::isfinite(o.clip_high) || o.clip_high < 0) {
    return error{"'clip_high' must be >= 0 (got " + std::to_string(o.clip_high) + ")"};
  }
  if (!std::isfinite(o.kl_coef) || o.kl_coef < 0) {
    return error{"'kl_coef' must be >= 0 (got " + std::to_string(o.kl_coef) + ")"};
  }
  const auto& op = o.offpolicy;
  if (!std::isfinite(op.low) || op.low < 0 || op.low > 1) {
    return error{"'offpolicy.low' must be in [0, 1] (got " + std::to_string(op.low) + ")"};
  }
  if (!std::isfinite(op.high) || op.high < 1) {
    return error{"'offpolicy.high' must be >= 1 (got " + std::to_string(op.high) + ")"};
  }
  if (op.max_staleness < -1) {
    return error{"'offpolicy.max_staleness' must be >= -1 (got " +
                 std::to_string(op.max_staleness) + ")"};
  }
  return ok_status();
}

}  // namespace leap
