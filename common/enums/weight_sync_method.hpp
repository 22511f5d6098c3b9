// How the torch learner's weights reach the servers: the config key policy.weight_sync
// (orchestrator/config, the launcher). What each method does differs by switches on this enum (no
// default:), so that -Wswitch names every place a new method must reach.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class weight_sync_method : std::uint8_t {
  automatic,  // the config picks: in_memory for an embedded server with a model, else disk
  disk,       // a folder per step, loaded through the server's route
  in_memory,  // the embedded server copies the learner's weights in the process
  nccl,       // vLLM's weight-transfer engine: the learner broadcasts to one server
  ipc,        // vLLM's weight-transfer routes: one server on the learner's GPU copies its buffer
};

// The one name table. Empty for a byte outside the enum. "auto" is the canonical name of
// `automatic`; configs written before this enum spell it "" (policy.weight_sync's field reads
// that too), which this table cannot hold: an empty name ends it.
constexpr std::string_view name_of(weight_sync_method m) {
  switch (m) {
    case weight_sync_method::automatic:
      return "auto";
    case weight_sync_method::disk:
      return "disk";
    case weight_sync_method::in_memory:
      return "in_memory";
    case weight_sync_method::nccl:
      return "nccl";
    case weight_sync_method::ipc:
      return "ipc";
  }
  return {};
}

// "auto", "disk", "in_memory", "nccl", "ipc"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(weight_sync_method m) {
  return enum_names::to_string(m);
}

}  // namespace leap
