// The client's view of one policy server, and the pure rules that route a turn and account for
// failures. The client's event loop owns the states; nothing here locks.
//
// Routing: a turn goes to the endpoint with the fewest requests in flight among those that are up,
// admitting (not in a weight sync) and below their in-flight limit. A turn pinned to an endpoint
// (its conversation's previous turns were served there, so the server's prefix cache holds its ids)
// goes only there, and waits for a free slot there, unless that endpoint is down or not admitting:
// then it is routed like any other turn (the prefix is recomputed elsewhere; nothing is lost).
#pragma once

#include <span>
#include <string>

namespace leap::policy {

struct endpoint_state {
  std::string base_url;
  int max_in_flight = 256;
  int in_flight = 0;      // generation requests sent and not yet answered
  bool up = true;         // false after down_after_failures consecutive failures
  bool admitting = true;  // false while a weight sync runs or after one failed
  int consecutive_failures = 0;
  std::string weight_version;  // set by the last successful weight sync ("" before any)

  [[nodiscard]] bool can_take() const { return up && admitting && in_flight < max_in_flight; }
  [[nodiscard]] bool routable() const { return up && admitting; }
};

enum class route_kind : unsigned char {
  send,         // send to `endpoint` now
  wait_pinned,  // the pinned endpoint is full: wait for a slot on `endpoint`
  wait_any,     // every routable endpoint is full, or none is routable: wait for any
};

struct route {
  route_kind kind = route_kind::wait_any;
  int endpoint = -1;
};

// Where a turn goes now. `pinned` is an endpoint index or -1 (out-of-range pins count as -1).
[[nodiscard]] route choose_route(std::span<const endpoint_state> endpoints, int pinned);

// Failure accounting. record_failure returns true when this failure marks the endpoint down.
bool record_failure(endpoint_state& endpoint, int down_after_failures);
void record_success(endpoint_state& endpoint);
// A health check's outcome: a failure counts like a failed request; a pass brings a down endpoint
// back up (and clears its failures). Returns true when it brought the endpoint back up.
bool record_health_check(endpoint_state& endpoint, bool passed, int down_after_failures);

}  // namespace leap::policy
