// The policy server over real HTTP on 127.0.0.1: every route, streaming, the weight-sync routes,
// and concurrency. Every request has a timeout (server_test_support.hpp's client).
#include "tests/policy/server_test_support.hpp"
// After server_test_support.hpp, which defines CPPHTTPLIB_OPENSSL_SUPPORT before httplib.h.
#include "tests/policy/position_server.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace leap::policy {
namespace {

using nlohmann::json;
using namespace leap::policy::testing;
using steady = std::chrono::steady_clock;

std::vector<token_id> chat_ids(const std::string& prompt) {
  return render_chat(std::vector<chat_message>{{"user", prompt}});
}

// Waits until `predicate` holds, failing after `limit`.
template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = steady::now() + limit;
  while (steady::now() < deadline) {
    if (predicate()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return predicate();
}

std::string metric_line(const std::string& metrics, const std::string& name) {
  const auto at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) {
    return {};
  }
  return metrics.substr(at + 1, metrics.find('\n', at + 1) - at - 1);
}

// GoogleTest names a suite after its fixture, in the suites' CamelCase.
class ServerHttp : public ::testing::Test {  // NOLINT(readability-identifier-naming)
 protected:
  void SetUp() override {
    server_ = start_server();
    ASSERT_TRUE(server_);
    client_ = client_for(*server_);
  }
  std::unique_ptr<policy_server> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerHttp, HealthModelsAndUnknownRoutes) {
  const http_reply health = get(*client_, "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_TRUE(health.body.empty());
  const http_reply models = get(*client_, "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["object"], "list");
  EXPECT_EQ(models.json()["data"][0]["id"], "leap-test");
  EXPECT_EQ(models.json()["data"][0]["max_model_len"], 32768);

  const http_reply missing = post(*client_, "/v1/nothing", json::object());
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.json()["error"]["type"], "NotFoundError");
  const http_reply wrong_model =
      post(*client_, "/v1/completions", json{{"model", "gpt-9"}, {"prompt", "x"}});
  EXPECT_EQ(wrong_model.status, 404);
  EXPECT_EQ(wrong_model.json()["error"]["message"], "The model `gpt-9` does not exist.");
}

TEST_F(ServerHttp, BadRequestsAre400WithActionableMessages) {
  struct row {
    std::string path;
    std::string body;
    std::string message;
  };
  const std::vector<row> rows = {
      {"/v1/completions", "{\"prompt\": ", "not valid JSON"},
      {"/v1/completions", "{}", "'prompt' is required"},
      {"/v1/completions", R"({"prompt": [1, 999]})", "token id 999 in 'prompt' is outside"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 40000})",
       "maximum context length is 32768 tokens. However, you requested 40001 tokens"},
      {"/v1/chat/completions", R"({"messages": []})", "'messages' must not be empty"},
      {"/generate", R"({"sampling_params": {}})", "'text' or 'input_ids' is required"},
      {"/detokenize", R"({"tokens": [300]})", "outside the vocabulary [0, 261)"},
      {"/update_weights", R"({"path": "/x"})", "Missing 'update_info' in request body"},
      {"/update_weights", R"({"update_info": 3})", "'update_info' must be an object"},
      {"/init_weight_transfer_engine", "{}", "Missing 'init_info' in request body"},
      {"/finish_weight_update", R"({"weight_version": "v1"})",
       "'weight_version' must be a non-negative integer"},
      {"/pause_generation", R"({"mode": "nap"})", "'mode' must be one of"},
  };
  for (const auto& r : rows) {
    httplib::Request req;
    auto res = client_->Post(r.path.c_str(), r.body, "application/json");
    ASSERT_TRUE(res) << r.path;
    EXPECT_EQ(res->status, 400) << r.path << " " << r.body;
    const json error = json::parse(res->body)["error"];
    EXPECT_EQ(error["type"], "BadRequestError");
    EXPECT_EQ(error["code"], 400);
    EXPECT_NE(error["message"].get<std::string>().find(r.message), std::string::npos)
        << error["message"];
  }
}

