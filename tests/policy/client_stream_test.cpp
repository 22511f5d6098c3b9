// The client's streaming mode (client_config.stream) against the project's own server on
// 127.0.0.1 (policy_server with the scripted backend, which is deterministic for a seed): every
// stream fault the server injects (truncated streams, dropped connections, aborts, a malformed
// event, 5xx) must leave each turn's ids, log-probs, text and finish exactly as a fault-free,
// non-streamed run gives them, with one callback per turn: nothing lost, nothing duplicated.
#include "policy/client/client.hpp"
#include "tests/policy/position_server.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace leap::policy {
namespace {

using namespace std::chrono_literals;
using collector = testing::turn_collector;

client_config stream_config(wire_flavour flavour, const std::string& url, bool stream) {
  client_config c;
  c.flavour = flavour;
  c.endpoints.push_back({url, 16});
  c.stream = stream;
  c.request_timeout = 10s;
  c.connect_timeout = 2s;
  c.retry.base_backoff = 1ms;
  c.retry.max_backoff = 5ms;
  // Faults are drawn at rates far above any real server's: give the turns room to get through.
  c.retry.max_attempts = 40;
  c.retry.max_resumes = 60;
  c.health.interval = 50ms;
  c.health.down_after_failures = 1000;
  c.seed = 3;
  return c;
}

// Turns over the tiny suite's three tasks: whole answers, and answers cut by max_tokens.
std::vector<turn_request> scripted_turns() {
  std::vector<turn_request> turns;
  const char* prompts[] = {testing::vector_add_prompt, testing::sum_prompt,
                           testing::reverse_prompt};
  int k = 0;
  for (const char* prompt : prompts) {
    const std::vector<chat_message> messages{{"system", "You write code."}, {"user", prompt}};
    for (int seed = 0; seed < 3; ++seed) {
      for (int max_tokens : {1024, 37}) {
        turn_request r;
        r.request_id = "turn-" + std::to_string(k++);
        r.prompt = render_chat(messages);
        r.sampling.max_tokens = max_tokens;
        r.sampling.seed = static_cast<std::uint64_t>(seed);
        turns.push_back(std::move(r));
      }
    }
  }
  return turns;
}

struct run_outcome {
  std::map<std::string, turn_result> by_id;
  client_stats stats;
  std::size_t callbacks = 0;
};

run_outcome run_turns(wire_flavour flavour, bool stream, const fault_config& faults) {
  server_config sc;
  sc.faults = faults;
  sc.stream_chunk_tokens = 8;  // more events per answer: more places for a cut
  // Room for the client's 16 streams and its health probes: with exactly 16 (the connection cap),
  // a probe arriving while every stream is open takes a waiting connection's place or gets 503,
  // and a loaded machine then shows a retry in the fault-free run.
  sc.threads = 32;
  auto server = testing::start_server(sc);
  EXPECT_TRUE(server);
  run_outcome out;
  if (!server) {
    return out;
  }
  auto created = policy_client::create(stream_config(flavour, server->base_url(), stream));
  EXPECT_TRUE(created) << (created ? "" : created.err().message);
  if (!created) {
    return out;
  }
  auto client = std::move(*created);
  collector done;
  const auto turns = scripted_turns();
  for (const auto& t : turns) {
    EXPECT_EQ(client->submit(t, done.callback()), submit_status::accepted);
  }
  EXPECT_TRUE(done.wait_for(turns.size())) << "turns still open";
  // A late duplicate callback would show up here.
  std::this_thread::sleep_for(50ms);
  {
    std::lock_guard lock(done.mutex);
    out.callbacks = done.results.size();
    for (auto& r : done.results) {
      EXPECT_TRUE(out.by_id.emplace(r.request_id, r).second)
          << "two callbacks for " << r.request_id;
    }
  }
  out.stats = client->stats();
  return out;
}

void expect_same_turns(const run_outcome& reference, const run_outcome& got) {
  ASSERT_EQ(got.callbacks, reference.by_id.size());
  for (const auto& [id, want] : reference.by_id) {
    SCOPED_TRACE(id);
    auto it = got.by_id.find(id);
    ASSERT_NE(it, got.by_id.end()) << "turn lost";
    const turn_result& r = it->second;
    ASSERT_EQ(r.status, turn_status::ok) << r.message;
    ASSERT_EQ(r.choices.size(), 1U);
    const auto& a = want.choices[0];
    const auto& b = r.choices[0];
    EXPECT_EQ(b.ids, a.ids);
    EXPECT_EQ(b.logprobs, a.logprobs);
    EXPECT_EQ(b.text, a.text);
    EXPECT_EQ(b.finish, a.finish);
    EXPECT_EQ(b.weight_version, a.weight_version);
  }
}

// GoogleTest names a suite after its fixture, in the suites' CamelCase.
class ClientStream  // NOLINT(readability-identifier-naming)
    : public ::testing::TestWithParam<wire_flavour> {};

// The fault-free, non-streamed run every faulty streamed run must equal.
const run_outcome& reference(wire_flavour flavour) {
  static std::map<wire_flavour, run_outcome> cache;
  auto it = cache.find(flavour);
  if (it == cache.end()) {
    it = cache.emplace(flavour, run_turns(flavour, false, {})).first;
    for (const auto& [id, r] : it->second.by_id) {
      EXPECT_EQ(r.status, turn_status::ok) << id << ": " << r.message;
    }
  }
  return it->second;
}

TEST_P(ClientStream, FaultFreeStreamEqualsTheWholeBody) {
  const auto& want = reference(GetParam());
  ASSERT_FALSE(want.by_id.empty());
  // Answers of both lengths really came back: whole ones end on "stop", cut ones on "length".
  int stops = 0, lengths = 0;
  for (const auto& [id, r] : want.by_id) {
    ASSERT_EQ(r.choices.size(), 1U);
    stops += r.choices[0].finish == finish_reason::stop;
    lengths += r.choices[0].finish == finish_reason::length;
  }
  EXPECT_EQ(stops, 9);
  EXPECT_EQ(lengths, 9);
  const auto got = run_turns(GetParam(), true, {});
  expect_same_turns(want, got);
  EXPECT_EQ(got.stats.resumes, 0U);
  EXPECT_EQ(got.stats.retries, 0U);
}

struct fault_case {
  const char* name;
  fault_config faults;
  bool resumes;  // the fault leaves tokens behind: the client must have resumed from them
};

fault_config faults_of(double fault_config::*which, double p, std::uint64_t seed) {
  fault_config f;
  f.*which = p;
  f.seed = seed;
  return f;
}

TEST_P(ClientStream, EveryStreamFaultEndsAsTheFaultFreeRun) {
  const auto& want = reference(GetParam());
  fault_config mixed;
  mixed.truncate = 0.2;
  mixed.drop = 0.1;
  mixed.abort = 0.2;
  mixed.malformed = 0.1;
  mixed.http_5xx = 0.1;
  mixed.seed = 11;
  const std::vector<fault_case> cases{
      // The stream stops after 1 to 3 events and the connection closes, no [DONE].
      {"truncate", faults_of(&fault_config::truncate, 0.5, 1), true},
      // The connection closes before any reply: nothing received, the request is sent again.
      {"drop", faults_of(&fault_config::drop, 0.5, 2), false},
      // The generation ends after 1 to 8 tokens with finish "abort" (then [DONE]).
      {"abort", faults_of(&fault_config::abort, 0.5, 3), true},
      // One of the first three events has its JSON cut: the events before it are kept and the
      // generation resumed from their tokens (a first bad event leaves none: sent again).
      {"malformed", faults_of(&fault_config::malformed, 0.5, 4), true},
      {"5xx", faults_of(&fault_config::http_5xx, 0.5, 5), false},
      {"mixed", mixed, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto got = run_turns(GetParam(), true, c.faults);
    expect_same_turns(want, got);
    EXPECT_GT(got.stats.resumes + got.stats.retries, 0U) << "no fault was met";
    if (c.resumes) {
      EXPECT_GT(got.stats.resumes, 0U) << "no stream was resumed from its tokens";
    }
    EXPECT_EQ(got.stats.ok, want.by_id.size());
    EXPECT_EQ(got.stats.completed, want.by_id.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Flavours, ClientStream,
                         ::testing::Values(wire_flavour::vllm, wire_flavour::sglang),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// n > 1 streamed: vLLM interleaves the choices' chunks by index, SGLang sends one object per
// choice with its index; either way the choices equal the whole body's.
TEST(ClientStreamChoices, SeveralCompletionsStreamedEqualTheWholeBody) {
  for (const auto flavour : {wire_flavour::vllm, wire_flavour::sglang}) {
    SCOPED_TRACE(std::string(to_string(flavour)));
    auto server = testing::start_server();
    ASSERT_TRUE(server);
    std::vector<turn_result> results;
    for (const bool stream : {false, true}) {
      auto created = policy_client::create(stream_config(flavour, server->base_url(), stream));
      ASSERT_TRUE(created) << created.err().message;
      collector done;
      turn_request r;
      r.request_id = "n3";
      r.prompt = render_chat(std::vector<chat_message>{{"user", testing::sum_prompt}});
      r.sampling.n = 3;
      r.sampling.seed = 5;
      ASSERT_EQ((*created)->submit(r, done.callback()), submit_status::accepted);
      ASSERT_TRUE(done.wait_for(1));
      ASSERT_EQ(done.results[0].status, turn_status::ok) << done.results[0].message;
      ASSERT_EQ(done.results[0].choices.size(), 3U);
      results.push_back(done.results[0]);
    }
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(results[1].choices[i].ids, results[0].choices[i].ids);
      EXPECT_EQ(results[1].choices[i].logprobs, results[0].choices[i].logprobs);
      EXPECT_EQ(results[1].choices[i].finish, results[0].choices[i].finish);
    }
  }
}

// A server that ignores "stream": true and answers one JSON body: the turn ends as a protocol error
// saying so, instead of being retried into the same answer. The project's server streams when
// asked, so this one server is a few lines of httplib here: an old vLLM's reply, whole.
TEST(ClientStreamChoices, AServerThatDoesNotStreamIsAProtocolError) {
  struct json_only_server {
    httplib::Server http;
    std::thread serving;
    ~json_only_server() {
      http.stop();
      if (serving.joinable()) {
        serving.join();
      }
    }
  } server;
  server.http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  server.http.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m",)"
                    R"("choices":[{"index":0,"text":"ab","token_ids":[97,98],)"
                    R"("logprobs":{"token_logprobs":[-0.1,-0.2],"tokens":["a","b"]},)"
                    R"("finish_reason":"length"}]})",
                    "application/json");
  });
  // Bound and listening here; connections queue until the accept loop runs.
  const int port = server.http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  server.serving = std::thread([&server] { server.http.listen_after_bind(); });
  auto created = policy_client::create(
      stream_config(wire_flavour::vllm, "http://127.0.0.1:" + std::to_string(port), true));
  ASSERT_TRUE(created) << created.err().message;
  collector done;
  turn_request r;
  r.request_id = "json";
  r.prompt = {1, 2, 3};
  r.sampling.max_tokens = 2;
  ASSERT_EQ((*created)->submit(r, done.callback()), submit_status::accepted);
  ASSERT_TRUE(done.wait_for(1));
  EXPECT_EQ(done.results[0].status, turn_status::protocol_error);
  EXPECT_NE(done.results[0].message.find("held no SSE event"), std::string::npos)
      << done.results[0].message;
  EXPECT_EQ(done.results[0].attempts, 1);
  created->reset();  // the turn was answered: the accept loop runs, so stopping it is seen
}

}  // namespace
}  // namespace leap::policy
