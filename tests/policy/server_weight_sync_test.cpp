// The client's weight-sync plans against the project's own server (the scripted backend) on
// loopback, and the ways a sync goes wrong: the connection is cut, the server restarts in the
// middle (it comes back on its startup weights and says so). Each is detected, the server stays out
// of rotation (no turn reaches it) until a sync succeeds, and turns go to the endpoints whose
// weights are known.
#include "policy/client/client.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace leap::policy {
namespace {

using namespace std::chrono_literals;
using testing::start_server;

client_config sync_config(const std::vector<std::string>& urls) {
  client_config c;
  c.flavour = wire_flavour::sglang;
  for (auto& u : urls) {
    c.endpoints.push_back({u, 8});
  }
  c.request_timeout = 10s;
  c.connect_timeout = 2s;
  c.retry.base_backoff = 1ms;
  c.retry.max_backoff = 20ms;
  c.health.interval = 50ms;
  c.health.timeout = 2s;
  c.seed = 1;
  return c;
}

weight_sync_plan fast(weight_sync_plan plan) {
  plan.health_attempts = 3;
  plan.health_retry_delay = 10ms;
  return plan;
}

status sync_now(policy_client& client, int endpoint, const weight_sync_plan& plan,
                weight_sync_request request) {
  std::promise<status> done;
  auto future = done.get_future();
  client.sync_weights(endpoint, plan, std::move(request),
                      [&done](status s) { done.set_value(std::move(s)); });
  if (future.wait_for(30s) != std::future_status::ready) {
    return error{"the sync did not finish"};
  }
  return future.get();
}

turn_result run_turn(policy_client& client, int pinned = -1) {
  turn_request r;
  r.prompt = {1, 2, 3};
  r.sampling.max_tokens = 8;
  r.pinned_endpoint = pinned;
  std::promise<turn_result> done;
  auto future = done.get_future();
  EXPECT_EQ(client.submit(std::move(r), [&done](turn_result t) { done.set_value(std::move(t)); }),
            submit_status::accepted);
  if (future.wait_for(30s) != std::future_status::ready) {
    turn_result t;
    t.status = turn_status::unavailable;
    t.message = "the turn did not finish";
    return t;
  }
  return future.get();
}

std::uint64_t generation_requests(const policy_server& server) {
  auto c = testing::client_for(server);
  auto reply = testing::get(*c, "/metrics");
  EXPECT_EQ(reply.status, 200);
  // One line per route: leap_policy_requests_total{route="/generate"} N
  const std::string key = "leap_policy_requests_total{route=\"/generate\"} ";
  const auto at = reply.body.find(key);
  if (at == std::string::npos) {
    return 0;
  }
  return std::stoull(reply.body.substr(at + key.size()));
}

// A stand-in for "the same address, a restarted server": forwards every request to `first` until
// the load call has been answered, then to `second` (a server that started later, on its own
// startup weights).
class restarting_proxy {
 public:
  restarting_proxy(int first, int second) : target_(first), second_(second) {
    http_.Post(".*", [this](const httplib::Request& q, httplib::Response& r) { forward(q, r); });
    http_.Get(".*", [this](const httplib::Request& q, httplib::Response& r) { forward(q, r); });
    // Bound and listening: connections wait in the backlog until the accept loop runs.
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~restarting_proxy() {
    http_.stop();
    thread_.join();
  }
  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void forward(const httplib::Request& q, httplib::Response& r) {
    httplib::Client c("127.0.0.1", target_.load());
    c.set_read_timeout(10s);
    auto reply = q.method == "POST" ? c.Post(q.target, q.body, q.get_header_value("Content-Type"))
                                    : c.Get(q.target);
    if (!reply) {
      r.status = 502;
      return;
    }
    r.status = reply->status;
    r.body = reply->body;
    for (const auto& [k, v] : reply->headers) {
      if (k == "x-weight-version" || k == "Content-Type") {
        r.set_header(k, v);
      }
    }
    if (q.path == "/update_weights_from_disk") {
      target_ = second_;  // the restart
    }
  }

  httplib::Server http_;
  std::atomic<int> target_;
  int second_;
  int port_ = 0;
  std::thread thread_;
};

TEST(ServerWeightSync, SglangPlanRecordsTheVersionTheServerReports) {
  server_config sc;
  sc.weight_version = 4;
  auto server = start_server(sc);
  ASSERT_TRUE(server);
  auto client = policy_client::create(sync_config({server->base_url()}));
  ASSERT_TRUE(client) << client.err().message;

  ASSERT_TRUE(sync_now(**client, 0, fast(sglang_disk_plan()), {"5", "/ckpt/step-5", ""}));
  EXPECT_EQ(server->weight_version(), 5);
  EXPECT_EQ((*client)->endpoints()[0].weight_version, "5");
  auto t = run_turn(**client);
  ASSERT_EQ(t.status, turn_status::ok) << t.message;
  EXPECT_EQ(t.choices[0].weight_version.value_or(""), "5");
}

TEST(ServerWeightSync, VllmTransferDiskPlanLoadsAtFinishAndRecordsTheVersion) {
  server_config sc;
  sc.weight_version = 4;
  auto server = start_server(sc);
  ASSERT_TRUE(server);
  auto client = policy_client::create(sync_config({server->base_url()}));
  ASSERT_TRUE(client) << client.err().message;
  ASSERT_TRUE(sync_now(**client, 0, fast(vllm_transfer_disk_plan()), {"5", "/ckpt/step-5", ""}));
  EXPECT_EQ(server->weight_version(), 5);
  EXPECT_EQ((*client)->endpoints()[0].weight_version, "5");
  auto t = run_turn(**client);
  ASSERT_EQ(t.status, turn_status::ok) << t.message;
  EXPECT_EQ(t.choices[0].weight_version.value_or(""), "5");
  // A relative folder is refused by the server: the sync fails and names the route.
  auto bad = sync_now(**client, 0, fast(vllm_transfer_disk_plan()), {"6", "step-6", ""});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("absolute"), std::string::npos) << bad.err().message;
  EXPECT_EQ(server->weight_version(), 5);
}

// A request's companion (a transfer engine's trainer side) runs alongside each control call: a
// call is ok only when both its HTTP answer and the companion are; the companion's failure fails
// the sync before anything is committed, naming the call.
TEST(ServerWeightSync, ACompanionRunsAlongsideEachCallAndItsFailureFailsTheSync) {
  server_config sc;
  sc.weight_version = 4;
  auto server = start_server(sc);
  ASSERT_TRUE(server);
  auto client = policy_client::create(sync_config({server->base_url()}));
  ASSERT_TRUE(client) << client.err().message;
  std::mutex mutex;
  std::vector<std::string> seen;
  std::vector<std::thread> workers;
  std::string fail_at;
  weight_sync_request request{"5", "/ckpt/step-5", ""};
  request.companion = [&](const control_call& call, const weight_sync_request& r,
                          const std::function<void(status)>& done) {
    std::lock_guard lock(mutex);
    seen.push_back(call.name + "@" + r.version);
    const bool fails = call.name == fail_at;
    // From another thread, as the learner's broadcast answers.
    workers.emplace_back([done, fails] { done(fails ? status{error{"boom"}} : ok_status()); });
  };
  ASSERT_TRUE(sync_now(**client, 0, fast(vllm_transfer_disk_plan()), request));
  EXPECT_EQ(server->weight_version(), 5);
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(seen,
              (std::vector<std::string>{"init@5", "start@5", "load@5", "finish@5", "flush@5"}));
    seen.clear();
  }
  fail_at = "load";
  request.version = "6";
  auto failed = sync_now(**client, 0, fast(vllm_transfer_disk_plan()), request);
  ASSERT_FALSE(failed);
  EXPECT_NE(
      failed.err().message.find("load (POST /update_weights): the trainer's side failed: boom"),
      std::string::npos)
      << failed.err().message;
  EXPECT_EQ(server->weight_version(), 5);  // finish was never sent
  EXPECT_FALSE((*client)->endpoints()[0].admitting);
  for (auto& w : workers) {
    w.join();
  }
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<std::string>{"init@6", "start@6", "load@6"}));
}

