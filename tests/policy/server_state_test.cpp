// The policy server's state without HTTP: who holds generation back, flights, the LoRA table and
// vLLM's weight-transfer session, driven directly against the scripted backend; and the routes'
// handlers called as the transport calls them, without sockets.
#include "policy/server/detail/server_state.hpp"

#include "tests/policy/server_test_support.hpp"
// After server_test_support.hpp, which defines CPPHTTPLIB_OPENSSL_SUPPORT before httplib.h.
#include "policy/server/detail/server_routes.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::policy {
namespace {

using nlohmann::json;

std::optional<http_error> error_of(const std::variant<std::int64_t, http_error>& v) {
  if (const auto* e = std::get_if<http_error>(&v)) {
    return *e;
  }
  return std::nullopt;
}

TEST(ServerState, PauseAndSleepAreSeparateHolders) {
  server_metrics metrics;
  server_state state(0, metrics);
  state.pause(pause_mode::abort);
  state.sleep(pause_mode::abort);
  EXPECT_TRUE(state.gate()->paused());
  state.resume();  // the pause is lifted, but the server still sleeps
  EXPECT_TRUE(state.gate()->paused());
  EXPECT_TRUE(state.sleeping());
  state.wake(true, false);  // the KV cache still sleeps
  EXPECT_TRUE(state.gate()->paused());
  EXPECT_FALSE(state.weights_asleep());
  state.wake(false, true);
  EXPECT_FALSE(state.gate()->paused());
  EXPECT_FALSE(state.sleeping());

  state.sleep(pause_mode::abort);
  state.pause(pause_mode::abort);
  state.wake(true, true);  // a wake-up does not lift a pause
  EXPECT_TRUE(state.gate()->paused());
  state.resume();
  EXPECT_FALSE(state.gate()->paused());
}

TEST(ServerState, PauseAbortsRunningFlightsAndHoldsNewOnes) {
  server_metrics metrics;
  server_state state(0, metrics);
  auto running = std::make_shared<generation_control>(state.gate());
  auto first = std::make_unique<server_state::flight>(state, running);
  EXPECT_EQ(metrics.waiting.load(), 1);
  ASSERT_TRUE(first->admit());
  EXPECT_EQ(metrics.running.load(), 1);
  EXPECT_EQ(metrics.waiting.load(), 0);

  const pause_counts counts = state.pause(pause_mode::abort);
  EXPECT_EQ(counts.aborted, 1U);
  EXPECT_TRUE(running->aborted());

  // A flight that arrives while paused waits, and is admitted once the pause is lifted.
  auto held = std::make_shared<generation_control>(state.gate());
  server_state::flight second(state, held);
  std::thread resumer([&] { state.resume(); });
  EXPECT_TRUE(second.admit());
  resumer.join();
  EXPECT_EQ(metrics.running.load(), 2);
  first.reset();
  EXPECT_EQ(metrics.running.load(), 1);

  // Shutdown refuses what is still held.
  state.pause(pause_mode::in_place);
  server_state::flight third(state, std::make_shared<generation_control>(state.gate()));
  state.stop();
  EXPECT_FALSE(third.admit());
}

TEST(ServerState, PauseWaitDrainsRunningFlights) {
  server_metrics metrics;
  server_state state(0, metrics);
  auto flight = std::make_unique<server_state::flight>(
      state, std::make_shared<generation_control>(state.gate()));
  ASSERT_TRUE(flight->admit());
  pause_counts counts{1, 1};
  std::thread pauser([&] { counts = state.pause(pause_mode::wait); });
  flight.reset();  // the running generation ends; the drain returns with none running
  pauser.join();
  EXPECT_EQ(counts.running, 0U);
  EXPECT_EQ(counts.aborted, 0U);
  EXPECT_TRUE(state.gate()->paused());
}

TEST(ServerState, DiskTransferSessionRules) {
  server_metrics metrics;
  server_state state(3, metrics);
  auto backend = testing::make_backend();
  ASSERT_NE(backend, nullptr);
  const json ckpt{{"path", "/ckpt/step-4"}};

  // A rendezvous the disk engine cannot serve is refused at init.
  auto init =
      state.init_transfer(*backend, transfer_backend::disk, json{{"master_address", "10.0.0.1"}});
  ASSERT_TRUE(init.has_value());
  EXPECT_EQ(init->status, 400);
  EXPECT_FALSE(state.init_transfer(*backend, transfer_backend::disk, json::object()).has_value());

  auto early = state.update_transfer(*backend, transfer_backend::disk, ckpt);
  ASSERT_TRUE(early.has_value());
  EXPECT_NE(early->message.find("start_weight_update must be called"), std::string::npos);
  EXPECT_EQ(error_of(state.finish_transfer(*backend, transfer_backend::disk, std::nullopt))->status,
            400);

  // Two checkpoints in one session: refused, and the session is over.
  ASSERT_FALSE(state.start_transfer(*backend, transfer_backend::disk).has_value());
  ASSERT_FALSE(state.update_transfer(*backend, transfer_backend::disk, ckpt).has_value());
  auto second = state.update_transfer(*backend, transfer_backend::disk, ckpt);
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->message.find("exactly one checkpoint"), std::string::npos);
  EXPECT_FALSE(state.transfer_active());
  EXPECT_EQ(state.weight_version(), 3);

