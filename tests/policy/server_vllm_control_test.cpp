// vLLM's control routes on the project's server (sleep mode, collective_rpc reload_weights,
// runtime LoRA adapters) over HTTP on 127.0.0.1, the vLLM-flavoured weight-sync plans driven by
// the policy client against it unchanged, and SGLang's /tokenize with chat messages.
#include "policy/client/client.hpp"
#include "policy/client/detail/client_protocol.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace leap::policy {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::client_for;
using testing::get;
using testing::http_reply;
using testing::post;
using testing::start_server;

template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) {
      return true;
    }
    std::this_thread::sleep_for(5ms);
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

bool is_sleeping(httplib::Client& c) { return get(c, "/is_sleeping").json()["is_sleeping"]; }

void expect_openai_error(const http_reply& reply, int status, const std::string& type,
                         const std::string& message_part) {
  EXPECT_EQ(reply.status, status) << reply.body;
  const json body = json::parse(reply.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << reply.body;
  ASSERT_TRUE(body.contains("error")) << reply.body;
  EXPECT_EQ(body["error"]["type"], type);
  EXPECT_EQ(body["error"]["code"], status);
  EXPECT_NE(body["error"]["message"].get<std::string>().find(message_part), std::string::npos)
      << body["error"]["message"];
}

// A server whose first token takes 20 s, so that a generation is still running when a control
// request lands.
scripted_config vllm_slow_first_token() {
  scripted_config scripted;
  scripted.latency.ttft_ms = 20000.0;
  return scripted;
}

// A generation on its own thread; its reply comes once something ends it.
std::future<http_reply> vllm_long_generation(policy_server& server) {
  return std::async(std::launch::async, [&server] {
    auto client = client_for(server, 15s);
    return post(*client, "/v1/completions",
                json{{"prompt", testing::vector_add_prompt},
                     {"max_tokens", 50},
                     {"return_token_ids", true}});
  });
}

// True once the server reports exactly one running request.
bool vllm_runs_one(httplib::Client& control) {
  return eventually([&] {
    return metric_line(get(control, "/metrics").body, "vllm:num_requests_running") ==
           "vllm:num_requests_running 1";
  });
}

// ---- pure parsing: tables ----

TEST(VllmControlWire, SleepAndWakeUpParameters) {
  struct row {
    std::optional<std::string> level, mode;
    int want_level;
    pause_mode want_mode;
    const char* error;
  };
  const std::vector<row> rows{
      {std::nullopt, std::nullopt, 1, pause_mode::abort, nullptr},
      {"2", std::nullopt, 2, pause_mode::abort, nullptr},
      {"1", "wait", 1, pause_mode::wait, nullptr},
      {"2", "keep", 2, pause_mode::in_place, nullptr},
      {"3", std::nullopt, 0, pause_mode::abort, "'level' must be 1 or 2"},
      {"1", "nap", 0, pause_mode::abort, "'mode' must be one of abort, wait, keep"},
  };
  for (const auto& r : rows) {
    auto parsed = parse_sleep_request(r.level, r.mode);
    if (r.error != nullptr) {
      ASSERT_FALSE(parsed);
      EXPECT_NE(parsed.err().message.find(r.error), std::string::npos) << parsed.err().message;
      continue;
    }
    ASSERT_TRUE(parsed) << parsed.err().message;
    EXPECT_EQ(parsed->level, r.want_level);
    EXPECT_EQ(parsed->mode, r.want_mode);
  }
  struct tags_row {
    std::vector<std::string> tags;
    bool weights, kv_cache;
    const char* error;
  };
  const std::vector<tags_row> tag_rows{
      {{}, true, true, nullptr},
      {{"weights"}, true, false, nullptr},
      {{"kv_cache"}, false, true, nullptr},
      {{"weights", "kv_cache"}, true, true, nullptr},
      {{"weights,kv_cache"}, true, true, nullptr},
      {{"gpu"}, false, false, "'tags' must be weights or kv_cache (got \"gpu\")"},
  };
  for (const auto& r : tag_rows) {
    auto parsed = parse_wake_up_request(r.tags);
    if (r.error != nullptr) {
      ASSERT_FALSE(parsed);
      EXPECT_NE(parsed.err().message.find(r.error), std::string::npos) << parsed.err().message;
      continue;
    }
    ASSERT_TRUE(parsed) << parsed.err().message;
    EXPECT_EQ(parsed->weights, r.weights);
    EXPECT_EQ(parsed->kv_cache, r.kv_cache);
  }
}

TEST(VllmControlWire, PauseParameters) {
  struct row {
    std::optional<std::string> mode, clear_cache;
    pause_mode want;
    const char* error;
  };
  const std::vector<row> rows{
      {std::nullopt, std::nullopt, pause_mode::abort, nullptr},
      {"abort", "false", pause_mode::abort, nullptr},
      {"wait", std::nullopt, pause_mode::wait, nullptr},
      {"keep", "true", pause_mode::in_place, nullptr},
      {"retract", std::nullopt, pause_mode::abort, "'mode' must be one of abort, wait, keep"},
      {"abort", "maybe", pause_mode::abort, "'clear_cache' must be a boolean"},
  };
  for (const auto& r : rows) {
    auto parsed = parse_vllm_pause_request(r.mode, r.clear_cache);
    if (r.error != nullptr) {
      ASSERT_FALSE(parsed);
      EXPECT_NE(parsed.err().message.find(r.error), std::string::npos) << parsed.err().message;
      continue;
    }
    ASSERT_TRUE(parsed) << parsed.err().message;
    EXPECT_EQ(parsed->mode, r.want);
  }
}

TEST(VllmControlWire, CollectiveRpcAndLoraBodies) {
  struct row {
    const char* body;
    const char* error;  // nullptr: parses
  };
  for (const row& r : std::vector<row>{{R"({"method": "reload_weights"})", nullptr},
                                       {R"({"method": "reload_weights", "kwargs": {}})", nullptr},
                                       {R"({"args": []})", "'method' is required"},
                                       {R"({"method": "x", "kwargs": 3})", "'kwargs' must be"}}) {
    auto parsed = parse_collective_rpc_request(json::parse(r.body));
    EXPECT_EQ(parsed.ok(), r.error == nullptr) << r.body;
    if (!parsed && r.error != nullptr) {
      EXPECT_NE(parsed.err().message.find(r.error), std::string::npos) << parsed.err().message;
    }
  }
  auto with_path = parse_collective_rpc_request(
      json::parse(R"({"method": "reload_weights", "kwargs": {"weights_path": "/w"}})"));
  ASSERT_TRUE(with_path);
  EXPECT_EQ(with_path->weights_path, "/w");
  for (const row& r : std::vector<row>{
           {R"({"lora_name": "a", "lora_path": "/p"})", nullptr},
           {R"({"lora_name": "a", "lora_path": "/p", "load_inplace": true})", nullptr},
           {R"({"lora_name": "a"})", "Both 'lora_name' and 'lora_path' must be provided."},
           {R"({"lora_path": "/p"})", "Both 'lora_name' and 'lora_path' must be provided."}}) {
    auto parsed = parse_load_lora_request(json::parse(r.body));
    EXPECT_EQ(parsed.ok(), r.error == nullptr) << r.body;
    if (!parsed && r.error != nullptr) {
      EXPECT_NE(parsed.err().message.find(r.error), std::string::npos) << parsed.err().message;
    }
  }
  EXPECT_FALSE(parse_unload_lora_request(json::parse("{}")));
  EXPECT_EQ(parse_unload_lora_request(json::parse(R"({"lora_name": "a"})"))->name, "a");
}

// ---- the routes over HTTP ----

TEST(VllmSleepMode, RequestsWhileAsleepWaitForTheWakeUpAndSeeTheReloadedWeights) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto control = client_for(*server);
  EXPECT_FALSE(is_sleeping(*control));
  const http_reply slept = post(*control, "/sleep?level=2", json::object());
  EXPECT_EQ(slept.status, 200);
  EXPECT_TRUE(slept.body.empty());  // vLLM answers an empty 200
  EXPECT_TRUE(is_sleeping(*control));

  // Held, as vLLM holds requests that arrive while its scheduler sleeps.
  auto waiting = std::async(std::launch::async, [&] {
    auto client = client_for(*server, 20s);
    return post(*client, "/v1/completions",
                json{{"prompt", "x"}, {"max_tokens", 3}, {"return_token_ids", true}});
  });
  ASSERT_TRUE(eventually([&] {
    return metric_line(get(*control, "/metrics").body, "vllm:num_requests_waiting") ==
           "vllm:num_requests_waiting 1";
  }));

  // reload_weights needs the weights awake.
  expect_openai_error(post(*control, "/collective_rpc", json{{"method", "reload_weights"}}), 400,
                      "BadRequestError", "POST /wake_up?tags=weights");
  EXPECT_EQ(post(*control, "/wake_up?tags=weights", json::object()).status, 200);
  EXPECT_TRUE(is_sleeping(*control));  // the KV cache still sleeps
  const http_reply reloaded = post(*control, "/collective_rpc", json{{"method", "reload_weights"}});
  ASSERT_EQ(reloaded.status, 200) << reloaded.body;
  EXPECT_EQ(reloaded.json()["results"].size(), 1U);
  EXPECT_EQ(reloaded.header("x-weight-version"), "1");
  EXPECT_EQ(server->weight_version(), 1);
  EXPECT_EQ(waiting.wait_for(0ms), std::future_status::timeout);

  EXPECT_EQ(post(*control, "/wake_up?tags=kv_cache", json::object()).status, 200);
  EXPECT_FALSE(is_sleeping(*control));
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  const http_reply reply = waiting.get();
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["weight_version"], 1);  // admitted after the reload
  EXPECT_EQ(reply.json()["choices"][0]["token_ids"].size(), 3U);
}

