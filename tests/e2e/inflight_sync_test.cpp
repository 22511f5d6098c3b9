// A `leap run` whose weight sync lands in the middle of a turn (policy.inflight_updates), the
// server holding that turn (its `hold` fault), through each server and sync that supports it:
// `leap serve-policy --model` syncing from disk over SGLang's routes (/pause_generation in abort
// mode, /update_weights_from_disk, /flush_cache, /continue_generation) and over vLLM's
// (/pause?mode=abort, /collective_rpc reload_weights, /reset_prefix_cache, /resume; vLLM's
// responses name no weight version, so the client names the resumed piece's), and the embedded
// server (SGLang's routes; `leap run --server-faults` holds the turn) syncing in memory (the load
// copies the learner's weights in the same process) and from disk. tests/e2e/inflight_support.hpp
// says what the run is and what its store must show; each test fails with in-flight updates off
// (LEAP_E2E_INFLIGHT_OFF=1).
#include "inflight_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace {

namespace inflight = leap::e2e::inflight;

TEST(LeapRunInflight, ASyncLandsInsideATurnAndTheTurnTrainsWithEachTokensVersion) {
  inflight::run_dir dir("inflight-sglang");
  inflight::run_against_a_served_model(
      dir, "sglang", {"/pause_generation", "/update_weights_from_disk", "/continue_generation"});
  if (HasFatalFailure()) {
    return;
  }
  inflight::expect_the_sync_inside_one_turn(dir);
}

TEST(LeapRunInflight, VllmPauseRoutesLandASyncInsideATurn) {
  inflight::run_dir dir("inflight-vllm");
  inflight::run_against_a_served_model(dir, "vllm", {"/pause", "/collective_rpc", "/resume"});
  if (HasFatalFailure()) {
    return;
  }
  inflight::expect_the_sync_inside_one_turn(dir);
}

// The embedded server holding the chosen turn (`leap run --server-faults`), syncing by
// `weight_sync`.
void inflight_embedded_run(const std::string& weight_sync) {
  inflight::run_dir dir("inflight-embedded-" + weight_sync);
  dir.write_model();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const auto config = dir.write_config({"embedded", "", weight_sync});
  const auto run = leap::e2e::run_leap({"run", config, "--server-faults", inflight::hold_spec()},
                                       std::chrono::seconds(400));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("step 2/2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("the embedded server injects faults: " + inflight::hold_spec()),
            std::string::npos)
      << run.output;
  inflight::expect_the_sync_inside_one_turn(dir);
}

TEST(LeapRunInflight, EmbeddedServerSyncingInMemoryLandsASyncInsideATurn) {
  inflight_embedded_run("in_memory");
}

TEST(LeapRunInflight, EmbeddedServerSyncingFromDiskLandsASyncInsideATurn) {
  inflight_embedded_run("disk");
}

// --server-faults is the embedded server's: a bad spec is refused before anything starts, and so
// are faults for a run whose server is elsewhere (they would silently do nothing).
TEST(LeapRunServerFaults, RefusedWhenBadOrWithoutTheEmbeddedServer) {
  inflight::run_dir dir("server-faults");
  dir.write_model();
  ASSERT_FALSE(HasFatalFailure());
  const auto config = dir.write_config({"sglang", "http://127.0.0.1:9", "disk"});
  const auto bad =
      leap::e2e::run_leap({"run", config, "--server-faults", "hold=2"}, std::chrono::seconds(120));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("leap run: error: --server-faults: "), std::string::npos) << bad.output;
  const auto elsewhere = leap::e2e::run_leap(
      {"run", config, "--server-faults", inflight::hold_spec()}, std::chrono::seconds(120));
  EXPECT_EQ(elsewhere.exit_code, 1) << elsewhere.output;
  EXPECT_NE(elsewhere.output.find("server faults are injected by the embedded server only, and "
                                  "policy.flavour is sglang"),
            std::string::npos)
      << elsewhere.output;
}

}  // namespace
