// The policy server's state without HTTP: who holds generation back, flights, the LoRA table and
// vLLM's weight-transfer session, driven directly against the scripted backend.
#include "policy/server_state.hpp"

#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <thread>

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
  auto init = state.init_transfer(*backend, "disk", json{{"master_address", "10.0.0.1"}});
  ASSERT_TRUE(init.has_value());
  EXPECT_EQ(init->status, 400);
  EXPECT_FALSE(state.init_transfer(*backend, "disk", json::object()).has_value());

  auto early = state.update_transfer(*backend, "disk", ckpt);
  ASSERT_TRUE(early.has_value());
  EXPECT_NE(early->message.find("start_weight_update must be called"), std::string::npos);
  EXPECT_EQ(error_of(state.finish_transfer(*backend, "disk", std::nullopt))->status, 400);

  // Two checkpoints in one session: refused, and the session is over.
  ASSERT_FALSE(state.start_transfer(*backend, "disk").has_value());
  ASSERT_FALSE(state.update_transfer(*backend, "disk", ckpt).has_value());
  auto second = state.update_transfer(*backend, "disk", ckpt);
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->message.find("exactly one checkpoint"), std::string::npos);
  EXPECT_FALSE(state.transfer_active());
  EXPECT_EQ(state.weight_version(), 3);

  // A finish with nothing received ends the session and serves nothing new.
  ASSERT_FALSE(state.start_transfer(*backend, "disk").has_value());
  auto empty = error_of(state.finish_transfer(*backend, "disk", std::nullopt));
  ASSERT_TRUE(empty.has_value());
  EXPECT_NE(empty->message.find("no weights were received"), std::string::npos);
  EXPECT_FALSE(state.transfer_active());

  // The whole session: the version is current + 1 unless the finish names one.
  ASSERT_FALSE(state.start_transfer(*backend, "disk").has_value());
  ASSERT_FALSE(state.update_transfer(*backend, "disk", ckpt).has_value());
  EXPECT_EQ(state.weight_version(), 3);  // nothing is served before finish
  auto finished = state.finish_transfer(*backend, "disk", std::nullopt);
  ASSERT_FALSE(error_of(finished).has_value()) << error_of(finished)->message;
  EXPECT_EQ(std::get<std::int64_t>(finished), 4);
  EXPECT_EQ(state.weight_version(), 4);
  ASSERT_FALSE(state.start_transfer(*backend, "disk").has_value());
  ASSERT_FALSE(state.update_transfer(*backend, "disk", ckpt).has_value());
  EXPECT_EQ(std::get<std::int64_t>(state.finish_transfer(*backend, "disk", 9)), 9);
  EXPECT_EQ(state.weight_version(), 9);
}

TEST(ServerState, TensorTransferNeedsAnInitializedEngine) {
  server_metrics metrics;
  server_state state(0, metrics);
  auto backend = testing::make_backend();
  ASSERT_NE(backend, nullptr);
  auto start = state.start_transfer(*backend, "nccl");
  ASSERT_TRUE(start.has_value());
  EXPECT_NE(start->message.find("not initialized"), std::string::npos);
  // The scripted backend has no nccl engine: init fails, and the engine stays uninitialized.
  auto init = state.init_transfer(*backend, "nccl", json{{"master_address", "127.0.0.1"}});
  ASSERT_TRUE(init.has_value());
  EXPECT_EQ(init->status, 500);
  EXPECT_TRUE(state.start_transfer(*backend, "nccl").has_value());
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

}  // namespace
}  // namespace leap::policy
