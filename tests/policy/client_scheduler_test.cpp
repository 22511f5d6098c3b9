// The turn scheduler's decisions without curl: admission to the context window, retry and backoff,
// what an answer (whole or streamed, as the transport delivers it) means for its turn, and what a
// piece of a generation leaves to do; and the state they act on (scheduler_state: endpoints,
// queues, the backoff's generator), driven as the client's loop drives it.
#include "policy/client/detail/client_scheduler.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace leap::policy::detail {
namespace {

using std::chrono::milliseconds;

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(LEAP_SOURCE_DIR) + "/tests/policy/fixtures/" + name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

http_outcome answer(long status, std::string body) {
  http_outcome out;
  out.status = status;
  out.body = std::move(body);
  return out;
}

http_outcome transport_failure(int code, std::string why, long status = 0) {
  http_outcome out;
  out.transport_ok = false;
  out.code = code;
  out.transport_error = std::move(why);
  out.status = status;
  return out;
}

const std::vector<token_id> prompt{151644, 872, 198};

reply_context vllm_context(const retry_config& retry) {
  reply_context ctx;
  ctx.flavour = wire_flavour::vllm;
  ctx.retry = &retry;
  ctx.where = "http://a:1";
  ctx.sent = prompt;
  return ctx;
}

TEST(ClientScheduler, AdmissionClampsToTheContextWindow) {
  struct row {
    std::size_t prompt;
    int max_tokens;
    int context;
    bool fits;
    int room;
  };
  for (const auto& r : std::vector<row>{{100, 50, 0, true, 50},
                                        {100, 50, 1'000, true, 50},
                                        {100, 50, 120, true, 20},
                                        {100, 50, 100, false, 0},
                                        {101, 50, 100, false, 0}}) {
    SCOPED_TRACE(testing::Message() << r.prompt << " " << r.max_tokens << " " << r.context);
    const auto a = admit_turn(r.prompt, r.max_tokens, r.context);
    EXPECT_EQ(a.fits, r.fits);
    if (r.fits) {
      EXPECT_EQ(a.max_tokens, r.room);
    } else {
      EXPECT_EQ(a.message, "prompt of " + std::to_string(r.prompt) +
                               " tokens fills the context window of " + std::to_string(r.context));
    }
  }
}

TEST(ClientScheduler, RetriesBackOffUntilAttemptsOrTheDeadlineRunOut) {
  retry_config retry;
  retry.max_attempts = 3;
  retry.base_backoff = milliseconds(100);
  retry.jitter = 0.0;
  const auto now = steady::now();
  int draws = 0;
  auto draw = [&draws] {
    ++draws;
    return 0.5;
  };
  auto second = decide_retry(retry, 2, "boom", now, now + milliseconds(10'000), draw);
  EXPECT_FALSE(second.give_up);
  EXPECT_EQ(second.when, now + milliseconds(200));  // 100 ms doubled for the second retry
  EXPECT_EQ(draws, 1);

  auto spent = decide_retry(retry, 3, "boom", now, now + milliseconds(10'000), draw);
  EXPECT_TRUE(spent.give_up);
  EXPECT_EQ(spent.message, "gave up after 3 failed attempts (retry.max_attempts); last: boom");
  EXPECT_EQ(draws, 1);  // no jitter drawn for a call that gives up on its attempts

  auto late = decide_retry(retry, 1, "boom", now, now + milliseconds(100), draw);
  EXPECT_TRUE(late.give_up);
  EXPECT_EQ(late.message, "turn deadline would pass before the next attempt; last: boom");
}

TEST(ClientScheduler, ARetryWaitsForTheServersRetryAfterUpToMaxBackoff) {
  retry_config retry;
  retry.base_backoff = milliseconds(100);
  retry.max_backoff = milliseconds(5'000);
  retry.jitter = 0.0;
  const auto now = steady::now();
  const auto deadline = now + milliseconds(60'000);
  auto draw = [] { return 0.0; };
  // Longer than the backoff: the server's wait.
  EXPECT_EQ(decide_retry(retry, 1, "429", now, deadline, draw, milliseconds(2'000)).when,
            now + milliseconds(2'000));
  // Shorter than the backoff: the backoff (a server cannot make the client retry sooner).
  EXPECT_EQ(decide_retry(retry, 3, "429", now, deadline, draw, milliseconds(0)).when,
            now + milliseconds(400));
  // Past max_backoff: capped there.
  EXPECT_EQ(decide_retry(retry, 1, "429", now, deadline, draw, milliseconds(3'600'000)).when,
            now + milliseconds(5'000));
  // A wait past the turn's deadline gives up now rather than later.
  EXPECT_TRUE(
      decide_retry(retry, 1, "429", now, now + milliseconds(1'000), draw, milliseconds(2'000))
          .give_up);

  // The verdict of a retried status carries the answer's Retry-After; other verdicts do not.
  const auto ctx = vllm_context(retry);
  auto busy = answer(429, "slow down");
  busy.retry_after = milliseconds(7'000);
  EXPECT_EQ(judge_reply(busy, ctx).retry_after, milliseconds(7'000));
  auto refused = answer(400, R"({"error": {"message": "bad n"}})");
  refused.retry_after = milliseconds(7'000);
  EXPECT_EQ(judge_reply(refused, ctx).action, reply_action::complete);
}

TEST(ClientScheduler, AnAnswerReadWholeCompletesRetriesOrIsAccepted) {
  retry_config retry;
  const auto ctx = vllm_context(retry);
  struct row {
    const char* name;
    http_outcome out;
    reply_action action;
    turn_status status;  // when complete
    bool endpoint_fault;
    std::string says;
  };
  const std::vector<row> rows{
      {"refused", transport_failure(7, "Couldn't connect to server"), reply_action::retry,
       turn_status::ok, true, "http://a:1: Couldn't connect to server"},
      {"bad url", transport_failure(3, "URL using bad/illegal format"), reply_action::complete,
       turn_status::rejected, false, "http://a:1: URL using bad/illegal format"},
      {"503", answer(503, "busy"), reply_action::retry, turn_status::ok, true, "HTTP 503"},
      {"429", answer(429, "slow down"), reply_action::retry, turn_status::ok, false, "HTTP 429"},
      {"context", answer(400, fixture("vllm_error_context_length.json")), reply_action::complete,
       turn_status::truncated, false, "maximum context length"},
      {"400", answer(400, R"({"error": {"message": "bad n"}})"), reply_action::complete,
       turn_status::rejected, false, "bad n"},
      {"not json", answer(200, fixture("truncated_body.json")), reply_action::retry,
       turn_status::ok, true, "http://a:1: "},
      {"no ids", answer(200, fixture("vllm_completion_no_token_ids.json")), reply_action::complete,
       turn_status::protocol_error, false, "http://a:1: "},
      {"two choices for one", answer(200, fixture("vllm_completion_n2.json")), reply_action::retry,
       turn_status::ok, true, "invalid reply"},
      {"ok", answer(200, fixture("vllm_completion.json")), reply_action::accept, turn_status::ok,
       false, ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    const auto v = judge_reply(r.out, ctx);
    EXPECT_EQ(v.action, r.action) << v.message;
    if (r.action == reply_action::complete) {
      EXPECT_EQ(v.status, r.status);
    }
    EXPECT_EQ(v.endpoint_fault, r.endpoint_fault);
    EXPECT_NE(v.message.find(r.says), std::string::npos) << v.message;
  }
  const auto ok = judge_reply(answer(200, fixture("vllm_completion.json")), ctx);
  ASSERT_EQ(ok.choices.size(), 1U);
  EXPECT_EQ(ok.choices[0].ids, (std::vector<token_id>{59730, 563, 737}));

  // An echoed prompt that differs from the ids sent (re-tokenised): a configuration fault.
  auto other = ctx;
  const std::vector<token_id> sent{1, 2, 3};
  other.sent = sent;
  EXPECT_EQ(judge_reply(answer(200, fixture("vllm_completion.json")), other).status,
            turn_status::protocol_error);
  // Ids at or above the known vocabulary: a faulty reply, retried.
  auto small = ctx;
  small.vocab_size = 600;
  EXPECT_EQ(judge_reply(answer(200, fixture("vllm_completion.json")), small).action,
            reply_action::retry);
}

TEST(ClientScheduler, AStreamCutAfterTokensIsAcceptedAsAnAbortToResumeFrom) {
  retry_config retry;
  const auto ctx = vllm_context(retry);
  const std::string whole = fixture("vllm_completion_stream.sse");
  const std::size_t second_event = whole.find("data:", 1);
  {
    stream_accumulator acc(wire_flavour::vllm, 1, prompt);
    ASSERT_TRUE(acc.feed(whole));
    const auto v = judge_stream(answer(200, ""), acc, ctx);
    ASSERT_EQ(v.action, reply_action::accept);
    EXPECT_FALSE(v.endpoint_fault);
    ASSERT_EQ(v.choices.size(), 1U);
    EXPECT_EQ(v.choices[0].ids, (std::vector<token_id>{750, 912, 2877, 64}));
    EXPECT_EQ(v.choices[0].finish, finish_reason::stop);
  }
  {
    // Dropped after the first event: its token is kept, marked as an abort.
    stream_accumulator acc(wire_flavour::vllm, 1, prompt);
    ASSERT_TRUE(acc.feed(whole.substr(0, second_event)));
    const auto v = judge_stream(transport_failure(18, "transfer closed", 200), acc, ctx);
    ASSERT_EQ(v.action, reply_action::accept);
    EXPECT_TRUE(v.endpoint_fault);
    ASSERT_EQ(v.choices.size(), 1U);
    EXPECT_EQ(v.choices[0].ids, (std::vector<token_id>{750}));
    EXPECT_EQ(v.choices[0].finish, finish_reason::abort);
    EXPECT_NE(v.message.find("http://a:1: stream cut short"), std::string::npos);
    EXPECT_NE(v.message.find("(transfer closed)"), std::string::npos);
  }
  {
    // Cut before any token: nothing to resume from, retried whole.
    stream_accumulator acc(wire_flavour::vllm, 1, prompt);
    ASSERT_TRUE(acc.feed(": keep-alive\n\n"));
    const auto v = judge_stream(transport_failure(18, "transfer closed", 200), acc, ctx);
    EXPECT_EQ(v.action, reply_action::retry);
    EXPECT_TRUE(v.endpoint_fault);
  }
  {
    // A whole 2xx body that held no event: the server ignored "stream": true.
    stream_accumulator acc(wire_flavour::vllm, 1, prompt);
    (void)acc.feed(fixture("vllm_completion.json"));
    const auto v = judge_stream(answer(200, ""), acc, ctx);
    EXPECT_EQ(v.action, reply_action::complete);
    EXPECT_EQ(v.status, turn_status::protocol_error);
    EXPECT_NE(v.message.find("held no SSE event"), std::string::npos);
  }
}

generated_turn piece(std::vector<token_id> ids, finish_reason finish, std::string text) {
  generated_turn t;
  t.logprobs.assign(ids.size(), -0.5F);
  t.ids = std::move(ids);
  t.finish = finish;
  t.text = std::move(text);
  return t;
}

generated_turn piece_of(std::vector<token_id> ids, finish_reason finish, std::string version) {
  auto t = piece(std::move(ids), finish, "x");
  t.weight_version = std::move(version);
  return t;
}

// A weight update in flight: the server aborts the generation under version 3, loads version 4,
// and the rest is sampled under 4. The stitched turn says which ids each version sampled.
TEST(ClientScheduler, StitchedPiecesKeepTheVersionOfEachId) {
  const partial_generation none;
  auto first = continue_piece({piece_of({1, 2}, finish_reason::abort, "3")}, none, 10, 0, 8, false,
                              "http://a:1");
  ASSERT_EQ(first.action, piece_action::resume);
  EXPECT_EQ(first.so_far.weight_segments, (std::vector<weight_segment>{{0, "3"}}));
  const partial_generation earlier{first.so_far.ids, first.so_far.logprobs, first.so_far.text,
                                   first.so_far.weight_segments};
  {
    auto d = continue_piece({piece_of({5, 6, 7}, finish_reason::stop, "4")}, earlier, 10, 1, 8,
                            false, "http://a:1");
    ASSERT_EQ(d.action, piece_action::done);
    ASSERT_EQ(d.choices.size(), 1U);
    EXPECT_EQ(d.choices[0].ids, (std::vector<token_id>{1, 2, 5, 6, 7}));
    EXPECT_EQ(d.choices[0].weight_segments, (std::vector<weight_segment>{{0, "3"}, {2, "4"}}));
  }
  {
    // Resumed under the same version (an abort that was no weight update): one segment.
    auto d = continue_piece({piece_of({5}, finish_reason::stop, "3")}, earlier, 10, 1, 8, false,
                            "http://a:1");
    ASSERT_EQ(d.choices.size(), 1U);
    EXPECT_EQ(d.choices[0].weight_segments, (std::vector<weight_segment>{{0, "3"}}));
  }
  {
    // A server that reports no version: one segment without one.
    auto d =
        continue_piece({piece({5}, finish_reason::stop, "e")}, none, 10, 0, 8, false, "http://a:1");
    ASSERT_EQ(d.choices.size(), 1U);
    EXPECT_EQ(d.choices[0].weight_segments, (std::vector<weight_segment>{{0, std::nullopt}}));
    // Resumed after an abort (vLLM reports no version): the resumed ids are a segment of their
    // own, for the pool to name, since new weights may have sampled them.
    auto aborted = continue_piece({piece({1, 2}, finish_reason::abort, "e")}, none, 10, 0, 8, false,
                                  "http://a:1");
    ASSERT_EQ(aborted.action, piece_action::resume);
    const partial_generation so_far{aborted.so_far.ids, aborted.so_far.logprobs,
                                    aborted.so_far.text, aborted.so_far.weight_segments};
    auto resumed = continue_piece({piece({5, 6}, finish_reason::stop, "f")}, so_far, 10, 1, 8,
                                  false, "http://a:1");
    ASSERT_EQ(resumed.choices.size(), 1U);
    EXPECT_EQ(resumed.choices[0].weight_segments,
              (std::vector<weight_segment>{{0, std::nullopt}, {2, std::nullopt}}));
  }
  {
    // n > 1: no segments; weight_version covers each choice.
    auto d = continue_piece(
        {piece_of({5}, finish_reason::stop, "4"), piece_of({6}, finish_reason::stop, "4")}, none,
        10, 0, 8, false, "http://a:1");
    ASSERT_EQ(d.choices.size(), 2U);
    EXPECT_TRUE(d.choices[0].weight_segments.empty());
    EXPECT_TRUE(d.choices[1].weight_segments.empty());
  }
}

TEST(ClientScheduler, PiecesAreStitchedResumedOrGivenUp) {
  partial_generation none;
  partial_generation earlier{{1, 2}, {-0.1F, -0.2F}, "ab"};
  {
    auto d = continue_piece({piece({3}, finish_reason::stop, "c")}, earlier, 10, 1, 8, false,
                            "http://a:1");
    EXPECT_EQ(d.action, piece_action::done);
    EXPECT_FALSE(d.resumed);
    ASSERT_EQ(d.choices.size(), 1U);
    EXPECT_EQ(d.choices[0].ids, (std::vector<token_id>{1, 2, 3}));
    EXPECT_EQ(d.choices[0].logprobs, (std::vector<float>{-0.1F, -0.2F, -0.5F}));
    EXPECT_EQ(d.choices[0].text, "abc");
  }
  {
    auto d = continue_piece({piece({3, 4}, finish_reason::abort, "cd")}, earlier, 10, 1, 8, false,
                            "http://a:1");
    EXPECT_EQ(d.action, piece_action::resume);
    EXPECT_TRUE(d.resumed);
    EXPECT_EQ(d.so_far.ids, (std::vector<token_id>{1, 2, 3, 4}));
    EXPECT_EQ(d.so_far.text, "abcd");
  }
  {
    // The abort came with the last wanted token: done, cut by length.
    auto d = continue_piece({piece({3, 4}, finish_reason::abort, "cd")}, earlier, 4, 1, 8, false,
                            "http://a:1");
    EXPECT_EQ(d.action, piece_action::done);
    EXPECT_TRUE(d.resumed);
    ASSERT_EQ(d.choices.size(), 1U);
    EXPECT_EQ(d.choices[0].finish, finish_reason::length);
    EXPECT_EQ(d.choices[0].ids.size(), 4U);
  }
  {
    auto d = continue_piece({piece({3}, finish_reason::abort, "c")}, earlier, 10, 8, 8, false,
                            "http://a:1");
    EXPECT_EQ(d.action, piece_action::give_up);
    EXPECT_EQ(d.message, "http://a:1: generation aborted 9 times (retry.max_resumes = 8)");
  }
  {
    auto d =
        continue_piece({piece({3}, finish_reason::abort, "c")}, none, 10, 0, 8, true, "http://a:1");
    EXPECT_EQ(d.action, piece_action::give_up);
    EXPECT_EQ(d.message, "turn deadline passed while resuming an aborted generation");
  }
  for (auto choices : {std::vector<generated_turn>{piece({}, finish_reason::abort, "")},
                       std::vector<generated_turn>{piece({5}, finish_reason::abort, "e"),
                                                   piece({6}, finish_reason::stop, "f")}}) {
    SCOPED_TRACE(choices.size());
    auto d = continue_piece(std::move(choices), none, 10, 0, 8, false, "http://a:1");
    EXPECT_EQ(d.action, piece_action::retry);
    EXPECT_FALSE(d.resumed);
    EXPECT_EQ(d.message, "http://a:1: generation aborted by the server");
  }
}

std::vector<endpoint_state> endpoints(std::initializer_list<int> max_in_flight) {
  std::vector<endpoint_state> out;
  for (const int m : max_in_flight) {
    endpoint_state e;
    e.base_url = "http://e" + std::to_string(out.size()) + ":8000/";
    e.max_in_flight = m;
    out.push_back(std::move(e));
  }
  return out;
}

// What the client's pump sends, in order, while endpoints have room.
std::vector<scheduler_state::ready_turn> pump(scheduler_state& s) {
  std::vector<scheduler_state::ready_turn> sent;
  while (const auto ready = s.next_ready()) {
    s.sent(ready->endpoint);
    sent.push_back(*ready);
  }
  return sent;
}

TEST(SchedulerState, TurnsWaitForASlotPinnedFirstThenTheSharedQueue) {
  scheduler_state s(endpoints({1, 2}), 0);
  EXPECT_EQ(s.endpoint(0).base_url, "http://e0:8000");  // the trailing slash is off
  ASSERT_EQ(s.size(), 2U);

  // Free slots: the least loaded endpoint, or the pinned one.
  EXPECT_EQ(s.route(1, -1), 0);
  s.sent(0);
  EXPECT_EQ(s.route(2, -1), 1);
  s.sent(1);
  EXPECT_EQ(s.route(3, 1), 1);
  s.sent(1);
  EXPECT_EQ(s.endpoint(1).in_flight, 2);
  // Full: a pinned turn waits on its endpoint, the others in the shared queue.
  EXPECT_EQ(s.route(4, -1), std::nullopt);
  EXPECT_EQ(s.route(5, 1), std::nullopt);
  EXPECT_EQ(s.route(6, 0), std::nullopt);
  EXPECT_EQ(s.route(7, -1), std::nullopt);
  EXPECT_FALSE(s.next_ready().has_value());

  // A slot on endpoint 1: its pinned turn goes before the shared queue's older one.
  s.answered(1);
  auto sent = pump(s);
  ASSERT_EQ(sent.size(), 1U);
  EXPECT_EQ(sent[0].key, 5U);
  EXPECT_EQ(sent[0].endpoint, 1);

  // Two slots: endpoint 0's pinned turn, then the shared queue in order where there is room.
  s.answered(0);
  s.answered(1);
  sent = pump(s);
  ASSERT_EQ(sent.size(), 2U);
  EXPECT_EQ(sent[0].key, 6U);
  EXPECT_EQ(sent[0].endpoint, 0);
  EXPECT_EQ(sent[1].key, 4U);
  EXPECT_EQ(sent[1].endpoint, 1);
  EXPECT_EQ(s.endpoint(0).in_flight, 1);
  EXPECT_EQ(s.endpoint(1).in_flight, 2);

  s.answered(0);
  sent = pump(s);
  ASSERT_EQ(sent.size(), 1U);
  EXPECT_EQ(sent[0].key, 7U);
  EXPECT_FALSE(s.next_ready().has_value());
}

TEST(SchedulerState, AnEndpointThatStopsAdmittingReleasesItsPinnedTurns) {
  scheduler_state s(endpoints({1, 1}), 0);
  EXPECT_EQ(s.route(1, 0), 0);
  s.sent(0);
  EXPECT_EQ(s.route(2, 1), 1);
  s.sent(1);
  EXPECT_EQ(s.route(3, -1), std::nullopt);  // shared
  EXPECT_EQ(s.route(4, 0), std::nullopt);   // pinned to 0
  EXPECT_EQ(s.route(5, 0), std::nullopt);   // pinned to 0

  // Endpoint 0 goes into a weight sync: its pinned turns join the shared queue behind turn 3.
  s.endpoint(0).admitting = false;
  s.unpin(0);
  s.answered(0);
  EXPECT_FALSE(s.next_ready().has_value());  // endpoint 0 does not admit, endpoint 1 is full
  s.answered(1);
  auto sent = pump(s);
  ASSERT_EQ(sent.size(), 1U);
  EXPECT_EQ(sent[0].key, 3U);
  EXPECT_EQ(sent[0].endpoint, 1);
  s.answered(1);
  sent = pump(s);
  ASSERT_EQ(sent.size(), 1U);
  EXPECT_EQ(sent[0].key, 4U);
  EXPECT_EQ(sent[0].endpoint, 1);

  // A turn pinned to an endpoint that is not routable goes anywhere at once.
  s.endpoint(0).admitting = true;
  EXPECT_EQ(s.route(8, 1), std::nullopt);
  s.endpoint(1).up = false;
  EXPECT_EQ(s.route(9, 1), 0);
}

TEST(SchedulerState, RetainQueuedKeepsTheOrderAndDropsWhatItIsTold) {
  scheduler_state s(endpoints({0, 0}), 0);  // no slots: everything waits
  for (const std::uint64_t key : {1, 2, 3, 4}) {
    EXPECT_EQ(s.route(key, -1), std::nullopt);
  }
  EXPECT_EQ(s.route(5, 1), std::nullopt);
  EXPECT_EQ(s.route(6, 1), std::nullopt);
  std::vector<std::uint64_t> seen;
  s.retain_queued([&seen](std::uint64_t key) {
    seen.push_back(key);
    return key % 2 == 0;
  });
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6}));
  s.endpoint(0).max_in_flight = 8;
  s.endpoint(1).max_in_flight = 8;
  std::vector<std::uint64_t> sent;
  for (const auto& r : pump(s)) {
    sent.push_back(r.key);
  }
  EXPECT_EQ(sent, (std::vector<std::uint64_t>{6, 2, 4}));  // pinned first, then the shared queue
}

TEST(SchedulerState, BackoffDrawsItsJitterFromTheSeededGenerator) {
  retry_config retry;
  retry.base_backoff = milliseconds(1'000);
  retry.max_backoff = milliseconds(1'000);
  retry.jitter = 1.0;  // the delay is drawn from [0, 1 s]
  const auto now = steady::now();
  const auto deadline = now + milliseconds(60'000);
  const auto delays = [&](std::uint64_t seed) {
    scheduler_state s(endpoints({1}), seed);
    std::vector<steady::duration> out;
    for (int failures = 1; failures <= 4; ++failures) {
      const auto d = s.backoff(retry, failures, "boom", now, deadline);
      EXPECT_FALSE(d.give_up);
      out.push_back(d.when - now);
    }
    return out;
  };
  const auto a = delays(7);
  EXPECT_EQ(a, delays(7));  // the same seed, the same delays
  EXPECT_NE(a, delays(8));
  for (const auto d : a) {
    EXPECT_GE(d, steady::duration::zero());
    EXPECT_LE(d, milliseconds(1'000));
  }
  // A call that gives up draws nothing: the next delay is the one it would have been.
  scheduler_state s(endpoints({1}), 7);
  EXPECT_TRUE(s.backoff(retry, retry.max_attempts, "boom", now, deadline).give_up);
  EXPECT_EQ(s.backoff(retry, 1, "boom", now, deadline).when - now, a[0]);
}

}  // namespace
}  // namespace leap::policy::detail
