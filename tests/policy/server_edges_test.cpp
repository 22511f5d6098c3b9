// Our server at the edges of what a client may send or ask: request bodies nested 100,000 levels
// deep, a POST without a body, a large form-encoded body, and top log-probs as OpenAI and vLLM
// define them. Real HTTP on 127.0.0.1 (server_test_support.hpp) and the pure renderers.
#include "policy/wire/wire.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

namespace leap::policy {
namespace {

using json = nlohmann::json;

std::string nested(std::size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

TEST(ServerEdges, DeeplyNestedRequestBodiesAre400AndTheServerKeepsServing) {
  auto server = testing::start_server();
  ASSERT_TRUE(server);
  auto http = testing::client_for(*server);
  for (const std::string& path :
       {"/v1/completions", "/v1/chat/completions", "/generate", "/tokenize", "/update_weights",
        "/init_weight_transfer_engine", "/finish_weight_update"}) {
    for (const std::string& body :
         {nested(100'000), R"({"prompt": )" + nested(100'000) + "}", nested(65)}) {
      auto res = http->Post(path, body, "application/json");
      ASSERT_TRUE(res) << path << ": no reply (" << httplib::to_string(res.error()) << ")";
      EXPECT_EQ(res->status, 400) << path;
      const auto j = json::parse(res->body);
      EXPECT_NE(j["error"]["message"].get<std::string>().find("deeper than 64"), std::string::npos)
          << res->body;
    }
  }
  auto ok =
      http->Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// Sends raw bytes and reads the status line of the reply; 0 when none came within `timeout_s`.
int raw_status(int port, const std::string& request, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  std::string reply;
  char buf[4096];
  while (reply.find("\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      break;
    }
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // "HTTP/1.1 400 Bad Request"
  return reply.size() > 12 ? std::atoi(reply.c_str() + 9) : 0;
}

TEST(ServerEdges, APostWithoutABodyIsAnsweredAtOnce) {
  server_config config;
  // The old behaviour waited for a body until this timeout; the reply must not depend on it.
  config.read_timeout = std::chrono::minutes(5);
  auto server = testing::start_server(config);
  ASSERT_TRUE(server);
  // No Content-Length, no Transfer-Encoding: a request without a body (RFC 9112, 6.3).
  EXPECT_EQ(
      raw_status(server->port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 60),
      400);
  // A control route takes an empty body as {}.
  EXPECT_EQ(
      raw_status(server->port(),
                 "POST /flush_cache HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 60),
      200);
  // Bodies with a length are still read whole, on a kept-alive connection too.
  const std::string body = R"({"prompt": "hi", "max_tokens": 1})";
  EXPECT_EQ(raw_status(server->port(),
                       "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body,
                       60),
            200);
}

TEST(ServerEdges, ALargeFormBodyIsA413WithAnErrorType) {
  auto server = testing::start_server();
  ASSERT_TRUE(server);
  auto http = testing::client_for(*server);
  auto res =
      http->Post("/v1/completions", std::string(9000, 'a'), "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  const auto j = json::parse(res->body);
  EXPECT_EQ(j["error"]["type"], "RequestEntityTooLargeError") << res->body;
  EXPECT_EQ(j["error"]["code"], 413);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("application/json"), std::string::npos);
}

// ---- top log-probs ----

// 'o' sampled at -0.5; the backend's alternatives x (-0.1, more likely than 'o'), y, z.
sequence_output ranked_sequence() {
  sequence_output s;
  s.token_ids = {'o'};
  s.logprobs = {-0.5};
  s.top_logprobs = {{{'x', -0.1}, {'y', -2.0}, {'z', -3.0}}};
  s.text = "o";
  s.finish = finish_reason::length;
  return s;
}

response_meta meta() { return {"cmpl-1", 1700000000, "leap-test", 0, 0.5}; }

std::vector<std::string> chat_top(int k, sequence_output s = ranked_sequence()) {
  chat_request request;
  request.logprobs = true;
  request.top_logprobs = k;
  const json out = render_chat_response(meta(), {std::move(s)}, request);
  std::vector<std::string> tokens;
  for (const auto& e : out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) {
    tokens.push_back(e["token"]);
  }
  return tokens;
}

std::vector<std::string> completion_top(int k, sequence_output s = ranked_sequence()) {
  completion_request request;
  request.logprobs = k;
  const json out = render_completion_response(meta(), {std::move(s)}, request);
  std::vector<std::string> tokens;
  for (const auto& [token, lp] : out["choices"][0]["logprobs"]["top_logprobs"][0].items()) {
    tokens.push_back(token);
  }
  std::sort(tokens.begin(), tokens.end());
  return tokens;
}

TEST(ServerEdges, ChatTopLogprobsAreTheKMostLikelySampledIncluded) {
  using v = std::vector<std::string>;
  EXPECT_EQ(chat_top(0), v{});
  EXPECT_EQ(chat_top(1), (v{"x"}));  // 'o' ranks second: not in the top 1
  EXPECT_EQ(chat_top(2), (v{"x", "o"}));
  EXPECT_EQ(chat_top(3), (v{"x", "o", "y"}));
  EXPECT_EQ(chat_top(5), (v{"x", "o", "y", "z"}));  // all there are
  sequence_output best = ranked_sequence();
  best.top_logprobs = {{{'x', -2.0}, {'y', -3.0}}};
  EXPECT_EQ(chat_top(1, best), (v{"o"}));
  // A backend that lists the sampled token among its alternatives: listed once.
  best.top_logprobs = {{{'o', -0.5}, {'x', -2.0}}};
  EXPECT_EQ(chat_top(3, best), (v{"o", "x"}));
}

TEST(ServerEdges, CompletionTopLogprobsAreKOrKPlusTheSampledOne) {
  using v = std::vector<std::string>;
  EXPECT_EQ(completion_top(0), (v{"o"}));       // logprobs: 0 -> the sampled token only
  EXPECT_EQ(completion_top(1), (v{"o", "x"}));  // k + 1: 'o' is not in the top 1
  EXPECT_EQ(completion_top(2), (v{"o", "x"}));  // k: 'o' is in the top 2
  EXPECT_EQ(completion_top(3), (v{"o", "x", "y"}));
  sequence_output best = ranked_sequence();
  best.top_logprobs = {{{'x', -2.0}, {'y', -3.0}, {'z', -4.0}}};
  EXPECT_EQ(completion_top(3, best), (v{"o", "x", "y"}));
}

TEST(ServerEdges, TopLogprobsOverHttpCountKAndHoldTheSampledToken) {
  auto server = testing::start_server();
  ASSERT_TRUE(server);
  auto http = testing::client_for(*server);
  auto chat = testing::post(*http, "/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                             {"max_tokens", 4},
                             {"logprobs", true},
                             {"top_logprobs", 3}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const auto content = chat.json()["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty());
  for (const auto& entry : content) {
    ASSERT_EQ(entry["top_logprobs"].size(), 3U) << entry.dump();
    // The scripted backend's sampled token is always its most likely one.
    EXPECT_EQ(entry["top_logprobs"][0]["token"], entry["token"]) << entry.dump();
    EXPECT_EQ(entry["top_logprobs"][0]["logprob"], entry["logprob"]);
  }
  auto completion = testing::post(*http, "/v1/completions",
                                  {{"prompt", "hi"}, {"max_tokens", 4}, {"logprobs", 3}});
  ASSERT_EQ(completion.status, 200) << completion.body;
  const auto logprobs = completion.json()["choices"][0]["logprobs"];
  for (std::size_t i = 0; i < logprobs["tokens"].size(); ++i) {
    const auto& top = logprobs["top_logprobs"][i];
    EXPECT_EQ(top.size(), 3U) << top.dump();
    EXPECT_TRUE(top.contains(logprobs["tokens"][i].get<std::string>())) << top.dump();
  }
}

}  // namespace
}  // namespace leap::policy
