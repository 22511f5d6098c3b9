// The weight-transfer backend a policy server runs, as vLLM's `--weight-transfer-config
// '{"backend": B}'` names it: the project's server (policy/server/server.hpp) and `leap
// serve-policy`. What each backend does differs by switches on this enum (no default:), so that
// -Wswitch names every place a new backend must reach.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in vLLM's flag and in error bodies: never rename a value.
enum class transfer_backend : std::uint8_t {
  disk,  // update_info names a folder, loaded through the policy backend's load_weights
  nccl,  // the policy backend receives a broadcast from the trainer's c10d group
  ipc,   // the policy backend copies the tensors out of the trainer's CUDA buffer
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(transfer_backend b) {
  switch (b) {
    case transfer_backend::disk:
      return "disk";
    case transfer_backend::nccl:
      return "nccl";
    case transfer_backend::ipc:
      return "ipc";
  }
  return {};
}

// Whether the backend stages tensors in the policy backend (policy_backend::receive_weights, then
// commit_weights), rather than naming a folder the server loads itself (disk).
constexpr bool stages_tensors(transfer_backend b) {
  switch (b) {
    case transfer_backend::disk:
      return false;
    case transfer_backend::nccl:
    case transfer_backend::ipc:
      return true;
  }
  return false;
}

// "disk", "nccl", "ipc"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(transfer_backend b) { return enum_names::to_string(b); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<transfer_backend> parse_transfer_backend(std::string_view name) {
  return enum_names::parse<transfer_backend>(name, "weight-transfer backend");
}

}  // namespace leap
