#include "policy/client/detail/endpoint.hpp"

namespace leap::policy {

route choose_route(std::span<const endpoint_state> endpoints, int pinned) {
  if (pinned >= 0 && static_cast<std::size_t>(pinned) < endpoints.size() &&
      endpoints[pinned].routable()) {
    return endpoints[pinned].can_take() ? route{route_kind::send, pinned}
                                        : route{route_kind::wait_pinned, pinned};
  }
  int best = -1;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    const auto& e = endpoints[i];
    if (!e.can_take()) {
      continue;
    }
    if (best < 0 || e.in_flight < endpoints[best].in_flight) {
      best = static_cast<int>(i);
    }
  }
  return best >= 0 ? route{route_kind::send, best} : route{route_kind::wait_any, -1};
}

bool record_failure(endpoint_state& endpoint, int down_after_failures) {
  ++endpoint.consecutive_failures;
  if (endpoint.up && endpoint.consecutive_failures >= down_after_failures) {
    endpoint.up = false;
    return true;
  }
  return false;
}

void record_success(endpoint_state& endpoint) { endpoint.consecutive_failures = 0; }

bool record_health_check(endpoint_state& endpoint, bool passed, int down_after_failures) {
  if (!passed) {
    record_failure(endpoint, down_after_failures);
    return false;
  }
  // A passing check revives a down endpoint, but does not forgive an up one its failed requests: a
  // server can answer /health and still fail every generation.
  if (!endpoint.up) {
    endpoint.up = true;
    endpoint.consecutive_failures = 0;
    return true;
  }
  return false;
}

}  // namespace leap::policy
