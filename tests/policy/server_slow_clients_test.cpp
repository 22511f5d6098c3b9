// Slow and idle clients cannot starve the policy server (issue 29: 300 connections sending a
// header byte a second made /v1/models and /v1/completions time out for as long as they stayed).
// Real servers on 127.0.0.1 with few workers: more connections trickling their headers than
// workers while normal requests are answered, the header and body deadlines, and the connection
// cap. Every socket has a deadline on every wait; timing assertions are lower bounds, or upper
// bounds far above what the work takes.
#include "tests/policy/raw_client.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
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

using nlohmann::json;
using namespace leap::policy::testing;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

server_config few_workers() {
  server_config config;
  config.threads = 8;
  return config;
}

// Room for every slow client of a test, so that the deadlines, not the connection cap (the
// worker count by default; tests/policy/http_test.cpp), are what cuts them off.
server_config few_workers_many_connections() {
  auto config = few_workers();
  config.max_connections = 256;
  return config;
}

// A normal client's GET /v1/models and POST /v1/completions both answered 200 within 5 s.
void expect_normal_requests_served(policy_server& server) {
  const auto started = steady::now();
  auto client = client_for(server, 5000ms);
  const auto models = get(*client, "/v1/models");
  const auto completion =
      post(*client, "/v1/completions", json{{"prompt", vector_add_prompt}, {"max_tokens", 4}});
  const auto elapsed = steady::now() - started;
  EXPECT_TRUE(models.ok) << httplib::to_string(models.error);
  EXPECT_EQ(models.status, 200) << models.body;
  EXPECT_TRUE(completion.ok) << httplib::to_string(completion.error);
  EXPECT_EQ(completion.status, 200) << completion.body;
  EXPECT_LT(elapsed, 5s);
}

// Sends each open client `next(i)` every 200 ms on a thread of its own until destroyed (60 s at
// most); a client whose send fails is noted closed.
class trickler {
 public:
  trickler(std::vector<raw_client>& clients, std::function<std::string(std::size_t)> next)
      : thread_([this, &clients, next = std::move(next)] {
          const auto deadline = steady::now() + 60s;
          while (!stop_ && steady::now() < deadline) {
            for (std::size_t i = 0; i < clients.size(); ++i) {
              auto& c = clients[i];
              if (!c.closed && !c.send_text(next(i))) {
                c.closed = steady::now();
              }
            }
            std::this_thread::sleep_for(200ms);
          }
        }) {}
  trickler(const trickler&) = delete;
  trickler& operator=(const trickler&) = delete;
  ~trickler() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// `count` connections send `head(i)` and then trickle `next(i)` every 200 ms against 8 workers
// with an 8 s body deadline: normal requests are served within 5 s meanwhile, each trickling body
// is answered 408 and closed, and the server serves on.
void expect_trickled_bodies_cut_off(std::size_t count,
                                    const std::function<std::string(std::size_t)>& head,
                                    std::function<std::string(std::size_t)> next) {
  auto config = few_workers_many_connections();
  config.body_timeout = 8s;
  auto server = start_server(config);
  ASSERT_TRUE(server);
  std::vector<raw_client> slow(count);
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(slow[i].connect_to(server->port()));
    ASSERT_TRUE(slow[i].send_text(head(i)));
  }
  {
    const trickler trickle(slow, std::move(next));
    std::this_thread::sleep_for(500ms);  // every body has started before the normal requests
    expect_normal_requests_served(*server);
    for (auto& s : slow) {
      s.read_to_close(60s);
    }
  }
  for (const auto& s : slow) {
    ASSERT_TRUE(s.closed) << "a trickling body's connection stayed open for 60 s";
    EXPECT_EQ(s.answer.rfind("HTTP/1.1 408", 0), 0u) << s.answer;
  }
  EXPECT_EQ(get(*client_for(*server), "/v1/models").status, 200);
}

