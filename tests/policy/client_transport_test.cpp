// The client's transport alone, against a real cpp-httplib server on 127.0.0.1: exchanges with
// their completion callbacks, a sink reading a 2xx body, timers, posts from another thread, and
// shutdown with exchanges still on the wire. Nothing here knows turns.
#include "policy/client/detail/client_transport.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::policy::detail {
namespace {

using std::chrono::milliseconds;

class server {
 public:
  server() {
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("x-weight-version", "12");
      res.set_content("fine", "text/plain");
    });
    http_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.get_header_value("X-Request-Id") + ":" + req.body, "text/plain");
    });
    http_.Get("/missing", [](const httplib::Request&, httplib::Response& res) {
      res.status = 404;
      res.set_content(R"({"error": "no"})", "application/json");
    });
    http_.Get("/stall", [this](const httplib::Request&, httplib::Response& res) {
      // Answers only once the test lets it (after the client gave up or shut down).
      std::unique_lock lock(mutex_);
      released_.wait(lock, [this] { return release_; });
      res.set_content("late", "text/plain");
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    // stop() before the accept loop runs would be lost and leave join() hanging: wait for it.
    while (!http_.is_running()) {
      std::this_thread::yield();
    }
  }
  ~server() {
    {
      std::lock_guard lock(mutex_);
      release_ = true;
    }
    released_.notify_all();
    http_.stop();
    thread_.join();
  }
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  [[nodiscard]] std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable released_;
  bool release_ = false;
};

http_request get(std::string url, milliseconds timeout = milliseconds(10'000)) {
  http_request r;
  r.url = std::move(url);
  r.method = "GET";
  r.timeout = timeout;
  r.connect_timeout = milliseconds(5'000);
  return r;
}

// Runs the loop on its own thread until a callback calls request_stop(); then shuts it down as
// policy_client does.
struct running_loop {
  transport net;
  std::thread thread;
  running_loop() {
    EXPECT_TRUE(net.open(4));
    thread = std::thread([this] {
      net.run([] {});
      net.close_inbox();
      net.abort_all();
    });
  }
  void join() { thread.join(); }
  ~running_loop() {
    if (thread.joinable()) {
      net.request_stop();
      thread.join();
    }
  }
  running_loop(const running_loop&) = delete;
  running_loop& operator=(const running_loop&) = delete;
};

TEST(ClientTransport, ExchangesCompleteOnceWithStatusBodyAndVersionHeader) {
  server s;
  running_loop loop;
  std::vector<http_outcome> outcomes(3);
  int done = 0;
  auto finish = [&](int i) {
    return [&, i](http_outcome out) {
      outcomes[i] = std::move(out);
      if (++done == 3) {
        loop.net.request_stop();
      }
    };
  };
  ASSERT_TRUE(loop.net.post([&] {
    loop.net.submit(get(s.url("/health")), finish(0));
    http_request echo = get(s.url("/echo"));
    echo.method = "POST";
    echo.body = R"({"a": 1})";
    echo.request_id = "turn-7.2";
    loop.net.submit(std::move(echo), finish(1));
    loop.net.submit(get(s.url("/missing")), finish(2));
  }));
  loop.join();
  ASSERT_EQ(done, 3);
  EXPECT_TRUE(outcomes[0].transport_ok);
  EXPECT_EQ(outcomes[0].status, 200);
  EXPECT_EQ(outcomes[0].body, "fine");
  EXPECT_EQ(outcomes[0].weight_version, "12");
  EXPECT_EQ(outcomes[1].status, 200);
  EXPECT_EQ(outcomes[1].body, R"(turn-7.2:{"a": 1})");
  EXPECT_TRUE(outcomes[2].transport_ok);
  EXPECT_EQ(outcomes[2].status, 404);
  EXPECT_EQ(outcomes[2].body, R"({"error": "no"})");
  EXPECT_GE(loop.net.connections_opened(), 1U);
}

TEST(ClientTransport, ASinkReadsA2xxBodyAndARefusalEndsTheExchange) {
  server s;
  running_loop loop;
  std::string read;
  http_outcome kept;
  http_outcome refused;
  int done = 0;
  ASSERT_TRUE(loop.net.post([&] {
    http_request r = get(s.url("/health"));
    r.sink = [&read](std::string_view bytes) {
      read += bytes;
      return true;
    };
    loop.net.submit(std::move(r), [&](http_outcome out) {
      kept = std::move(out);
      if (++done == 2) {
        loop.net.request_stop();
      }
    });
    http_request no = get(s.url("/health"));
    no.sink = [](std::string_view) { return false; };
    loop.net.submit(std::move(no), [&](http_outcome out) {
      refused = std::move(out);
      if (++done == 2) {
        loop.net.request_stop();
      }
    });
  }));
  loop.join();
  EXPECT_EQ(read, "fine");
  EXPECT_TRUE(kept.transport_ok);
  EXPECT_EQ(kept.body, "");  // the sink had it
  EXPECT_FALSE(refused.transport_ok);
  EXPECT_TRUE(stopped_by_sink(refused));
  EXPECT_EQ(refused.status, 200);
}

TEST(ClientTransport, TimersRunInOrderAndNotBeforeTheirTime) {
  running_loop loop;
  std::vector<int> order;
  steady::time_point armed;
  steady::time_point second_ran;
  ASSERT_TRUE(loop.net.post([&] {
    armed = steady::now();
    loop.net.schedule(armed + milliseconds(40), [&] {
      order.push_back(2);
      second_ran = steady::now();
      loop.net.request_stop();
    });
    loop.net.schedule(armed, [&] { order.push_back(1); });
  }));
  loop.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_GE(second_ran - armed, milliseconds(40));
}

TEST(ClientTransport, AFailedConnectionAndAShutdownBothCompleteTheirExchanges) {
  server s;
  // A port nothing listens on: bind one (no listen), note it, close it.
  std::string dead;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    dead = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/";
    ::close(fd);
  }
  running_loop loop;
  http_outcome refused;
  http_outcome stalled;
  std::atomic<int> done{0};
  ASSERT_TRUE(loop.net.post([&] {
    loop.net.submit(get(dead), [&](http_outcome out) {
      refused = std::move(out);
      ++done;
      // The stalled exchange is still on the wire: stopping must complete it too.
      loop.net.request_stop();
    });
    loop.net.submit(get(s.url("/stall")), [&](http_outcome out) {
      stalled = std::move(out);
      ++done;
    });
  }));
  loop.join();
  EXPECT_EQ(done.load(), 2);
  EXPECT_FALSE(refused.transport_ok);
  EXPECT_TRUE(transport_retryable(refused));
  EXPECT_FALSE(refused.transport_error.empty());
  EXPECT_FALSE(stalled.transport_ok);  // aborted by the shutdown, not answered
  // After the shutdown nothing more is taken.
  EXPECT_FALSE(loop.net.post([] {}));
}

}  // namespace
}  // namespace leap::policy::detail
