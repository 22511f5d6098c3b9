#include "policy/server/detail/server_transport.hpp"

#include "policy/http/http.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace leap::policy {
namespace {

gate_limits limits_of(const server_config& config) {
  gate_limits limits;
  limits.threads = config.threads;
  limits.max_connections = config.max_connections;
  limits.listen_backlog = config.listen_backlog;
  limits.header_timeout = config.header_timeout;
  limits.body_timeout = config.body_timeout;
  limits.idle_timeout = config.keep_alive_timeout;
  limits.read_timeout = config.read_timeout;
  limits.write_timeout = config.write_timeout;
  limits.body_min_rate = config.body_min_rate;
  limits.body_rate_grace = config.body_rate_grace;
  limits.max_requests_per_connection = std::max<std::size_t>(1, config.keep_alive_max_requests);
  // httplib refuses form-encoded bodies over 8 KB (and any body over the payload limit).
  limits.too_large_message =
      "the request body is too large for its content type (form-encoded bodies: 8192 bytes at "
      "most); send JSON with Content-Type: application/json";
  limits.error_body = [](int status, const std::string& message) {
    return dump_json(render_error({status, message}));
  };
  return limits;
}

// The one wrapper every route goes through: a returned error becomes OpenAI's error JSON with its
// status (what a handler throws, the transport answers 500 in the same shape).
http_handler wrap(std::string path, route_handler handler, server_metrics& metrics) {
  return [&metrics, path = std::move(path), handler = std::move(handler)](const http_request& req,
                                                                          httplib::Response& res) {
    metrics.count_request(path);
    if (auto failure = handler(req, res)) {
      res.status = failure->status;
      res.set_content(dump_json(render_error(*failure)), "application/json");
    }
  };
}

}  // namespace

void drop_current_connection() { gated_server::drop_connection(); }

http_transport::http_transport(const server_config& config)
    : config_(config), http_(std::make_unique<gated_server>(limits_of(config))) {}

http_transport::~http_transport() { stop(); }

result<int> http_transport::start(std::vector<route> routes, server_metrics& metrics,
                                  std::function<std::int64_t()> weight_version) {
  gated_server& http = *http_;
  for (auto& r : routes) {
    http.route(r.method, r.path, wrap(r.path, std::move(r.handler), metrics));
  }
  if (config_.on_request) {
    http.after_route([&on_request = config_.on_request](const http_request& req,
                                                        const httplib::Response& res) {
      on_request(answered_request{req.method(), req.path(), req.query(), req.body(),
                                  req.header("X-Request-Id"), res.status == -1 ? 200 : res.status});
    });
  }
  // Runs just before a response is written, so that a client reading /metrics right after its
  // response already sees it counted (a logger would run after the write).
  http.before_reply([&metrics, weight_version = std::move(weight_version)](httplib::Response& res) {
    if (!res.has_header("x-weight-version")) {
      res.set_header("x-weight-version", std::to_string(weight_version()));
    }
    if (!gated_server::dropped()) {
      metrics.count_response(res.status);
    }
  });
  auto port = http.start(config_.host, config_.port);
  if (!port) {
    return error{"policy server: " + port.err().message};
  }
  return *port;
}

void http_transport::stop() { http_->stop(); }

}  // namespace leap::policy