  // A finish with nothing received ends the session and serves nothing new.
  ASSERT_FALSE(state.start_transfer(*backend, transfer_backend::disk).has_value());
  auto empty = error_of(state.finish_transfer(*backend, transfer_backend::disk, std::nullopt));
  ASSERT_TRUE(empty.has_value());
  EXPECT_NE(empty->message.find("no weights were received"), std::string::npos);
  EXPECT_FALSE(state.transfer_active());

  // The whole session: the version is current + 1 unless the finish names one.
  ASSERT_FALSE(state.start_transfer(*backend, transfer_backend::disk).has_value());
  ASSERT_FALSE(state.update_transfer(*backend, transfer_backend::disk, ckpt).has_value());
  EXPECT_EQ(state.weight_version(), 3);  // nothing is served before finish
  auto finished = state.finish_transfer(*backend, transfer_backend::disk, std::nullopt);
  ASSERT_FALSE(error_of(finished).has_value()) << error_of(finished)->message;
  EXPECT_EQ(std::get<std::int64_t>(finished), 4);
  EXPECT_EQ(state.weight_version(), 4);
  ASSERT_FALSE(state.start_transfer(*backend, transfer_backend::disk).has_value());
  ASSERT_FALSE(state.update_transfer(*backend, transfer_backend::disk, ckpt).has_value());
  EXPECT_EQ(std::get<std::int64_t>(state.finish_transfer(*backend, transfer_backend::disk, 9)), 9);
  EXPECT_EQ(state.weight_version(), 9);
}

// A delta folder (learner/weight_delta.hpp's weight_delta.json) loads only on the version it was
// computed from; a model folder (no manifest) is not checked.
TEST(ServerState, ADeltaLoadsOnlyOnItsBaseVersion) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("leap-delta-base-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto manifest = [&](const std::string& text) {
    std::ofstream(dir / "weight_delta.json") << text;
    return dir.string();
  };
  struct row {
    std::string manifest;  // "" = a model folder
    std::int64_t served;
    int status;  // 0 = accepted
    std::string says;
  };
  const std::vector<row> cases{
      {"", 7, 0, ""},
      {R"({"base_version": 7, "version": 8})", 7, 0, ""},
      {R"({"base_version": 6, "version": 7})", 7, 409,
       "applies to weight version 6, this server holds version 7"},
      {R"({"base_version": 8, "version": 9})", 7, 409, "send the full weights"},
      {R"({"version": 9})", 7, 400, "base_version"},
      {"not json", 7, 400, "cannot be read"},
  };
  for (const auto& c : cases) {
    std::filesystem::remove(dir / "weight_delta.json");
    const std::string path = c.manifest.empty() ? dir.string() : manifest(c.manifest);
    const auto got = server_state::check_delta_base(path, c.served);
    EXPECT_EQ(got ? got->status : 0, c.status) << c.manifest;
    if (got) {
      EXPECT_NE(got->message.find(c.says), std::string::npos) << got->message;
    }
  }

  // Through vLLM's disk engine and a folder load: a stale delta ends the session, nothing served.
  server_metrics metrics;
  server_state state(3, metrics);
  auto backend = testing::make_backend();
  ASSERT_NE(backend, nullptr);
  manifest(R"({"base_version": 2, "version": 4})");
  ASSERT_FALSE(state.start_transfer(*backend, transfer_backend::disk).has_value());
  ASSERT_FALSE(state.update_transfer(*backend, transfer_backend::disk, json{{"path", dir.string()}})
                   .has_value());
  EXPECT_EQ(error_of(state.finish_transfer(*backend, transfer_backend::disk, std::nullopt))->status,
            409);
  EXPECT_FALSE(state.transfer_active());
  EXPECT_EQ(error_of(state.load_folder(*backend, dir.string(), 4, 400))->status, 409);
  EXPECT_EQ(state.weight_version(), 3);
  manifest(R"({"base_version": 3, "version": 4})");
  EXPECT_EQ(std::get<std::int64_t>(state.load_folder(*backend, dir.string(), std::nullopt, 400)),
            4);
  EXPECT_EQ(state.weight_version(), 4);
  std::filesystem::remove_all(dir);
}