TEST(VllmSleepMode, SleepAbortsRunningGenerationsAndWakeUpWithoutTagsWakesAll) {
  auto server = start_server({}, vllm_slow_first_token());
  ASSERT_TRUE(server);
  auto running = vllm_long_generation(*server);
  auto control = client_for(*server);
  ASSERT_TRUE(vllm_runs_one(*control));
  EXPECT_EQ(post(*control, "/sleep", json::object()).status, 200);  // level 1, mode abort
  const http_reply reply = running.get();
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json()["choices"][0]["finish_reason"], "abort");
  EXPECT_TRUE(is_sleeping(*control));
  // A /continue_generation does not wake a sleeping server; /wake_up without tags does.
  EXPECT_EQ(post(*control, "/continue_generation", json::object()).status, 200);
  EXPECT_TRUE(get(*control, "/is_paused").json()["is_paused"]);
  EXPECT_EQ(post(*control, "/wake_up", json::object()).status, 200);
  EXPECT_FALSE(is_sleeping(*control));
  EXPECT_FALSE(get(*control, "/is_paused").json()["is_paused"]);
}

// vLLM's /pause in abort mode ends a running generation with its tokens and holds new ones until
// /resume, answered as vLLM answers.
TEST(VllmPause, AbortEndsTheRunningGenerationAndResumeLetsTheNextRun) {
  auto server = start_server({}, vllm_slow_first_token());
  ASSERT_TRUE(server);
  auto running = vllm_long_generation(*server);
  auto control = client_for(*server);
  ASSERT_TRUE(vllm_runs_one(*control));
  const http_reply paused = post(*control, "/pause?mode=abort", json::object());
  ASSERT_EQ(paused.status, 200) << paused.body;
  EXPECT_EQ(paused.json()["status"], "paused");
  const http_reply reply = running.get();
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json()["choices"][0]["finish_reason"], "abort");
  EXPECT_TRUE(get(*control, "/is_paused").json()["is_paused"]);
  const http_reply resumed = post(*control, "/resume", json::object());
  ASSERT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_EQ(resumed.json()["status"], "resumed");
  EXPECT_FALSE(get(*control, "/is_paused").json()["is_paused"]);
  expect_openai_error(post(*control, "/pause?mode=retract", json::object()), 400, "BadRequestError",
                      "'mode' must be one of abort, wait, keep");
}

