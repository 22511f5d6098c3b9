// The loss options as JSON, derived from their one field list (their fields() in
// common/loss_options.hpp, walked as common/field_list.hpp says): how rank 0 of a data-parallel
// learner hands them to the other ranks (learner/trainer_parallel.cpp). Members by their names,
// nested structs as objects, enums by their names (common/enums). Internal to learner/; no LibTorch
// here.
#pragma once

#include "common/loss_options.hpp"
#include "common/result.hpp"

#include <nlohmann/json_fwd.hpp>

namespace leap::learner::detail {

// Every listed member, defaults included. Thread-safe.
[[nodiscard]] nlohmann::json loss_options_json(const loss_options& options);

// The inverse of loss_options_json. Errors name the member ("offpolicy.mode: unknown name 'x'
// (valid: off, ...)"): a member missing, a value of the wrong JSON type or out of the member's
// range, an enum name unknown. Members not in the list are ignored. Thread-safe.
[[nodiscard]] result<loss_options> loss_options_from_json(const nlohmann::json& j);

}  // namespace leap::learner::detail
