// What policy/http offers, its one public header (implemented by http.cpp): the one HTTP transport
// of the project's two servers, the policy server (policy/server/server_transport.cpp installs its
// routes) and the daemon's control API (tools/daemon/daemon.cpp): cpp-httplib parses requests,
// the gate owns the connections, and routes see the transport's own http_request, never
// httplib's. The transport also owns what every route shares: anything a route throws is a 500,
// what httplib refuses itself (unknown routes, bodies over the limit, malformed requests) gets a
// body, all in the server's one error shape (gate_limits::error_body); binding; the serving
// thread.
//
// Why. httplib 0.11 gives every accepted connection a worker thread from accept to close, so a
// client that sends its headers a byte a second holds a worker for as long as it likes, and more
// such clients than workers starve everyone else. Here one thread, the gate, holds every
// connection while its request is incomplete, polling them all, and hands a worker only a request
// whose request line and headers (and, when declared and small, body) are in memory. Slow and idle
// clients hold a file descriptor and a buffer, never a worker:
// - Header deadline: a connection whose request line and headers are not all in within
//   header_timeout of its accept (of its first byte, for the next request on a kept-alive one) is
//   answered 408 and closed; one that sent nothing is closed silently.
// - Body deadline: a body the gate waits for must be in within body_timeout of its headers, else
//   408. The gate holds a body the client sends unasked (a declared length, or chunked) up to
//   prebuffer_body_bytes: whole when it fits, else its first prebuffer_body_bytes; the worker
//   reads what is left, and what the gate could not hold (Expect: 100-continue, bodies that need a
//   grant), within body_timeout of the worker's start and, past body_rate_grace, at
//   body_min_rate on average, else the request fails and the connection is closed: a body that
//   trickles holds a worker for body_rate_grace, not for the whole deadline.
// - Head check: a server's cheap, pure check of a request's line and headers (the daemon's bearer
//   token) runs in the gate once the headers are in: a refused request is answered by the gate
//   and never reaches a worker; an accepted one has its body held in the gate like any other.
// - Connection cap: at most max_connections are open (in the gate or in a worker; by default the
//   worker count, so that a whole request never waits for a worker). A connection accepted at
//   the cap takes the place of the one that has waited longest in the gate for its request (a
//   kept-alive idle one first, closed silently; else one incomplete for at least
//   evictable_after, answered 503 with Retry-After); when none qualifies, the new one is
//   answered 503 with Retry-After at once. Either way the gate answers, never a worker, so
//   clients slower than their peers lose their place, and a normal request is served while
//   slow ones fill the cap.
// - Body buffer: when the bodies the gate holds reach prebuffer_total_bytes and another body's
//   bytes wait to be read, the body holding the most bytes that has sent nothing for
//   body_stall_time is answered 408 and its bytes freed, so stalled bodies cannot pause the
//   reading of the others until their deadline.
// - The listen backlog is widened (httplib listens with 5, which a burst of connects overflows;
//   with SYN cookies the overflow is answered with resets).
// - Closing: after its last response a connection is shut for writing and drained for a moment
//   before it is closed, so that unread bytes of the request (a body refused from its headers) do
//   not turn the close into a reset that destroys the response before the client has read it.
#pragma once