TEST_F(ServerHttp, CompletionsTokenInTokenOut) {
  const std::vector<token_id> prompt = chat_ids(vector_add_prompt);
  const http_reply reply = post(*client_, "/v1/completions",
                                json{{"model", "leap-test"},
                                     {"prompt", prompt},
                                     {"max_tokens", 2000},
                                     {"return_token_ids", true},
                                     {"logprobs", 0},
                                     {"skip_special_tokens", false},
                                     {"stop_token_ids", {special::im_end}},
                                     {"seed", 3}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json out = reply.json();
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["id"].get<std::string>().rfind("cmpl-", 0), 0U);
  const json& choice = out["choices"][0];
  EXPECT_EQ(choice["prompt_token_ids"].get<std::vector<token_id>>(), prompt);
  const auto ids = choice["token_ids"].get<std::vector<token_id>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), special::im_end);
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_TRUE(choice["stop_reason"].is_null());  // the model's end token, though also listed
  EXPECT_EQ(choice["logprobs"]["token_logprobs"].size(), ids.size());
  EXPECT_EQ(choice["text"].get<std::string>(),
            byte_tokenizer::decode(std::span(ids).first(ids.size() - 1)));
  EXPECT_NE(choice["text"].get<std::string>().find("```cuda\n"), std::string::npos);
  EXPECT_EQ(out["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(out["usage"]["completion_tokens"], ids.size());
  EXPECT_EQ(out["weight_version"], 0);
  EXPECT_EQ(reply.header("x-weight-version"), "0");

  // The same request again: the same answer (seeded).
  const http_reply again =
      post(*client_, "/v1/completions",
           json{{"prompt", prompt}, {"max_tokens", 2000}, {"return_token_ids", true}, {"seed", 3}});
  EXPECT_EQ(again.json()["choices"][0]["token_ids"], choice["token_ids"]);
}

TEST_F(ServerHttp, CompletionsDefaultsBatchesAndStops) {
  // vLLM's default max_tokens for completions is 16.
  const json short_out =
      post(*client_, "/v1/completions", json{{"prompt", vector_add_prompt}}).json();
  EXPECT_EQ(short_out["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(short_out["usage"]["completion_tokens"], 16);
  EXPECT_EQ(short_out["choices"][0]["text"].get<std::string>().size(), 16U);

  // A batch of two prompts, n = 2: four choices, prompt-major.
  const json batch = post(*client_, "/v1/completions",
                          json{{"prompt", {chat_ids(sum_prompt), chat_ids(reverse_prompt)}},
                               {"n", 2},
                               {"max_tokens", 1000},
                               {"return_token_ids", true}})
                         .json();
  ASSERT_EQ(batch["choices"].size(), 4U);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(batch["choices"][i]["index"], i);
  }
  EXPECT_EQ(batch["choices"][2]["prompt_token_ids"].get<std::vector<token_id>>(),
            chat_ids(reverse_prompt));
  EXPECT_NE(batch["choices"][0]["text"].get<std::string>().find("```cpp"), std::string::npos);
  EXPECT_NE(batch["choices"][3]["text"].get<std::string>().find("```python"), std::string::npos);

  // A stop string trims the text; the stop_reason names it.
  const json stopped =
      post(*client_, "/v1/completions",
           json{{"prompt", chat_ids(sum_prompt)}, {"max_tokens", 1000}, {"stop", {"```"}}})
          .json();
  EXPECT_EQ(stopped["choices"][0]["text"], "Here is my implementation.\n\n");
  EXPECT_EQ(stopped["choices"][0]["stop_reason"], "```");
}

TEST_F(ServerHttp, ChatAndItsStream) {
  const json request{{"messages", {{{"role", "user"}, {"content", reverse_prompt}}}},
                     {"seed", 8},
                     {"return_token_ids", true}};
  const http_reply plain = post(*client_, "/v1/chat/completions", request);
  ASSERT_EQ(plain.status, 200);
  const json out = plain.json();
  EXPECT_EQ(out["object"], "chat.completion");
  const std::string content = out["choices"][0]["message"]["content"];
  EXPECT_NE(content.find("```python\n"), std::string::npos);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out["prompt_token_ids"].get<std::vector<token_id>>(), chat_ids(reverse_prompt));

  json stream_request = request;
  stream_request["stream"] = true;
  stream_request["stream_options"] = {{"include_usage", true}};
  const http_reply stream = post(*client_, "/v1/chat/completions", stream_request);
  ASSERT_TRUE(stream.ok);
  EXPECT_EQ(stream.header("Content-Type"), "text/event-stream");
  const auto events = sse_payloads(stream.body);
  ASSERT_GE(events.size(), 4U);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed;
  std::vector<token_id> streamed_ids;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_EQ(chunk["choices"][0]["delta"].contains("role"), i == 0);
    EXPECT_LE(chunk["choices"][0]["token_ids"].size(), 16U);
    streamed += chunk["choices"][0]["delta"]["content"].get<std::string>();
    for (const auto& id : chunk["choices"][0]["token_ids"]) {
      streamed_ids.push_back(id.get<token_id>());
    }
    const bool last = i + 3 == events.size();
    EXPECT_EQ(chunk["choices"][0]["finish_reason"].is_null(), !last);
  }
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(json(streamed_ids), out["choices"][0]["token_ids"]);
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], out["usage"]);
}