TEST(VllmSleepMode, BadControlRequestsAnswerOpenAiErrors) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto c = client_for(*server);
  expect_openai_error(post(*c, "/sleep?level=3", json::object()), 400, "BadRequestError",
                      "'level' must be 1 or 2");
  expect_openai_error(post(*c, "/wake_up?tags=gpu", json::object()), 400, "BadRequestError",
                      "'tags' must be weights or kv_cache");
  expect_openai_error(post(*c, "/collective_rpc", json{{"method", "save_sharded_state"}}), 400,
                      "BadRequestError", "not served here (served: reload_weights)");
  expect_openai_error(post(*c, "/collective_rpc", json::object()), 400, "BadRequestError",
                      "'method' is required");
  EXPECT_FALSE(is_sleeping(*c));
}

TEST(VllmLora, AdaptersLoadListServeAndUnload) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto c = client_for(*server);
  const http_reply loaded =
      post(*c, "/v1/load_lora_adapter", json{{"lora_name", "coder"}, {"lora_path", "/tmp/a"}});
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_EQ(loaded.body, "Success: LoRA adapter 'coder' added successfully.");
  EXPECT_EQ(server->weight_version(), 1);

  const json models = get(*c, "/v1/models").json();
  ASSERT_EQ(models["data"].size(), 2U);
  EXPECT_EQ(models["data"][0]["id"], "leap-test");
  EXPECT_EQ(models["data"][1]["id"], "coder");
  EXPECT_EQ(models["data"][1]["parent"], "leap-test");
  EXPECT_EQ(models["data"][1]["root"], "/tmp/a");

  // The adapter's name is a model requests may name.
  const http_reply served =
      post(*c, "/v1/completions", json{{"model", "coder"}, {"prompt", "x"}, {"max_tokens", 2}});
  ASSERT_EQ(served.status, 200) << served.body;
  EXPECT_EQ(served.json()["weight_version"], 1);

  expect_openai_error(
      post(*c, "/v1/load_lora_adapter", json{{"lora_name", "coder"}, {"lora_path", "/tmp/b"}}), 400,
      "BadRequestError", "has already been loaded");
  EXPECT_EQ(post(*c, "/v1/load_lora_adapter",
                 json{{"lora_name", "coder"}, {"lora_path", "/tmp/b"}, {"load_inplace", true}})
                .status,
            200);
  EXPECT_EQ(server->weight_version(), 2);
  EXPECT_EQ(get(*c, "/v1/models").json()["data"][1]["root"], "/tmp/b");
  expect_openai_error(post(*c, "/v1/load_lora_adapter", json{{"lora_name", "coder"}}), 400,
                      "BadRequestError", "Both 'lora_name' and 'lora_path' must be provided.");

  const http_reply unloaded = post(*c, "/v1/unload_lora_adapter", json{{"lora_name", "coder"}});
  EXPECT_EQ(unloaded.status, 200);
  EXPECT_EQ(unloaded.body, "Success: LoRA adapter 'coder' removed successfully.");
  expect_openai_error(post(*c, "/v1/unload_lora_adapter", json{{"lora_name", "coder"}}), 404,
                      "NotFoundError", "cannot be found");
  expect_openai_error(
      post(*c, "/v1/completions", json{{"model", "coder"}, {"prompt", "x"}, {"max_tokens", 2}}),
      404, "NotFoundError", "does not exist");
  EXPECT_EQ(get(*c, "/v1/models").json()["data"].size(), 1U);
}

