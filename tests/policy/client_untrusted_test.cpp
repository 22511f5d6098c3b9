// What a server may send that no correct server does: JSON nested 100,000 levels deep, token ids
// that do not fit or are outside the vocabulary, more choices than asked for, and transient
// faults of /tokenize. The client (and our own server, for request bodies) must refuse each
// clearly, retry what a retry can fix, and never crash. Real HTTP on 127.0.0.1: a small
// cpp-httplib server whose replies each test scripts, and the project's policy_server.
#include "policy/client/client.hpp"
#include "policy/client/detail/client_protocol.hpp"
#include "policy/wire/wire.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace leap::policy {
namespace {

using namespace std::chrono_literals;

std::string nested(std::size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

// The body of FastAPI's error with a detail nested `levels` deep.
std::string deep_detail(std::size_t levels) { return R"({"detail": )" + nested(levels) + "}"; }

// A server whose replies are scripted per route: each request takes the next reply queued for its
// path, or the route's default once the queue is empty. `cut` sends half the body and closes the
// connection (a content provider that gives up), as a server that died mid-reply.
class scripted_http_server {
 public:
  struct reply {
    int status = 200;
    std::string body;
    bool cut = false;
  };

  scripted_http_server() {
    const auto scripted = [this](const httplib::Request& req, httplib::Response& res) {
      reply r;
      {
        std::lock_guard lock(mutex_);
        ++requests_[req.path];
        last_body_[req.path] = req.body;
        auto& queue = queued_[req.path];
        if (!queue.empty()) {
          r = std::move(queue.front());
          queue.pop_front();
        } else if (auto it = defaults_.find(req.path); it != defaults_.end()) {
          r = it->second;
        } else {
          r = {404, R"({"detail": "Not Found"})"};
        }
      }
      res.status = r.status;
      if (!r.cut) {
        res.set_content(r.body, "application/json");
        return;
      }
      auto body = std::make_shared<std::string>(std::move(r.body));
      res.set_content_provider(body->size(), "application/json",
                               [body](std::size_t offset, std::size_t, httplib::DataSink& sink) {
                                 if (offset > 0) {
                                   return false;
                                 }
                                 sink.write(body->data(), body->size() / 2);
                                 return true;
                               });
    };
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{}", "application/json");
    });
    server_.Get(".*", scripted);
    server_.Post(".*", scripted);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the accept loop runs would be lost and leave join() hanging.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!server_.is_running() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~scripted_http_server() {
    server_.stop();
    thread_.join();
  }
  scripted_http_server(const scripted_http_server&) = delete;
  scripted_http_server& operator=(const scripted_http_server&) = delete;

  void queue(const std::string& path, reply r) {
    std::lock_guard lock(mutex_);
    queued_[path].push_back(std::move(r));
  }
  void set_default(const std::string& path, reply r) {
    std::lock_guard lock(mutex_);
    defaults_[path] = std::move(r);
  }
  int requests(const std::string& path) {
    std::lock_guard lock(mutex_);
    return requests_[path];
  }
  std::string last_body(const std::string& path) {
    std::lock_guard lock(mutex_);
    return last_body_[path];
  }
  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  std::mutex mutex_;
  std::map<std::string, std::deque<reply>> queued_;
  std::map<std::string, reply> defaults_;
  std::map<std::string, int> requests_;
  std::map<std::string, std::string> last_body_;
  int port_ = 0;
  std::thread thread_;
};

// A vLLM completion with the given ids (one choice each), log-probs -0.5.
std::string vllm_reply(const std::vector<std::string>& choice_ids) {
  std::string out = R"({"id":"cmpl-1","object":"text_completion","choices":[)";
  for (std::size_t c = 0; c < choice_ids.size(); ++c) {
    const auto count =
        choice_ids[c].empty() ? 0 : std::count(choice_ids[c].begin(), choice_ids[c].end(), ',') + 1;
    std::string lps;
    for (int i = 0; i < count; ++i) {
      lps += (i ? "," : "") + std::string("-0.5");
    }
    out += (c ? "," : "") + std::string(R"({"index":)") + std::to_string(c) +
           R"(,"text":"x","token_ids":[)" + choice_ids[c] + R"(],"logprobs":{"token_logprobs":[)" +
           lps + R"(]},"finish_reason":"stop"})";
  }
  return out + "]}";
}

client_config config_for(const std::string& url) {
  client_config c;
  c.endpoints.push_back({url, 8});
  c.request_timeout = 5s;
  c.connect_timeout = 2s;
  c.retry.base_backoff = 1ms;
  c.retry.max_backoff = 5ms;
  c.retry.max_attempts = 3;
  c.health.interval = 50ms;  // an endpoint marked down by failed replies comes back at once
  c.seed = 1;
  return c;
}

std::unique_ptr<policy_client> untrusted_client(client_config config) {
  auto c = policy_client::create(std::move(config));
  EXPECT_TRUE(c) << (c ? "" : c.err().message);
  return c ? std::move(*c) : nullptr;
}

// Submits one turn and waits (bounded) for its result.
turn_result run_turn(policy_client& client, int n = 1, int max_tokens = 8) {
  turn_request r;
  r.request_id = "t";
  r.prompt = {1, 2, 3};
  r.sampling.n = n;
  r.sampling.max_tokens = max_tokens;
  auto done = std::make_shared<std::promise<turn_result>>();
  auto future = done->get_future();
  EXPECT_EQ(client.submit(std::move(r), [done](turn_result t) { done->set_value(std::move(t)); }),
            submit_status::accepted);
  if (future.wait_for(60s) != std::future_status::ready) {
    ADD_FAILURE() << "the turn never completed";
    return {};
  }
  return future.get();
}

result<std::vector<token_id>> run_tokenize(policy_client& client) {
  auto done = std::make_shared<std::promise<result<std::vector<token_id>>>>();
  auto future = done->get_future();
  client.tokenize(-1, {{"user", "hi"}}, true,
                  [done](result<std::vector<token_id>> ids) { done->set_value(std::move(ids)); });
  if (future.wait_for(60s) != std::future_status::ready) {
    return error{"the tokenize call never completed"};
  }
  return future.get();
}

// ---- nesting depth ----

TEST(UntrustedJson, NestingDepthCountsBracketsOutsideStringsOnly) {
  struct row {
    std::string text;
    int depth;
  };
  const std::vector<row> rows = {
      {"", 0},
      {"42", 0},
      {"[]", 1},
      {R"({"a": [1, {"b": []}]})", 4},
      {R"({"a": "[[[[{{{{"})", 1},
      {R"({"a": "\"[[[["})", 1},
      {R"(["\\", [[]]])", 3},
      {nested(64), 64},
      {nested(65), 65},
      {nested(100'000), 65},  // counted no further than the limit + 1
      {"]]]][", 1},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(json_nesting_depth(r.text), r.depth) << r.text.substr(0, 40);
  }
  EXPECT_TRUE(parse_bounded_json(nested(64)).is_array());
  EXPECT_TRUE(parse_bounded_json(nested(65)).is_discarded());
  EXPECT_TRUE(parse_bounded_json("[1,").is_discarded());
}

TEST(UntrustedJson, ErrorMessageOfADeeplyNestedBodyIsBoundedText) {
  for (const std::string& body : {deep_detail(100'000), R"({"error": )" + nested(100'000) + "}",
                                  R"({"detail": )" + nested(60) + "}"}) {
    const std::string m = error_message(body);
    EXPECT_FALSE(m.empty());
    EXPECT_LE(m.size(), 310U);
  }
  const auto v = classify_http_status(503, deep_detail(100'000), retry_config{});
  EXPECT_EQ(v.kind, attempt_kind::retry);
}

TEST(UntrustedJson, ParsersRefuseDeepBodiesAndEventsAsMalformed) {
  for (auto flavour : {wire_flavour::vllm, wire_flavour::sglang}) {
    const auto parsed = parse_generate_response(flavour, deep_detail(100'000), "", {});
    EXPECT_EQ(parsed.problem, parse_problem::malformed);
    EXPECT_NE(parsed.message.find("deeper than 64"), std::string::npos) << parsed.message;
    stream_accumulator acc(flavour, 1, {});
    EXPECT_FALSE(acc.feed("data: " + deep_detail(100'000) + "\n\n"));
    EXPECT_NE(acc.finish("").message.find("deeper than 64"), std::string::npos);
  }
  EXPECT_FALSE(parse_tokenize_response(R"({"tokens": )" + nested(100'000) + "}"));
}

TEST(ClientUntrusted, DeeplyNestedErrorBodiesEndTheTurnWithoutACrash) {
  scripted_http_server server;
  auto client = untrusted_client(config_for(server.url()));
  ASSERT_TRUE(client);

  server.queue("/v1/completions", {400, deep_detail(100'000)});
  auto r = run_turn(*client);
  EXPECT_EQ(r.status, turn_status::rejected) << r.message;
  EXPECT_NE(r.message.find("HTTP 400"), std::string::npos) << r.message;
  EXPECT_LT(r.message.size(), 600U);

  // 503 is retried; the next attempt gets an answer.
  server.queue("/v1/completions", {503, deep_detail(100'000)});
  server.queue("/v1/completions", {200, deep_detail(100'000)});
  server.queue("/v1/completions", {200, vllm_reply({"5,6"})});
  r = run_turn(*client);
  ASSERT_EQ(r.status, turn_status::ok) << r.message;
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.choices.at(0).ids, (std::vector<token_id>{5, 6}));
}

// ---- token ids and choices ----

TEST(ClientProtocolIds, ImpossibleIdsAreInvalidNeverConverted) {
  struct row {
    wire_flavour flavour;
    std::string body;
    parse_problem problem;
    std::string message;  // a substring of the message
  };
  auto sglang = [](const std::string& id) {
    return R"({"text":"x","meta_info":{"finish_reason":{"type":"stop"},)"
           R"("output_token_logprobs":[[-0.5,)" +
           id + R"(,null]]}})";
  };
  const std::vector<row> rows = {
      {wire_flavour::vllm, vllm_reply({"4294967361"}), parse_problem::invalid, "4294967361"},
      {wire_flavour::vllm, vllm_reply({"-1"}), parse_problem::invalid, "-1"},
      {wire_flavour::vllm, vllm_reply({"2147483648"}), parse_problem::invalid, "2147483648"},
      {wire_flavour::vllm, vllm_reply({"18446744073709551615"}), parse_problem::invalid, ""},
      {wire_flavour::vllm, vllm_reply({"2147483647"}), parse_problem::none, ""},
      {wire_flavour::vllm, vllm_reply({"1.5"}), parse_problem::schema, "not a list of ids"},
      {wire_flavour::sglang, sglang("4294967361"), parse_problem::invalid, "4294967361"},
      {wire_flavour::sglang, sglang("-7"), parse_problem::invalid, "-7"},
      {wire_flavour::sglang, sglang("7"), parse_problem::none, ""},
  };
  for (const auto& r : rows) {
    for (const auto& parsed : {parse_generate_response(r.flavour, r.body, "", {}),
                               parse_generate_response_reference(r.flavour, r.body, "", {})}) {
      EXPECT_EQ(parsed.problem, r.problem) << r.body << ": " << parsed.message;
      EXPECT_NE(parsed.message.find(r.message), std::string::npos) << parsed.message;
    }
  }
  EXPECT_FALSE(parse_tokenize_response(R"({"tokens": [1, 4294967361]})"));
  EXPECT_FALSE(parse_tokenize_response(R"({"tokens": [-1]})"));
  // The echoed prompt is compared as sent, not truncated to 32 bits.
  const std::string echo = R"({"choices":[{"index":0,"text":"","token_ids":[],"logprobs":)"
                           R"({"token_logprobs":[]},"finish_reason":"stop",)"
                           R"("prompt_token_ids":[4294967297]}]})";
  const std::vector<token_id> prompt{1};
  EXPECT_EQ(parse_generate_response(wire_flavour::vllm, echo, "", prompt).problem,
            parse_problem::schema);
}

TEST(ClientProtocolIds, ChoicesAreCheckedAgainstNAndTheVocabulary) {
  auto two = parse_generate_response(wire_flavour::vllm, vllm_reply({"1", "2"}), "", {});
  ASSERT_EQ(two.problem, parse_problem::none);
  auto checked = check_choices(two.choices, 1, 0);
  EXPECT_EQ(checked.problem, parse_problem::invalid);
  EXPECT_NE(checked.message.find("2 choices in the reply, 1 asked for"), std::string::npos);
  EXPECT_EQ(check_choices(two.choices, 2, 0).problem, parse_problem::none);
  EXPECT_EQ(check_choices(two.choices, 2, 3).problem, parse_problem::none);
  checked = check_choices(two.choices, 2, 2);
  EXPECT_EQ(checked.problem, parse_problem::invalid);
  EXPECT_NE(checked.message.find("token id 2 is outside the vocabulary (vocab_size 2)"),
            std::string::npos)
      << checked.message;

  // A stream naming a choice beyond n is invalid, not a configuration fault.
  stream_accumulator acc(wire_flavour::vllm, 1, {});
  acc.feed("data: " + vllm_reply({"1", "2"}) + "\n\n");
  EXPECT_EQ(acc.finish("").problem, parse_problem::invalid);
}

TEST(ClientUntrusted, FaultyRepliesAreRetriedAndNeverStored) {
  scripted_http_server server;
  auto config = config_for(server.url());
  config.vocab_size = 100;
  auto client = untrusted_client(config);
  ASSERT_TRUE(client);

  server.queue("/v1/completions", {200, vllm_reply({"4294967361"})});
  server.queue("/v1/completions", {200, vllm_reply({"5", "6"})});  // n = 1
  server.queue("/v1/completions", {200, vllm_reply({"5,6"})});
  auto r = run_turn(*client);
  ASSERT_EQ(r.status, turn_status::ok) << r.message;
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.choices.at(0).ids, (std::vector<token_id>{5, 6}));

  // Every reply faulty: the turn gives up naming the fault; nothing is delivered as a choice.
  server.set_default("/v1/completions", {200, vllm_reply({"5,100"})});
  r = run_turn(*client);
  EXPECT_EQ(r.status, turn_status::unavailable);
  EXPECT_TRUE(r.choices.empty());
  EXPECT_NE(r.message.find("invalid reply: choice 0: token id 100 is outside the vocabulary"),
            std::string::npos)
      << r.message;
  server.set_default("/v1/completions", {200, vllm_reply({"-1"})});
  r = run_turn(*client);
  EXPECT_EQ(r.status, turn_status::unavailable);
  EXPECT_NE(r.message.find("token id -1 is not an id"), std::string::npos) << r.message;
}

// ---- /tokenize ----

TEST(ClientUntrusted, TokenizeRetriesTransientFaults) {
  scripted_http_server server;
  auto config = config_for(server.url());
  config.retry.max_attempts = 6;
  config.vocab_size = 100;
  auto client = untrusted_client(config);
  ASSERT_TRUE(client);
  server.queue("/tokenize", {503, R"({"error": {"message": "busy"}})"});
  server.queue("/tokenize", {200, R"({"tokens": [1, 2, 3], "count": 3})", /*cut=*/true});
  server.queue("/tokenize", {200, "not json"});
  server.queue("/tokenize", {200, R"({"tokens": [1, 200]})"});  // beyond the vocabulary
  server.queue("/tokenize", {200, R"({"tokens": [1, 2, 3], "count": 3})"});
  auto ids = run_tokenize(*client);
  ASSERT_TRUE(ids) << ids.err().message;
  EXPECT_EQ(*ids, (std::vector<token_id>{1, 2, 3}));
  EXPECT_EQ(server.requests("/tokenize"), 5);
  EXPECT_EQ(client->stats().tokenize_attempts, 5U);

  // A refusal a retry cannot fix is answered at once; a fault that persists, after max_attempts.
  server.queue("/tokenize", {400, R"({"error": {"message": "bad messages"}})"});
  ids = run_tokenize(*client);
  ASSERT_FALSE(ids);
  EXPECT_NE(ids.err().message.find("bad messages"), std::string::npos) << ids.err().message;
  EXPECT_EQ(server.requests("/tokenize"), 6);
  server.set_default("/tokenize", {503, deep_detail(100'000)});
  ids = run_tokenize(*client);
  ASSERT_FALSE(ids);
  EXPECT_NE(ids.err().message.find("gave up after 6 failed attempts"), std::string::npos)
      << ids.err().message;
  EXPECT_EQ(server.requests("/tokenize"), 12);
}

// ---- start-up check ----

result<std::vector<endpoint_check>> run_preflight(policy_client& client,
                                                  preflight_request request) {
  auto done = std::make_shared<std::promise<result<std::vector<endpoint_check>>>>();
  auto future = done->get_future();
  client.preflight(std::move(request), [done](auto checks) { done->set_value(std::move(checks)); });
  if (future.wait_for(60s) != std::future_status::ready) {
    return error{"the start-up check never completed"};
  }
  return future.get();
}

const char* const models_body =
    R"({"object":"list","data":[{"id":"m1","object":"model","max_model_len":4096,"vocab_size":100}]})";

TEST(ClientPreflight, ASoundServerPassesAndItsVocabularyBoundsTheIds) {
  scripted_http_server server;
  server.set_default("/v1/models", {200, models_body});
  server.set_default("/tokenize", {200, R"({"tokens": [1, 2, 3], "count": 3})"});
  server.set_default("/v1/completions", {200, vllm_reply({"7"})});
  auto config = config_for(server.url());
  config.model = "m1";
  auto client = untrusted_client(config);
  ASSERT_TRUE(client);
  preflight_request probe;
  probe.tokenize_probe = {{"user", "Say hello."}};
  auto checks = run_preflight(*client, probe);
  ASSERT_TRUE(checks) << checks.err().message;
  ASSERT_EQ(checks->size(), 1U);
  EXPECT_EQ((*checks)[0].models, (std::vector<std::string>{"m1"}));
  EXPECT_EQ((*checks)[0].max_model_len, 4096);
  EXPECT_EQ((*checks)[0].vocab_size, 100);
  EXPECT_EQ(server.requests("/tokenize"), 1);
  EXPECT_EQ(server.requests("/v1/completions"), 1);
  // The reported vocabulary now bounds every reply's ids.
  server.set_default("/v1/completions", {200, vllm_reply({"150"})});
  auto r = run_turn(*client);
  EXPECT_EQ(r.status, turn_status::unavailable);
  EXPECT_NE(r.message.find("outside the vocabulary (vocab_size 100)"), std::string::npos)
      << r.message;
}

// vLLM and SGLang do not report their vocabulary: the one known here (the run's policy.tokenizer,
// client_config::fallback_vocab_size) bounds the ids then, so an id beyond it is retried as a
// fault and never delivered (issue 29: it was stored). A server that reports its own replaces it.
TEST(ClientPreflight, TheFallbackVocabularyBoundsIdsUntilAServerReportsItsOwn) {
  const char* const unreported =
      R"({"object":"list","data":[{"id":"m1","object":"model","max_model_len":4096}]})";
  const char* const reported =
      R"({"object":"list","data":[{"id":"m1","object":"model","max_model_len":4096,"vocab_size":200}]})";
  struct row {
    const char* what;
    const char* models;
    const char* ids;
    const char* refusal;  // "": delivered
  };
  const std::vector<row> rows = {
      {"below the fallback", unreported, "5,99", ""},
      {"at the fallback, none reported", unreported, "5,100",
       "token id 100 is outside the vocabulary (vocab_size 100)"},
      {"beyond the fallback, inside the reported", reported, "5,150", ""},
      {"at the reported", reported, "5,200",
       "token id 200 is outside the vocabulary (vocab_size 200)"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    scripted_http_server server;
    server.set_default("/v1/models", {200, r.models});
    server.set_default("/tokenize", {200, R"({"tokens": [1, 2, 3], "count": 3})"});
    server.set_default("/v1/completions", {200, vllm_reply({"7"})});
    auto config = config_for(server.url());
    config.model = "m1";
    config.fallback_vocab_size = 100;
    auto client = untrusted_client(config);
    ASSERT_TRUE(client);
    preflight_request probe;
    probe.tokenize_probe = {{"user", "Say hello."}};
    auto checks = run_preflight(*client, probe);
    ASSERT_TRUE(checks) << checks.err().message;
    server.set_default("/v1/completions", {200, vllm_reply({r.ids})});
    auto turn = run_turn(*client);
    if (std::string(r.refusal).empty()) {
      ASSERT_EQ(turn.status, turn_status::ok) << turn.message;
      EXPECT_EQ(turn.choices.at(0).ids.size(), 2U);
    } else {
      EXPECT_EQ(turn.status, turn_status::unavailable);
      EXPECT_TRUE(turn.choices.empty());
      EXPECT_EQ(turn.attempts, 3);  // retried as a fault
      EXPECT_NE(turn.message.find(r.refusal), std::string::npos) << turn.message;
    }
  }
}

// A run configured with max_tokens for a larger model than the one served: vLLM answers 400 (prompt
// + max_tokens over max_model_len), which would end every turn empty. The window /v1/models reports
// (4096 in models_body) lowers max_tokens to what fits the 3-token prompt.
TEST(ClientPreflight, TheReportedContextWindowLowersMaxTokensToWhatFits) {
  scripted_http_server server;
  server.set_default("/v1/models", {200, models_body});
  server.set_default("/v1/completions", {200, vllm_reply({"7"})});
  auto client = untrusted_client(config_for(server.url()));
  ASSERT_TRUE(client);
  auto before = run_turn(*client, 1, 10'000);
  EXPECT_EQ(before.status, turn_status::ok) << before.message;
  EXPECT_NE(server.last_body("/v1/completions").find(R"("max_tokens":10000)"), std::string::npos)
      << server.last_body("/v1/completions");
  preflight_request probe;
  probe.prompt = {1};
  auto checks = run_preflight(*client, probe);
  ASSERT_TRUE(checks) << checks.err().message;
  auto after = run_turn(*client, 1, 10'000);
  EXPECT_EQ(after.status, turn_status::ok) << after.message;
  EXPECT_NE(server.last_body("/v1/completions").find(R"("max_tokens":4093)"), std::string::npos)
      << server.last_body("/v1/completions");
}

TEST(ClientPreflight, EachUnfitServerIsNamedWithItsRouteAndReason) {
  struct row {
    const char* name;
    std::string model;
    bool stream;
    std::map<std::string, scripted_http_server::reply> routes;
    std::vector<std::string> expected;  // substrings of the error
  };
  const std::vector<row> rows = {
      {"no /tokenize", "", false, {}, {"/tokenize (prompts are rendered there)", "HTTP 404"}},
      {"another model",
       "m2",
       false,
       {{"/v1/models", {200, models_body}}},
       {"does not serve the model 'm2'", "lists 'm1'"}},
      {"no /v1/models with a model to check",
       "m1",
       false,
       {},
       {"/v1/models: HTTP 404", "needed to check the model 'm1'"}},
      {"stream ignored",
       "",
       true,
       {{"/tokenize", {200, R"({"tokens": [1]})"}}, {"/v1/completions", {200, vllm_reply({"7"})}}},
       {"/v1/completions: a test generation of one token ended protocol_error", "no SSE event"}},
      {"protocol errors on every reply",
       "",
       false,
       {{"/tokenize", {200, R"({"tokens": [1]})"}},
        {"/v1/completions", {200, R"({"choices":[{"index":0,"text":"x"}]})"}}},
       {"ended protocol_error", "no 'token_ids'"}},
  };
  for (const auto& r : rows) {
    scripted_http_server server;
    for (const auto& [path, reply] : r.routes) {
      server.set_default(path, reply);
    }
    auto config = config_for(server.url());
    config.model = r.model;
    config.stream = r.stream;
    auto client = untrusted_client(config);
    ASSERT_TRUE(client);
    preflight_request probe;
    probe.tokenize_probe = {{"user", "Say hello."}};
    auto checks = run_preflight(*client, probe);
    ASSERT_FALSE(checks) << r.name;
    EXPECT_NE(checks.err().message.find(server.url()), std::string::npos)
        << r.name << ": " << checks.err().message;
    for (const auto& e : r.expected) {
      EXPECT_NE(checks.err().message.find(e), std::string::npos)
          << r.name << ": " << checks.err().message;
    }
  }
}

}  // namespace
}  // namespace leap::policy