TEST_F(ServerHttp, CompletionStreamCarriesTokenIds) {
  const std::vector<token_id> prompt = chat_ids(sum_prompt);
  const json request{{"prompt", prompt},
                     {"max_tokens", 500},
                     {"seed", 4},
                     {"return_token_ids", true},
                     {"logprobs", 0}};
  const json whole = post(*client_, "/v1/completions", request).json();
  json stream_request = request;
  stream_request["stream"] = true;
  const auto events = sse_payloads(post(*client_, "/v1/completions", stream_request).body);
  ASSERT_GE(events.size(), 3U);
  std::vector<token_id> ids;
  std::vector<double> logprobs;
  std::string text;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    const json& c = chunk["choices"][0];
    EXPECT_EQ(c.contains("prompt_token_ids"), i == 0);
    for (const auto& id : c["token_ids"]) {
      ids.push_back(id.get<token_id>());
    }
    for (const auto& lp : c["logprobs"]["token_logprobs"]) {
      logprobs.push_back(lp.get<double>());
    }
    text += c["text"].get<std::string>();
  }
  EXPECT_EQ(json(ids), whole["choices"][0]["token_ids"]);
  EXPECT_EQ(json(logprobs), whole["choices"][0]["logprobs"]["token_logprobs"]);
  EXPECT_EQ(text, whole["choices"][0]["text"].get<std::string>());
}

