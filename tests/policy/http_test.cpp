// The gate in front of both HTTP servers (policy/http/http.hpp), on a real gated_server on
// 127.0.0.1 with small limits: a head check answered by the gate without a worker, the
// connection cap (excess refused at once, a normal request served while slow clients fill it),
// and the body buffer shared fairly (stalled bodies give way to one that is coming). Every socket
// wait has a deadline; timing assertions are lower bounds or upper bounds far above the work.
#include "policy/http/http.hpp"

#include "tests/policy/raw_client.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::policy {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using testing::raw_client;

gate_limits small_limits() {
  gate_limits limits;
  limits.threads = 2;
  limits.header_timeout = 30s;  // far above the tests' bounds: a refusal is never a deadline
  limits.body_timeout = 60s;
  limits.error_body = [](int status, const std::string& message) {
    return "{\"error\": {\"code\": " + std::to_string(status) + ", \"message\": \"" + message +
           "\"}}";
  };
  return limits;
}

// A gated server with GET /ok, POST /size (the body's length) and GET /block (waits until
// release() or 60 s).
class gate_under_test {
 public:
  explicit gate_under_test(gate_limits limits, gate_head_check check = {})
      : server_(std::move(limits)) {
    server_.route(http_method::get, "/ok", [](const http_request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    server_.route(http_method::post, "/size", [](const http_request& req, httplib::Response& res) {
      res.set_content(std::to_string(req.body().size()), "text/plain");
    });
    server_.route(http_method::get, "/block", [this](const http_request&, httplib::Response& res) {
      std::unique_lock lock(mutex_);
      ++blocked_;
      changed_.notify_all();
      changed_.wait_for(lock, 60s, [&] { return released_; });
      res.set_content("released", "text/plain");
    });
    if (check) {
      server_.check_heads(std::move(check));
    }
    auto port = server_.start("127.0.0.1", 0);
    EXPECT_TRUE(port) << (port ? "" : port.err().message);
    port_ = port ? *port : 0;
  }
  ~gate_under_test() {
    release();
    server_.stop();
  }
  gate_under_test(const gate_under_test&) = delete;
  gate_under_test& operator=(const gate_under_test&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(10, 0);
    c.set_write_timeout(10, 0);
    return c;
  }
  // Waits until `n` requests are inside /block (30 s at most).
  bool wait_blocked(int n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 30s, [&] { return blocked_ >= n; });
  }
  void release() {
    {
      const std::lock_guard lock(mutex_);
      released_ = true;
    }
    changed_.notify_all();
  }

 private:
  gated_server server_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  int blocked_ = 0;
  bool released_ = false;
};

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// Sends each open client a byte every 200 ms for `span`, reading what comes back.
void trickle(std::vector<raw_client>& clients, std::chrono::milliseconds span) {
  const auto until = steady::now() + span;
  while (steady::now() < until) {
    for (auto& s : clients) {
      s.poll_answer(0ms);
      if (!s.closed && !s.send_text("a")) {
        s.closed = steady::now();
      }
    }
    std::this_thread::sleep_for(200ms);
  }
}

// The clients answered 503 by the cap, each with Retry-After.
int count_refused(std::vector<raw_client>& clients) {
  int refused = 0;
  for (auto& s : clients) {
    s.poll_answer(0ms);
    if (starts_with(s.answer, "HTTP/1.1 503")) {
      ++refused;
      EXPECT_NE(s.answer.find("Retry-After: 1\r\n"), std::string::npos) << s.answer;
      EXPECT_NE(s.answer.find("connections open, its limit"), std::string::npos) << s.answer;
    }
  }
  return refused;
}

// A check the gate runs: the daemon's kind (a bearer token), answered 401 by the gate itself.
// Both workers are held by /block, so an answer that needed a worker could not come: the old
// transport ran the check on a worker (httplib's pre-routing handler).
TEST(HttpGate, AHeadCheckRefusesWithoutAWorker) {
  auto limits = small_limits();
  limits.max_connections = 64;
  gate_under_test gate(limits, [](const http_request& req, httplib::Response& res) {
    if (req.header("Authorization") == "Bearer secret") {
      return true;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content("{\"error\": \"no token\"}", "application/json");
    return false;
  });
  ASSERT_GT(gate.port(), 0);
  std::vector<std::thread> blockers;
  blockers.reserve(2);
  for (int i = 0; i < 2; ++i) {
    blockers.emplace_back([&] {
      auto c = gate.client();
      c.set_read_timeout(60, 0);
      c.Get("/block", {{"Authorization", "Bearer secret"}});
    });
  }
  ASSERT_TRUE(gate.wait_blocked(2));

  raw_client refused;
  ASSERT_TRUE(refused.connect_to(gate.port()));
  // A declared body that never comes: refused from the headers.
  ASSERT_TRUE(
      refused.send_text("POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"));
  const auto asked = steady::now();
  refused.read_to_close(20s);
  ASSERT_TRUE(refused.closed);
  EXPECT_LT(*refused.closed - asked, 10s);
  EXPECT_TRUE(starts_with(refused.answer, "HTTP/1.1 401 Unauthorized\r\n")) << refused.answer;
  EXPECT_NE(refused.answer.find("WWW-Authenticate: Bearer\r\n"), std::string::npos)
      << refused.answer;
  EXPECT_NE(refused.answer.find("{\"error\": \"no token\"}"), std::string::npos) << refused.answer;

  gate.release();
  for (auto& t : blockers) {
    t.join();
  }
  // With the token, a request passes the check and its body reaches the route.
  auto c = gate.client();
  auto res =
      c.Post("/size", {{"Authorization", "Bearer secret"}}, std::string(5000, 'a'), "text/plain");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "5000");
}

// The test: more slow clients than workers. The cap is the worker count (2) by default;
// clients beyond it are answered 503 with Retry-After at once (the header deadline is 30 s), and
// a normal request is served within 5 s while the slow ones fill the cap: it takes the place of
// the one that has waited longest. Before, the cap was the descriptor limit: no slow client was
// refused, each waited for its header deadline.
TEST(HttpGate, BeyondTheCapSlowClientsAreRefusedAndANormalRequestIsServed) {
  gate_under_test gate(small_limits());
  ASSERT_GT(gate.port(), 0);
  constexpr int slow_count = 8;
  std::vector<raw_client> slow(slow_count);
  for (auto& s : slow) {
    ASSERT_TRUE(s.connect_to(gate.port()));
    ASSERT_TRUE(s.send_text("GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  }
  // Trickle a byte to each every 200 ms for 1.5 s, reading what comes back.
  trickle(slow, 1500ms);
  // Each connection beyond the cap meant one refusal: of itself, at once, or (on a machine slow
  // enough that it came a second after the first ones) of the one that had waited longest.
  EXPECT_EQ(count_refused(slow), slow_count - 2);

  const auto asked = steady::now();
  raw_client normal;
  ASSERT_TRUE(normal.connect_to(gate.port()));
  ASSERT_TRUE(normal.send_text("GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  normal.read_to_close(10s);
  const auto took = steady::now() - asked;
  EXPECT_TRUE(starts_with(normal.answer, "HTTP/1.1 200")) << normal.answer;
  EXPECT_NE(normal.answer.find("\r\n\r\nok"), std::string::npos) << normal.answer;
  EXPECT_LT(took, 5s);
  // Its place was the oldest slow client's, which was told so.
  trickle(slow, 500ms);
  EXPECT_EQ(count_refused(slow), slow_count - 1);
  int told = 0;
  for (const auto& s : slow) {
    told += s.answer.find("waited longest") != std::string::npos ? 1 : 0;
  }
  EXPECT_GE(told, 1);
}

// Kept-alive idle connections give their place first, closed without an answer.
TEST(HttpGate, AtTheCapAnIdleKeptAliveConnectionGivesItsPlace) {
  auto limits = small_limits();
  limits.max_requests_per_connection = 100;
  limits.idle_timeout = 30s;
  limits.max_connections = 1;
  gate_under_test gate(limits);
  ASSERT_GT(gate.port(), 0);
  raw_client kept;
  ASSERT_TRUE(kept.connect_to(gate.port()));
  ASSERT_TRUE(kept.send_text("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto deadline = steady::now() + 10s;
  while (kept.answer.find("\r\n\r\nok") == std::string::npos && steady::now() < deadline) {
    kept.poll_answer(100ms);
  }
  ASSERT_NE(kept.answer.find("\r\n\r\nok"), std::string::npos) << kept.answer;
  // Its worker hands it back to the gate right after the answer.
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(kept.closed);
  raw_client normal;
  ASSERT_TRUE(normal.connect_to(gate.port()));
  ASSERT_TRUE(normal.send_text("GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  normal.read_to_close(10s);
  EXPECT_TRUE(starts_with(normal.answer, "HTTP/1.1 200")) << normal.answer;
  kept.read_to_close(10s);
  EXPECT_TRUE(kept.closed);
}

// The body buffer: 4 MiB in all, 1 MiB a body. Five clients send all but the last byte of their
// first MiB and stall, filling it; a normal request's body then waits for room. Before, it waited
// until the stalled bodies' deadline (60 s); now the stalled body holding the most is answered 408
// and the normal one is read and served within 5 s.
TEST(HttpGate, StalledBodiesGiveWayToABodyThatIsComing) {
  auto limits = small_limits();
  limits.max_connections = 64;
  limits.prebuffer_body_bytes = std::size_t{1} << 20;
  limits.prebuffer_total_bytes = std::size_t{4} << 20;
  limits.body_stall_time = 500ms;
  gate_under_test gate(limits);
  ASSERT_GT(gate.port(), 0);
  constexpr int stalled_count = 5;
  std::vector<raw_client> stalled(stalled_count);
  const std::string body((std::size_t{1} << 20) - 1, 'a');
  for (auto& s : stalled) {
    ASSERT_TRUE(s.connect_to(gate.port()));
    ASSERT_TRUE(s.send_text("POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n"));
  }
  {
    // The gate may read no more of the last ones: a send that blocks returns within 10 s.
    std::vector<std::thread> senders;
    senders.reserve(stalled_count);
    for (auto& s : stalled) {
      senders.emplace_back([&s, &body] { s.send_text(body); });
    }
    for (auto& t : senders) {
      t.join();
    }
  }
  std::this_thread::sleep_for(1s);  // every one has stalled for longer than body_stall_time

  const auto asked = steady::now();
  raw_client normal;
  ASSERT_TRUE(normal.connect_to(gate.port()));
  ASSERT_TRUE(normal.send_text(
      "POST /size HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n" +
      std::string(100000, 'b')));
  normal.read_to_close(10s);
  const auto took = steady::now() - asked;
  EXPECT_TRUE(starts_with(normal.answer, "HTTP/1.1 200")) << normal.answer.substr(0, 300);
  EXPECT_NE(normal.answer.find("\r\n\r\n100000"), std::string::npos)
      << normal.answer.substr(0, 300);
  EXPECT_LT(took, 5s);
  int told = 0;
  for (auto& s : stalled) {
    s.poll_answer(1000ms);
    if (starts_with(s.answer, "HTTP/1.1 408")) {
      ++told;
      EXPECT_NE(s.answer.find("stalled"), std::string::npos) << s.answer;
    }
  }
  EXPECT_GE(told, 1);
}

}  // namespace
}  // namespace leap::policy