TEST(ServerWeightSync, ARestartInTheMiddleIsAVersionMismatchAndKeepsTheServerOut) {
  server_config sc;
  sc.weight_version = 4;
  auto before = start_server(sc);
  auto restarted = start_server(sc);  // back on its startup weights: version 4
  auto healthy = start_server(sc);
  ASSERT_TRUE(before && restarted && healthy);
  restarting_proxy proxy(before->port(), restarted->port());
  auto client = policy_client::create(sync_config({healthy->base_url(), proxy.url()}));
  ASSERT_TRUE(client) << client.err().message;

  auto s = sync_now(**client, 1, fast(sglang_disk_plan()), {"5", "/ckpt/step-5", ""});
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("version mismatch"), std::string::npos) << s.err().message;
  EXPECT_NE(s.err().message.find("reports weight version 4"), std::string::npos) << s.err().message;
  EXPECT_EQ(before->weight_version(), 5);  // the load reached the server that then went away
  const auto view = (*client)->endpoints()[1];
  EXPECT_FALSE(view.admitting);
  EXPECT_EQ(view.sync, sync_phase::failed);
  EXPECT_NE(view.weight_version, "5");

  // Out of rotation: a turn pinned to it goes to the endpoint whose weights are known.
  const auto served_before = generation_requests(*restarted);
  for (int i = 0; i < 3; ++i) {
    auto t = run_turn(**client, 1);
    ASSERT_EQ(t.status, turn_status::ok) << t.message;
    EXPECT_EQ(t.endpoint, 0);
  }
  EXPECT_EQ(generation_requests(*restarted), served_before);

  // A sync that succeeds brings it back.
  ASSERT_TRUE(sync_now(**client, 1, fast(sglang_disk_plan()), {"6", "/ckpt/step-6", ""}));
  EXPECT_EQ(restarted->weight_version(), 6);
  EXPECT_TRUE((*client)->endpoints()[1].admitting);
  auto t = run_turn(**client, 1);
  ASSERT_EQ(t.status, turn_status::ok) << t.message;
  EXPECT_EQ(t.endpoint, 1);
}