TEST_F(ServerHttp, SglangGenerate) {
  const std::vector<token_id> prompt = chat_ids(vector_add_prompt);
  const http_reply reply = post(
      *client_, "/generate",
      json{{"input_ids", prompt},
           {"return_logprob", true},
           {"sampling_params",
            {{"max_new_tokens", 2000}, {"temperature", 0.8}, {"skip_special_tokens", false}}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json out = reply.json();
  const auto ids = out["output_ids"].get<std::vector<token_id>>();
  ASSERT_FALSE(ids.empty());
  const json& meta = out["meta_info"];
  EXPECT_EQ(meta["finish_reason"], json({{"type", "stop"}, {"matched", special::im_end}}));
  EXPECT_EQ(meta["prompt_tokens"], prompt.size());
  EXPECT_EQ(meta["completion_tokens"], ids.size());
  EXPECT_EQ(meta["weight_version"], "0");
  ASSERT_EQ(meta["output_token_logprobs"].size(), ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(meta["output_token_logprobs"][i][1], ids[i]);
    EXPECT_LT(meta["output_token_logprobs"][i][0].get<double>(), 0.0);
  }
  // SGLang's default max_new_tokens is 128.
  const json capped = post(*client_, "/generate", json{{"text", vector_add_prompt}}).json();
  EXPECT_EQ(capped["meta_info"]["finish_reason"], json({{"type", "length"}, {"length", 128}}));
  // A batch answers a list.
  const json batch = post(*client_, "/generate",
                          json{{"input_ids", {prompt, chat_ids(sum_prompt)}},
                               {"sampling_params", {{"max_new_tokens", 8}}}})
                         .json();
  ASSERT_TRUE(batch.is_array());
  EXPECT_EQ(batch.size(), 2U);
  // Streaming is cumulative: every event holds everything so far.
  const auto events = sse_payloads(post(*client_, "/generate",
                                        json{{"input_ids", prompt},
                                             {"stream", true},
                                             {"sampling_params", {{"max_new_tokens", 100}}}})
                                       .body);
  ASSERT_GE(events.size(), 3U);
  EXPECT_EQ(events.back(), "[DONE]");
  std::size_t previous = 0;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    EXPECT_GE(e["output_ids"].size(), previous);
    previous = e["output_ids"].size();
    EXPECT_EQ(e["meta_info"]["finish_reason"].is_null(), i + 2 < events.size());
  }
  EXPECT_EQ(previous, 100U);
}

TEST_F(ServerHttp, TokenizeAndDetokenize) {
  const json by_prompt = post(*client_, "/tokenize", json{{"prompt", "hi<|im_end|>"}}).json();
  EXPECT_EQ(by_prompt["tokens"], json::array({'h', 'i', special::im_end}));
  EXPECT_EQ(by_prompt["count"], 3);
  EXPECT_EQ(by_prompt["max_model_len"], 32768);
  const std::vector<chat_message> messages{{"user", sum_prompt}};
  const json by_messages = post(*client_, "/tokenize",
                                json{{"messages", {{{"role", "user"}, {"content", sum_prompt}}}},
                                     {"return_token_strs", true}})
                               .json();
  EXPECT_EQ(by_messages["tokens"].get<std::vector<token_id>>(), render_chat(messages));
  EXPECT_EQ(by_messages["token_strs"][0], "<|im_start|>");
  const json text =
      post(*client_, "/detokenize", json{{"tokens", {'o', 'k', special::eos}}}).json();
  EXPECT_EQ(text["prompt"], "ok<|eos|>");
  EXPECT_EQ(text["text"], "ok<|eos|>");
}

// A client's multi-turn loop, token in and token out: the answer's ids and the feedback delta are
// appended to the prompt; the server sees a debug turn.
TEST_F(ServerHttp, MultiTurnDeltaIsADebugTurn) {
  std::vector<token_id> conversation = chat_ids(sum_prompt);
  const json turn1 = post(*client_, "/v1/completions",
                          json{{"prompt", conversation},
                               {"max_tokens", 1000},
                               {"return_token_ids", true},
                               {"seed", 1}})
                         .json();
  const auto answer = turn1["choices"][0]["token_ids"].get<std::vector<token_id>>();
  conversation.insert(conversation.end(), answer.begin(), answer.end());
  const auto delta =
      render_chat_delta(conversation, std::vector<chat_message>{{"user", "error: wrong sum"}});
  conversation.insert(conversation.end(), delta.begin(), delta.end());
  const json turn2 = post(*client_, "/v1/completions",
                          json{{"prompt", conversation},
                               {"max_tokens", 1000},
                               {"return_token_ids", true},
                               {"seed", 1}})
                         .json();
  EXPECT_EQ(turn2["choices"][0]["prompt_token_ids"].get<std::vector<token_id>>(), conversation);
  EXPECT_NE(turn2["choices"][0]["text"].get<std::string>().find("corrected version"),
            std::string::npos);
}

TEST_F(ServerHttp, WeightUpdatesAreReported) {
  // vLLM's weight-transfer engine, disk backend: the folder is loaded at finish.
  ASSERT_EQ(
      post(*client_, "/init_weight_transfer_engine", json{{"init_info", json::object()}}).status,
      200);
  ASSERT_EQ(post(*client_, "/start_weight_update", json::object()).status, 200);
  ASSERT_EQ(
      post(*client_, "/update_weights", json{{"update_info", {{"path", "/ckpt/step-5"}}}}).status,
      200);
  EXPECT_EQ(server_->weight_version(), 0);  // nothing served changes before finish
  const http_reply updated = post(*client_, "/finish_weight_update", json{{"weight_version", "5"}});
  ASSERT_EQ(updated.status, 200) << updated.body;
  EXPECT_EQ(updated.json()["weight_version"], 5);
  EXPECT_EQ(server_->weight_version(), 5);
  const http_reply completion = post(*client_, "/v1/completions", json{{"prompt", "x"}});
  EXPECT_EQ(completion.json()["weight_version"], 5);
  EXPECT_EQ(completion.header("x-weight-version"), "5");
  EXPECT_EQ(get(*client_, "/health").header("x-weight-version"), "5");

  // SGLang's route: an explicit version, or the next one.
  EXPECT_EQ(post(*client_, "/update_weights_from_disk",
                 json{{"model_path", "/m"}, {"weight_version", "9"}})
                .json()["weight_version"],
            9);
  EXPECT_EQ(post(*client_, "/update_weights_from_disk", json{{"model_path", "/m"}})
                .json()["weight_version"],
            10);
  EXPECT_EQ(post(*client_, "/generate", json{{"text", "x"}}).json()["meta_info"]["weight_version"],
            "10");
  EXPECT_EQ(get(*client_, "/get_model_info").json()["weight_version"], "10");
  EXPECT_EQ(post(*client_, "/flush_cache", json::object()).status, 200);
  EXPECT_EQ(post(*client_, "/reset_prefix_cache", json::object()).status, 200);
}

TEST_F(ServerHttp, WeightTransferSessionsKeepTheirOrder) {
  // update and finish outside a session are refused; nothing changes.
  EXPECT_EQ(post(*client_, "/update_weights", json{{"update_info", {{"path", "/a"}}}}).status, 400);
  const http_reply early = post(*client_, "/finish_weight_update", json::object());
  EXPECT_EQ(early.status, 400);
  EXPECT_NE(early.body.find("/start_weight_update first"), std::string::npos) << early.body;
  // A session without weights finishes with an error and changes nothing.
  ASSERT_EQ(post(*client_, "/start_weight_update", json::object()).status, 200);
  EXPECT_EQ(post(*client_, "/finish_weight_update", json::object()).status, 400);
  // A relative path, and a second checkpoint in one session, end the session.
  ASSERT_EQ(post(*client_, "/start_weight_update", json::object()).status, 200);
  EXPECT_EQ(post(*client_, "/update_weights", json{{"update_info", {{"path", "rel"}}}}).status,
            400);
  EXPECT_EQ(post(*client_, "/finish_weight_update", json::object()).status, 400);
  ASSERT_EQ(post(*client_, "/start_weight_update", json::object()).status, 200);
  ASSERT_EQ(post(*client_, "/update_weights", json{{"update_info", {{"path", "/a"}}}}).status, 200);
  EXPECT_EQ(post(*client_, "/update_weights", json{{"update_info", {{"path", "/b"}}}}).status, 400);
  EXPECT_EQ(post(*client_, "/finish_weight_update", json::object()).status, 400);
  EXPECT_EQ(server_->weight_version(), 0);
  // A start while a session is open begins again (its client is gone); finish without a version
  // takes the next one.
  ASSERT_EQ(post(*client_, "/start_weight_update", json::object()).status, 200);
  ASSERT_EQ(post(*client_, "/update_weights", json{{"update_info", {{"path", "/a"}}}}).status, 200);
  ASSERT_EQ(post(*client_, "/start_weight_update", json::object()).status, 200);
  ASSERT_EQ(post(*client_, "/update_weights", json{{"update_info", {{"path", "/b"}}}}).status, 200);
  const http_reply done = post(*client_, "/finish_weight_update", json::object());
  ASSERT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(done.header("x-weight-version"), "1");
  EXPECT_EQ(server_->weight_version(), 1);
}

TEST_F(ServerHttp, MetricsCountRequestsAndTokens) {
  post(*client_, "/v1/completions", json{{"prompt", "abc"}, {"max_tokens", 5}});
  post(*client_, "/v1/completions", json{{"prompt", "abc"}, {"max_tokens", 5}});
  const http_reply metrics = get(*client_, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("leap_policy_requests_total{route=\"/v1/completions\"} 2"),
            std::string::npos)
      << metrics.body;
  EXPECT_EQ(metric_line(metrics.body, "leap_policy_prompt_tokens_total"),
            "leap_policy_prompt_tokens_total 6");
  EXPECT_EQ(metric_line(metrics.body, "leap_policy_generation_tokens_total"),
            "leap_policy_generation_tokens_total 10");
  EXPECT_EQ(metric_line(metrics.body, "leap_policy_requests_in_flight"),
            "leap_policy_requests_in_flight 0");
  EXPECT_NE(metrics.body.find("leap_policy_responses_total{code=\"200\"} 2"), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("vllm:num_requests_running 0"), std::string::npos);
}

class ServerControl : public ::testing::Test {  // NOLINT(readability-identifier-naming)
 protected:
  // Slow enough that a request is surely in flight while the test acts.
  void start(double ttft_ms) {
    scripted_config scripted;
    scripted.latency.ttft_ms = ttft_ms;
    server_ = start_server({}, scripted);
    ASSERT_TRUE(server_);
  }
  std::string metrics() { return get(*client_for(*server_), "/metrics").body; }

  std::unique_ptr<policy_server> server_;
};

TEST_F(ServerControl, PauseInPlaceHoldsNewRequestsUntilResume) {
  start(0.0);
  auto control = client_for(*server_);
  EXPECT_EQ(post(*control, "/pause_generation", json{{"mode", "in_place"}}).status, 200);
  EXPECT_EQ(get(*control, "/is_paused").json()["is_paused"], true);
  auto waiting = std::async(std::launch::async, [&] {
    auto client = client_for(*server_);
    return post(*client, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 3}});
  });
  ASSERT_TRUE(eventually([&] {
    return metric_line(metrics(), "vllm:num_requests_waiting") == "vllm:num_requests_waiting 1";
  }));
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  EXPECT_EQ(post(*control, "/continue_generation", json::object()).status, 200);
  const http_reply reply = waiting.get();
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(get(*control, "/is_paused").json()["is_paused"], false);
}