TEST(ServerState, TensorTransferNeedsAnInitializedEngine) {
  server_metrics metrics;
  server_state state(0, metrics);
  auto backend = testing::make_backend();
  ASSERT_NE(backend, nullptr);
  auto start = state.start_transfer(*backend, transfer_backend::nccl);
  ASSERT_TRUE(start.has_value());
  EXPECT_NE(start->message.find("the nccl weight-transfer engine is not initialized"),
            std::string::npos)
      << start->message;
  // The scripted backend has no nccl engine: init fails, and the engine stays uninitialized.
  auto init =
      state.init_transfer(*backend, transfer_backend::nccl, json{{"master_address", "127.0.0.1"}});
  ASSERT_TRUE(init.has_value());
  EXPECT_EQ(init->status, 500);
  EXPECT_NE(init->message.find("init_weight_transfer_engine (nccl): the scripted backend has no "
                               "'nccl' weight-transfer engine"),
            std::string::npos)
      << init->message;
  EXPECT_TRUE(state.start_transfer(*backend, transfer_backend::nccl).has_value());
}

TEST(ServerState, AdapterLoadsChangeTableAndVersionTogether) {
  server_metrics metrics;
  server_state state(5, metrics);
  const auto ok = [](std::int64_t) -> status { return done{}; };
  EXPECT_EQ(std::get<std::int64_t>(state.load_adapter("a", "/lora/a", false, ok)), 6);
  EXPECT_TRUE(state.has_adapter("a"));

  auto again = error_of(state.load_adapter("a", "/lora/a2", false, ok));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->status, 400);
  EXPECT_EQ(state.adapters().at("a"), "/lora/a");
  EXPECT_EQ(state.weight_version(), 6);

  EXPECT_EQ(std::get<std::int64_t>(state.load_adapter("a", "/lora/a2", true, ok)), 7);
  EXPECT_EQ(state.adapters().at("a"), "/lora/a2");

  const auto fail = [](std::int64_t) -> status { return error{"no such file"}; };
  auto failed = error_of(state.load_adapter("b", "/lora/b", false, fail));
  ASSERT_TRUE(failed.has_value());
  EXPECT_NE(failed->message.find("no such file"), std::string::npos);
  EXPECT_FALSE(state.has_adapter("b"));
  EXPECT_EQ(state.weight_version(), 7);

  EXPECT_TRUE(state.unload_adapter("a"));
  EXPECT_FALSE(state.unload_adapter("a"));
  EXPECT_TRUE(state.adapters().empty());
}