TEST(ServerWeightSync, ACutConnectionFailsTheSyncAndTheServerTakesNoTurns) {
  auto healthy = start_server();
  auto doomed = start_server();
  ASSERT_TRUE(healthy && doomed);
  const std::string doomed_url = doomed->base_url();
  auto client = policy_client::create(sync_config({healthy->base_url(), doomed_url}));
  ASSERT_TRUE(client) << client.err().message;
  doomed.reset();  // the connection is gone before the load call

  for (const auto& plan : {sglang_disk_plan(), vllm_disk_plan(), vllm_transfer_disk_plan()}) {
    auto s = sync_now(**client, 1, fast(plan), {"2", "/ckpt/step-2", ""});
    ASSERT_FALSE(s);
    EXPECT_NE(s.err().message.find(plan.calls.front().name + " ("), std::string::npos)
        << s.err().message;
    EXPECT_NE(s.err().message.find("takes no turns until a sync succeeds"), std::string::npos)
        << s.err().message;
    EXPECT_FALSE((*client)->endpoints()[1].admitting);
    auto t = run_turn(**client, 1);
    ASSERT_EQ(t.status, turn_status::ok) << t.message;
    EXPECT_EQ(t.endpoint, 0);
  }
}

}  // namespace
}  // namespace leap::policy
