// Fault injection for the project's policy server, so that a client is shown to ride through what
// real inference servers do under load. Faults apply to the generation routes only
// (/v1/completions, /v1/chat/completions, /generate); health, metrics, tokenizer and control routes
// never fail on purpose.
//
// Which request gets which fault is a pure function of (config, the request's arrival number on the
// generation routes): the first arrivals take the kinds of `fault_config::script` in order (a test
// scripts exactly what a client meets), every later one draws with the configured probabilities
// from (seed, arrival number), so the i-th generation request of a server gets the same fault in
// every run with the same config, and a retry (a new arrival) draws afresh.
#pragma once

#include "common/result.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

// The spec names (parse_fault_spec, to_string) are given after each kind.
enum class fault_kind : std::uint8_t {
  none,
  drop,       // "drop": the connection closes with no reply at all (the client sees an empty reply)
  http_5xx,   // "5xx": 502, 503 or 504 (drawn) with an OpenAI error body
  stall,      // "stall": the reply is held for stall_duration, beyond a sane client timeout
  malformed,  // "malformed": 200 with a body that is not JSON (streams: one event that is not JSON)
  truncate,   // "truncate": the body stops mid-way and the connection closes (streams: no [DONE])
  abort,      // "abort": 200, the generation ends early with finish "abort" and partial tokens
  status_429,    // "429": too many requests, with a Retry-After header (fault_config::retry_after)
  status_500,    // "500": an internal error (an engine that died; clients do not retry it)
  status_502,    // "502"
  status_503,    // "503"
  status_504,    // "504"
  no_token_ids,  // "no_token_ids": 200 without token ids (a vLLM that ignores return_token_ids)
  context_too_long,  // "context_too_long": 400 in the engine's context-length wording
  bad_request,       // "bad_request": 400 for a sampling parameter the engine refuses
  // "hold": 200, but the generation waits after its hold_tokens-th token until it is aborted (a
  // pause in abort mode, the client leaving), the server stops, the served weight version changes
  // or hold_duration passes, then goes on (a slow generation that a weight sync lands in)
  hold,
};

// How many kinds there are (for per-kind tables).
inline constexpr std::size_t fault_kind_count = 16;

[[nodiscard]] const char* to_string(fault_kind kind);

struct fault_config {
  // Probabilities per generation request; they must add up to at most 1. Default: all 0.
  double drop = 0.0;
  double http_5xx = 0.0;
  double stall = 0.0;
  double malformed = 0.0;
  double truncate = 0.0;
  double abort = 0.0;
  double status_429 = 0.0;
  double status_500 = 0.0;
  double status_502 = 0.0;
  double status_503 = 0.0;
  double status_504 = 0.0;
  double no_token_ids = 0.0;
  double context_too_long = 0.0;
  double bad_request = 0.0;
  double hold = 0.0;
  // The faults of the first generation arrivals, in order (none: that arrival is served); the
  // probabilities apply from arrival script.size() on. Default: empty.
  std::vector<fault_kind> script;
  // How long a stalled reply is held. Default: 30 s.
  std::chrono::milliseconds stall_duration{30000};
  // How many tokens an aborted generation keeps (at most: it may end on its own first).
  // Default: 0, drawn per request in 1..8.
  std::size_t abort_tokens = 0;
  // After how many generated tokens a held generation waits (it is not held when it ends first).
  // Default: 1.
  std::size_t hold_tokens = 1;
  // The longest a held generation waits. Default: 60 s.
  std::chrono::milliseconds hold_duration{60000};
  // The Retry-After header of a 429, in seconds. Default: 1.
  std::chrono::seconds retry_after{1};
  // Default: 0.
  std::uint64_t seed = 0;

  [[nodiscard]] bool any() const;
};

// Parses "drop=0.05,5xx=0.05,stall=0.02,malformed=0.02,truncate=0.02,abort=0.05,429=0.01,500=0.01,
// 502=0,503=0,504=0,no_token_ids=0,context_too_long=0,bad_request=0,hold=0,
// script=503:drop:none:abort:hold,stall_ms=30000,abort_tokens=2,hold_tokens=4,hold_ms=60000,
// retry_after_s=1,seed=7". Every key is optional; "" and "none" mean
// no faults. `script` lists kinds by their spec names, separated by ':'. Errors name the bad key or
// value and what is accepted. Pure.
[[nodiscard]] result<fault_config> parse_fault_spec(std::string_view spec);

struct fault_decision {
  fault_kind kind = fault_kind::none;
  int http_status = 0;       // the status of an HTTP error fault (429, 5xx, 400), else 0
  std::uint64_t detail = 0;  // spare randomness for the fault's shape (where to cut, abort)
};

// The fault for the generation request that arrived `serial`-th (0-based). Pure.
[[nodiscard]] fault_decision decide_fault(const fault_config& config, std::uint64_t serial);

}  // namespace leap::policy
