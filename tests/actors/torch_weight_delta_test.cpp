// Delta weight sync against the project's server (LibTorch backend, bf16, on loopback): a float32
// learner takes real optimizer steps and writes delta folders (learner/weight_delta.hpp); SGLang's
// /update_weights_from_disk and vLLM's reload_weights load them. The served weights after deltas
// are bit-identical to a full sync's; a delta on another base version is refused (409) and one on
// other weights fails its checksum, the served weights unchanged either way, and a full sync
// through the client's sync plan then brings the server back, turns and deltas going on.
#include "actors/torch/torch_policy_backend.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"
#include "learner/trainer.hpp"
#include "learner/weight_delta.hpp"
#include "policy/client/client.hpp"
#include "policy/server/server.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/actors/torch_delta_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::temp_dir;

using served = testing::probed_server;
using reply = testing::http_reply;

served serve(const std::string& model_dir) {
  return testing::serve_probed(model_dir, transfer_backend::disk, 4, 120s, 300s);
}

reply post(httplib::Client& http, const std::string& path, const json& body) {
  return testing::post_json(http, path, body);
}

reply load(served& s, const std::string& folder, std::int64_t version) {
  return post(*s.http, "/update_weights_from_disk",
              {{"model_path", folder}, {"weight_version", std::to_string(version)}});
}

// What the server holds now, every parameter's bytes (the probe leaves the version as it is).
std::map<std::string, std::vector<std::uint8_t>> served_bytes(served& s,
                                                              const std::string& model_dir) {
  learner::policy_options o;
  o.dtype = "bfloat16";
  auto copy = learner::policy::load(model_dir, o);
  EXPECT_TRUE(copy.ok());
  s.seen->copy = std::make_unique<learner::policy>(std::move(*copy));
  const auto version = s.server->weight_version();
  const reply r = load(s, std::string(in_memory_weights), version);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.server->weight_version(), version);
  std::map<std::string, std::vector<std::uint8_t>> out;
  for (const auto& name : s.seen->copy->parameter_names()) {
    out[name] = s.seen->copy->parameter(name)->data;
  }
  return out;
}

TEST(TorchWeightDelta, DeltasThroughTheServerEqualAFullSyncBitForBit) {
  temp_dir dir;
  auto l = testing::make_delta_learner(dir);
  auto by_delta = serve(l.initial);
  auto by_full = serve(l.initial);
  ASSERT_TRUE(by_delta.server && by_full.server);
  learner::weight_delta_sender sender("bfloat16");
  ASSERT_TRUE(sender.reset(l.trainer->current_policy(), 0).ok());
  for (std::int64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(l.trainer->update(l.batch).ok());
    const auto delta = (dir.path() / ("delta-" + std::to_string(v))).string();
    auto stats = sender.write_delta(l.trainer->current_policy(), v, delta);
    ASSERT_TRUE(stats.ok()) << stats.err().message;
    EXPECT_GT(stats->changed_elements, 0);
    EXPECT_LT(stats->bytes, stats->full_bytes);
    const reply r = load(by_delta, delta, v);
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_TRUE(sender.commit().ok());
    const auto full = (dir.path() / ("full-" + std::to_string(v))).string();
    ASSERT_TRUE(l.trainer->current_policy().save(full, "bfloat16").ok());
    ASSERT_EQ(load(by_full, full, v).status, 200);
  }
  EXPECT_EQ(by_delta.server->weight_version(), 3);
  const auto a = served_bytes(by_delta, l.initial);
  const auto b = served_bytes(by_full, l.initial);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

TEST(TorchWeightDelta, AnUnchangedModelLoadsAnEmptyDelta) {
  temp_dir dir;
  auto l = testing::make_delta_learner(dir);
  auto s = serve(l.initial);
  ASSERT_TRUE(s.server);
  const auto before = served_bytes(s, l.initial);
  learner::weight_delta_sender sender("bfloat16");
  ASSERT_TRUE(sender.reset(l.trainer->current_policy(), 0).ok());
  const auto delta = (dir.path() / "delta").string();
  auto stats = sender.write_delta(l.trainer->current_policy(), 1, delta);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->bytes, 0);
  std::uintmax_t on_disk = 0;
  for (const auto& e : std::filesystem::directory_iterator(delta)) {
    on_disk += e.file_size();
  }
  EXPECT_LT(on_disk, 1024U);
  const reply r = load(s, delta, 1);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.server->weight_version(), 1);
  EXPECT_EQ(served_bytes(s, l.initial), before);
}

