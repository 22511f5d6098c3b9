// Why the policy stopped generating a turn: OpenAI's finish_reason, plus what the client saw. One
// type for the servers' wire (policy/wire), the client (policy/conversation), the LibTorch sampler
// (learner/policy) and the stored trajectories (orchestrator/trajectory).
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Stored as one byte in trajectory records: append new values, never reorder.
enum class finish_reason : std::uint8_t {
  stop,    // the model ended its answer (end of sequence, a stop token or a stop string)
  length,  // max_tokens or the context limit was reached: the answer is cut off
  abort,   // the server aborted the request (preemption, pause, shutdown); partial tokens may exist
  error,   // no answer: the request failed; the turn holds no output tokens
  other,   // a reason the server names that is none of the above (e.g. "content_filter")
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(finish_reason f) {
  switch (f) {
    case finish_reason::stop:
      return "stop";
    case finish_reason::length:
      return "length";
    case finish_reason::abort:
      return "abort";
    case finish_reason::error:
      return "error";
    case finish_reason::other:
      return "other";
  }
  return {};
}

// "stop", "length", ...; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(finish_reason f) { return enum_names::to_string(f); }

// The value of a name as to_string writes it; an error listing the valid names otherwise.
[[nodiscard]] inline result<finish_reason> parse_finish_reason(std::string_view name) {
  return enum_names::parse<finish_reason>(name, "finish reason");
}

}  // namespace leap
