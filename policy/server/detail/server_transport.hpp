// The policy server on the project's one HTTP transport (internal to policy/): routes are plain
// data, (method, path, handler), installed on policy/http/http.hpp's gated_server, which the
// daemon's control API serves on too (connections, deadlines, the cap, http_request, what a route
// throws, httplib's own refusals, all in OpenAI's error shape here). A handler never throws on
// purpose: it returns the error to answer with, which the one wrapper here turns into OpenAI's
// error body and its status, counting the route; every response is stamped with x-weight-version.
// The routes know nothing of sockets.
//
// A handler that wants its connection dropped with no reply (the "drop" fault; httplib has no way)
// calls drop_current_connection(): every later write on it fails, httplib gives up on the
// response, and the connection is closed having sent nothing.
#pragma once

#include "common/result.hpp"
#include "policy/http/http.hpp"
#include "policy/server/detail/server_metrics.hpp"
#include "policy/server/server.hpp"
#include "policy/wire/wire.hpp"

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace leap::policy {

// A route's handler: fills the response, or returns the error to answer with instead.
using route_handler =
    std::function<std::optional<http_error>(const http_request&, httplib::Response&)>;

struct route {
  http_method method = http_method::get;
  std::string path;
  route_handler handler;
};

// The request this thread serves closes its connection with no reply at all. Call from a handler.
void drop_current_connection();

// Owns the listening socket and its worker threads. Not copyable; stop() is idempotent.
class http_transport {
 public:
  explicit http_transport(const server_config& config);
  ~http_transport();
  http_transport(const http_transport&) = delete;
  http_transport& operator=(const http_transport&) = delete;

  // Installs `routes` (each through the one wrapper, counted in `metrics`), binds config's
  // host:port and listens on a background thread. `weight_version` is read for every response's
  // x-weight-version header that a handler did not set. Returns the bound port.
  result<int> start(std::vector<route> routes, server_metrics& metrics,
                    std::function<std::int64_t()> weight_version);

  // Stops accepting, closes the listening socket and joins the accept loop (which joins the
  // workers). A worker still in a handler finishes it first: end generations before calling.
  void stop();

 private:
  const server_config& config_;
  std::unique_ptr<gated_server> http_;
};

}  // namespace leap::policy