// A backend without adapter support (the interface's default), as the LibTorch one is.
class weights_only_backend final : public policy_backend {
 public:
  explicit weights_only_backend(std::shared_ptr<policy_backend> inner) : inner_(std::move(inner)) {}
  [[nodiscard]] std::string name() const override { return "weights-only"; }
  status generate(const backend_request& request, generation_control& control,
                  const token_sink& sink) override {
    return inner_->generate(request, control, sink);
  }
  status load_weights(const std::string& path, std::int64_t version) override {
    return inner_->load_weights(path, version);
  }

 private:
  std::shared_ptr<policy_backend> inner_;
};

TEST(VllmLora, ABackendWithoutAdaptersAnswers501) {
  server_config config;
  config.model_name = "leap-test";
  config.threads = 8;
  auto started =
      policy_server::start(config, std::make_shared<weights_only_backend>(testing::make_backend()));
  ASSERT_TRUE(started) << started.err().message;
  auto c = client_for(**started);
  expect_openai_error(
      post(*c, "/v1/load_lora_adapter", json{{"lora_name", "coder"}, {"lora_path", "/tmp/a"}}), 501,
      "NotImplementedError", "the weights-only backend cannot load LoRA adapters");
  expect_openai_error(post(*c, "/v1/unload_lora_adapter", json{{"lora_name", "coder"}}), 501,
                      "NotImplementedError", "cannot load LoRA adapters");
  EXPECT_EQ((*started)->weight_version(), 0);
}

// ---- the vLLM-flavoured weight-sync plans, driven by the client ----

client_config vllm_client(const policy_server& server, std::string model = "") {
  client_config c;
  c.flavour = wire_flavour::vllm;
  c.endpoints.push_back({server.base_url(), 8});
  c.model = std::move(model);
  c.request_timeout = 10s;
  c.health.interval = 50ms;
  c.retry.base_backoff = 1ms;
  return c;
}

