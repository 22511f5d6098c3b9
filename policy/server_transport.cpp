#include "policy/server_transport.hpp"

#include "policy/http_gate.hpp"

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
  limits.max_requests_per_connection = std::max<std::size_t>(1, config.keep_alive_max_requests);
  limits.error_body = [](int status, const std::string& message) {
    return dump_json(render_error({status, message}));
  };
  return limits;
}

}  // namespace

class http_server final : public gated_server {
 public:
  explicit http_server(const server_config& config) : gated_server(limits_of(config)) {}
};

namespace {

// The one wrapper every route goes through: a returned error and anything thrown become OpenAI's
// error JSON, with the error's status (500 for what was thrown).
httplib::Server::Handler wrap(std::string path, route_handler handler, server_metrics& metrics,
                              const std::function<void(const answered_request&)>& on_request) {
  return [&metrics, &on_request, path = std::move(path), handler = std::move(handler)](
             const httplib::Request& req, httplib::Response& res) {
    metrics.count_request(path);
    std::optional<http_error> failure;
    try {
      failure = handler(req, res);
    } catch (const std::exception& e) {
      failure = http_error{500, std::string("internal error: ") + e.what()};
    } catch (...) {
      failure = http_error{500, "internal error"};
    }
    if (failure) {
      res.status = failure->status;
      res.set_content(dump_json(render_error(*failure)), "application/json");
    }
    if (on_request) {
      std::string query;
      for (const auto& [key, value] : req.params) {
        query += (query.empty() ? "" : "&") + key + "=" + value;
      }
      on_request(answered_request{req.method, req.path, std::move(query), req.body,
                                  req.get_header_value("X-Request-Id"),
                                  res.status == -1 ? 200 : res.status});
    }
  };
}

}  // namespace

void drop_current_connection() { gated_server::drop_connection(); }

http_transport::http_transport(const server_config& config)
    : config_(config), http_(std::make_unique<http_server>(config)) {}

http_transport::~http_transport() { stop(); }

result<int> http_transport::start(std::vector<route> routes, server_metrics& metrics,
                                  std::function<std::int64_t()> weight_version) {
  http_server& http = *http_;
  http.set_payload_max_length(std::size_t{64} << 20U);
  for (auto& r : routes) {
    auto handler = wrap(r.path, std::move(r.handler), metrics, config_.on_request);
    if (r.method == http_method::get) {
      http.Get(r.path, std::move(handler));
    } else {
      http.Post(r.path, std::move(handler));
    }
  }
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        const int status = res.status == -1 ? 404 : res.status;
        res.status = status;
        std::string message = "request failed with status " + std::to_string(status);
        if (status == 404) {
          message = "no route " + req.method + " " + req.path;
        } else if (status == 413) {
          // httplib refuses form-encoded bodies over 8 KB (and any body over the payload limit).
          message =
              "the request body is too large for its content type (form-encoded bodies: "
              "8192 bytes at most); send JSON with Content-Type: application/json";
        }
        res.set_content(dump_json(render_error({status, message})), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  // Runs just before a response is written, so that a client reading /metrics right after its
  // response already sees it counted (a logger would run after the write).
  http.set_post_routing_handler([&metrics, weight_version = std::move(weight_version)](
                                    const httplib::Request&, httplib::Response& res) {
    if (!res.has_header("x-weight-version")) {
      res.set_header("x-weight-version", std::to_string(weight_version()));
    }
    if (!gated_server::dropped()) {
      metrics.count_response(res.status);
    }
  });

  int port = config_.port;
  if (port == 0) {
    port = http.bind_to_any_port(config_.host);
    if (port < 0) {
      return error{"policy server: cannot bind a free port on " + config_.host};
    }
  } else if (!http.bind_to_port(config_.host, port)) {
    return error{"policy server: cannot bind " + config_.host + ":" + std::to_string(port) +
                 " (in use, or not an address of this host)"};
  }
  listener_ = std::thread([&http] { http.serve(); });
  return port;
}

void http_transport::stop() {
  http_->halt();
  if (listener_.joinable()) {
    listener_.join();
  }
}

}  // namespace leap::policy
