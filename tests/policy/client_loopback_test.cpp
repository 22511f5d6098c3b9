// The policy client against the project's own server on 127.0.0.1
// (tests/policy/position_server.hpp: policy_server, a position-based backend, faults scripted per
// arrival): round trips in both flavours, routing, back-pressure, every injected fault, resumption,
// health, weight sync and shutdown. Every wait is bounded so that a hang fails instead of stalling.
#include "policy/client/client.hpp"
#include "tests/policy/position_server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

namespace leap::policy {
namespace {

using namespace std::chrono_literals;
using testing::expected_reply;
using testing::position_server;
using fault = fault_kind;
using collector = testing::turn_collector;

// Endpoint state has no notification API; poll it, bounded.
template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = 10s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (predicate()) {
      return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return predicate();
}

client_config fast_config(wire_flavour flavour, const std::vector<std::string>& urls) {
  client_config c;
  c.flavour = flavour;
  for (auto& u : urls) {
    c.endpoints.push_back({u, 8});
  }
  c.request_timeout = 2s;
  c.connect_timeout = 1s;
  c.retry.base_backoff = 1ms;
  c.retry.max_backoff = 20ms;
  c.health.interval = 50ms;
  c.health.timeout = 500ms;
  c.seed = 1;
  return c;
}

std::unique_ptr<policy_client> make_client(client_config config) {
  auto c = policy_client::create(std::move(config));
  EXPECT_TRUE(c) << (c ? "" : c.err().message);
  return c ? std::move(*c) : nullptr;
}

turn_request turn(std::string id, std::size_t prompt_len, int max_tokens = 64, int pinned = -1) {
  turn_request r;
  r.request_id = std::move(id);
  for (std::size_t i = 0; i < prompt_len; ++i) {
    r.prompt.push_back(static_cast<token_id>(i + 1));
  }
  r.sampling.max_tokens = max_tokens;
  r.pinned_endpoint = pinned;
  return r;
}

std::vector<token_id> as_ids(const std::vector<int>& v) { return {v.begin(), v.end()}; }

TEST(ClientLoopback, VllmTurnsBuildAConversationTokenInTokenOut) {
  position_server server({}, {}, 1);
  auto client = make_client(fast_config(wire_flavour::vllm, {server.url()}));
  collector done;

  conversation conv;
  std::vector<token_id> prompt{151644, 872, 198, 40, 41};
  conv.append_prompt(prompt);
  turn_request r;
  r.request_id = "rollout-1.turn-1";
  r.prompt = conv.tokens();
  r.sampling.max_tokens = 64;
  ASSERT_EQ(client->submit(r, done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(1));
  auto first = done.take()[0];
  ASSERT_EQ(first.status, turn_status::ok) << first.message;
  ASSERT_EQ(first.choices.size(), 1U);
  EXPECT_EQ(first.choices[0].ids, as_ids(expected_reply(5, 64)));  // positions 5..15
  EXPECT_EQ(first.choices[0].logprobs.front(), testing::position_logprob(5));
  EXPECT_EQ(first.choices[0].finish, finish_reason::stop);
  EXPECT_EQ(first.choices[0].weight_version, "1");
  EXPECT_EQ(first.attempts, 1);
  EXPECT_EQ(first.endpoint, 0);
  ASSERT_TRUE(conv.append_model_turn(first.choices[0], first.endpoint, first.attempts));

  conv.append_feedback(std::vector<token_id>{7, 8, 9});
  r.request_id = "rollout-1.turn-2";
  r.prompt = conv.tokens();
  r.pinned_endpoint = conv.pinned_endpoint();
  r.sampling.max_tokens = 3;
  ASSERT_EQ(client->submit(r, done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(2));
  auto second = done.take()[1];
  ASSERT_EQ(second.status, turn_status::ok) << second.message;
  EXPECT_EQ(second.choices[0].ids, as_ids(expected_reply(conv.size(), 3)));
  EXPECT_EQ(second.choices[0].finish, finish_reason::length);
  ASSERT_TRUE(conv.append_model_turn(second.choices[0], second.endpoint, second.attempts));

  // The server saw exactly the ids the client keeps: the first turn's sampled ids were sent back
  // verbatim as part of the second prompt.
  auto records = server.records();
  ASSERT_EQ(records.size(), 2U);
  EXPECT_EQ(records[0].wire_id, "rollout-1.turn-1.1");
  EXPECT_EQ(records[1].prompt_len, 5U + first.choices[0].ids.size() + 3U);
  EXPECT_EQ(conv.mask().size(), conv.tokens().size());
}

TEST(ClientLoopback, SglangTurnWithSeveralCompletions) {
  position_server server({}, {}, 4);
  auto client = make_client(fast_config(wire_flavour::sglang, {server.url()}));
  collector done;
  auto r = turn("g1", 10, 4);
  r.sampling.n = 2;
  ASSERT_EQ(client->submit(r, done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(1));
  auto res = done.take()[0];
  ASSERT_EQ(res.status, turn_status::ok) << res.message;
  ASSERT_EQ(res.choices.size(), 2U);
  for (const auto& c : res.choices) {
    EXPECT_EQ(c.ids, as_ids(expected_reply(10, 4)));
    EXPECT_EQ(c.finish, finish_reason::length);
    EXPECT_EQ(c.weight_version, "4");
    EXPECT_EQ(c.logprobs.size(), c.ids.size());
  }
}

TEST(ClientLoopback, ManyTurnsReuseConnectionsWithinTheInFlightLimit) {
  position_server server;
  auto config = fast_config(wire_flavour::vllm, {server.url()});
  config.endpoints[0].max_in_flight = 4;
  auto client = make_client(config);
  collector done;
  constexpr int turns = 200;
  for (int i = 0; i < turns; ++i) {
    ASSERT_EQ(client->submit(turn("t" + std::to_string(i), 8 + i % 5, 8), done.callback()),
              submit_status::accepted);
  }
  ASSERT_TRUE(done.wait_for(turns));
  std::set<std::string> ids;
  for (const auto& r : done.take()) {
    EXPECT_EQ(r.status, turn_status::ok) << r.message;
    EXPECT_TRUE(ids.insert(r.request_id).second) << "duplicate callback for " << r.request_id;
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(turns));
  EXPECT_EQ(server.records().size(), static_cast<std::size_t>(turns));
  EXPECT_LE(server.backend().max_concurrent(), 4);
  const auto stats = client->stats();
  // Four generation connections, plus the health checks' (which share the pool).
  EXPECT_LE(stats.connections_opened, 8U) << "connections are not reused";
  EXPECT_EQ(stats.ok, static_cast<std::uint64_t>(turns));
}

TEST(ClientLoopback, RoutesToTheLeastOutstandingEndpointAndPinsConversations) {
  position_server a;
  position_server b;
  auto client = make_client(fast_config(wire_flavour::vllm, {a.url(), b.url()}));
  collector done;
  a.hold(true);
  b.hold(true);
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(client->submit(turn("u" + std::to_string(i), 4), done.callback()),
              submit_status::accepted);
  }
  EXPECT_TRUE(a.wait_held(3));
  EXPECT_TRUE(b.wait_held(3));
  a.hold(false);
  b.hold(false);
  ASSERT_TRUE(done.wait_for(6));
  EXPECT_EQ(a.records().size(), 3U);
  EXPECT_EQ(b.records().size(), 3U);

  // Pinned turns go to their endpoint even though it is busier.
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(client->submit(turn("p" + std::to_string(i), 4, 8, 1), done.callback()),
              submit_status::accepted);
  }
  ASSERT_TRUE(done.wait_for(11));
  EXPECT_EQ(a.records().size(), 3U);
  EXPECT_EQ(b.records().size(), 8U);
  for (const auto& r : done.take()) {
    EXPECT_EQ(r.status, turn_status::ok);
  }
}

TEST(ClientLoopback, APinnedTurnLeavesAnEndpointThatGoesDown) {
  position_server a;
  position_server b({fault::status_503, fault::status_503, fault::status_503});
  auto config = fast_config(wire_flavour::vllm, {a.url(), b.url()});
  config.health.interval = 10s;  // only request failures mark b down here
  auto client = make_client(config);
  collector done;
  ASSERT_EQ(client->submit(turn("pinned", 6, 8, 1), done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(1));
  auto r = done.take()[0];
  ASSERT_EQ(r.status, turn_status::ok) << r.message;
  EXPECT_EQ(r.endpoint, 0);
  EXPECT_EQ(r.attempts, 4);
  EXPECT_EQ(b.records().size(), 3U);
  EXPECT_EQ(a.records().size(), 1U);
  auto views = client->endpoints();
  EXPECT_FALSE(views[1].up);
  EXPECT_TRUE(views[0].up);
}

TEST(ClientLoopback, AnswersBusyWhenTheBoundedQueueIsFull) {
  position_server server;
  auto config = fast_config(wire_flavour::vllm, {server.url()});
  config.endpoints[0].max_in_flight = 1;
  config.max_pending = 2;
  auto client = make_client(config);
  collector done;
  server.hold(true);
  EXPECT_EQ(client->submit(turn("a", 4), done.callback()), submit_status::accepted);
  EXPECT_EQ(client->submit(turn("b", 4), done.callback()), submit_status::accepted);
  EXPECT_EQ(client->submit(turn("c", 4), done.callback()), submit_status::accepted);
  EXPECT_EQ(client->submit(turn("d", 4), done.callback()), submit_status::busy);
  EXPECT_TRUE(server.wait_held(1));
  EXPECT_TRUE(eventually([&] { return client->stats().pending == 2; }));
  server.hold(false);
  ASSERT_TRUE(done.wait_for(3));
  EXPECT_FALSE(done.wait_for(4, 100ms));  // the busy turn's callback never runs
  EXPECT_EQ(client->stats().busy, 1U);
  EXPECT_EQ(server.backend().max_concurrent(), 1);
  // Capacity is free again.
  EXPECT_EQ(client->submit(turn("e", 4), done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(4));
}

TEST(ClientLoopback, RidesThroughEveryTransientFault) {
  struct row {
    std::string name;
    fault f;
  };
  const std::vector<row> rows = {
      {"connection dropped before the body", fault::drop},
      {"body cut in half", fault::truncate},
      {"502", fault::status_502},
      {"503", fault::status_503},
      {"504", fault::status_504},
      {"429", fault::status_429},
      {"stall past the timeout", fault::stall},
      {"malformed JSON", fault::malformed},
  };
  for (auto flavour : {wire_flavour::vllm, wire_flavour::sglang}) {
    for (const auto& row : rows) {
      SCOPED_TRACE(row.name + " / " + std::string(to_string(flavour)));
      position_server server({row.f});
      auto config = fast_config(flavour, {server.url()});
      config.request_timeout = 300ms;
      auto client = make_client(config);
      collector done;
      ASSERT_EQ(client->submit(turn("f", 12, 64), done.callback()), submit_status::accepted);
      ASSERT_TRUE(done.wait_for(1));
      auto r = done.take()[0];
      ASSERT_EQ(r.status, turn_status::ok) << r.message;
      EXPECT_EQ(r.choices[0].ids, as_ids(expected_reply(12, 64)));
      EXPECT_EQ(r.attempts, 2);
      auto records = server.records();
      ASSERT_EQ(records.size(), 2U);
      EXPECT_EQ(records[0].wire_id, "f.1");
      EXPECT_EQ(records[1].wire_id, "f.2");
      EXPECT_EQ(client->stats().retries, 1U);
      client.reset();  // close connections before the server stops
    }
  }
}

// A 429's Retry-After holds the retry back (the client's own backoff is 1 ms here) without
// holding the loop: a turn submitted meanwhile is served at once. Only lower bounds on time.
TEST(ClientLoopback, A429sRetryAfterHoldsTheRetryWhileOtherTurnsAreServed) {
  fault_config faults;
  faults.retry_after = 3s;
  position_server server({fault::status_429}, faults);
  auto config = fast_config(wire_flavour::vllm, {server.url()});
  config.retry.max_backoff = 10s;
  auto client = make_client(config);
  collector done;
  ASSERT_EQ(client->submit(turn("held", 12, 8), done.callback()), submit_status::accepted);
  ASSERT_TRUE(eventually([&] { return !server.records().empty(); }));
  ASSERT_EQ(client->submit(turn("other", 5, 8), done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(2));
  const auto results = done.take();
  // The turn submitted second completed first: the held one waited on a timer, not the loop.
  EXPECT_EQ(results[0].request_id, "other");
  EXPECT_EQ(results[1].request_id, "held");
  for (const auto& r : results) {
    EXPECT_EQ(r.status, turn_status::ok) << r.message;
  }
  const auto records = server.records();
  ASSERT_EQ(records.size(), 3U);
  EXPECT_EQ(records[0].wire_id, "held.1");
  EXPECT_EQ(records[0].applied, fault::status_429);
  EXPECT_EQ(records[1].wire_id, "other.1");
  EXPECT_EQ(records[2].wire_id, "held.2");
  EXPECT_GE(records[2].arrived - records[0].arrived, 3s);
  client.reset();
}

// A Retry-After past retry.max_backoff is capped there: the turn does not sit out the server's
// hour. (The collector's 60 s bound is the only upper bound.)
TEST(ClientLoopback, ARetryAfterBeyondMaxBackoffIsCappedThere) {
  fault_config faults;
  faults.retry_after = 3600s;
  position_server server({fault::status_429}, faults);
  auto config = fast_config(wire_flavour::sglang, {server.url()});
  config.retry.max_backoff = 300ms;
  auto client = make_client(config);
  collector done;
  ASSERT_EQ(client->submit(turn("capped", 12, 8), done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(1));
  const auto r = done.take()[0];
  EXPECT_EQ(r.status, turn_status::ok) << r.message;
  EXPECT_EQ(r.attempts, 2);
  const auto records = server.records();
  ASSERT_EQ(records.size(), 2U);
  EXPECT_GE(records[1].arrived - records[0].arrived, 300ms);
  client.reset();
}

TEST(ClientLoopback, ResumesAnAbortedGenerationFromTheTokensReceived) {
  for (auto flavour : {wire_flavour::vllm, wire_flavour::sglang}) {
    SCOPED_TRACE(std::string(to_string(flavour)));
    fault_config keep_two;
    keep_two.abort_tokens = 2;  // an abort keeps the first 2 tokens (never all 13)
    position_server server({fault::abort, fault::abort}, keep_two);
    auto client = make_client(fast_config(flavour, {server.url()}));
    collector done;
    ASSERT_EQ(client->submit(turn("r", 3, 64), done.callback()), submit_status::accepted);
    ASSERT_TRUE(done.wait_for(1));
    auto r = done.take()[0];
    ASSERT_EQ(r.status, turn_status::ok) << r.message;
    // The stitched generation equals an uninterrupted one, log-probs included.
    const auto want = as_ids(expected_reply(3, 64));
    EXPECT_EQ(r.choices[0].ids, want);
    ASSERT_EQ(r.choices[0].logprobs.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(r.choices[0].logprobs[i], testing::position_logprob(3 + i));
    }
    EXPECT_EQ(r.choices[0].finish, finish_reason::stop);
    EXPECT_EQ(r.resumes, 2);
    EXPECT_EQ(r.attempts, 3);
    auto records = server.records();
    ASSERT_EQ(records.size(), 3U);
    EXPECT_EQ(records[0].prompt_len, 3U);
    EXPECT_EQ(records[1].prompt_len, 5U);  // the 2 received tokens appended
    EXPECT_EQ(records[2].prompt_len, 7U);
    EXPECT_EQ(records[0].max_tokens, 64);
    EXPECT_EQ(records[1].max_tokens, 62);  // max_tokens reduced by what was received
    EXPECT_EQ(records[2].max_tokens, 60);
    client.reset();
  }
}

TEST(ClientLoopback, NeverRetriesWhatARetryCannotFix) {
  struct row {
    std::string name;
    fault f;
    turn_status status;
    std::string substring;
  };
  const std::vector<row> rows = {
      {"context too long", fault::context_too_long, turn_status::truncated,
       "maximum context length"},
      {"bad request", fault::bad_request, turn_status::rejected, "temperature"},
      {"500 not listed for retry", fault::status_500, turn_status::rejected, "engine died"},
      {"no token ids", fault::no_token_ids, turn_status::protocol_error, "return_token_ids"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    position_server server({row.f});
    auto client = make_client(fast_config(wire_flavour::vllm, {server.url()}));
    collector done;
    ASSERT_EQ(client->submit(turn("n", 5), done.callback()), submit_status::accepted);
    ASSERT_TRUE(done.wait_for(1));
    auto r = done.take()[0];
    EXPECT_EQ(r.status, row.status) << to_string(r.status);
    EXPECT_NE(r.message.find(row.substring), std::string::npos) << r.message;
    EXPECT_EQ(server.records().size(), 1U);
    client.reset();
  }
}

TEST(ClientLoopback, GivesUpAfterMaxAttempts) {
  position_server server(
      {fault::status_503, fault::status_503, fault::status_503, fault::status_503});
  auto config = fast_config(wire_flavour::vllm, {server.url()});
  config.retry.max_attempts = 3;
  config.health.down_after_failures = 100;
  auto client = make_client(config);
  collector done;
  ASSERT_EQ(client->submit(turn("x", 5), done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(1));
  auto r = done.take()[0];
  EXPECT_EQ(r.status, turn_status::unavailable);
  EXPECT_NE(r.message.find("3 failed attempts"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("HTTP 503"), std::string::npos) << r.message;
  EXPECT_EQ(server.records().size(), 3U);
}

TEST(ClientLoopback, ClampsToTheContextWindow) {
  position_server server;
  auto config = fast_config(wire_flavour::vllm, {server.url()});
  config.max_context_tokens = 30;
  auto client = make_client(config);
  collector done;
  ASSERT_EQ(client->submit(turn("full", 30, 100), done.callback()), submit_status::accepted);
  ASSERT_EQ(client->submit(turn("room", 25, 100), done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(2));
  std::map<std::string, turn_result> by_id;
  for (auto& r : done.take()) {
    by_id[r.request_id] = r;
  }
  EXPECT_EQ(by_id["full"].status, turn_status::truncated);
  EXPECT_EQ(by_id["room"].status, turn_status::ok);
  auto records = server.records();
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].max_tokens, 5);
}

TEST(ClientLoopback, EndpointGoesDownOnFailedHealthChecksAndComesBack) {
  position_server server;
  auto client = make_client(fast_config(wire_flavour::vllm, {server.url()}));
  server.backend().set_healthy(false);
  ASSERT_TRUE(eventually([&] { return !client->endpoints()[0].up; }));
  collector done;
  ASSERT_EQ(client->submit(turn("waits", 5), done.callback()), submit_status::accepted);
  EXPECT_FALSE(done.wait_for(1, 150ms));  // held: no endpoint is up
  EXPECT_TRUE(server.records().empty());
  server.backend().set_healthy(true);
  ASSERT_TRUE(done.wait_for(1));
  EXPECT_EQ(done.take()[0].status, turn_status::ok);
  EXPECT_TRUE(client->endpoints()[0].up);
}

TEST(ClientLoopback, RetriesARefusedConnectionAndMovesToAnotherEndpoint) {
  int dead_port;
  {
    position_server dead;  // bound, then closed: nothing listens there
    dead_port = dead.port();
  }
  const std::string dead_url = "http://127.0.0.1:" + std::to_string(dead_port);
  {  // Alone, the refused endpoint is retried until the attempts run out.
    auto config = fast_config(wire_flavour::vllm, {dead_url});
    config.retry.max_attempts = 3;
    config.health.down_after_failures = 1000;
    auto client = make_client(config);
    collector done;
    ASSERT_EQ(client->submit(turn("alone", 5), done.callback()), submit_status::accepted);
    ASSERT_TRUE(done.wait_for(1));
    auto r = done.take()[0];
    EXPECT_EQ(r.status, turn_status::unavailable);
    EXPECT_EQ(r.attempts, 3);
    EXPECT_NE(r.message.find("onnect"), std::string::npos) << r.message;
  }
  {  // With a live endpoint beside it, a turn pinned to the dead one ends up on the live one.
    position_server live;
    auto config = fast_config(wire_flavour::vllm, {dead_url, live.url()});
    config.health.down_after_failures = 1;
    auto client = make_client(config);
    collector done;
    ASSERT_EQ(client->submit(turn("refused", 5, 8, 0), done.callback()), submit_status::accepted);
    ASSERT_TRUE(done.wait_for(1));
    auto r = done.take()[0];
    ASSERT_EQ(r.status, turn_status::ok) << r.message;
    EXPECT_EQ(r.endpoint, 1);
    EXPECT_FALSE(client->endpoints()[0].up);
    EXPECT_EQ(live.records().size(), 1U);
  }
}

TEST(ClientLoopback, NoTurnIsLostOrDuplicatedUnderMixedFaults) {
  std::mt19937 rng(7);
  const fault kinds[] = {fault::none,       fault::none,       fault::none,      fault::status_503,
                         fault::drop,       fault::truncate,   fault::malformed, fault::abort,
                         fault::status_502, fault::status_429, fault::stall};
  std::vector<fault> scripts[2];
  for (auto& script : scripts) {
    for (int i = 0; i < 150; ++i) {
      script.push_back(kinds[rng() % std::size(kinds)]);
    }
  }
  fault_config keep_two;
  keep_two.abort_tokens = 2;
  position_server a(scripts[0], keep_two);
  position_server b(scripts[1], keep_two);
  auto config = fast_config(wire_flavour::sglang, {a.url(), b.url()});
  config.request_timeout = 300ms;
  config.retry.max_attempts = 20;
  config.health.down_after_failures = 1000;  // keep both in rotation
  auto client = make_client(config);
  collector done;
  constexpr int turns = 300;
  for (int i = 0; i < turns; ++i) {
    ASSERT_EQ(client->submit(turn("m" + std::to_string(i), 1 + i % 40, 64), done.callback()),
              submit_status::accepted);
  }
  ASSERT_TRUE(done.wait_for(turns, 60s));
  EXPECT_FALSE(done.wait_for(turns + 1, 50ms));
  std::set<std::string> seen;
  for (const auto& r : done.take()) {
    ASSERT_EQ(r.status, turn_status::ok) << r.request_id << ": " << r.message;
    EXPECT_TRUE(seen.insert(r.request_id).second) << "duplicate " << r.request_id;
    const int i = std::stoi(r.request_id.substr(1));
    EXPECT_EQ(r.choices[0].ids, as_ids(expected_reply(1 + i % 40, 64))) << r.request_id;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(turns));
  // Every attempt the servers saw belongs to a submitted turn, with attempts numbered 1, 2, ...
  // One id arrives twice only when its first arrival was dropped: libcurl sends a request again,
  // once, on a fresh connection when a reused one closes with no reply at all (the same attempt).
  std::map<std::string, std::set<std::string>> attempts;
  for (auto* s : {&a, &b}) {
    std::map<std::string, fault> last_fault;
    for (const auto& rec : s->records()) {
      EXPECT_TRUE(seen.count(rec.turn_id)) << rec.wire_id;
      if (!attempts[rec.turn_id].insert(rec.wire_id).second) {
        EXPECT_EQ(last_fault[rec.wire_id], fault::drop) << "attempt id reused: " << rec.wire_id;
      }
      last_fault[rec.wire_id] = rec.applied;
    }
  }
  EXPECT_EQ(attempts.size(), static_cast<std::size_t>(turns));
  const auto stats = client->stats();
  EXPECT_EQ(stats.completed, static_cast<std::uint64_t>(turns));
  EXPECT_EQ(stats.ok, static_cast<std::uint64_t>(turns));
  EXPECT_EQ(stats.in_flight, 0U);
  EXPECT_EQ(stats.pending, 0U);
  client.reset();
}

TEST(ClientLoopback, RendersFeedbackThroughTheServersTokenize) {
  position_server server;
  auto client = make_client(fast_config(wire_flavour::vllm, {server.url()}));
  struct call {
    std::mutex m;
    std::condition_variable cv;
    std::map<int, result<std::vector<token_id>>> out;
  } calls;
  auto ask = [&](int slot, const std::vector<chat_message>& messages, bool gen) {
    client->tokenize(-1, messages, gen, [&calls, slot](result<std::vector<token_id>> r) {
      std::lock_guard lock(calls.m);
      calls.out.emplace(slot, std::move(r));
      calls.cv.notify_all();
    });
  };
  const std::vector<chat_message> prev{{"user", "write a kernel"}};
  auto with = [&](std::vector<chat_message> extra) {
    auto v = prev;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  ask(0, with({{"assistant", "a"}}), false);
  ask(1, with({{"assistant", "b"}}), false);
  ask(2, with({{"assistant", "a"}, {"user", "error: x"}}), true);
  {
    std::unique_lock lock(calls.m);
    ASSERT_TRUE(calls.cv.wait_for(lock, 10s, [&] { return calls.out.size() == 3; }));
  }
  for (auto& [slot, r] : calls.out) {
    ASSERT_TRUE(r) << slot << ": " << r.err().message;
  }
  auto closing = template_closing(*calls.out.at(0), *calls.out.at(1));
  auto delta = template_delta(*calls.out.at(0), *calls.out.at(2));
  ASSERT_TRUE(closing) << closing.err().message;
  ASSERT_TRUE(delta) << delta.err().message;

  // The same as the local ChatML renderer over bytes (the server's byte vocabulary).
  chatml_renderer local(
      [](std::string_view t) { return std::vector<token_id>(t.begin(), t.end()); },
      special::im_start, special::im_end);
  // The model stopped on <|im_end|>.
  const std::vector<token_id> history{1, 2, 3, special::im_end};
  auto expected = local.render_feedback({{"user", "error: x"}}, history);
  ASSERT_TRUE(expected);
  auto got = close_turn(history, *closing);
  got.insert(got.end(), delta->begin(), delta->end());
  EXPECT_EQ(got, *expected);

  // A port nobody listens on gives an error, not a hang.
  auto bad_config = fast_config(wire_flavour::vllm, {"http://127.0.0.1:1"});
  auto bad = make_client(bad_config);
  std::promise<result<std::vector<token_id>>> p;
  bad->tokenize(0, prev, true,
                [&p](result<std::vector<token_id>> r) { p.set_value(std::move(r)); });
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(f.get());
}

struct sync_waiter {
  std::promise<status> promise;
  std::future<status> future = promise.get_future();
  std::function<void(status)> callback() {
    return [this](status s) { promise.set_value(std::move(s)); };
  }
  status get() {
    if (future.wait_for(20s) != std::future_status::ready) {
      return error{"weight sync did not finish"};
    }
    return future.get();
  }
};

TEST(ClientWeightSyncHttp, DrainsLoadsFlushesChecksAndAdmits) {
  position_server server({}, {}, 6);
  auto client = make_client(fast_config(wire_flavour::sglang, {server.url()}));
  collector done;
  server.hold(true);
  ASSERT_EQ(client->submit(turn("before-1", 4), done.callback()), submit_status::accepted);
  ASSERT_EQ(client->submit(turn("before-2", 4), done.callback()), submit_status::accepted);
  ASSERT_TRUE(server.wait_held(2));

  sync_waiter sync;
  client->sync_weights(0, sglang_disk_plan(), {"7", "/ckpt/step-7", ""}, sync.callback());
  ASSERT_TRUE(eventually([&] { return !client->endpoints()[0].admitting; }));
  // A turn submitted during the sync waits: the only endpoint does not admit.
  ASSERT_EQ(client->submit(turn("during", 4), done.callback()), submit_status::accepted);
  // A second sync on the same endpoint is refused while the first runs.
  sync_waiter second;
  client->sync_weights(0, sglang_disk_plan(), {"8", "/x", ""}, second.callback());
  auto refused = second.get();
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.err().message.find("already running"), std::string::npos);

  server.hold(false);
  auto s = sync.get();
  ASSERT_TRUE(s) << s.err().message;
  ASSERT_TRUE(done.wait_for(3));
  std::map<std::string, turn_result> by_id;
  for (auto& r : done.take()) {
    by_id[r.request_id] = r;
  }
  EXPECT_EQ(by_id["before-1"].choices[0].weight_version, "6");
  EXPECT_EQ(by_id["during"].choices[0].weight_version, "7");
  EXPECT_EQ(by_id["during"].endpoint_weight_version, "7");

  // The order on the server: both in-flight turns done, then load, flush, then the waiting turn.
  auto log = server.log();
  ASSERT_EQ(log.size(), 5U) << ::testing::PrintToString(log);
  EXPECT_EQ(log[0].rfind("generate before-", 0), 0U);
  EXPECT_EQ(log[1].rfind("generate before-", 0), 0U);
  EXPECT_EQ(log[2],
            R"(POST /update_weights_from_disk {"model_path":"/ckpt/step-7","weight_version":"7"})");
  EXPECT_EQ(log[3], "POST /flush_cache");
  EXPECT_EQ(log[4], "generate during.1 done");
  auto view = client->endpoints()[0];
  EXPECT_TRUE(view.admitting);
  EXPECT_EQ(view.weight_version, "7");
  EXPECT_EQ(view.sync, sync_phase::idle);
}

// A turn held after 3 tokens (the rest waits) while `plan` loads version 7 into `server`; `out`:
// what the client hands back once the server lets the generation go on.
void loopback_turn_across_sync(position_server& server, wire_flavour flavour,
                               const weight_sync_plan& plan, turn_result* out) {
  auto client = make_client(fast_config(flavour, {server.url()}));
  collector done;
  server.hold_after(3);
  server.hold(true);
  ASSERT_EQ(client->submit(turn("long", 4), done.callback()), submit_status::accepted);
  ASSERT_TRUE(server.wait_held(1));
  sync_waiter sync;
  client->sync_weights(0, plan, {"7", "/ckpt/step-7", ""}, sync.callback());
  auto s = sync.get();
  ASSERT_TRUE(s) << s.err().message;
  server.hold(false);
  ASSERT_TRUE(done.wait_for(1));
  *out = done.take()[0];
}

// The same through vLLM's routes: /pause?mode=abort, /collective_rpc reload_weights,
// /reset_prefix_cache, /resume. The turn held mid-generation comes back aborted with its tokens, is
// resumed after the load, and is whole.
TEST(ClientWeightSyncHttp, VllmsPauseInAbortModeGivesATurnTheTokensOfBothVersions) {
  position_server server({}, {}, 6);
  turn_result r;
  ASSERT_NO_FATAL_FAILURE(
      loopback_turn_across_sync(server, wire_flavour::vllm, vllm_disk_plan(true), &r));
  ASSERT_EQ(r.status, turn_status::ok) << r.message;
  EXPECT_EQ(r.resumes, 1);
  EXPECT_EQ(r.choices[0].ids, as_ids(expected_reply(4, 64)));
  ASSERT_EQ(r.choices[0].weight_segments.size(), 2U)
      << ::testing::PrintToString(r.choices[0].weight_segments);
  EXPECT_EQ(r.choices[0].weight_segments[1].first, 3U);
  EXPECT_NE(r.choices[0].weight_segments[0].version, r.choices[0].weight_segments[1].version);
  // The pause came before the load, the resume after it, and the resumed piece after the resume.
  auto log = server.log();
  const auto at = [&](std::string_view prefix) {
    return std::find_if(log.begin(), log.end(),
                        [&](const std::string& line) { return line.rfind(prefix, 0) == 0; }) -
           log.begin();
  };
  const auto n = static_cast<std::ptrdiff_t>(log.size());
  ASSERT_LT(at("POST /pause?mode=abort"), n) << ::testing::PrintToString(log);
  ASSERT_LT(at("POST /collective_rpc"), n) << ::testing::PrintToString(log);
  ASSERT_LT(at("POST /resume"), n) << ::testing::PrintToString(log);
  EXPECT_LT(at("POST /pause?mode=abort"), at("POST /collective_rpc"));
  EXPECT_LT(at("POST /collective_rpc"), at("POST /resume"));
  EXPECT_LT(at("POST /resume"), at("generate long.2"));
}

// A weight update in flight (issue 33): the sync pauses the server in abort mode without draining,
// the turn held mid-generation ends aborted with the tokens version 6 sampled, version 7 loads, and
// the client resumes the turn under 7. The stitched turn is whole and says where 7 took over.
TEST(ClientWeightSyncHttp, APauseInAbortModeGivesATurnTheTokensOfBothVersions) {
  position_server server({}, {}, 6);
  turn_result r;
  ASSERT_NO_FATAL_FAILURE(
      loopback_turn_across_sync(server, wire_flavour::sglang, sglang_disk_plan(true), &r));
  ASSERT_EQ(r.status, turn_status::ok) << r.message;
  EXPECT_EQ(r.resumes, 1);
  // Nothing lost or duplicated: the same ids as an uninterrupted generation.
  EXPECT_EQ(r.choices[0].ids, as_ids(expected_reply(4, 64)));
  EXPECT_EQ(r.choices[0].weight_version, "7");
  EXPECT_EQ(r.choices[0].weight_segments, (std::vector<weight_segment>{{0, "6"}, {3, "7"}}));
  auto log = server.log();
  ASSERT_FALSE(log.empty());
  EXPECT_NE(
      std::find(
          log.begin(), log.end(),
          R"(POST /update_weights_from_disk {"model_path":"/ckpt/step-7","weight_version":"7"})"),
      log.end())
      << ::testing::PrintToString(log);
}

TEST(ClientWeightSyncHttp, VllmSleepReloadWakeRunsItsCallsInOrder) {
  position_server server;
  auto client = make_client(fast_config(wire_flavour::vllm, {server.url()}));
  sync_waiter sync;
  client->sync_weights(0, vllm_sleep_reload_plan(), {"3", "", ""}, sync.callback());
  auto s = sync.get();
  ASSERT_TRUE(s) << s.err().message;
  const std::vector<std::string> want = {"POST /sleep?level=2", "POST /wake_up?tags=weights",
                                         R"(POST /collective_rpc {"method":"reload_weights"})",
                                         "POST /wake_up?tags=kv_cache", "POST /reset_prefix_cache"};
  EXPECT_EQ(server.log(), want);
  EXPECT_EQ(client->endpoints()[0].weight_version, "3");
}

TEST(ClientWeightSyncHttp, FailuresAreReportedWithTheStepAndKeepTheServerOut) {
  // Each failure is one the server really has: a checkpoint its backend cannot load, a reload
  // that fails (500), a call that blocks (a pause that waits for a generation another client
  // holds open), a backend that reports itself unhealthy, and this client's own turn that never
  // finishes.
  enum class held { none, own_turn, other_client };
  struct row {
    std::string name;
    std::function<void(position_server&, weight_sync_plan&)> setup;
    held hold;
    std::string substring;
    bool admitting_after;
  };
  const std::vector<row> rows = {
      {"load says success: false",
       [](position_server& s, weight_sync_plan&) {
         s.backend().fail_load("/ckpt", "checkpoint not found");
       },
       held::none, "checkpoint not found", false},
      {"a step answers 500",
       [](position_server& s, weight_sync_plan& p) {
         s.backend().fail_load("position-weights", "shape mismatch");
         p.calls.push_back(
             control_call{"reload", "POST", "/collective_rpc", R"({"method":"reload_weights"})"});
       },
       held::none, "reload (POST /collective_rpc) failed: HTTP 500", false},
      {"a control call past its deadline",
       [](position_server&, weight_sync_plan& p) {
         p.calls.insert(p.calls.begin(), control_call{"slow", "POST", "/pause_generation",
                                                      R"({"mode":"wait"})", 200ms});
       },
       held::other_client, "slow (POST /pause_generation) failed", false},
      {"health never passes",
       [](position_server& s, weight_sync_plan& p) {
         s.backend().set_healthy(false);
         p.health_attempts = 3;
         p.health_retry_delay = 10ms;
       },
       held::none, "health check failed 3 times", false},
      {"drain times out",
       [](position_server& s, weight_sync_plan& p) {
         s.hold(true);
         p.drain_timeout = 100ms;
       },
       held::own_turn, "did not drain within 100 ms", true},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    position_server server;
    auto config = fast_config(wire_flavour::sglang, {server.url()});
    config.health.interval = 10s;
    auto client = make_client(config);
    auto other = make_client(config);
    auto plan = sglang_disk_plan();
    row.setup(server, plan);
    collector done;
    if (row.hold == held::own_turn) {
      ASSERT_EQ(client->submit(turn("stuck", 4), done.callback()), submit_status::accepted);
      ASSERT_TRUE(server.wait_held(1));
    } else if (row.hold == held::other_client) {
      server.hold(true);
      ASSERT_EQ(other->submit(turn("elsewhere", 4), done.callback()), submit_status::accepted);
      ASSERT_TRUE(server.wait_held(1));
    }
    sync_waiter sync;
    client->sync_weights(0, plan, {"1", "/ckpt", ""}, sync.callback());
    auto s = sync.get();
    ASSERT_FALSE(s);
    EXPECT_NE(s.err().message.find(row.substring), std::string::npos) << s.err().message;
    EXPECT_NE(s.err().message.find(server.url()), std::string::npos) << s.err().message;
    auto view = client->endpoints()[0];
    EXPECT_EQ(view.admitting, row.admitting_after);
    EXPECT_EQ(view.weight_version, "");
    server.hold(false);
    client.reset();
    other.reset();
  }
}

TEST(ClientLoopback, StoppingCancelsEveryOutstandingTurnOnce) {
  position_server server;
  collector done;
  {
    auto config = fast_config(wire_flavour::vllm, {server.url()});
    config.endpoints[0].max_in_flight = 2;
    auto client = make_client(config);
    server.hold(true);
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(client->submit(turn("c" + std::to_string(i), 4), done.callback()),
                submit_status::accepted);
    }
    ASSERT_TRUE(server.wait_held(2));
  }
  ASSERT_EQ(done.take().size(), 5U);
  for (const auto& r : done.take()) {
    EXPECT_EQ(r.status, turn_status::cancelled);
  }
  server.hold(false);
}

}  // namespace
}  // namespace leap::policy