status run_sync(policy_client& client, weight_sync_plan plan, weight_sync_request request) {
  std::promise<status> done;
  client.sync_weights(0, std::move(plan), std::move(request),
                      [&](status s) { done.set_value(std::move(s)); });
  auto future = done.get_future();
  if (future.wait_for(30s) != std::future_status::ready) {
    return error{"the sync did not finish"};
  }
  return future.get();
}

turn_result run_turn(policy_client& client, const std::string& id) {
  std::promise<turn_result> done;
  turn_request r;
  r.request_id = id;
  r.prompt = render_chat(std::vector<chat_message>{{"user", testing::sum_prompt}});
  r.sampling.max_tokens = 16;
  r.sampling.seed = 1;
  EXPECT_EQ(client.submit(r, [&](turn_result t) { done.set_value(std::move(t)); }),
            submit_status::accepted);
  auto future = done.get_future();
  if (future.wait_for(30s) != std::future_status::ready) {
    turn_result late;
    late.status = turn_status::unavailable;
    late.message = "no callback";
    return late;
  }
  return future.get();
}

TEST(VllmPlans, SleepReloadPlanRunsUnchangedAgainstOurServer) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto created = policy_client::create(vllm_client(*server));
  ASSERT_TRUE(created) << created.err().message;
  auto& client = **created;
  const turn_result before = run_turn(client, "before");
  ASSERT_EQ(before.status, turn_status::ok) << before.message;
  EXPECT_EQ(before.choices[0].weight_version, "0");

  // Turns submitted around the sync: the client holds them while the server is out of rotation,
  // and they run on the reloaded weights.
  std::vector<std::future<turn_result>> around;
  around.reserve(4);
  for (int i = 0; i < 4; ++i) {
    around.push_back(std::async(
        std::launch::async, [&, i] { return run_turn(client, "around-" + std::to_string(i)); }));
  }
  const status synced = run_sync(client, vllm_sleep_reload_plan(), {"7", "", ""});
  ASSERT_TRUE(synced) << synced.err().message;
  EXPECT_EQ(server->weight_version(), 1);
  EXPECT_EQ(client.endpoints()[0].weight_version, "7");
  auto control = client_for(*server);
  EXPECT_FALSE(is_sleeping(*control));
  const turn_result after = run_turn(client, "after");
  ASSERT_EQ(after.status, turn_status::ok) << after.message;
  EXPECT_EQ(after.choices[0].weight_version, "1");
  EXPECT_EQ(after.endpoint_weight_version, "7");
  EXPECT_EQ(after.choices[0].ids, before.choices[0].ids);  // the scripted answers do not change
  for (auto& f : around) {
    const turn_result r = f.get();
    EXPECT_EQ(r.status, turn_status::ok) << r.request_id << ": " << r.message;
  }
  // The plan's calls all went to the server.
  const std::string metrics = get(*control, "/metrics").body;
  for (const char* route : {"/sleep", "/wake_up", "/collective_rpc", "/reset_prefix_cache"}) {
    EXPECT_NE(metrics.find(std::string("route=\"") + route + "\""), std::string::npos) << route;
  }
}

TEST(VllmPlans, LoraPlanLoadsTheAdapterAndTurnsNameIt) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto created = policy_client::create(vllm_client(*server));
  ASSERT_TRUE(created) << created.err().message;
  for (int step = 1; step <= 2; ++step) {
    const status synced = run_sync(
        **created, vllm_lora_plan(),
        {"step-" + std::to_string(step), "/ckpt/step-" + std::to_string(step), "policy-lora"});
    ASSERT_TRUE(synced) << synced.err().message;  // load_inplace replaces the loaded adapter
    EXPECT_EQ(server->weight_version(), step);
  }
  auto control = client_for(*server);
  const json models = get(*control, "/v1/models").json();
  ASSERT_EQ(models["data"].size(), 2U);
  EXPECT_EQ(models["data"][1]["id"], "policy-lora");
  EXPECT_EQ(models["data"][1]["root"], "/ckpt/step-2");

  auto lora_client = policy_client::create(vllm_client(*server, "policy-lora"));
  ASSERT_TRUE(lora_client) << lora_client.err().message;
  const turn_result r = run_turn(**lora_client, "lora-turn");
  ASSERT_EQ(r.status, turn_status::ok) << r.message;
  EXPECT_EQ(r.choices[0].weight_version, "2");
}

