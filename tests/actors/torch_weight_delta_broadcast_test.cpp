// Delta weight sync over the broadcast path against the project's server (LibTorch backend, bf16,
// the nccl weight-transfer engine over c10d gloo on loopback): a float32 learner takes real
// optimizer steps, prepares each delta (learner/weight_delta.hpp) and broadcasts only the changed
// tensors (learner::broadcast_sender::send_delta) while the server's /update_weights receives them
// with vLLM's sparse_nccl update_info plus the project's base version and checksums. The served
// weights after deltas are bit-identical to the learner's in bf16; a delta on another base version
// is refused (409) and one on other weights fails its checksum, the served weights unchanged and
// the group in step, so the same session then takes the full broadcast.
#include "actors/torch/torch_policy_backend.hpp"
#include "actors/torch/torch_weight_transfer.hpp"
#include "learner/policy.hpp"
#include "learner/trainer.hpp"
#include "learner/weight_broadcast.hpp"
#include "learner/weight_delta.hpp"
#include "policy/server/server.hpp"
#include "policy/wire/wire.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/actors/torch_delta_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
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

constexpr auto delta_bcast_timeout = 120s;

bool delta_bcast_has_gloo() {
  const auto backends = learner::broadcast_backends();
  return std::find(backends.begin(), backends.end(), "gloo") != backends.end();
}

using delta_bcast_server = testing::probed_server;
using delta_bcast_reply = testing::http_reply;
using testing::post_json;

delta_bcast_server serve_bf16(const std::string& model_dir) {
  return testing::serve_probed(model_dir, transfer_backend::nccl, 8, 300s, delta_bcast_timeout);
}

using weight_bytes = std::map<std::string, std::vector<std::uint8_t>>;

weight_bytes bytes_of(const learner::policy& p) {
  weight_bytes out;
  for (const auto& name : p.parameter_names()) {
    out[name] = p.parameter(name)->data;
  }
  return out;
}