// The report, scaled down: 20 connections trickling a header byte every 200 ms against 8
// workers. Before, each held a worker for as long as it trickled (httplib's per-read timeout was
// never reached), so the normal requests queued behind them. Now they wait in the gate, which
// holds no worker, and are cut off with 408 at the header deadline.
TEST(ServerSlowClients, TricklingHeadersDoNotStarveRequests) {
  auto config = few_workers_many_connections();
  config.header_timeout = 8s;
  auto server = start_server(config);
  ASSERT_TRUE(server);
  constexpr int slow_count = 20;
  std::vector<raw_client> slow(slow_count);
  for (auto& s : slow) {
    ASSERT_TRUE(s.connect_to(server->port()));
    ASSERT_TRUE(s.send_text("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  }
  // Every slow client has sent a byte since it connected before the normal requests start.
  const auto trickle = [&] {
    for (auto& s : slow) {
      if (!s.closed && !s.send_text("a")) {
        s.closed = steady::now();
      }
    }
  };
  trickle();
  std::this_thread::sleep_for(200ms);
  trickle();

  std::atomic<bool> stop_trickling{false};
  std::thread trickler([&] {
    const auto deadline = steady::now() + 60s;
    while (!stop_trickling && steady::now() < deadline) {
      trickle();
      std::this_thread::sleep_for(200ms);
    }
  });
  expect_normal_requests_served(*server);
  // They were served while the slow clients still held their connections.
  int still_open = 0;
  for (auto& s : slow) {
    s.poll_answer(0ms);
    still_open += s.closed ? 0 : 1;
  }
  EXPECT_EQ(still_open, slow_count);

  // The header deadline cuts every slow client off with 408, never before the deadline.
  for (auto& s : slow) {
    s.read_to_close(60s);
  }
  stop_trickling = true;
  trickler.join();
  for (const auto& s : slow) {
    ASSERT_TRUE(s.closed) << "a trickling connection stayed open for 60 s";
    EXPECT_GE(*s.closed - s.connected, 8s);
    EXPECT_EQ(s.answer.rfind("HTTP/1.1 408", 0), 0u) << s.answer;
    EXPECT_NE(s.answer.find("headers did not arrive"), std::string::npos) << s.answer;
  }
  // And the server serves on.
  EXPECT_EQ(get(*client_for(*server), "/v1/models").status, 200);
}

// The test with the server's defaults: the connection cap is the worker count (8), so of
// 20 connections trickling their headers the 12 beyond it are answered 503 with Retry-After at
// once (the header deadline is 30 s), and normal requests are served within 5 s while the slow
// ones fill the cap, each taking the place of the slow one that has waited longest. Before, the
// cap was the descriptor limit: every slow client waited for its header deadline.
TEST(ServerSlowClients, BeyondTheDefaultCapSlowClientsAreRefusedAtOnce) {
  auto config = few_workers();
  config.header_timeout = 30s;
  auto server = start_server(config);
  ASSERT_TRUE(server);
  constexpr int slow_count = 20;
  std::vector<raw_client> slow(slow_count);
  for (auto& s : slow) {
    ASSERT_TRUE(s.connect_to(server->port()));
    ASSERT_TRUE(s.send_text("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  }
  {
    const trickler trickle(slow, [](std::size_t) { return std::string("a"); });
    std::this_thread::sleep_for(1500ms);
    expect_normal_requests_served(*server);
  }
  int refused = 0;
  for (auto& s : slow) {
    s.poll_answer(1000ms);
    if (s.answer.rfind("HTTP/1.1 503", 0) == 0) {
      ++refused;
      EXPECT_NE(s.answer.find("Retry-After: 1\r\n"), std::string::npos) << s.answer;
    }
  }
  // The 12 beyond the cap, and those whose place the normal requests took.
  EXPECT_GE(refused, slow_count - 8);
}

// The same with bodies: 20 connections that declare a 1 MiB body and trickle it, against 8
// workers. Before, a body over 256 KiB went to a worker at once, which then waited for it until
// the body deadline; now the gate holds bodies up to 16 MiB (256 MiB in all) and hands the request
// on only when it is whole, so the normal requests are served meanwhile.
TEST(ServerSlowClients, TricklingLargeBodiesDoNotStarveRequests) {
  expect_trickled_bodies_cut_off(
      20,
      [](std::size_t) {
        return std::string(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 1048576\r\n\r\n{\"prompt\": \"");
      },
      [](std::size_t) { return std::string("a"); });
}

// Issue 29's remainder: bodies the gate did not hold, a declared length over 16 MiB and chunked
// ones, went to a worker at once, which waited for them until the body deadline; 60 such trickling
// clients against 8 workers starved every other request. Now the gate holds their first 16 MiB,
// so trickling ones never reach a worker and get 408 at the body deadline.
TEST(ServerSlowClients, TricklingHugeAndChunkedBodiesDoNotStarveRequests) {
  expect_trickled_bodies_cut_off(
      60,
      [](std::size_t i) {
        return std::string(
                   "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                   "application/json\r\n") +
               (i % 2 == 0 ? "Content-Length: 33554432\r\n\r\n"  // 32 MiB
                           : "Transfer-Encoding: chunked\r\n\r\n");
      },
      [](std::size_t i) { return std::string(i % 2 == 0 ? "a" : "1\r\na\r\n"); });
}

// A body the gate cannot hold (here: the client waits for 100 Continue) is read by its worker,
// which drops a client sending below body_min_rate once body_rate_grace has passed, long before
// the body deadline: 16 such clients against 8 workers each hold one for about a second, not 60.
TEST(ServerSlowClients, BodiesBelowTheMinimumRateGiveTheirWorkerBack) {
  auto config = few_workers_many_connections();
  config.body_timeout = 60s;
  config.body_min_rate = 1024;
  config.body_rate_grace = 1s;
  auto server = start_server(config);
  ASSERT_TRUE(server);
  std::vector<raw_client> slow(16);
  for (auto& s : slow) {
    ASSERT_TRUE(s.connect_to(server->port()));
    ASSERT_TRUE(
        s.send_text("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    "application/json\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n"
                    "\r\n{\"prompt\": \""));
  }
  {
    const trickler trickle(slow, [](std::size_t) { return std::string("a"); });
    for (auto& s : slow) {
      s.read_to_close(30s);
    }
  }
  for (const auto& s : slow) {
    ASSERT_TRUE(s.closed) << "a body below the minimum rate held its worker for 30 s";
    EXPECT_GE(*s.closed - s.connected, 1s);
    // Answered (httplib's 400 for a body it could not read) and closed, not kept alive.
    EXPECT_NE(s.answer.find("HTTP/1.1 400"), std::string::npos) << s.answer;
  }
  expect_normal_requests_served(*server);
}

// The gate holds a chunked body until its last chunk is in, then serves it (httplib 0.11 takes
// no trailers).
TEST(ServerSlowClients, ChunkedBodiesAreServedOnceWhole) {
  auto server = start_server(few_workers());
  ASSERT_TRUE(server);
  const std::string body = json{{"prompt", vector_add_prompt}, {"max_tokens", 4}}.dump();
  const auto half = body.size() / 2;
  const auto chunk = [](const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx", data.size());
    return std::string(size) + "\r\n" + data + "\r\n";
  };
  raw_client raw;
  ASSERT_TRUE(raw.connect_to(server->port()));
  ASSERT_TRUE(
      raw.send_text("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                    chunk(body.substr(0, half))));
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(raw.send_text(chunk(body.substr(half)) + "0\r\n\r\n"));
  raw.read_to_close(30s);
  ASSERT_TRUE(raw.closed);
  EXPECT_EQ(raw.answer.rfind("HTTP/1.1 200", 0), 0u) << raw.answer;
  EXPECT_NE(raw.answer.find("\"choices\""), std::string::npos) << raw.answer;
}

// A connection that sent nothing is closed at the header deadline without an answer; a body
// that stops coming gets 408 at the body deadline, counted from its headers.
TEST(ServerSlowClients, IdleAndStalledBodiesAreClosedAtTheirDeadlines) {
  auto config = few_workers();
  config.header_timeout = 2s;
  config.body_timeout = 3s;
  auto server = start_server(config);
  ASSERT_TRUE(server);
  raw_client silent;
  ASSERT_TRUE(silent.connect_to(server->port()));
  raw_client stalled;
  ASSERT_TRUE(stalled.connect_to(server->port()));
  ASSERT_TRUE(stalled.send_text(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100\r\n\r\n{\"prompt\": "));
  const auto headers_sent = steady::now();
  // Meanwhile a normal request is served.
  EXPECT_EQ(get(*client_for(*server, 5000ms), "/v1/models").status, 200);
  silent.read_to_close(60s);
  stalled.read_to_close(60s);
  ASSERT_TRUE(silent.closed);
  EXPECT_GE(*silent.closed - silent.connected, 2s);
  EXPECT_EQ(silent.answer, "");
  ASSERT_TRUE(stalled.closed);
  EXPECT_GE(*stalled.closed - headers_sent, 3s);
  EXPECT_EQ(stalled.answer.rfind("HTTP/1.1 408", 0), 0u) << stalled.answer;
  EXPECT_NE(stalled.answer.find("request body did not arrive"), std::string::npos)
      << stalled.answer;
}

// Beyond max_connections a connection is answered 503 with Retry-After at once, in the one error
// shape, and never reaches a worker; once a connection closes, requests are served again.
TEST(ServerSlowClients, ConnectionsBeyondTheCapAreRefusedAtOnce) {
  auto config = few_workers();
  config.max_connections = 4;
  config.header_timeout = 30s;
  auto server = start_server(config);
  ASSERT_TRUE(server);
  std::vector<raw_client> held(4);
  for (auto& h : held) {
    ASSERT_TRUE(h.connect_to(server->port()));
  }
  raw_client extra;
  ASSERT_TRUE(extra.connect_to(server->port()));
  ASSERT_TRUE(extra.send_text("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto asked = steady::now();
  extra.read_to_close(30s);
  ASSERT_TRUE(extra.closed);
  EXPECT_LT(*extra.closed - asked, 10s);  // the header deadline is 30 s: refused, not timed out
  EXPECT_EQ(extra.answer.rfind("HTTP/1.1 503", 0), 0u) << extra.answer;
  EXPECT_NE(extra.answer.find("Retry-After: 1\r\n"), std::string::npos) << extra.answer;
  const auto body =
      extra.answer.substr(std::min(extra.answer.size(), extra.answer.find("\r\n\r\n") + 4));
  const auto j = json::parse(body, nullptr, false);
  EXPECT_TRUE(j.contains("error")) << extra.answer;

  // One held connection goes away: a request is served again.
  ::close(held[0].fd);
  held[0].fd = -1;
  bool served = false;
  const auto deadline = steady::now() + 20s;
  while (!served && steady::now() < deadline) {
    served = get(*client_for(*server, 5000ms), "/v1/models").status == 200;
    if (!served) {
      std::this_thread::sleep_for(50ms);
    }
  }
  EXPECT_TRUE(served);
}

// Keep-alive survives the gate: many requests on one connection, and a pipelined pair from a
// client that shut its sending side after them.
TEST(ServerSlowClients, KeptAliveAndPipelinedRequestsAreServed) {
  auto server = start_server(few_workers());
  ASSERT_TRUE(server);
  auto client = client_for(*server, 5000ms);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(get(*client, "/v1/models").status, 200);
  }
  raw_client raw;
  ASSERT_TRUE(raw.connect_to(server->port()));
  ASSERT_TRUE(
      raw.send_text("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n"
                    "Connection: close\r\n\r\n"));
  // A client may shut its side once it has sent everything; it is still answered.
  ::shutdown(raw.fd, SHUT_WR);
  raw.read_to_close(30s);
  ASSERT_TRUE(raw.closed);
  std::size_t responses = 0;
  for (auto at = raw.answer.find("HTTP/1.1 200"); at != std::string::npos;
       at = raw.answer.find("HTTP/1.1 200", at + 1)) {
    ++responses;
  }
  EXPECT_EQ(responses, 2u) << raw.answer;
}

}  // namespace
}  // namespace leap::policy
