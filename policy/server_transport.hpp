// The policy server's transport (internal to policy/): sockets, cpp-httplib, and the one way a
// route is served. Routes are plain data, (method, path, handler); a handler never throws on
// purpose: it returns the error to answer with. The transport's one wrapper turns a returned error,
// and anything thrown anyway, into OpenAI's error body and its status, and counts the route; it
// also answers unknown routes and httplib's own refusals in the same shape, and stamps every
// response with x-weight-version. The routes themselves know nothing of sockets.
//
// Connections are the gate's (http_gate.hpp), which the daemon's control API uses too: requests
// reach a worker only whole, so slow or idle clients hold no worker; header and body deadlines,
// a connection cap answered with 503 and Retry-After. A handler that wants its connection dropped
// with no reply (the "drop" fault; httplib has no way) calls drop_current_connection(): every later
// write on it fails, httplib gives up on the response, and the connection is closed having sent
// nothing.
#pragma once

#include "common/result.hpp"
#include "policy/server.hpp"
#include "policy/server_metrics.hpp"
#include "policy/wire.hpp"

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
    std::function<std::optional<http_error>(const httplib::Request&, httplib::Response&)>;

enum class http_method : std::uint8_t { get, post };

struct route {
  http_method method = http_method::get;
  std::string path;
  route_handler handler;
};

// The request this thread serves closes its connection with no reply at all. Call from a handler.
void drop_current_connection();

class http_server;

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
  std::unique_ptr<http_server> http_;
  std::thread listener_;
};

}  // namespace leap::policy
