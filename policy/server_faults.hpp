// Fault injection for the project's policy server, so that a client is shown to ride through what
// real inference servers do under load. Faults apply to the generation routes only
// (/v1/completions, /v1/chat/completions, /generate); health, metrics, tokenizer and control routes
// never fail on purpose.
//
// Which request gets which fault is a pure function of (seed, the request's arrival number on the
// generation routes): the i-th generation request of a server gets the same fault in every run with
// the same seed, and a retry (a new arrival) draws afresh, so a client that retries gets through.
#pragma once

#include "common/result.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace leap::policy {

enum class fault_kind : std::uint8_t {
  none,
  drop,       // the connection closes with no reply at all (the client sees an empty reply)
  http_5xx,   // 502, 503 or 504 with an OpenAI error body
  stall,      // the reply is held for stall_duration, beyond a sane client timeout, then sent
  malformed,  // 200 with a body that is not valid JSON (streams: one event that is not JSON)
  truncate,   // the body stops mid-way and the connection closes (streams: cut before [DONE])
  abort,      // 200, but the generation ends early with finish_reason "abort" and partial tokens
};

[[nodiscard]] const char* to_string(fault_kind kind);

struct fault_config {
  // Probabilities per generation request; they must add up to at most 1. Default: all 0.
  double drop = 0.0;
  double http_5xx = 0.0;
  double stall = 0.0;
  double malformed = 0.0;
  double truncate = 0.0;
  double abort = 0.0;
  // How long a stalled reply is held. Default: 30 s.
  std::chrono::milliseconds stall_duration{30000};
  // Default: 0.
  std::uint64_t seed = 0;

  [[nodiscard]] bool any() const;
};

// Parses "drop=0.05,5xx=0.05,stall=0.02,malformed=0.02,truncate=0.02,abort=0.05,stall_ms=30000,
// seed=7". Every key is optional; "" and "none" mean no faults. Errors name the bad key or value
// and what is accepted. Pure.
[[nodiscard]] result<fault_config> parse_fault_spec(std::string_view spec);

struct fault_decision {
  fault_kind kind = fault_kind::none;
  int http_status = 0;       // for http_5xx: 502, 503 or 504
  std::uint64_t detail = 0;  // spare randomness for the fault's shape (where to cut, abort)
};

// The fault for the generation request that arrived `serial`-th (0-based). Pure.
[[nodiscard]] fault_decision decide_fault(const fault_config& config, std::uint64_t serial);

}  // namespace leap::policy