// What the server holds now (the probe's load leaves the version as it is).
weight_bytes served_weights(delta_bcast_server& s) {
  learner::policy_options o;
  o.dtype = "bfloat16";
  auto copy = learner::policy::load(s.model_dir, o);
  EXPECT_TRUE(copy.ok());
  s.seen->copy = std::make_unique<learner::policy>(std::move(*copy));
  const auto version = s.server->weight_version();
  const auto r = post_json(*s.http, "/update_weights_from_disk",
                           {{"model_path", std::string(in_memory_weights)},
                            {"weight_version", std::to_string(version)}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.server->weight_version(), version);
  return bytes_of(*s.seen->copy);
}

// The learner's weights as the server holds them: rounded to bf16.
weight_bytes learner_in_bf16(const learner::policy& p, const std::filesystem::path& dir) {
  EXPECT_TRUE(p.save(dir.string(), "bfloat16").ok());
  learner::policy_options o;
  o.dtype = "bfloat16";
  auto loaded = learner::policy::load(dir.string(), o);
  EXPECT_TRUE(loaded.ok());
  return loaded.ok() ? bytes_of(*loaded) : weight_bytes{};
}

// The learner's end of the group, formed with the server's /init_weight_transfer_engine.
std::unique_ptr<learner::broadcast_sender> join_server(delta_bcast_server& s) {
  auto sender = learner::broadcast_sender::listen("127.0.0.1", 0, 2, delta_bcast_timeout);
  EXPECT_TRUE(sender.ok()) << sender.err().message;
  if (!sender.ok()) {
    return nullptr;
  }
  const json init{{"init_info",
                   {{"master_address", "127.0.0.1"},
                    {"master_port", (*sender)->port()},
                    {"rank_offset", 1},
                    {"world_size", 2}}}};
  auto joined = std::async(
      std::launch::async, [&] { return post_json(*s.http, "/init_weight_transfer_engine", init); });
  const auto connected = (*sender)->connect("cpu");
  EXPECT_TRUE(connected.ok()) << connected.err().message;
  EXPECT_EQ(joined.get().status, 200);
  return std::move(*sender);
}

// /update_weights with `update_info` while the learner broadcasts (`send`), as vLLM's trainer
// drives it.
template <typename Send>
delta_bcast_reply update_while(delta_bcast_server& s, const json& update_info, Send send) {
  auto update = std::async(std::launch::async, [&] {
    return post_json(*s.http, "/update_weights", {{"update_info", update_info}});
  });
  const status sent = send();
  EXPECT_TRUE(sent.ok()) << sent.err().message;
  return update.get();
}

json full_info(const learner::policy& p) {
  policy::nccl_update_info info;
  for (const auto& t : learner::broadcast_layout(p)) {
    info.names.push_back(t.name);
    info.dtype_names.push_back(t.dtype);
    info.shapes.push_back(t.shape);
  }
  return policy::render_nccl_update_info(info);
}

json render_delta_update_info(const learner::weight_delta_layout& layout) {
  return policy::render_nccl_update_info(delta_update_info(layout));
}

delta_bcast_reply finish(delta_bcast_server& s, std::int64_t version) {
  return post_json(*s.http, "/finish_weight_update", {{"weight_version", std::to_string(version)}});
}

TEST(TorchWeightDeltaBroadcast, DeltasLandAndTheServedWeightsEqualTheLearnersInBf16) {
  if (!delta_bcast_has_gloo()) {
    GTEST_SKIP() << "this LibTorch build has no c10d gloo";
  }
  temp_dir dir;
  auto l = testing::make_delta_learner(dir);
  auto s = serve_bf16(l.initial);
  ASSERT_TRUE(s.server);
  auto sender = join_server(s);
  ASSERT_TRUE(sender);
  learner::weight_delta_sender deltas("bfloat16");
  ASSERT_TRUE(deltas.reset(l.trainer->current_policy(), 0).ok());
  for (std::int64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(l.trainer->update(l.batch).ok());
    auto prepared = deltas.prepare_delta(l.trainer->current_policy(), v);
    ASSERT_TRUE(prepared.ok()) << prepared.err().message;
    EXPECT_GT(prepared->stats.changed_elements, 0);
    EXPECT_LT(prepared->stats.bytes, prepared->stats.full_bytes);
    EXPECT_EQ(prepared->layout.base_version, v - 1);
    ASSERT_EQ(post_json(*s.http, "/start_weight_update", json::object()).status, 200);
    const auto r = update_while(s, render_delta_update_info(prepared->layout),
                                [&] { return sender->send_delta(*prepared); });
    ASSERT_EQ(r.status, 200) << r.body;
    const auto f = finish(s, v);
    ASSERT_EQ(f.status, 200) << f.body;
    ASSERT_TRUE(deltas.commit().ok());
  }
  EXPECT_EQ(s.server->weight_version(), 3);
  const auto served = served_weights(s);
  ASSERT_FALSE(served.empty());
  EXPECT_EQ(served, learner_in_bf16(l.trainer->current_policy(), dir.path() / "bf16"));
  // And the served weights did move from the initial ones.
  EXPECT_NE(served,
            learner_in_bf16(*learner::policy::load(l.initial), dir.path() / "initial-bf16"));
}

TEST(TorchWeightDeltaBroadcast, AServerOffTheBaseIsRefusedAndTheFullBroadcastFollowsInTheSession) {
  if (!delta_bcast_has_gloo()) {
    GTEST_SKIP() << "this LibTorch build has no c10d gloo";
  }
  temp_dir dir;
  auto l = testing::make_delta_learner(dir);
  auto s = serve_bf16(l.initial);
  ASSERT_TRUE(s.server);
  auto sender = join_server(s);
  ASSERT_TRUE(sender);
  learner::weight_delta_sender deltas("bfloat16");
  ASSERT_TRUE(deltas.reset(l.trainer->current_policy(), 0).ok());
  ASSERT_TRUE(l.trainer->update(l.batch).ok());
  ASSERT_TRUE(deltas.prepare_delta(l.trainer->current_policy(), 1).ok());
  ASSERT_TRUE(deltas.commit().ok());  // as if the server took version 1; it missed it
  ASSERT_TRUE(l.trainer->update(l.batch).ok());
  auto d2 = deltas.prepare_delta(l.trainer->current_policy(), 2);
  ASSERT_TRUE(d2.ok()) << d2.err().message;
  const auto before = served_weights(s);

  // Version 0 served, the delta's base is 1: refused by version once it was received.
  ASSERT_EQ(post_json(*s.http, "/start_weight_update", json::object()).status, 200);
  const auto stale = update_while(s, render_delta_update_info(d2->layout),
                                  [&] { return sender->send_delta(*d2); });
  EXPECT_EQ(stale.status, 409) << stale.body;
  EXPECT_THAT(stale.body, HasSubstr("applies to weight version 1, this server holds version 0"));
  EXPECT_EQ(s.server->weight_version(), 0);
  EXPECT_EQ(served_weights(s), before);

  // The same session takes the full broadcast over the same group, and ends on the learner's.
  deltas.forget();
  const auto full = update_while(s, full_info(l.trainer->current_policy()),
                                 [&] { return sender->send(l.trainer->current_policy()); });
  ASSERT_EQ(full.status, 200) << full.body;
  ASSERT_EQ(finish(s, 2).status, 200);
  EXPECT_EQ(s.server->weight_version(), 2);
  const auto learner_bf16 = learner_in_bf16(l.trainer->current_policy(), dir.path() / "bf16-2");
  EXPECT_EQ(served_weights(s), learner_bf16);

  // A server that claims the base version but holds other weights: the checksums catch it.
  ASSERT_TRUE(deltas.reset(l.trainer->current_policy(), 2).ok());
  ASSERT_EQ(post_json(*s.http, "/update_weights_from_disk",
                      {{"model_path", l.initial}, {"weight_version", "2"}})
                .status,
            200);  // version 2, the initial weights
  const auto initial = served_weights(s);
  ASSERT_TRUE(l.trainer->update(l.batch).ok());
  auto d3 = deltas.prepare_delta(l.trainer->current_policy(), 3);
  ASSERT_TRUE(d3.ok());
  ASSERT_EQ(post_json(*s.http, "/start_weight_update", json::object()).status, 200);
  const auto bad = update_while(s, render_delta_update_info(d3->layout),
                                [&] { return sender->send_delta(*d3); });
  EXPECT_EQ(bad.status, 500) << bad.body;
  EXPECT_THAT(bad.body, HasSubstr("checksum"));
  EXPECT_EQ(s.server->weight_version(), 2);
  EXPECT_EQ(served_weights(s), initial);
  deltas.forget();
  const auto again = update_while(s, full_info(l.trainer->current_policy()),
                                  [&] { return sender->send(l.trainer->current_policy()); });
  ASSERT_EQ(again.status, 200) << again.body;
  ASSERT_EQ(finish(s, 3).status, 200);
  EXPECT_EQ(served_weights(s), learner_in_bf16(l.trainer->current_policy(), dir.path() / "bf16-3"));
}

}  // namespace
}  // namespace leap::actors
