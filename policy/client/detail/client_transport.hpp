// The policy client's transport: one curl multi handle driven by socket actions on an epoll set,
// with timers and an eventfd wake-up. It knows HTTP exchanges, not turns: submit a request with a
// completion callback, schedule a timer, post a command from another thread. Everything but post()
// and request_stop() runs on the loop thread (the one that calls run()).
//
// Internal to policy/ (policy_client is its only user).
#pragma once

#include "common/result.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace leap::policy::detail {

using steady = std::chrono::steady_clock;

// How one exchange ended. `transport_ok` false: no complete HTTP answer (connection refused, a
// timeout, a cut body, a sink that refused bytes, or the transport shut down first).
struct http_outcome {
  bool transport_ok = true;
  // libcurl's code (0 when transport_ok): the caller tells the retryable ones apart with
  // transport_retryable().
  int code = 0;
  std::string transport_error;  // curl's text and its detail, when !transport_ok
  long status = 0;              // the HTTP status (0 when none arrived)
  std::string body;             // the body, unless a 2xx went to the request's sink
  std::string weight_version;   // the x-weight-version header, if any
  // The Retry-After header's wait, if the answer had one that parse_retry_after reads.
  std::optional<std::chrono::milliseconds> retry_after;
};

// Transport failures that no retry can fix: the request itself is wrong.
[[nodiscard]] bool transport_retryable(const http_outcome& out);
// True when the exchange ended because the body sink refused bytes.
[[nodiscard]] bool stopped_by_sink(const http_outcome& out);

struct http_request {
  std::string url;
  std::string method = "POST";  // GET sends no body
  std::string body;
  std::string request_id;  // sent as X-Request-Id when not empty
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds connect_timeout{0};
  // Where a 2xx body goes as it arrives, instead of http_outcome::body; returning false ends the
  // exchange (what arrived before is the sink's). Empty: the body is kept whole.
  std::function<bool(std::string_view)> sink;
};

class transport {
 public:
  transport();
  ~transport();
  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;

  // Creates the epoll set, the wake-up and the multi handle. `max_idle_connections`: connections
  // kept open for reuse.
  [[nodiscard]] status open(long max_idle_connections);

  // Runs the loop on the calling thread until request_stop(): each round runs the posted commands,
  // then `each_round`, then waits for sockets, curl's timer or the next timer, and runs what is
  // due. Returns with exchanges and timers still pending: see close_inbox() and abort_all().
  void run(const std::function<void()>& each_round);

  // Any thread. Queues `command` for the loop; false once the inbox is closed (command dropped).
  bool post(std::function<void()> command);
  // Any thread. run() returns after its current round.
  void request_stop();
  [[nodiscard]] bool stop_requested() const;

  // Loop thread. Starts an exchange; `done` runs exactly once, on the loop (at once, with an
  // error, when the multi handle refuses it).
  void submit(http_request request, std::function<void(http_outcome)> done);
  // Loop thread. Runs `fn` at `when` or soon after.
  void schedule(steady::time_point when, std::function<void()> fn);

  // Loop thread, after run(): refuses further posts and runs the commands already posted.
  void close_inbox();
  // Loop thread: ends every exchange in progress (their callbacks get an aborted outcome) and drops
  // the timers.
  void abort_all();

  // TCP connections opened so far (reuse keeps this low). Any thread.
  [[nodiscard]] std::uint64_t connections_opened() const;

 private:
  class state;
  std::unique_ptr<state> state_;
};

}  // namespace leap::policy::detail