TEST_F(ServerControl, PauseAbortEndsRunningGenerations) {
  start(20000.0);
  auto running = std::async(std::launch::async, [&] {
    auto client = client_for(*server_, std::chrono::seconds(15));
    return post(
        *client, "/v1/completions",
        json{{"prompt", vector_add_prompt}, {"max_tokens", 50}, {"return_token_ids", true}});
  });
  ASSERT_TRUE(eventually([&] {
    return metric_line(metrics(), "vllm:num_requests_running") == "vllm:num_requests_running 1";
  }));
  auto control = client_for(*server_);
  const http_reply paused = post(*control, "/pause_generation", json::object());
  EXPECT_EQ(paused.json()["aborted"], 1);
  const http_reply reply = running.get();
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json()["choices"][0]["finish_reason"], "abort");
  EXPECT_TRUE(reply.json()["choices"][0]["token_ids"].empty());
  EXPECT_EQ(post(*control, "/resume_generation", json::object()).status, 200);
}

TEST_F(ServerControl, PauseWaitDrainsRunningGenerations) {
  start(300.0);
  auto running = std::async(std::launch::async, [&] {
    auto client = client_for(*server_);
    return post(*client, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 4}});
  });
  ASSERT_TRUE(eventually([&] {
    return metric_line(metrics(), "vllm:num_requests_running") == "vllm:num_requests_running 1";
  }));
  auto control = client_for(*server_);
  const http_reply paused = post(*control, "/pause_generation", json{{"mode", "wait"}});
  EXPECT_EQ(paused.json()["running"], 0);
  // Drained: the running request has its full answer by now.
  ASSERT_EQ(running.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(running.get().json()["choices"][0]["finish_reason"], "length");
}

