// The one connection layer of the project's two HTTP servers, the policy server's transport
// (server_transport.cpp) and the daemon's control API (tools/daemon/daemon.cpp): cpp-httplib
// parses requests and runs the routes, the gate owns the connections.
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
//   408; a body a worker reads (a large or chunked one, read as it comes) within body_timeout of
//   the worker's start, else the request fails and the connection is closed.
// - Connection cap: a connection accepted while max_connections are open is answered 503 with
//   Retry-After at once and closed, without ever reaching a worker.
// - The listen backlog is widened (httplib listens with 5, which a burst of connects overflows;
//   with SYN cookies the overflow is answered with resets).
// - Closing: after its last response a connection is shut for writing and drained for a moment
//   before it is closed, so that unread bytes of the request (a body refused from its headers) do
//   not turn the close into a reset that destroys the response before the client has read it.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace leap::policy {

struct gate_limits {
  std::size_t threads = 8;  // workers that run whole requests. Default: 8
  // Open at once, beyond: 503. 0: the descriptor limit less 64 (1024 when unknown); never more.
  // Default: 0
  std::size_t max_connections = 0;
  int listen_backlog = 1024;                        // Default: 1024
  std::chrono::milliseconds header_timeout{10000};  // Default: 10 s
  std::chrono::milliseconds body_timeout{60000};    // Default: 60 s
  std::chrono::milliseconds idle_timeout{5000};     // a kept-alive connection's wait for its next
                                                    // request. Default: 5 s
  std::chrono::milliseconds read_timeout{30000};    // one wait of a worker's read. Default: 30 s
  std::chrono::milliseconds write_timeout{30000};   // one wait of a write. Default: 30 s
  std::size_t max_header_bytes = std::size_t{64} << 10;  // request line and headers; beyond: 413.
                                                         // Default: 64 KiB
  // A body that declares a length up to this is read by the gate before a worker gets the request
  // (0: never; bodies are then read by the worker), while the gate holds at most
  // prebuffer_total_bytes of such bodies at once; a larger body, a chunked one, or one beyond the
  // total is read by its worker (its body deadline bounds how long). Default: 16 MiB
  std::size_t prebuffer_body_bytes = std::size_t{16} << 20;
  std::size_t prebuffer_total_bytes = std::size_t{256} << 20;  // Default: 256 MiB
  std::size_t max_requests_per_connection = 1;  // 1: Connection: close after each. Default: 1
  // Whether a request's body may be read only after grant_body() (the daemon grants it once the
  // token is checked, from the headers). Default: false (every body may be read)
  bool body_needs_grant = false;
  // The body of the gate's own answers (408, 413, 503), in the server's one error shape.
  std::function<std::string(int status, const std::string& message)> error_body;
};

// httplib's server with the gate in front. Configure routes and handlers as for httplib, bind,
// then call serve() on the thread that should run the accept loop. Not copyable.
class gated_server : public httplib::Server {
 public:
  explicit gated_server(gate_limits limits);
  ~gated_server() override;
  gated_server(const gated_server&) = delete;
  gated_server& operator=(const gated_server&) = delete;

  // Widens the backlog, starts the gate and the workers, and runs httplib's accept loop until
  // halt(). Then closes every connection not in a handler, and returns once the workers have
  // finished the requests they were serving. Returns httplib's listen_after_bind() result.
  bool serve();

  // Closes the listening socket: serve() returns. Thread-safe, idempotent, at any moment (also
  // before serve() runs, which then returns at once).
  void halt();

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
  bool process_and_close_socket(socket_t sock) override;

  std::unique_ptr<impl> impl_;
};

}  // namespace leap::policy
