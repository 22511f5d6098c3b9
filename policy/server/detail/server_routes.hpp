// The policy server's routes (internal to policy/), as tables the transport installs: generation
// (server_generation_routes.cpp: /v1/completions, /v1/chat/completions, /generate with SSE
// streaming, /tokenize, /detokenize) and control (server_control_routes.cpp: weight sync,
// pause/continue, sleep/wake, collective_rpc, LoRA, health, models, metrics, model info).
#pragma once

#include "common/result.hpp"
#include "policy/server/detail/server_metrics.hpp"
#include "policy/server/detail/server_state.hpp"
#include "policy/server/detail/server_transport.hpp"
#include "policy/server/server.hpp"
#include "policy/wire/wire.hpp"

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace leap::policy {

// What every route works on. Everything referenced outlives the routes (the server owns it).
struct server_context {
  const server_config& config;
  policy_backend& backend;
  server_state& state;
  server_metrics& metrics;
};

// The start of every route that reads a JSON body: the body parsed (parse_json_body: depth bound,
// syntax), then `parse(body, args...)` (a wire.hpp parser, giving a result<T>). A failure of either
// is that step's error, unchanged; a route answers it with bad_request().
template <class Parse, class... Args>
[[nodiscard]] auto parse_body(const http_request& req, Parse&& parse, Args&&... args)
    -> std::invoke_result_t<Parse, const nlohmann::json&, Args...> {
  auto body = parse_json_body(req.body());
  if (!body) {
    return body.err();
  }
  return std::invoke(std::forward<Parse>(parse), std::as_const(*body), std::forward<Args>(args)...);
}

// Makes routes' handlers of a service's member handlers: bind(&service_type::handler) calls it on
// `service`, which every handler made so keeps alive.
template <class Service>
[[nodiscard]] auto route_binder(std::shared_ptr<Service> service) {
  return [service = std::move(service)](auto method) -> route_handler {
    return [service, method](const http_request& req, httplib::Response& res) {
      return ((*service).*method)(req, res);
    };
  };
}

// A request the client got wrong: a 400 with the error's message as it is.
[[nodiscard]] inline http_error bad_request(const error& failure) {
  return http_error{400, failure.message};
}

[[nodiscard]] std::vector<route> generation_routes(const server_context& context);
[[nodiscard]] std::vector<route> control_routes(const server_context& context);

}  // namespace leap::policy
