// Which server API the policy client speaks: the two HTTP dialects of inference servers. A server
// flavour (server_flavour.hpp) says which dialect it is spoken to in.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

enum class wire_flavour : std::uint8_t {
  vllm,    // POST /v1/completions with a token-id prompt, return_token_ids, logprobs: 0
  sglang,  // POST /generate with input_ids, return_logprob, sampling_params
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(wire_flavour f) {
  switch (f) {
    case wire_flavour::vllm:
      return "vllm";
    case wire_flavour::sglang:
      return "sglang";
  }
  return {};
}

// "vllm" or "sglang"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(wire_flavour f) { return enum_names::to_string(f); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<wire_flavour> parse_wire_flavour(std::string_view name) {
  return enum_names::parse<wire_flavour>(name, "wire flavour");
}

}  // namespace leap
