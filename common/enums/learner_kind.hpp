// Which learner a run trains with: the config key learner.kind (orchestrator/config, the launcher).
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class learner_kind : std::uint8_t {
  record,  // stores scored batches, updates nothing (dry runs, benchmarks)
  torch,   // the LibTorch learner
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(learner_kind v) {
  switch (v) {
    case learner_kind::record:
      return "record";
    case learner_kind::torch:
      return "torch";
  }
  return {};
}

// "record", "torch"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(learner_kind v) { return enum_names::to_string(v); }

}  // namespace leap