TEST(TorchWeightDelta, AStaleBaseOrABadChecksumIsRefusedAndAFullSyncRecovers) {
  temp_dir dir;
  auto l = testing::make_delta_learner(dir);
  auto s = serve(l.initial);
  ASSERT_TRUE(s.server);
  learner::weight_delta_sender sender("bfloat16");
  ASSERT_TRUE(sender.reset(l.trainer->current_policy(), 0).ok());
  ASSERT_TRUE(l.trainer->update(l.batch).ok());
  const auto d1 = (dir.path() / "d1").string();
  ASSERT_TRUE(sender.write_delta(l.trainer->current_policy(), 1, d1).ok());
  ASSERT_TRUE(sender.commit().ok());  // as if the server took it; it missed it
  ASSERT_TRUE(l.trainer->update(l.batch).ok());
  const auto d2 = (dir.path() / "d2").string();
  ASSERT_TRUE(sender.write_delta(l.trainer->current_policy(), 2, d2).ok());
  const auto before = served_bytes(s, l.initial);

  // The server is at version 0, the delta's base is 1: refused by version.
  reply r = load(s, d2, 2);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_THAT(r.body, HasSubstr("applies to weight version 1, this server holds version 0"));
  EXPECT_EQ(s.server->weight_version(), 0);
  EXPECT_EQ(served_bytes(s, l.initial), before);

  // The same through vLLM's reload_weights: 409 as well.
  r = post(*s.http, "/collective_rpc",
           {{"method", "reload_weights"}, {"kwargs", {{"weights_path", d2}}}});
  EXPECT_EQ(r.status, 409) << r.body;

  // A server that claims the base version but holds other weights: the checksums catch it.
  ASSERT_EQ(load(s, std::string(l.initial), 1).status, 200);  // version 1, version-0 weights
  r = load(s, d2, 2);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("checksum"));
  EXPECT_EQ(s.server->weight_version(), 1);
  EXPECT_EQ(served_bytes(s, l.initial), before);

  // The fallback, through the client's SGLang plan as `leap run` drives it: the delta fails, the
  // server stays out of rotation; a full sync brings it back; deltas go on from there.
  policy::client_config c;
  c.flavour = wire_flavour::sglang;
  c.endpoints.push_back({s.server->base_url(), 4});
  c.request_timeout = 60s;
  c.health.interval = 50ms;
  c.seed = 1;
  auto client = policy::policy_client::create(c);
  ASSERT_TRUE(client) << client.err().message;
  auto plan = policy::sglang_disk_plan();
  plan.health_retry_delay = 10ms;
  auto sync = [&](const std::string& folder, std::int64_t version) {
    std::promise<status> done;
    auto future = done.get_future();
    (*client)->sync_weights(0, plan, {std::to_string(version), folder, "", {}},
                            [&done](status st) { done.set_value(std::move(st)); });
    EXPECT_EQ(future.wait_for(120s), std::future_status::ready);
    return future.get();
  };
  const status refused = sync(d2, 2);
  ASSERT_FALSE(refused.ok());
  sender.forget();
  const auto full = (dir.path() / "full-2").string();
  ASSERT_TRUE(l.trainer->current_policy().save(full, "bfloat16").ok());
  const status recovered = sync(full, 2);
  ASSERT_TRUE(recovered.ok()) << recovered.err().message;
  ASSERT_TRUE(sender.reset(l.trainer->current_policy(), 2).ok());
  ASSERT_TRUE(l.trainer->update(l.batch).ok());
  const auto d3 = (dir.path() / "d3").string();
  ASSERT_TRUE(sender.write_delta(l.trainer->current_policy(), 3, d3).ok());
  const status next = sync(d3, 3);
  ASSERT_TRUE(next.ok()) << next.err().message;
  ASSERT_TRUE(sender.commit().ok());
  EXPECT_EQ(s.server->weight_version(), 3);

  policy::turn_request t;
  t.prompt = {40, 41, 42};
  t.sampling.max_tokens = 4;
  std::promise<policy::turn_result> turn;
  auto turned = turn.get_future();
  ASSERT_EQ((*client)->submit(std::move(t),
                              [&turn](policy::turn_result res) { turn.set_value(std::move(res)); }),
            policy::submit_status::accepted);
  ASSERT_EQ(turned.wait_for(60s), std::future_status::ready);
  const auto result = turned.get();
  ASSERT_EQ(result.status, policy::turn_status::ok) << result.message;
  EXPECT_EQ(result.choices[0].weight_version.value_or(""), "3");
}

}  // namespace
}  // namespace leap::actors