// Requests sleep on their own workers: many slow requests are all in flight at once. Shown by the
// server's own running count rather than by wall time, which a loaded machine stretches: with a
// first-token latency far longer than the test, a server that serialised would never report more
// than one request running.
TEST(ServerConcurrency, SlowRequestsDoNotSerialise) {
  scripted_config scripted;
  scripted.latency.ttft_ms = 60000.0;
  server_config config;
  config.threads = 48;
  auto server = start_server(config, scripted);
  ASSERT_TRUE(server);
  constexpr int requests = 32;
  std::vector<std::future<int>> replies;
  replies.reserve(requests);
  for (int i = 0; i < requests; ++i) {
    replies.push_back(std::async(std::launch::async, [&server, i] {
      auto client = client_for(*server, std::chrono::seconds(120));
      return post(*client, "/v1/completions",
                  json{{"prompt", chat_ids(reverse_prompt)}, {"max_tokens", 100}, {"seed", i}})
          .status;
    }));
  }
  EXPECT_TRUE(eventually(
      [&] {
        return get(*client_for(*server), "/metrics")
                   .body.find("vllm:num_requests_running " + std::to_string(requests)) !=
               std::string::npos;
      },
      std::chrono::seconds(50)))
      << "not all " << requests << " requests were running at once";
  // Stopping aborts the sleeping generations; each request gets an answer, none hangs.
  server->stop();
  for (auto& r : replies) {
    EXPECT_EQ(r.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  }
}

TEST(ServerLifecycle, StopsPromptlyWithRequestsInFlight) {
  scripted_config scripted;
  scripted.latency.ttft_ms = 30000.0;
  auto server = start_server({}, scripted);
  ASSERT_TRUE(server);
  auto streaming = std::async(std::launch::async, [&] {
    auto client = client_for(*server, std::chrono::seconds(20));
    return post(
        *client, "/v1/chat/completions",
        json{{"messages", {{{"role", "user"}, {"content", sum_prompt}}}}, {"stream", true}});
  });
  ASSERT_TRUE(eventually([&] {
    return get(*client_for(*server), "/metrics").body.find("vllm:num_requests_running 1") !=
           std::string::npos;
  }));
  const auto start = steady::now();
  server->stop();
  EXPECT_LT(steady::now() - start, std::chrono::seconds(3));
  const http_reply reply = streaming.get();
  // The stream ends with the generation aborted, never a hang.
  const auto events = sse_payloads(reply.body);
  if (events.size() >= 2) {
    EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "abort");
  }
  server->stop();  // idempotent
}

