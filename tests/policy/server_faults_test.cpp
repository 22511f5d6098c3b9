// Fault injection: the spec parser and the decision function as tables, then every fault kind
// observed over real HTTP against a server on 127.0.0.1.
#include "policy/server/server.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace leap::policy {
namespace {

using nlohmann::json;
using namespace leap::policy::testing;

TEST(FaultSpec, ParseTable) {
  struct row {
    std::string spec;
    std::string error;  // empty: must parse
  };
  const std::vector<row> rows = {
      {"", ""},
      {"none", ""},
      {"drop=0.1", ""},
      {"drop=0.1, 5xx=0.2 ,stall=0.05,malformed=0.05,truncate=0.05,abort=0.1,stall_ms=250,seed=9",
       ""},
      {"drop=1", ""},
      {"drop", "is not key=value"},
      {"drop=x", "the rate of 'drop' must be a number in [0, 1] (got 'x')"},
      {"drop=1.5", "must be a number in [0, 1]"},
      {"drop=-0.1", "must be a number in [0, 1]"},
      {"429=0.1,500=0.1,502=0.1,503=0.1,504=0.1,no_token_ids=0.1,context_too_long=0.1,"
       "bad_request=0.1,retry_after_s=3,abort_tokens=2",
       ""},
      {"script=503:drop:none:no_token_ids:context_too_long:bad_request:429:500:5xx:abort", ""},
      {"script=503:explode", "'script' holds an unknown fault 'explode'"},
      {"script=", ""},
      {"explode=0.1", "unknown fault 'explode' (known: drop, 5xx"},
      {"503=x", "the rate of '503' must be a number in [0, 1]"},
      {"retry_after_s=soon", "'retry_after_s' must be a non-negative integer"},
      {"abort_tokens=-2", "'abort_tokens' must be a non-negative integer"},
      {"503=0.5,no_token_ids=0.6", "add up to 1.1"},
      {"stall_ms=-1", "'stall_ms' must be a non-negative integer"},
      {"drop=0.6,abort=0.6", "add up to 1.2"},
      {"hold=0.5,hold_tokens=4,hold_ms=250,script=none:hold", ""},
      {"hold_tokens=x", "'hold_tokens' must be a non-negative integer"},
      {"hold_ms=-5", "'hold_ms' must be a non-negative integer"},
      {"explode=0.1", "hold, script, stall_ms, abort_tokens, hold_tokens, hold_ms, retry_after_s"},
  };
  for (const auto& r : rows) {
    const auto parsed = parse_fault_spec(r.spec);
    if (r.error.empty()) {
      EXPECT_TRUE(parsed.ok()) << r.spec << ": " << parsed.err().message;
    } else {
      ASSERT_FALSE(parsed.ok()) << r.spec;
      EXPECT_NE(parsed.err().message.find(r.error), std::string::npos) << parsed.err().message;
    }
  }
  const auto full = parse_fault_spec("drop=0.1,5xx=0.2,stall_ms=250,seed=9");
  ASSERT_TRUE(full.ok());
  EXPECT_DOUBLE_EQ(full->drop, 0.1);
  EXPECT_DOUBLE_EQ(full->http_5xx, 0.2);
  EXPECT_EQ(full->stall_duration, std::chrono::milliseconds(250));
  EXPECT_EQ(full->seed, 9U);
  EXPECT_TRUE(full->any());
  EXPECT_FALSE(parse_fault_spec("")->any());

  const auto exact =
      parse_fault_spec("429=0.25,retry_after_s=3,abort_tokens=2,script=503:none:429");
  ASSERT_TRUE(exact.ok()) << exact.err().message;
  EXPECT_DOUBLE_EQ(exact->status_429, 0.25);
  EXPECT_EQ(exact->retry_after, std::chrono::seconds(3));
  EXPECT_EQ(exact->abort_tokens, 2U);
  EXPECT_EQ(exact->script, (std::vector<fault_kind>{fault_kind::status_503, fault_kind::none,
                                                    fault_kind::status_429}));
  const auto held = parse_fault_spec("hold_tokens=4,hold_ms=250,script=none:hold");
  ASSERT_TRUE(held.ok()) << held.err().message;
  EXPECT_EQ(held->hold_tokens, 4U);
  EXPECT_EQ(held->hold_duration, std::chrono::milliseconds(250));
  EXPECT_EQ(held->script, (std::vector<fault_kind>{fault_kind::none, fault_kind::hold}));
  EXPECT_EQ(parse_fault_spec("")->hold_tokens, 1U);
  EXPECT_EQ(parse_fault_spec("")->hold_duration, std::chrono::milliseconds(60000));
  // A script alone is a fault configuration.
  EXPECT_TRUE(parse_fault_spec("script=none:drop")->any());
  // Every kind's spec name reads back as that kind.
  for (std::size_t k = 0; k < fault_kind_count; ++k) {
    const auto kind = static_cast<fault_kind>(k);
    const auto parsed = parse_fault_spec(std::string("script=") + to_string(kind));
    ASSERT_TRUE(parsed.ok()) << to_string(kind) << ": " << parsed.err().message;
    EXPECT_EQ(parsed->script, std::vector<fault_kind>{kind});
  }
}

TEST(FaultDecision, AScriptDecidesTheFirstArrivalsThenTheRatesApply) {
  fault_config config;
  config.script = {fault_kind::status_503, fault_kind::none, fault_kind::status_429,
                   fault_kind::context_too_long, fault_kind::http_5xx};
  config.drop = 1.0;
  struct row {
    std::uint64_t serial;
    fault_kind kind;
    int status;
  };
  const std::vector<row> rows = {
      {0, fault_kind::status_503, 503}, {1, fault_kind::none, 0},
      {2, fault_kind::status_429, 429}, {3, fault_kind::context_too_long, 400},
      {5, fault_kind::drop, 0},         {6, fault_kind::drop, 0},
  };
  for (const auto& r : rows) {
    const fault_decision d = decide_fault(config, r.serial);
    EXPECT_EQ(d.kind, r.kind) << r.serial;
    EXPECT_EQ(d.http_status, r.status) << r.serial;
  }
  const int drawn = decide_fault(config, 4).http_status;
  EXPECT_TRUE(drawn == 502 || drawn == 503 || drawn == 504) << drawn;
  // Each exact status kind, drawn by its rate, carries its status.
  const std::pair<double fault_config::*, int> exact[] = {
      {&fault_config::status_429, 429},  {&fault_config::status_500, 500},
      {&fault_config::status_502, 502},  {&fault_config::status_503, 503},
      {&fault_config::status_504, 504},  {&fault_config::context_too_long, 400},
      {&fault_config::bad_request, 400}, {&fault_config::no_token_ids, 0},
  };
  for (const auto& [rate, status] : exact) {
    fault_config only;
    only.*rate = 1.0;
    for (std::uint64_t serial = 0; serial < 20; ++serial) {
      const fault_decision d = decide_fault(only, serial);
      EXPECT_NE(d.kind, fault_kind::none);
      EXPECT_EQ(d.http_status, status) << to_string(d.kind);
    }
  }
}

TEST(FaultDecision, DeterministicAndAtTheConfiguredRates) {
  auto config = parse_fault_spec("drop=0.1,5xx=0.1,stall=0.1,malformed=0.1,truncate=0.1,abort=0.1");
  ASSERT_TRUE(config.ok());
  std::map<fault_kind, int> counts;
  for (std::uint64_t serial = 0; serial < 20000; ++serial) {
    const fault_decision d = decide_fault(*config, serial);
    EXPECT_EQ(d.kind, decide_fault(*config, serial).kind);
    ++counts[d.kind];
    if (d.kind == fault_kind::http_5xx) {
      EXPECT_TRUE(d.http_status == 502 || d.http_status == 503 || d.http_status == 504);
    }
  }
  for (const auto kind : {fault_kind::drop, fault_kind::http_5xx, fault_kind::stall,
                          fault_kind::malformed, fault_kind::truncate, fault_kind::abort}) {
    EXPECT_NEAR(counts[kind] / 20000.0, 0.1, 0.015) << to_string(kind);
  }
  // The kinds added later are stacked after these: a spec of the first six draws as it did.
  EXPECT_EQ(counts.size(), 7U);
  EXPECT_NEAR(counts[fault_kind::none] / 20000.0, 0.4, 0.02);

  // Another seed gives another sequence.
  config->seed = 1;
  int differ = 0;
  auto base = *config;
  base.seed = 0;
  for (std::uint64_t serial = 0; serial < 200; ++serial) {
    differ += decide_fault(*config, serial).kind != decide_fault(base, serial).kind ? 1 : 0;
  }
  EXPECT_GT(differ, 50);
  EXPECT_EQ(decide_fault(fault_config{}, 5).kind, fault_kind::none);
}

// ---- over HTTP ----

server_config with_faults(const std::string& spec) {
  server_config config;
  auto faults = parse_fault_spec(spec);
  EXPECT_TRUE(faults.ok()) << faults.err().message;
  config.faults = *faults;
  return config;
}

json completion_body(bool stream = false) {
  return json{{"prompt", vector_add_prompt}, {"max_tokens", 400}, {"stream", stream},
              {"return_token_ids", true},    {"logprobs", 0},     {"seed", 1}};
}

TEST(FaultsOverHttp, DropClosesWithoutReply) {
  auto server = start_server(with_faults("drop=1"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  const http_reply reply = post(*client, "/v1/completions", completion_body());
  EXPECT_FALSE(reply.ok);
  EXPECT_EQ(reply.error, httplib::Error::Read);
  EXPECT_TRUE(reply.body.empty());
  // The server itself is fine: health and metrics answer, and count the fault.
  const http_reply metrics = get(*client_for(*server), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("leap_policy_faults_injected_total{kind=\"drop\"} 1"),
            std::string::npos);
}

TEST(FaultsOverHttp, ServerErrorsCarryOpenAiErrorBodies) {
  auto server = start_server(with_faults("5xx=1"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  std::map<int, int> seen;
  for (int i = 0; i < 12; ++i) {
    const http_reply reply = post(*client, "/v1/completions", completion_body());
    ASSERT_TRUE(reply.ok);
    ++seen[reply.status];
    EXPECT_TRUE(reply.status == 502 || reply.status == 503 || reply.status == 504);
    EXPECT_EQ(reply.json()["error"]["code"], reply.status);
    EXPECT_NE(reply.json()["error"]["message"].get<std::string>().find("injected fault"),
              std::string::npos);
  }
  EXPECT_GE(seen.size(), 2U);  // more than one of 502/503/504 over a dozen requests
}

TEST(FaultsOverHttp, StallOutlastsTheClientTimeout) {
  auto server = start_server(with_faults("stall=1,stall_ms=5000"));
  ASSERT_TRUE(server);
  auto client = client_for(*server, std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  const http_reply reply = post(*client, "/v1/completions", completion_body());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(reply.ok);
  EXPECT_EQ(reply.error, httplib::Error::Read);
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::milliseconds(4000));
  // Stopping wakes the stalled worker at once instead of waiting out the stall.
  const auto stop_start = std::chrono::steady_clock::now();
  server->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, std::chrono::milliseconds(3000));
}

TEST(FaultsOverHttp, MalformedJsonBody) {
  auto server = start_server(with_faults("malformed=1"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  const http_reply reply = post(*client, "/v1/completions", completion_body());
  ASSERT_TRUE(reply.ok);
  EXPECT_EQ(reply.status, 200);
  EXPECT_FALSE(json::accept(reply.body));
  EXPECT_FALSE(reply.body.empty());

  // Streams: one of the first three events is not JSON; the rest are, and the stream ends
  // properly. Over several requests the bad event is not always the first.
  std::set<std::size_t> bad_positions;
  for (int i = 0; i < 12; ++i) {
    const http_reply stream = post(*client, "/v1/completions", completion_body(true));
    ASSERT_TRUE(stream.ok);
    const auto events = sse_payloads(stream.body);
    ASSERT_GE(events.size(), 4U);
    std::size_t bad = 0;
    for (std::size_t k = 0; k < events.size(); ++k) {
      if (!json::accept(events[k]) && events[k] != "[DONE]") {
        ++bad;
        bad_positions.insert(k);
        EXPECT_LT(k, 3U);
      }
    }
    EXPECT_EQ(bad, 1U);
    EXPECT_EQ(events.back(), "[DONE]");
  }
  EXPECT_GT(bad_positions.size(), 1U);
}

TEST(FaultsOverHttp, TruncatedBodiesAndStreams) {
  auto server = start_server(with_faults("truncate=1"));
  ASSERT_TRUE(server);
  {
    auto client = client_for(*server);
    const http_reply reply = post(*client, "/v1/completions", completion_body());
    EXPECT_FALSE(reply.ok);
    EXPECT_FALSE(json::accept(reply.body));
  }
  {
    auto client = client_for(*server);
    const http_reply stream =
        post(*client, "/v1/chat/completions",
             json{{"messages", {{{"role", "user"}, {"content", sum_prompt}}}}, {"stream", true}});
    EXPECT_FALSE(stream.ok);  // the chunked body never ends
    const auto events = sse_payloads(stream.body);
    EXPECT_GE(events.size(), 1U);
    EXPECT_LE(events.size(), 3U);
    for (const auto& e : events) {
      EXPECT_NE(e, "[DONE]");
      EXPECT_TRUE(json::accept(e));
    }
  }
}

TEST(FaultsOverHttp, AbortReturnsPartialTokens) {
  auto server = start_server(with_faults("abort=1"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  const http_reply reply = post(*client, "/v1/completions", completion_body());
  ASSERT_TRUE(reply.ok);
  ASSERT_EQ(reply.status, 200);
  const json choice = reply.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "abort");
  const auto ids = choice["token_ids"].get<std::vector<token_id>>();
  EXPECT_GE(ids.size(), 1U);
  EXPECT_LE(ids.size(), 8U);
  EXPECT_EQ(choice["text"].get<std::string>(), byte_tokenizer::decode(ids, true));

  // SGLang's shape of the same thing.
  const http_reply generate =
      post(*client, "/generate", json{{"text", vector_add_prompt}, {"return_logprob", true}});
  ASSERT_TRUE(generate.ok);
  const json meta = generate.json()["meta_info"];
  EXPECT_EQ(meta["finish_reason"]["type"], "abort");
  EXPECT_EQ(meta["output_token_logprobs"].size(), generate.json()["output_ids"].size());

  // Streams end with an abort chunk, then [DONE].
  const http_reply stream = post(*client, "/v1/completions", completion_body(true));
  ASSERT_TRUE(stream.ok);
  const auto events = sse_payloads(stream.body);
  ASSERT_GE(events.size(), 2U);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "abort");
}

TEST(FaultsOverHttp, FaultsSpareControlRoutesAndRetriesGetThrough) {
  auto server = start_server(with_faults("5xx=0.5,seed=3"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(get(*client, "/health").status, 200);
    EXPECT_EQ(post(*client, "/tokenize", json{{"prompt", "x"}}).status, 200);
  }
  // A client that retries on 5xx gets every request through.
  int failures = 0;
  for (int request = 0; request < 10; ++request) {
    for (int attempt = 0;; ++attempt) {
      ASSERT_LT(attempt, 30);
      const http_reply reply = post(*client, "/v1/completions", completion_body());
      ASSERT_TRUE(reply.ok);
      if (reply.status == 200) {
        break;
      }
      ++failures;
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(FaultsOverHttp, ExactStatusesAndA429WithRetryAfter) {
  auto server = start_server(with_faults("script=429:500:502:503:504,retry_after_s=7"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  for (const int status : {429, 500, 502, 503, 504}) {
    const http_reply reply = post(*client, "/v1/completions", completion_body());
    ASSERT_TRUE(reply.ok);
    EXPECT_EQ(reply.status, status);
    EXPECT_EQ(reply.json()["error"]["code"], status);
    EXPECT_NE(reply.json()["error"]["message"].get<std::string>().find("injected fault"),
              std::string::npos);
    EXPECT_EQ(reply.header("Retry-After"), status == 429 ? "7" : "") << status;
  }
  // The script is spent: the sixth arrival is served.
  EXPECT_EQ(post(*client, "/v1/completions", completion_body()).status, 200);
  const http_reply metrics = get(*client, "/metrics");
  EXPECT_NE(metrics.body.find("leap_policy_faults_injected_total{kind=\"429\"} 1"),
            std::string::npos);
}

TEST(FaultsOverHttp, BadRequestsInTheEnginesWords) {
  server_config config = with_faults("script=context_too_long:context_too_long:bad_request");
  config.max_model_len = 4096;
  auto server = start_server(config);
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  // vLLM's wording on the OpenAI routes, SGLang's on /generate; both 400 BadRequestError.
  const http_reply vllm = post(*client, "/v1/completions", completion_body());
  ASSERT_EQ(vllm.status, 400);
  EXPECT_EQ(vllm.json()["error"]["type"], "BadRequestError");
  const auto vllm_message = vllm.json()["error"]["message"].get<std::string>();
  EXPECT_NE(vllm_message.find("This model's maximum context length is 4096 tokens"),
            std::string::npos)
      << vllm_message;
  EXPECT_NE(vllm_message.find("400 in the completion"), std::string::npos) << vllm_message;
  const http_reply sglang =
      post(*client, "/generate", json{{"text", vector_add_prompt}, {"return_logprob", true}});
  ASSERT_EQ(sglang.status, 400);
  EXPECT_NE(sglang.json()["error"]["message"].get<std::string>().find(
                "is longer than the model's context length (4096 tokens)"),
            std::string::npos)
      << sglang.body;
  const http_reply bad = post(*client, "/v1/completions", completion_body());
  ASSERT_EQ(bad.status, 400);
  EXPECT_NE(
      bad.json()["error"]["message"].get<std::string>().find("temperature must be non-negative"),
      std::string::npos)
      << bad.body;
}

TEST(FaultsOverHttp, NoTokenIdsTakesTheIdsOutOfEveryShape) {
  auto server = start_server(with_faults("no_token_ids=1"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  const http_reply reply = post(*client, "/v1/completions", completion_body());
  ASSERT_EQ(reply.status, 200);
  const json choice = reply.json()["choices"][0];
  EXPECT_FALSE(choice.contains("token_ids")) << reply.body;
  EXPECT_FALSE(choice["text"].get<std::string>().empty());

  const http_reply generate =
      post(*client, "/generate", json{{"text", vector_add_prompt}, {"return_logprob", true}});
  ASSERT_EQ(generate.status, 200);
  EXPECT_FALSE(generate.json().contains("output_ids")) << generate.body;
  EXPECT_FALSE(generate.json()["text"].get<std::string>().empty());

  const http_reply stream = post(*client, "/v1/completions", completion_body(true));
  ASSERT_TRUE(stream.ok);
  const auto events = sse_payloads(stream.body);
  ASSERT_GE(events.size(), 2U);
  EXPECT_EQ(events.back(), "[DONE]");
  for (std::size_t k = 0; k + 1 < events.size(); ++k) {
    EXPECT_FALSE(json::parse(events[k])["choices"][0].contains("token_ids")) << events[k];
  }
}

TEST(FaultsOverHttp, AbortTokensFixesWhatAnAbortKeeps) {
  auto server = start_server(with_faults("abort=1,abort_tokens=3"));
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  for (int i = 0; i < 4; ++i) {
    const http_reply reply = post(*client, "/v1/completions", completion_body());
    ASSERT_EQ(reply.status, 200);
    EXPECT_EQ(reply.json()["choices"][0]["finish_reason"], "abort");
    EXPECT_EQ(reply.json()["choices"][0]["token_ids"].size(), 3U);
  }
}

// The token ids of a stream's events.
std::vector<token_id> faults_stream_ids(const std::vector<std::string>& events) {
  std::vector<token_id> ids;
  for (const auto& e : events) {
    const json event = json::parse(e, nullptr, false);
    if (!event.is_discarded() && event.contains("choices") &&
        event["choices"][0].contains("token_ids")) {
      for (const auto& id : event["choices"][0]["token_ids"]) {
        ids.push_back(id.get<token_id>());
      }
    }
  }
  return ids;
}

// A streamed completion read on a thread of its own, so that a test can act while it is held.
class faults_held_stream {
 public:
  faults_held_stream(const policy_server& server, const json& body)
      : client_(client_for(server, std::chrono::milliseconds(120000))), reader_([this, body] {
          httplib::Request req;
          req.method = "POST";
          req.path = "/v1/completions";
          req.body = body.dump();
          req.set_header("Content-Type", "application/json");
          req.content_receiver = [this](const char* data, std::size_t size, std::uint64_t,
                                        std::uint64_t) {
            std::lock_guard lock(mutex_);
            body_.append(data, size);
            changed_.notify_all();
            return true;
          };
          httplib::Response res;
          httplib::Error error = httplib::Error::Success;
          client_->send(req, res, error);
          std::lock_guard lock(mutex_);
          done_ = true;
          changed_.notify_all();
        }) {}
  ~faults_held_stream() {
    if (reader_.joinable()) {
      reader_.join();
    }
  }
  faults_held_stream(const faults_held_stream&) = delete;
  faults_held_stream& operator=(const faults_held_stream&) = delete;

  // Waits (at most 30 s) until the stream has carried at least `count` token ids; false if it
  // ended or the time ran out first.
  bool wait_for_ids(std::size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::unique_lock lock(mutex_);
    while (faults_stream_ids(sse_payloads(body_)).size() < count) {
      if (done_ || changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
        return false;
      }
    }
    return true;
  }
  [[nodiscard]] bool done() {
    std::lock_guard lock(mutex_);
    return done_;
  }
  // The whole stream's events, once it has ended.
  std::vector<std::string> events() {
    reader_.join();
    return sse_payloads(body_);
  }

 private:
  std::unique_ptr<httplib::Client> client_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string body_;
  bool done_ = false;
  std::thread reader_;
};

// The hold fault keeps a generation after hold_tokens tokens (sent first on a stream) until a
// pause in abort mode ends it: finish abort with exactly those tokens, the first ones of the same
// request unheld. Then the pause is lifted and the next arrival (none) runs through.
TEST(FaultsOverHttp, AHoldKeepsAGenerationAfterItsTokensUntilAnAbortModePause) {
  auto server = start_server(with_faults("script=hold:none,hold_tokens=3"));
  ASSERT_TRUE(server);
  std::vector<std::string> events;
  {
    faults_held_stream stream(*server, completion_body(true));
    ASSERT_TRUE(stream.wait_for_ids(3));
    EXPECT_FALSE(stream.done());
    auto control = client_for(*server);
    const http_reply paused = post(*control, "/pause_generation", json{{"mode", "abort"}});
    ASSERT_EQ(paused.status, 200) << paused.body;
    EXPECT_EQ(paused.json()["aborted"], 1);
    events = stream.events();
    EXPECT_EQ(post(*control, "/continue_generation", json::object()).status, 200);
  }
  ASSERT_GE(events.size(), 2U);
  EXPECT_EQ(events.back(), "[DONE]");
  const std::vector<token_id> ids = faults_stream_ids(events);
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "abort");
  const http_reply unheld = post(*client_for(*server), "/v1/completions", completion_body());
  ASSERT_EQ(unheld.status, 200) << unheld.body;
  const auto all = unheld.json()["choices"][0]["token_ids"].get<std::vector<token_id>>();
  ASSERT_GT(all.size(), 3U);
  EXPECT_EQ(ids, std::vector<token_id>(all.begin(), all.begin() + 3));
  EXPECT_NE(get(*client_for(*server), "/metrics")
                .body.find("leap_policy_faults_injected_total{kind=\"hold\"} 1"),
            std::string::npos);
}

// A hold also ends when the served weight version changes (the generation then goes on to its
// natural end: every token, as unheld) and, at the latest, after hold_ms.
TEST(FaultsOverHttp, AHoldEndsWhenTheVersionChangesOrAfterHoldMs) {
  auto server = start_server(with_faults("script=hold:none,hold_tokens=2,hold_ms=60000"));
  ASSERT_TRUE(server);
  auto control = client_for(*server);
  std::vector<std::string> by_version;
  {
    faults_held_stream stream(*server, completion_body(true));
    ASSERT_TRUE(stream.wait_for_ids(2));
    const http_reply loaded = post(*control, "/v1/load_lora_adapter",
                                   json{{"lora_name", "a"}, {"lora_path", "/nowhere"}});
    ASSERT_EQ(loaded.status, 200) << loaded.body;
    by_version = stream.events();
  }
  const auto unheld = faults_stream_ids(
      sse_payloads(post(*control, "/v1/completions", completion_body(true)).body));
  EXPECT_GT(unheld.size(), 2U);
  EXPECT_EQ(faults_stream_ids(by_version), unheld);

  auto timed = start_server(with_faults("script=hold,hold_tokens=2,hold_ms=300"));
  ASSERT_TRUE(timed);
  const auto start = std::chrono::steady_clock::now();
  const http_reply slow = post(*client_for(*timed), "/v1/completions", completion_body(true));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_EQ(faults_stream_ids(sse_payloads(slow.body)), unheld);
}

TEST(FaultsOverHttp, TheObserverSeesEveryArrivalWithItsFault) {
  std::mutex mutex;
  std::vector<generation_arrival> arrivals;
  std::vector<answered_request> answered;
  server_config config = with_faults("script=503:none");
  config.on_generation = [&](const generation_arrival& a) {
    std::lock_guard lock(mutex);
    arrivals.push_back(a);
  };
  config.on_request = [&](const answered_request& r) {
    std::lock_guard lock(mutex);
    answered.push_back(r);
  };
  auto server = start_server(config);
  ASSERT_TRUE(server);
  auto client = client_for(*server);
  httplib::Headers headers{{"X-Request-Id", "turn-9.1"}};
  const auto first =
      client->Post("/v1/completions", headers, completion_body().dump(), "application/json");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 503);
  EXPECT_EQ(post(*client, "/generate",
                 json{{"input_ids", {1, 2, 3}}, {"sampling_params", {{"max_new_tokens", 5}}}})
                .status,
            200);
  EXPECT_EQ(post(*client, "/flush_cache", json::object()).status, 200);
  server->stop();
  std::lock_guard lock(mutex);
  ASSERT_EQ(arrivals.size(), 2U);
  EXPECT_EQ(arrivals[0].serial, 0U);
  EXPECT_EQ(arrivals[0].route, "/v1/completions");
  EXPECT_EQ(arrivals[0].request_id, "turn-9.1");
  EXPECT_EQ(arrivals[0].max_tokens, 400);
  EXPECT_EQ(arrivals[0].fault.kind, fault_kind::status_503);
  EXPECT_EQ(arrivals[1].route, "/generate");
  EXPECT_EQ(arrivals[1].prompt_tokens, 3U);
  EXPECT_EQ(arrivals[1].max_tokens, 5);
  EXPECT_EQ(arrivals[1].fault.kind, fault_kind::none);
  ASSERT_EQ(answered.size(), 3U);
  EXPECT_EQ(answered[0].status, 503);
  EXPECT_EQ(answered[0].request_id, "turn-9.1");
  EXPECT_EQ(answered[2].method, "POST");
  EXPECT_EQ(answered[2].path, "/flush_cache");
  EXPECT_EQ(answered[2].body, "{}");
}

}  // namespace
}  // namespace leap::policy