TEST(VllmPlans, LoraPlanAgainstABackendWithoutAdaptersFailsClearly) {
  server_config config;
  config.threads = 8;
  auto started =
      policy_server::start(config, std::make_shared<weights_only_backend>(testing::make_backend()));
  ASSERT_TRUE(started) << started.err().message;
  auto created = policy_client::create(vllm_client(**started));
  ASSERT_TRUE(created) << created.err().message;
  const status synced = run_sync(**created, vllm_lora_plan(), {"1", "/ckpt", "policy-lora"});
  ASSERT_FALSE(synced);
  EXPECT_NE(synced.err().message.find("HTTP 501"), std::string::npos) << synced.err().message;
  EXPECT_NE(synced.err().message.find("cannot load LoRA adapters"), std::string::npos)
      << synced.err().message;
}

// ---- SGLang's /tokenize with chat messages ----

TEST(SglangTokenize, ServerAcceptsSglangsChatShape) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto c = client_for(*server);
  const std::vector<chat_message> messages{{"system", "Be brief."}, {"user", "Add 2 and 3."}};
  // SGLang's form: exactly one of prompt and messages, read as a chat request (no
  // add_generation_prompt: the generation prompt is always rendered), extra chat fields ignored.
  const http_reply reply =
      post(*c, "/tokenize",
           json{{"model", "leap-test"},
                {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                          {{"role", "user"}, {"content", "Add 2 and 3."}}})},
                {"chat_template_kwargs", nullptr},
                {"tools", nullptr}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["tokens"].get<std::vector<token_id>>(), render_chat(messages));
  EXPECT_EQ(reply.json()["count"], render_chat(messages).size());
  EXPECT_EQ(reply.json()["max_model_len"], 32768);
  // continue_final_message: the last (assistant) message stays open, as SGLang renders it.
  std::vector<chat_message> open = messages;
  open.push_back({"assistant", "It is"});
  const http_reply cont =
      post(*c, "/tokenize",
           json{{"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                          {{"role", "user"}, {"content", "Add 2 and 3."}},
                                          {{"role", "assistant"}, {"content", "It is"}}})},
                {"continue_final_message", true}});
  ASSERT_EQ(cont.status, 200) << cont.body;
  chat_render_options options;
  options.continue_final_message = true;
  options.add_generation_prompt = false;
  EXPECT_EQ(cont.json()["tokens"].get<std::vector<token_id>>(), render_chat(open, options));
  expect_openai_error(post(*c, "/tokenize", json{{"prompt", "x"}, {"messages", json::array()}}),
                      400, "BadRequestError", "exactly one of 'prompt'");
}

TEST(SglangTokenize, ClientSendsSglangsShapeForTheSglangFlavour) {
  const std::vector<chat_message> messages{{"user", "hi"}};
  auto body = build_tokenize_body(wire_flavour::sglang, "m", messages, true);
  ASSERT_TRUE(body) << body.err().message;
  const json sent = json::parse(*body);
  EXPECT_EQ(sent, (json{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}));
  auto without = build_tokenize_body(wire_flavour::sglang, "", messages, false);
  ASSERT_FALSE(without);
  EXPECT_NE(without.err().message.find("always renders the generation prompt"), std::string::npos);
  // vLLM's shape is unchanged.
  auto vllm = build_tokenize_body(wire_flavour::vllm, "", messages, false);
  ASSERT_TRUE(vllm);
  EXPECT_EQ(json::parse(*vllm)["add_generation_prompt"], false);
  EXPECT_EQ(json::parse(*vllm)["add_special_tokens"], false);

  auto server = start_server();
  ASSERT_TRUE(server);
  client_config config;
  config.flavour = wire_flavour::sglang;
  config.endpoints.push_back({server->base_url(), 4});
  auto client = policy_client::create(config);
  ASSERT_TRUE(client) << client.err().message;
  for (const bool generation_prompt : {true, false}) {
    std::promise<result<std::vector<token_id>>> done;
    (*client)->tokenize(0, messages, generation_prompt,
                        [&](result<std::vector<token_id>> ids) { done.set_value(std::move(ids)); });
    auto future = done.get_future();
    ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
    auto ids = future.get();
    if (generation_prompt) {
      ASSERT_TRUE(ids) << ids.err().message;
      EXPECT_EQ(*ids, render_chat(messages));
    } else {
      ASSERT_FALSE(ids);
      EXPECT_NE(ids.err().message.find("local template"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace leap::policy