// Every route that reads a JSON body starts the same way (parse_body): a body that is not JSON,
// then a request its wire parser refuses, is a 400 whose message is that parser's own, unchanged.
TEST(ServerRoutes, BodyErrorsAre400WithTheParsersOwnMessage) {
  server_config config;
  config.vocab = byte_vocabulary();
  config.vocab_size = config.vocab->vocab_size();
  auto backend = testing::make_backend();
  ASSERT_NE(backend, nullptr);
  server_metrics metrics;
  server_state state(0, metrics);
  const server_context context{config, *backend, state, metrics};
  std::vector<route> routes = generation_routes(context);
  for (auto& r : control_routes(context)) {
    routes.push_back(std::move(r));
  }
  const auto call = [&routes](const std::string& path,
                              const std::string& body) -> std::optional<http_error> {
    for (const auto& r : routes) {
      if (r.path == path) {
        httplib::Request req;
        req.method = "POST";
        req.path = path;
        req.body = body;
        httplib::Response res;
        return r.handler(http_request(req), res);
      }
    }
    ADD_FAILURE() << "no route " << path;
    return std::nullopt;
  };
  using parser = std::function<result<done>(const json&)>;
  const auto of = [](auto parse) -> parser {
    return [parse](const json& body) -> result<done> {
      auto parsed = parse(body);
      if (!parsed) {
        return parsed.err();
      }
      return done{};
    };
  };
  struct row {
    std::string path;
    std::string body;  // valid JSON that the route's parser refuses
    parser parse;
  };
  const std::vector<row> rows = {
      {"/v1/completions", "{}", of(parse_completion_request)},
      {"/v1/chat/completions", R"({"messages": []})", of(parse_chat_request)},
      {"/generate", R"({"sampling_params": {}})", of(parse_generate_request)},
      {"/tokenize", "{}", of(parse_tokenize_request)},
      {"/detokenize", "{}", of(parse_detokenize_request)},
      {"/update_weights_from_disk", "{}", of(parse_sglang_update_weights_request)},
      {"/init_weight_transfer_engine", "{}",
       of([](const json& b) { return parse_weight_transfer_request(b, "init_info"); })},
      {"/update_weights", R"({"update_info": 3})",
       of([](const json& b) { return parse_weight_transfer_request(b, "update_info"); })},
      {"/finish_weight_update", R"({"weight_version": "v1"})",
       of(parse_finish_weight_update_request)},
      {"/pause_generation", R"({"mode": "nap"})", of(parse_pause_request)},
      {"/collective_rpc", "{}", of(parse_collective_rpc_request)},
      {"/v1/load_lora_adapter", "{}", of(parse_load_lora_request)},
      {"/v1/unload_lora_adapter", "{}", of(parse_unload_lora_request)},
  };
  const std::string not_json = "{\"prompt\": ";
  const auto not_json_message = parse_json_body(not_json);
  ASSERT_FALSE(not_json_message);
  for (const auto& r : rows) {
    const auto bad_syntax = call(r.path, not_json);
    ASSERT_TRUE(bad_syntax.has_value()) << r.path;
    EXPECT_EQ(bad_syntax->status, 400) << r.path;
    EXPECT_EQ(bad_syntax->message, not_json_message.err().message) << r.path;

    const auto expected = r.parse(json::parse(r.body));
    ASSERT_FALSE(expected) << r.path << " " << r.body;
    const auto refused = call(r.path, r.body);
    ASSERT_TRUE(refused.has_value()) << r.path;
    EXPECT_EQ(refused->status, 400) << r.path;
    EXPECT_EQ(refused->message, expected.err().message) << r.path;
  }
  // A route whose body is not read still refuses one that is not JSON.
  const auto start = call("/start_weight_update", not_json);
  ASSERT_TRUE(start.has_value());
  EXPECT_EQ(start->message, not_json_message.err().message);

  // /update_weights with the body it took before it became vLLM's route says where that went.
  const auto old_shape = call("/update_weights", R"({"path": "/x"})");
  ASSERT_TRUE(old_shape.has_value());
  EXPECT_EQ(old_shape->status, 400);
  EXPECT_EQ(old_shape->message,
            "Missing 'update_info' in request body (this is vLLM's weight-transfer route: a "
            "folder loads with {\"update_info\": {\"path\": ...}} between /start_weight_update and "
            "/finish_weight_update, or with SGLang's /update_weights_from_disk)");
}

}  // namespace
}  // namespace leap::policy
