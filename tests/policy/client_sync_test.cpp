// The weight-sync driver without curl: events in (answers as the transport delivers them, timers,
// in-flight counts), the requests it asks for and the state it reaches out.
#include "policy/client/detail/client_sync.hpp"

#include <gtest/gtest.h>

namespace leap::policy::detail {
namespace {

using std::chrono::milliseconds;

http_outcome answer(long status, std::string body = "{}", std::string version = {}) {
  http_outcome out;
  out.status = status;
  out.body = std::move(body);
  out.weight_version = std::move(version);
  return out;
}

http_outcome cut(std::string why) {
  http_outcome out;
  out.transport_ok = false;
  out.code = 7;  // CURLE_COULDNT_CONNECT
  out.transport_error = std::move(why);
  return out;
}

weight_sync_plan two_calls() {
  weight_sync_plan plan;
  plan.drain_timeout = milliseconds(30'000);
  plan.health_attempts = 3;
  plan.health_retry_delay = milliseconds(250);
  plan.check_version = true;
  plan.calls.push_back(
      {"load", "POST", "/load/{version}", R"({"path": "{path}"})", milliseconds(9'000)});
  plan.calls.push_back({"flush", "POST", "/flush_cache", "", milliseconds(1'000)});
  return plan;
}

weight_sync_request version(std::string v, std::string path = "/w/a\"b") {
  weight_sync_request r;
  r.version = std::move(v);
  r.weights_path = std::move(path);
  return r;
}

TEST(ClientSyncDriver, DrainsThenCallsInOrderThenChecksHealthAndFinishes) {
  sync_driver d("http://a:1");
  auto started = d.start(two_calls(), version("7"), /*in_flight=*/2);
  ASSERT_TRUE(started);
  EXPECT_TRUE(started->stop_admitting);
  ASSERT_TRUE(started->drain_timer);
  EXPECT_EQ(*started->drain_timer, milliseconds(30'000));
  EXPECT_FALSE(started->call);  // two turns still in flight
  EXPECT_EQ(d.phase(), sync_phase::draining);
  const auto g = d.generation();

  EXPECT_FALSE(d.in_flight_changed(1).call);
  auto drained = d.in_flight_changed(0);
  ASSERT_TRUE(drained.call);
  EXPECT_EQ(drained.call->index, 0U);
  EXPECT_EQ(drained.call->method, "POST");
  EXPECT_EQ(drained.call->path, "/load/7");
  EXPECT_EQ(drained.call->body, R"({"path": "/w/a\"b"})");  // escaped inside the JSON string
  EXPECT_EQ(drained.call->deadline, milliseconds(9'000));
  EXPECT_FALSE(drained.call->with_companion);
  EXPECT_EQ(d.phase(), sync_phase::calling);

  auto second = d.call_answered(g, answer(200));
  ASSERT_TRUE(second.call);
  EXPECT_EQ(second.call->path, "/flush_cache");
  EXPECT_EQ(d.state().call_index, 1U);

  auto health = d.call_answered(g, answer(200));
  EXPECT_FALSE(health.call);
  ASSERT_TRUE(health.health_check);
  EXPECT_EQ(*health.health_check, milliseconds(0));
  EXPECT_EQ(d.phase(), sync_phase::health_checking);

  auto again = d.health_answered(g, answer(503));
  ASSERT_TRUE(again.health_check);
  EXPECT_EQ(*again.health_check, milliseconds(250));
  EXPECT_EQ(again.ending, sync_ending::running);

  auto done = d.health_answered(g, answer(200, "", "7"));
  EXPECT_EQ(done.ending, sync_ending::finished);
  EXPECT_EQ(done.version, "7");
  EXPECT_FALSE(d.active());
  EXPECT_EQ(d.phase(), sync_phase::idle);
  // A drain timer of the finished sync fires later: nothing happens.
  EXPECT_EQ(d.drain_timed_out(g).ending, sync_ending::running);
  EXPECT_FALSE(d.current(g));
}

TEST(ClientSyncDriver, NothingInFlightSendsTheFirstCallAtOnce) {
  sync_driver d("http://a:1");
  auto fx = d.start(two_calls(), version("1"), 0);
  ASSERT_TRUE(fx);
  EXPECT_TRUE(fx->stop_admitting);
  ASSERT_TRUE(fx->call);
  EXPECT_EQ(fx->call->path, "/load/1");

  weight_sync_plan no_drain = two_calls();
  no_drain.drain = false;
  sync_driver p("http://a:1");
  auto paused = p.start(no_drain, version("1"), 5);  // turns in flight are not waited for
  ASSERT_TRUE(paused);
  EXPECT_FALSE(paused->drain_timer);
  ASSERT_TRUE(paused->call);
}

TEST(ClientSyncDriver, DrainTimeoutAbandonsAndASecondStartIsRefusedMeanwhile) {
  sync_driver d("http://a:1");
  auto fx = d.start(two_calls(), version("2"), 1);
  ASSERT_TRUE(fx);
  const auto g = d.generation();
  auto refused = d.start(two_calls(), version("3"), 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.err().message,
            "weight sync of http://a:1: a sync is already running (draining)");

  auto timed_out = d.drain_timed_out(g);
  EXPECT_EQ(timed_out.ending, sync_ending::abandoned);
  EXPECT_NE(timed_out.message.find("did not drain within 30000 ms"), std::string::npos);
  EXPECT_NE(timed_out.message.find("admits turns again"), std::string::npos);
  EXPECT_FALSE(d.active());
  // The turn that finally finishes after the abandoned sync starts nothing.
  EXPECT_FALSE(d.in_flight_changed(0).call);
  EXPECT_TRUE(d.start(two_calls(), version("3"), 0));
}

TEST(ClientSyncDriver, ACallIsOkOnlyWhenItsAnswerAndItsCompanionBothAre) {
  auto with_companion = [] {
    auto r = version("4");
    r.companion = [](const control_call&, const weight_sync_request&,
                     const std::function<void(status)>&) {};
    return r;
  };
  {
    sync_driver d("http://a:1");
    auto fx = d.start(two_calls(), with_companion(), 0);
    ASSERT_TRUE(fx && fx->call);
    EXPECT_TRUE(fx->call->with_companion);
    const auto g = d.generation();
    EXPECT_FALSE(d.call_answered(g, answer(200)).call);  // the trainer's side is still out
    auto next = d.companion_done(g, ok_status());
    ASSERT_TRUE(next.call);
    EXPECT_EQ(next.call->path, "/flush_cache");
  }
  {
    sync_driver d("http://a:1");
    ASSERT_TRUE(d.start(two_calls(), with_companion(), 0));
    const auto g = d.generation();
    EXPECT_EQ(d.companion_done(g, error{"gloo: peer gone"}).ending, sync_ending::running);
    auto failed = d.call_answered(g, answer(200));
    EXPECT_EQ(failed.ending, sync_ending::failed);
    EXPECT_EQ(failed.message,
              "weight sync of http://a:1: load (POST /load/4): the trainer's side failed: gloo: "
              "peer gone; the server's weights are unknown, so it takes no turns until a sync "
              "succeeds");
    EXPECT_EQ(d.phase(), sync_phase::failed);
  }
}

TEST(ClientSyncDriver, AFailedCallFailsTheSyncNamingIt) {
  struct row {
    http_outcome out;
    std::string says;
  };
  const std::vector<row> rows{
      {answer(500, R"({"error": {"message": "disk full"}})"),
       "load (POST /load/5) failed: HTTP 500: disk full"},
      {answer(200, R"({"success": false, "message": "no such folder"})"),
       "load (POST /load/5) failed: no such folder"},
      {answer(200, R"({"success": false})"), "load (POST /load/5) failed: success: false"},
      {cut("Connection refused"), "load (POST /load/5) failed: Connection refused"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.says);
    sync_driver d("http://a:1");
    ASSERT_TRUE(d.start(two_calls(), version("5"), 0));
    auto fx = d.call_answered(d.generation(), r.out);
    EXPECT_EQ(fx.ending, sync_ending::failed);
    EXPECT_NE(fx.message.find(r.says), std::string::npos) << fx.message;
    EXPECT_FALSE(fx.call);
    // After a failure a new sync may start (and is the only way back into rotation).
    EXPECT_TRUE(d.start(two_calls(), version("6"), 0));
  }
}

TEST(ClientSyncDriver, HealthChecksRunOutOrCatchAnotherVersion) {
  auto to_health = [](sync_driver& d) {
    EXPECT_TRUE(d.start(two_calls(), version("8"), 0));
    const auto g = d.generation();
    (void)d.call_answered(g, answer(200));
    EXPECT_TRUE(d.call_answered(g, answer(200)).health_check);
    return g;
  };
  {
    sync_driver d("http://a:1");
    const auto g = to_health(d);
    EXPECT_TRUE(d.health_answered(g, answer(503)).health_check);
    EXPECT_TRUE(d.health_answered(g, cut("timeout")).health_check);
    auto failed = d.health_answered(g, answer(502));
    EXPECT_EQ(failed.ending, sync_ending::failed);
    EXPECT_NE(failed.message.find("health check failed 3 times; last: HTTP 502"),
              std::string::npos);
  }
  {
    sync_driver d("http://a:1");
    const auto g = to_health(d);
    auto mismatch = d.health_answered(g, answer(200, "", "0"));
    EXPECT_EQ(mismatch.ending, sync_ending::failed);
    EXPECT_NE(mismatch.message.find("reports weight version 0 after the sync, which asked for 8"),
              std::string::npos);
  }
  {
    // A server that reports no version passes (vLLM and SGLang send none).
    sync_driver d("http://a:1");
    const auto g = to_health(d);
    EXPECT_EQ(d.health_answered(g, answer(200)).ending, sync_ending::finished);
  }
}

// A delta (policy.weight_sync_delta) is sent first; a load that refuses it (409: the server is on
// another base version) is sent once more with the full folder, and the sync goes on from there.
TEST(ClientSyncDriver, ARefusedDeltaIsSentAgainAsTheFullFolder) {
  sync_driver d("http://a:1");
  auto request = version("3", "/w/step-3");
  request.delta_path = "/w/step-3/delta";
  auto started = d.start(two_calls(), request, 0);
  ASSERT_TRUE(started);
  ASSERT_TRUE(started->call);
  EXPECT_EQ(started->call->body, R"({"path": "/w/step-3/delta"})");
  EXPECT_TRUE(started->delta_refused.empty());
  const auto g = d.generation();

  auto full = d.call_answered(g, answer(409, R"({"error": "on version 1, not the base 2"})"));
  ASSERT_TRUE(full.call);
  EXPECT_EQ(full.call->index, 0U);
  EXPECT_EQ(full.call->body, R"({"path": "/w/step-3"})");
  EXPECT_NE(full.delta_refused.find("HTTP 409"), std::string::npos) << full.delta_refused;
  EXPECT_NE(full.delta_refused.find("not the base 2"), std::string::npos) << full.delta_refused;
  EXPECT_EQ(full.ending, sync_ending::running);

  auto flush = d.call_answered(g, answer(200));
  ASSERT_TRUE(flush.call);
  EXPECT_EQ(flush.call->path, "/flush_cache");
  EXPECT_TRUE(flush.delta_refused.empty());
  auto health = d.call_answered(g, answer(200));
  ASSERT_TRUE(health.health_check);
  auto done = d.health_answered(g, answer(200, "{}", "3"));
  EXPECT_EQ(done.ending, sync_ending::finished);
  EXPECT_EQ(done.version, "3");
}

// Only once: the full folder failing too fails the sync; a delta that loads needs no full folder;
// a call that does not name {path} (the flush) failing is not retried.
TEST(ClientSyncDriver, TheFullFolderIsTriedOnceAndOnlyForTheLoad) {
  {
    sync_driver d("http://a:1");
    auto request = version("3", "/w/full");
    request.delta_path = "/w/delta";
    auto started = d.start(two_calls(), request, 0);
    ASSERT_TRUE(started && started->call);
    const auto g = d.generation();
    ASSERT_TRUE(d.call_answered(g, answer(409)).call);
    auto failed = d.call_answered(g, answer(400, R"({"error": "no model"})"));
    EXPECT_FALSE(failed.call);
    EXPECT_EQ(failed.ending, sync_ending::failed);
    EXPECT_NE(failed.message.find("no model"), std::string::npos) << failed.message;
  }
  {
    sync_driver d("http://a:1");
    auto request = version("4", "/w/full");
    request.delta_path = "/w/delta";
    auto started = d.start(two_calls(), request, 0);
    ASSERT_TRUE(started && started->call);
    const auto g = d.generation();
    auto flush = d.call_answered(g, answer(200));
    ASSERT_TRUE(flush.call);
    EXPECT_EQ(flush.call->path, "/flush_cache");
    EXPECT_TRUE(flush.delta_refused.empty());
    auto failed = d.call_answered(g, answer(500));
    EXPECT_FALSE(failed.call);
    EXPECT_EQ(failed.ending, sync_ending::failed);
    EXPECT_TRUE(failed.delta_refused.empty());
  }
}

// The broadcast path's delta: a call with a delta_body carries the request's delta update_info
// first and, refused, its full body; the companion's call says which (carries_delta).
weight_sync_plan transfer_load(const std::string& full_info) {
  weight_sync_plan plan = two_calls();
  plan.calls[0].body = R"({"update_info":)" + full_info + "}";
  plan.calls[0].delta_body = R"({"update_info":{delta_update_info}})";
  return plan;
}

TEST(ClientSyncDriver, ARefusedBroadcastDeltaIsSentAgainWithTheFullUpdateInfo) {
  sync_driver d("http://a:1");
  auto request = version("3");
  request.delta_update_info = [] { return std::string(R"({"names":["a"],"base_version":2})"); };
  auto started = d.start(transfer_load(R"({"names":["a","b"]})"), request, 0);
  ASSERT_TRUE(started && started->call);
  EXPECT_EQ(started->call->body, R"({"update_info":{"names":["a"],"base_version":2}})");
  EXPECT_TRUE(started->call->carries_delta);
  const auto g = d.generation();
  auto full = d.call_answered(g, answer(409, R"({"error": "applies to weight version 2"})"));
  ASSERT_TRUE(full.call);
  EXPECT_EQ(full.call->index, 0U);
  EXPECT_EQ(full.call->body, R"({"update_info":{"names":["a","b"]}})");
  EXPECT_FALSE(full.call->carries_delta);
  EXPECT_NE(full.delta_refused.find("HTTP 409"), std::string::npos) << full.delta_refused;
  ASSERT_TRUE(d.call_answered(g, answer(200)).call);  // the flush
  ASSERT_TRUE(d.call_answered(g, answer(200)).health_check);
  EXPECT_EQ(d.health_answered(g, answer(200, "{}", "3")).ending, sync_ending::finished);
}

TEST(ClientSyncDriver, WithoutADeltaForTheVersionTheFullUpdateInfoGoesOnce) {
  sync_driver d("http://a:1");
  auto request = version("3");
  request.delta_update_info = [] { return std::string(); };
  auto started = d.start(transfer_load(R"({"names":["a","b"]})"), request, 0);
  ASSERT_TRUE(started && started->call);
  EXPECT_EQ(started->call->body, R"({"update_info":{"names":["a","b"]}})");
  EXPECT_FALSE(started->call->carries_delta);
  auto failed = d.call_answered(d.generation(), answer(500, R"({"error": "cut"})"));
  EXPECT_FALSE(failed.call);
  EXPECT_EQ(failed.ending, sync_ending::failed);
  EXPECT_TRUE(failed.delta_refused.empty());
}

TEST(ClientSyncDriver, AnswersOfAnEarlierSyncAreIgnored) {
  sync_driver d("http://a:1");
  ASSERT_TRUE(d.start(two_calls(), version("1"), 0));
  const auto first = d.generation();
  EXPECT_EQ(d.call_answered(first, cut("reset")).ending, sync_ending::failed);
  ASSERT_TRUE(d.start(two_calls(), version("2"), 0));
  // The first sync's late answers change nothing in the second.
  auto late = d.call_answered(first, answer(200));
  EXPECT_FALSE(late.call);
  EXPECT_EQ(late.ending, sync_ending::running);
  EXPECT_EQ(d.state().call_index, 0U);
  EXPECT_FALSE(d.health_answered(first, answer(200)).health_check);
  // The second goes on with its own.
  ASSERT_TRUE(d.call_answered(d.generation(), answer(200)).call);
  EXPECT_TRUE(d.abort());
  EXPECT_FALSE(d.active());
  EXPECT_FALSE(d.abort());
}

}  // namespace
}  // namespace leap::policy::detail
