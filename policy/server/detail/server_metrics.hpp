// The policy server's counters, rendered as Prometheus text for GET /metrics. Both our own names
// (leap_policy_*) and the vLLM gauges a router reads for back-pressure (vllm:num_requests_running,
// vllm:num_requests_waiting) are exported.
#pragma once

#include "policy/server/server.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace leap::policy {

// Thread-safe: counters are atomics; the per-route and per-status maps take a mutex.
class server_metrics {
 public:
  void count_request(const std::string& route);
  void count_response(int status);
  void count_fault(fault_kind kind);
  void add_tokens(std::int64_t prompt, std::int64_t generated);

  // Generation requests being generated (running) and held by a pause (waiting).
  std::atomic<std::int64_t> running{0};
  std::atomic<std::int64_t> waiting{0};
  // Broadcast deltas (an nccl update_info with base_version) staged, and refused (409 off the
  // base, a checksum or another failure).
  std::atomic<std::int64_t> deltas_staged{0};
  std::atomic<std::int64_t> deltas_refused{0};

  // The Prometheus text exposition (version 0.0.4). The gauges the server owns are passed in.
  [[nodiscard]] std::string render(std::int64_t weight_version, bool paused) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::int64_t> requests_;                      // by route
  std::map<int, std::int64_t> responses_;                             // by status code
  std::array<std::atomic<std::int64_t>, fault_kind_count> faults_{};  // by fault_kind
  std::atomic<std::int64_t> prompt_tokens_{0};
  std::atomic<std::int64_t> generation_tokens_{0};
};

}  // namespace leap::policy