#include "common/result.hpp"

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace leap::policy {

enum class http_method : std::uint8_t { get, post };

// A request as a route sees it: what was asked, never the connection. Valid during the call that
// it is handed to.
class http_request {
 public:
  explicit http_request(const httplib::Request& req) : req_(req) {}

  [[nodiscard]] const std::string& method() const { return req_.method; }
  [[nodiscard]] const std::string& path() const { return req_.path; }
  [[nodiscard]] const std::string& body() const { return req_.body; }
  // The header's value ("" when absent); names are case-insensitive.
  [[nodiscard]] std::string header(const std::string& name) const;
  [[nodiscard]] bool has_param(const std::string& key) const;
  // The i-th value of a query parameter ("" when absent), decoded.
  [[nodiscard]] std::string param(const std::string& key, std::size_t i = 0) const;
  [[nodiscard]] std::size_t param_count(const std::string& key) const;
  // Every query parameter, decoded, as key=value joined by '&' (keys in order).
  [[nodiscard]] std::string query() const;
  // The route pattern's capture `i` (1 for the first group).
  [[nodiscard]] std::string match(std::size_t i) const;

 private:
  const httplib::Request& req_;
};

// A route's handler: fills the response (status, headers, content or a content provider).
using http_handler = std::function<void(const http_request&, httplib::Response&)>;
// The gate's check of a request's line and headers (gate_limits::head_check): a pure function of
// them, run on the gate's one thread, so it must be cheap and never block. True lets the request
// go on; false answers with `res` as the check left it (status, headers, content) and closes.
using gate_head_check = std::function<bool(const http_request&, httplib::Response&)>;
// Sees a request and its response, as they are when the route is done.
using http_observer = std::function<void(const http_request&, const httplib::Response&)>;

struct gate_limits {
  std::size_t threads = 8;  // workers that run whole requests. Default: 8
  // Open at once (in the gate or in a worker); at the cap a new connection takes the place of
  // one waiting longest in the gate, else it is refused with 503 and Retry-After. 0: `threads`.
  // Never more than the descriptor limit less 64. Default: 0 (the worker count)
  std::size_t max_connections = 0;
  // How long a request must have been incomplete in the gate before a new connection at the cap
  // may take its place. Default: 1 s
  std::chrono::milliseconds evictable_after{1000};
  // At prebuffer_total_bytes, a body that has sent nothing for this long while another waits for
  // room is answered 408 (the largest first). Default: 1 s
  std::chrono::milliseconds body_stall_time{1000};
  // Run in the gate on every request's line and headers before any of its body is read
  // (gate_head_check). Default: none (every request goes on)
  gate_head_check head_check;
  int listen_backlog = 1024;                        // Default: 1024
  std::chrono::milliseconds header_timeout{10000};  // Default: 10 s
  std::chrono::milliseconds body_timeout{60000};    // Default: 60 s
  std::chrono::milliseconds idle_timeout{5000};     // a kept-alive connection's wait for its next
                                                    // request. Default: 5 s
  std::chrono::milliseconds read_timeout{30000};    // one wait of a worker's read. Default: 30 s
  std::chrono::milliseconds write_timeout{30000};   // one wait of a write. Default: 30 s
  std::size_t max_header_bytes = std::size_t{64} << 10;  // request line and headers; beyond: 413.
                                                         // Default: 64 KiB
  // How much of a body the gate reads before a worker gets the request: a body up to this whole,
  // a larger or chunked one its first this many bytes (0: none; bodies are then read by the
  // worker). The gate holds at most prebuffer_total_bytes of bodies at once; beyond, it reads no
  // more body bytes until some are handed on (the waiting bodies' deadlines still run).
  // Default: 16 MiB
  std::size_t prebuffer_body_bytes = std::size_t{16} << 20;
  std::size_t prebuffer_total_bytes = std::size_t{256} << 20;  // Default: 256 MiB
  // A worker reading a body drops a client that, body_rate_grace after the worker started, has
  // sent it fewer than body_min_rate bytes a second on average (0: no minimum).
  // Default: 16 KiB/s after 5 s
  std::size_t body_min_rate = std::size_t{16} << 10;
  std::chrono::milliseconds body_rate_grace{5000};
  std::size_t max_requests_per_connection = 1;  // 1: Connection: close after each. Default: 1
  // Whether a request's body may be read only after grant_body(), or up to max_body_bytes once
  // it passed head_check (the daemon's token). Default: false (every body may be read)
  bool body_needs_grant = false;
  // A body longer than this is refused with 413. Default: 64 MiB
  std::size_t max_body_bytes = std::size_t{64} << 20;
  // The message of a 413 the server answers itself (a body over max_body_bytes, or over its
  // grant). Default: "the request body is too large"
  std::string too_large_message = "the request body is too large";
  // The body (JSON) of the transport's own answers (408, 413, 503, unknown routes, what a route
  // threw), in the server's one error shape.
  std::function<std::string(int status, const std::string& message)> error_body;
};

// httplib's server with the gate in front. Install routes (and the optional hooks), then start().
// Not copyable.
class gated_server : public httplib::Server {
 public:
  explicit gated_server(gate_limits limits);
  ~gated_server() override;
  gated_server(const gated_server&) = delete;
  gated_server& operator=(const gated_server&) = delete;

  // `handler` answers requests of `method` whose path matches `pattern` (a regular expression;
  // its groups are http_request::match). Anything it throws is answered 500.
  void route(http_method method, const std::string& pattern, http_handler handler);
  // Every request's line and headers go through `check` in the gate (gate_limits::head_check)
  // before any of its body is read, also one that waits for 100 Continue (refused, it is never
  // invited to send its body). Before start().
  void check_heads(gate_head_check check);
  // Sets gate_limits::max_connections (0: the worker count). Before start().
  void limit_connections(std::size_t max_connections);
  // Runs after each route's handler (also one that threw), before the response is written.
  void after_route(http_observer observer);
  // Runs for every response just before it is written (routes', and the transport's own).
  void before_reply(std::function<void(httplib::Response&)> hook);

  // Binds host:port (0: a free port) and serves on a thread of its own until stop(). Returns the
  // bound port, or an error naming the address.
  result<int> start(const std::string& host, int port);
  // Closes the listening socket and waits for the serving thread, which first lets the workers
  // finish the requests they serve. Thread-safe with start(), idempotent, at any moment.
  void stop();

  // For a handler, about the request its thread serves:
  // The connection is closed with no reply at all (every later write fails).
  static void drop_connection();
  // The request's body may be read, up to `bytes` (body_needs_grant).
  static void grant_body(std::size_t bytes);
  // Whether a read was refused because the body went past what was granted.
  [[nodiscard]] static bool over_budget();
  // Whether drop_connection() was called for it.
  [[nodiscard]] static bool dropped();

  struct impl;

 private:
  // Widens the backlog, starts the gate and the workers, and runs httplib's accept loop until
  // halt(). Then closes every connection not in a handler, and returns once the workers have
  // finished the requests they were serving. Returns httplib's listen_after_bind() result.
  bool serve();
  // Closes the listening socket: serve() returns. Idempotent, at any moment (also before serve()
  // runs, which then returns at once).
  void halt();
  bool process_and_close_socket(socket_t sock) override;
  // Answers `status` with `message` in the error shape.
  void fail(httplib::Response& res, int status, const std::string& message) const;

  std::unique_ptr<impl> impl_;
  http_observer after_route_;
  std::thread serving_;
};

}  // namespace leap::policy
