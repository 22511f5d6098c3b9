// Which split a group belongs to: validation groups are never trained on. Stored with every group
// (storage's codec as one byte, keys and JSON exports by name), so values only grow at the end.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in exports and logs: never rename a value.
enum class split_kind : std::uint8_t { train, validation };

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(split_kind v) {
  switch (v) {
    case split_kind::train:
      return "train";
    case split_kind::validation:
      return "validation";
  }
  return {};
}

// "train", "validation"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(split_kind v) { return enum_names::to_string(v); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<split_kind> parse_split_kind(std::string_view name) {
  return enum_names::parse<split_kind>(name, "split");
}

}  // namespace leap
