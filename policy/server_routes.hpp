// The policy server's routes (internal to policy/), as tables the transport installs: generation
// (server_generation_routes.cpp: /v1/completions, /v1/chat/completions, /generate with SSE
// streaming, /tokenize, /detokenize) and control (server_control_routes.cpp: weight sync,
// pause/continue, sleep/wake, collective_rpc, LoRA, health, models, metrics, model info).
#pragma once

#include "policy/server.hpp"
#include "policy/server_metrics.hpp"
#include "policy/server_state.hpp"
#include "policy/server_transport.hpp"

#include <vector>

namespace leap::policy {

// What every route works on. Everything referenced outlives the routes (the server owns it).
struct server_context {
  const server_config& config;
  policy_backend& backend;
  server_state& state;
  server_metrics& metrics;
};

[[nodiscard]] std::vector<route> generation_routes(const server_context& context);
[[nodiscard]] std::vector<route> control_routes(const server_context& context);

}  // namespace leap::policy
