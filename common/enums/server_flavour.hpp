// Which inference server a run talks to: the config key policy.flavour. Everything the client does
// differently per flavour is read off this header: its dialect on the wire (wire_of), whose
// weight-reload routes its servers have (reload_routes_of) and its line in the config reference
// (meaning_of). A flavour that speaks an existing dialect is its value and its case in each switch
// here (none has a default:, so -Wswitch names each); nothing in policy/ or the config changes.
// (The config's rules that need one server's own routes name it: nccl and ipc need vllm itself.)
#pragma once

#include "common/enums/enum_names.hpp"
#include "common/enums/wire_flavour.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in config files: never rename a value.
enum class server_flavour : std::uint8_t {
  vllm,      // an external vLLM server (OpenAI-compatible /v1/completions)
  sglang,    // an external SGLang server (/generate)
  embedded,  // the project's own policy server, started in-process (serves both dialects)
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(server_flavour f) {
  switch (f) {
    case server_flavour::vllm:
      return "vllm";
    case server_flavour::sglang:
      return "sglang";
    case server_flavour::embedded:
      return "embedded";
  }
  return {};
}

// The dialect the client speaks to the flavour's servers.
constexpr wire_flavour wire_of(server_flavour f) {
  switch (f) {
    case server_flavour::vllm:
      return wire_flavour::vllm;
    case server_flavour::sglang:
      return wire_flavour::sglang;
    case server_flavour::embedded:
      return wire_flavour::vllm;  // it serves both; the client speaks vLLM's
  }
  return wire_flavour::vllm;
}

// Whose routes load a learner's step folder into the flavour's servers (policy::disk_sync_plan):
// vLLM's /collective_rpc reload or SGLang's /update_weights_from_disk.
constexpr wire_flavour reload_routes_of(server_flavour f) {
  switch (f) {
    case server_flavour::vllm:
      return wire_flavour::vllm;
    case server_flavour::sglang:
    case server_flavour::embedded:  // the project's server serves SGLang's load route
      return wire_flavour::sglang;
  }
  return wire_flavour::sglang;
}

// What the flavour is, as the config reference's policy.flavour line says it. Empty for a byte
// outside the enum.
constexpr std::string_view meaning_of(server_flavour f) {
  switch (f) {
    case server_flavour::vllm:
      return "/v1/completions, token ids";
    case server_flavour::sglang:
      return "/generate";
    case server_flavour::embedded:
      return "in-process; no endpoints";
  }
  return {};
}

// "vllm", "sglang", "embedded"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(server_flavour f) { return enum_names::to_string(f); }

}  // namespace leap