TEST(ServerLifecycle, BindErrorsAreValues) {
  auto first = start_server();
  ASSERT_TRUE(first);
  server_config config;
  config.port = first->port();
  auto second = policy_server::start(config, make_backend());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.err().message.find("cannot bind 127.0.0.1:" + std::to_string(first->port())),
            std::string::npos);
  config.port = 0;
  config.threads = 0;
  EXPECT_FALSE(policy_server::start(config, make_backend()).ok());
  EXPECT_FALSE(policy_server::start(server_config{}, nullptr).ok());
}

// A backend that reports itself unhealthy (a lost device) makes /health answer 503 with its
// reason, and 200 again once it recovers; generation routes are not refused for it.
TEST(ServerHealth, FollowsTheBackend) {
  position_server server;
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(std::chrono::seconds(10));
  auto healthy = client.Get("/health");
  ASSERT_TRUE(healthy);
  EXPECT_EQ(healthy->status, 200);
  server.backend().set_healthy(false);
  auto sick = client.Get("/health");
  ASSERT_TRUE(sick);
  EXPECT_EQ(sick->status, 503);
  EXPECT_NE(sick->body.find("the position backend: the device is gone"), std::string::npos)
      << sick->body;
  server.backend().set_healthy(true);
  auto again = client.Get("/health");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

}  // namespace
}  // namespace leap::policy
