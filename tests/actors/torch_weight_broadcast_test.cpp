// vLLM's nccl weight-transfer engine between the LibTorch learner and the project's server on
// loopback: the learner hosts the c10d group (learner::broadcast_sender), the server (torch
// backend, weight_transfer_backend "nccl") joins it at /init_weight_transfer_engine, receives each
// /update_weights into a staging buffer and swaps it in at /finish_weight_update. On a CPU build
// this runs over gloo; the GPU test runs the same path over NCCL and skips without CUDA.
#include "actors/torch/torch_learner.hpp"
#include "actors/torch/torch_policy_backend.hpp"
#include "actors/torch/torch_weight_transfer.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"
#include "learner/weight_broadcast.hpp"
#include "learner/weight_ipc.hpp"
#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"
#include "policy/server/server.hpp"
#include "policy/wire/wire.hpp"
#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::actors {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::temp_dir;

// Long enough for a loaded 2-core machine; a cut transfer is detected by the closed connection,
// not by this timeout.
constexpr auto transfer_timeout = 120s;

std::string write_model(const std::filesystem::path& dir, std::uint64_t seed) {
  auto config = byte_model_preset("tiny");
  EXPECT_TRUE(config.ok());
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(
      learner::write_safetensors_dir(dir.string(), learner::random_weights(*config, seed)).ok());
  EXPECT_TRUE(learner::write_model_config(dir.string(), *config).ok());
  return dir.string();
}

struct served {
  std::unique_ptr<policy::policy_server> server;
  std::unique_ptr<httplib::Client> http;
};

served serve(const std::string& model_dir, const std::string& device, int port = 0) {
  served s;
  torch_backend_options options;
  options.device = device;
  options.transfer_timeout = transfer_timeout;
  auto backend = make_torch_policy_backend(model_dir, options);
  EXPECT_TRUE(backend.ok()) << backend.err().message;
  if (!backend.ok()) {
    return s;
  }
  policy::server_config sc;
  sc.threads = 8;
  sc.port = port;
  sc.weight_transfer_backend = transfer_backend::nccl;
  auto server = policy::policy_server::start(sc, *backend);
  EXPECT_TRUE(server.ok()) << server.err().message;
  if (!server.ok()) {
    return s;
  }
  s.server = std::move(*server);
  s.http = std::make_unique<httplib::Client>(s.server->host(), s.server->port());
  s.http->set_read_timeout(300s);
  return s;
}

struct reply {
  int status = 0;
  std::string body;
  std::string version;  // x-weight-version
};

reply post(httplib::Client& http, const std::string& path, const json& body) {
  auto r = http.Post(path, body.dump(), "application/json");
  if (!r) {
    return {0, httplib::to_string(r.error()), ""};
  }
  return {r->status, r->body, r->get_header_value("x-weight-version")};
}

json init_info(int port) {
  return json{{"init_info",
               {{"master_address", "127.0.0.1"},
                {"master_port", port},
                {"rank_offset", 1},
                {"world_size", 2}}}};
}

json update_info(const learner::policy& model) {
  policy::nccl_update_info info;
  for (const auto& t : learner::broadcast_layout(model)) {
    info.names.push_back(t.name);
    info.dtype_names.push_back(t.dtype);
    info.shapes.push_back(t.shape);
  }
  return json{{"update_info", policy::render_nccl_update_info(info)}};
}

// The learner's end and the server's /init_weight_transfer_engine, run together as vLLM's trainer
// does (the route returns once the group is formed).
std::unique_ptr<learner::broadcast_sender> rendezvous(served& s, const std::string& device) {
  auto sender = learner::broadcast_sender::listen("127.0.0.1", 0, 2, transfer_timeout);
  EXPECT_TRUE(sender.ok()) << sender.err().message;
  if (!sender.ok()) {
    return nullptr;
  }
  auto init = std::async(std::launch::async, [&, port = (*sender)->port()] {
    return post(*s.http, "/init_weight_transfer_engine", init_info(port));
  });
  const auto connected = (*sender)->connect(device);
  EXPECT_TRUE(connected.ok()) << connected.err().message;
  const reply r = init.get();
  EXPECT_EQ(r.status, 200) << r.body;
  return std::move(*sender);
}

// One greedy completion: the sampled ids, their log-probs and the version that served them.
struct sampled {
  std::vector<std::int32_t> ids;
  std::vector<float> logprobs;
  std::int64_t version = -1;
};

const std::vector<policy::token_id>& prompt() {
  static const std::vector<policy::chat_message> messages{{"user", "write digits that sum to 7"}};
  static const auto p = policy::render_chat(messages);
  return p;
}

sampled complete(httplib::Client& http) {
  const json request{{"prompt", prompt()},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"return_token_ids", true},
                     {"logprobs", 0}};
  const reply r = post(http, "/v1/completions", request);
  EXPECT_EQ(r.status, 200) << r.body;
  sampled out;
  if (r.status != 200) {
    return out;
  }
  const auto body = json::parse(r.body);
  out.ids = body["choices"][0]["token_ids"].get<std::vector<std::int32_t>>();
  out.logprobs = body["choices"][0]["logprobs"]["token_logprobs"].get<std::vector<float>>();
  out.version = body["weight_version"].get<std::int64_t>();
  return out;
}

// Largest |served - model's own log-prob| over the completion.
double gap_to(const learner::policy& model, const sampled& s) {
  std::vector<std::int32_t> ids(prompt().begin(), prompt().end());
  ids.insert(ids.end(), s.ids.begin(), s.ids.end());
  auto scored = model.token_logprobs({ids});
  EXPECT_TRUE(scored.ok()) << scored.err().message;
  if (!scored.ok() || s.ids.empty()) {
    return 1e9;
  }
  double gap = 0;
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    gap = std::max(
        gap, static_cast<double>(std::abs((*scored)[0][prompt().size() + i] - s.logprobs[i])));
  }
  return gap;
}

// A broadcast of the learner's whole model, through the routes as vLLM's trainer drives them.
void broadcast_update(served& s, learner::broadcast_sender& sender, const learner::policy& model,
                      std::int64_t version) {
  ASSERT_EQ(post(*s.http, "/start_weight_update", json::object()).status, 200);
  auto update = std::async(std::launch::async,
                           [&] { return post(*s.http, "/update_weights", update_info(model)); });
  const auto sent = sender.send(model);
  ASSERT_TRUE(sent.ok()) << sent.err().message;
  const reply updated = update.get();
  ASSERT_EQ(updated.status, 200) << updated.body;
  const reply finished =
      post(*s.http, "/finish_weight_update", json{{"weight_version", std::to_string(version)}});
  ASSERT_EQ(finished.status, 200) << finished.body;
  EXPECT_EQ(finished.version, std::to_string(version));
}

void broadcast_serves_the_learners_weights(const std::string& learner_device,
                                           const std::string& server_device) {
  temp_dir dir;
  const auto served_dir = write_model(dir.path() / "served", 21);
  const auto learner_dir = write_model(dir.path() / "learner", 22);
  learner::policy_options po;
  po.device = learner_device;
  auto old_model = learner::policy::load(served_dir, po);
  auto new_model = learner::policy::load(learner_dir, po);
  ASSERT_TRUE(old_model.ok() && new_model.ok());
  auto s = serve(served_dir, server_device);
  ASSERT_TRUE(s.server);
  ASSERT_LT(gap_to(*old_model, complete(*s.http)), 1e-4);

  auto sender = rendezvous(s, learner_device);
  ASSERT_TRUE(sender);
  // Received but not finished: the server still samples from the weights it had.
  ASSERT_EQ(post(*s.http, "/start_weight_update", json::object()).status, 200);
  auto update = std::async(std::launch::async, [&] {
    return post(*s.http, "/update_weights", update_info(*new_model));
  });
  ASSERT_TRUE(sender->send(*new_model).ok());
  ASSERT_EQ(update.get().status, 200);
  const auto staged = complete(*s.http);
  EXPECT_EQ(staged.version, 0);
  EXPECT_LT(gap_to(*old_model, staged), 1e-4);
  ASSERT_EQ(post(*s.http, "/finish_weight_update", json{{"weight_version", "3"}}).status, 200);

  const auto after = complete(*s.http);
  EXPECT_EQ(after.version, 3);
  EXPECT_EQ(s.server->weight_version(), 3);
  EXPECT_LT(gap_to(*new_model, after), 1e-4);
  EXPECT_GT(gap_to(*old_model, after), 1e-3);  // the weights really changed

  // The group stays: the next update needs no new rendezvous.
  broadcast_update(s, *sender, *old_model, 4);
  const auto back = complete(*s.http);
  EXPECT_EQ(back.version, 4);
  EXPECT_LT(gap_to(*old_model, back), 1e-4);
}

TEST(TorchWeightBroadcast, GlooBroadcastThroughTheEngineRoutesServesTheLearnersWeights) {
  const auto backends = learner::broadcast_backends();
  if (std::find(backends.begin(), backends.end(), "gloo") == backends.end()) {
    GTEST_SKIP() << "this LibTorch build has no c10d gloo";
  }
  broadcast_serves_the_learners_weights("cpu", "cpu");
}

TEST(TorchWeightBroadcast, NcclBroadcastBetweenTwoGpus) {
  const auto backends = learner::broadcast_backends();
  if (std::find(backends.begin(), backends.end(), "nccl") == backends.end()) {
    GTEST_SKIP() << "this LibTorch build has no c10d NCCL (a CUDA LibTorch with nccl.h)";
  }
  auto config = byte_model_preset("tiny");
  ASSERT_TRUE(config.ok());
  learner::policy_options po;
  po.device = "cuda:1";
  // NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected"): the learner
  // on cuda:0, the server on cuda:1 (a server on the learner's GPU is the ipc backend's case).
  if (!learner::policy::create_random(*config, 1, po).ok()) {
    GTEST_SKIP() << "fewer than 2 GPUs";
  }
  broadcast_serves_the_learners_weights("cuda:0", "cuda:1");
}

TEST(TorchWeightBroadcast, ACutTransferIsDetectedAndTheServedWeightsStay) {
  const auto backends = learner::broadcast_backends();
  if (std::find(backends.begin(), backends.end(), "gloo") == backends.end()) {
    GTEST_SKIP() << "this LibTorch build has no c10d gloo";
  }
  temp_dir dir;
  const auto served_dir = write_model(dir.path() / "served", 21);
  const auto learner_dir = write_model(dir.path() / "learner", 22);
  auto old_model = learner::policy::load(served_dir);
  auto new_model = learner::policy::load(learner_dir);
  ASSERT_TRUE(old_model.ok() && new_model.ok());
  auto s = serve(served_dir, "cpu");
  ASSERT_TRUE(s.server);

  // Before any rendezvous the engine refuses to start.
  const reply early = post(*s.http, "/start_weight_update", json::object());
  EXPECT_EQ(early.status, 400);
  EXPECT_NE(early.body.find("/init_weight_transfer_engine first"), std::string::npos) << early.body;

  auto sender = rendezvous(s, "cpu");
  ASSERT_TRUE(sender);
  ASSERT_EQ(post(*s.http, "/start_weight_update", json::object()).status, 200);
  auto update = std::async(std::launch::async, [&] {
    return post(*s.http, "/update_weights", update_info(*new_model));
  });
  // The learner dies half-way: half the tensors, then its end of the group is gone.
  const auto half = learner::broadcast_layout(*new_model).size() / 2;
  ASSERT_TRUE(sender->send(*new_model, half).ok());
  sender.reset();
  const reply cut = update.get();
  EXPECT_EQ(cut.status, 500) << cut.body;
  EXPECT_NE(cut.body.find("served weights are unchanged"), std::string::npos) << cut.body;
  // The session is over: finishing it is refused, and nothing half-received is served.
  EXPECT_EQ(post(*s.http, "/finish_weight_update", json{{"weight_version", "1"}}).status, 400);
  const auto still = complete(*s.http);
  EXPECT_EQ(still.version, 0);
  EXPECT_LT(gap_to(*old_model, still), 1e-4);

  // The group was dropped with the cut: a retry rendezvouses again and succeeds.
  EXPECT_EQ(post(*s.http, "/update_weights", update_info(*new_model)).status, 400);
  auto again = rendezvous(s, "cpu");
  ASSERT_TRUE(again);
  broadcast_update(s, *again, *new_model, 1);
  const auto after = complete(*s.http);
  EXPECT_EQ(after.version, 1);
  EXPECT_LT(gap_to(*new_model, after), 1e-4);
}

TEST(TorchWeightBroadcast, AnUpdateThatDoesNotFitTheServedModelIsRefusedBeforeReceiving) {
  const auto backends = learner::broadcast_backends();
  if (std::find(backends.begin(), backends.end(), "gloo") == backends.end()) {
    GTEST_SKIP() << "this LibTorch build has no c10d gloo";
  }
  temp_dir dir;
  const auto served_dir = write_model(dir.path() / "served", 21);
  auto s = serve(served_dir, "cpu");
  ASSERT_TRUE(s.server);
  auto sender = rendezvous(s, "cpu");
  ASSERT_TRUE(sender);
  ASSERT_EQ(post(*s.http, "/start_weight_update", json::object()).status, 200);
  const json bad{{"update_info",
                  {{"names", {"model.embed_tokens.weight"}},
                   {"dtype_names", {"float32"}},
                   {"shapes", {{3, 3}}}}}};
  const reply refused = post(*s.http, "/update_weights", bad);
  EXPECT_EQ(refused.status, 500) << refused.body;
  EXPECT_NE(refused.body.find("another shape"), std::string::npos) << refused.body;
  const json packed{{"update_info",
                     {{"names", json::array()},
                      {"dtype_names", json::array()},
                      {"shapes", json::array()},
                      {"packed", true}}}};
  ASSERT_EQ(post(*s.http, "/start_weight_update", json::object()).status, 200);
  EXPECT_NE(post(*s.http, "/update_weights", packed).body.find("packed"), std::string::npos);
  EXPECT_EQ(s.server->weight_version(), 0);
}

// ---- leap run's path: the client's sync state machine driving the routes, the learner's end
// (torch_weight_transfer) alongside its calls ----

bool has_gloo() {
  const auto backends = learner::broadcast_backends();
  return std::find(backends.begin(), backends.end(), "gloo") != backends.end();
}

std::unique_ptr<policy::policy_client> client_of(const policy::policy_server& server) {
  policy::client_config cc;
  cc.flavour = wire_flavour::vllm;
  cc.endpoints.push_back({server.base_url(), 4});
  cc.request_timeout = 60s;
  cc.health.timeout = 10s;
  auto client = policy::policy_client::create(cc);
  EXPECT_TRUE(client.ok()) << client.err().message;
  return client.ok() ? std::move(*client) : nullptr;
}

status sync_now(policy::policy_client& client, const policy::weight_sync_plan& plan,
                policy::weight_sync_request request) {
  std::promise<status> done;
  auto future = done.get_future();
  client.sync_weights(0, plan, std::move(request),
                      [&done](status s) { done.set_value(std::move(s)); });
  if (future.wait_for(2 * transfer_timeout) != std::future_status::ready) {
    return error{"the sync did not finish"};
  }
  return future.get();
}

std::shared_ptr<torch_learner> learner_on(const std::string& model_dir,
                                          const std::filesystem::path& run) {
  torch_learner_options lo;
  lo.model_dir = model_dir;
  lo.checkpoint_dir = (run / "checkpoints").string();
  lo.weights_dir = (run / "weights").string();
  lo.in_memory = true;
  auto created = torch_learner::create(std::move(lo));
  EXPECT_TRUE(created.ok()) << created.err().message;
  return created.ok() ? std::shared_ptr<torch_learner>(std::move(*created)) : nullptr;
}

// The two transfer tests' models: the server starts on one, the learner holds the other, both
// loaded to tell which one the server serves.
struct two_models {
  temp_dir dir;
  std::string served_dir = write_model(dir.path() / "served", 21);
  std::string learner_dir = write_model(dir.path() / "learner", 22);
  result<learner::policy> old_model = learner::policy::load(served_dir);
  result<learner::policy> new_model = learner::policy::load(learner_dir);
};

TEST(TorchWeightTransfer, RunPathFormsTheGroupOnceAndAServerRestartFailsTheNextSyncByName) {
  if (!has_gloo()) {
    GTEST_SKIP() << "this LibTorch build has no c10d gloo";
  }
  two_models m;
  ASSERT_TRUE(m.old_model.ok() && m.new_model.ok());
  auto learner = learner_on(m.learner_dir, m.dir.path() / "run");
  ASSERT_TRUE(learner);
  auto s = serve(m.served_dir, "cpu");
  ASSERT_TRUE(s.server);
  auto client = client_of(*s.server);
  ASSERT_TRUE(client);
  const std::string url = s.server->base_url();
  auto transfer = torch_weight_transfer::open(learner, url, "cpu", transfer_timeout);
  ASSERT_TRUE(transfer.ok()) << transfer.err().message;
  auto info = (*transfer)->update_info();
  ASSERT_TRUE(info.ok()) << info.err().message;

  // The first sync forms the group and sends the learner's weights.
  policy::weight_sync_request request;
  request.version = "0";
  request.companion = (*transfer)->companion();
  const auto first =
      sync_now(*client, policy::vllm_transfer_nccl_plan((*transfer)->init_info(), *info), request);
  ASSERT_TRUE(first.ok()) << first.err().message;
  auto served_now = complete(*s.http);
  EXPECT_LT(gap_to(*m.new_model, served_now), 1e-4);
  EXPECT_GT(gap_to(*m.old_model, served_now), 1e-3);

  // Later syncs reuse the group (no init call).
  const auto step_plan = policy::vllm_transfer_nccl_plan("", *info);
  const auto second = sync_now(*client, step_plan, request);
  ASSERT_TRUE(second.ok()) << second.err().message;
  EXPECT_EQ(s.server->weight_version(), 0);

  // The server restarts on its port, back on its startup weights and without the group: the next
  // sync fails at once, naming the server and the route, and the endpoint takes no turns.
  const int port = s.server->port();
  s.http.reset();
  s.server->stop();
  s.server.reset();
  auto restarted = serve(m.served_dir, "cpu", port);
  ASSERT_TRUE(restarted.server) << "port " << port << " was taken meanwhile";
  const auto third = sync_now(*client, step_plan, request);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.err().message.find(url), std::string::npos) << third.err().message;
  EXPECT_NE(third.err().message.find("/init_weight_transfer_engine first"), std::string::npos)
      << third.err().message;
  EXPECT_FALSE(client->endpoints()[0].admitting);
  EXPECT_LT(gap_to(*m.old_model, complete(*restarted.http)), 1e-4);
}

TEST(TorchWeightTransfer, RunPathTransferCutMidWayLeavesTheServedWeights) {
  if (!has_gloo()) {
    GTEST_SKIP() << "this LibTorch build has no c10d gloo";
  }
  two_models m;
  ASSERT_TRUE(m.old_model.ok() && m.new_model.ok());
  auto s = serve(m.served_dir, "cpu");
  ASSERT_TRUE(s.server);
  auto client = client_of(*s.server);
  ASSERT_TRUE(client);
  auto listened = learner::broadcast_sender::listen("127.0.0.1", 0, 2, transfer_timeout);
  ASSERT_TRUE(listened.ok()) << listened.err().message;
  std::shared_ptr<learner::broadcast_sender> sender = std::move(*listened);
  const auto layout = update_info(*m.new_model)["update_info"];
  const auto half = learner::broadcast_layout(*m.new_model).size() / 2;

  // The learner's end as torch_weight_transfer's, except that its "load" dies half-way.
  std::vector<std::thread> workers;
  policy::weight_sync_request request;
  request.version = "1";
  request.companion = [&](const policy::control_call& call, const policy::weight_sync_request&,
                          const std::function<void(status)>& done) {
    if (call.name == "init") {
      workers.emplace_back([&, done] { done(sender->connect("cpu")); });
    } else if (call.name == "load") {
      workers.emplace_back([&, done] {
        auto sent = sender->send(*m.new_model, half);
        sender->close();
        done(sent);
      });
    } else {
      done(ok_status());
    }
  };
  const json init = init_info(sender->port())["init_info"];
  const auto cut =
      sync_now(*client, policy::vllm_transfer_nccl_plan(init.dump(), layout.dump()), request);
  for (auto& w : workers) {
    w.join();
  }
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.err().message.find("/update_weights"), std::string::npos) << cut.err().message;
  EXPECT_NE(cut.err().message.find("served weights are unchanged"), std::string::npos)
      << cut.err().message;
  EXPECT_FALSE(client->endpoints()[0].admitting);
  // Nothing half-received is served: the startup weights, the startup version.
  EXPECT_EQ(s.server->weight_version(), 0);
  const auto still = complete(*s.http);
  EXPECT_EQ(still.version, 0);
  EXPECT_LT(gap_to(*m.old_model, still), 1e-4);
}

TEST(TorchWeightTransfer, ADiskEngineRefusesAnNcclRendezvousAtOnce) {
  temp_dir dir;
  const auto served_dir = write_model(dir.path() / "served", 21);
  auto backend = make_torch_policy_backend(served_dir, {});
  ASSERT_TRUE(backend.ok()) << backend.err().message;
  policy::server_config sc;
  sc.threads = 4;  // weight_transfer_backend: disk, the default
  auto server = policy::policy_server::start(sc, *backend);
  ASSERT_TRUE(server.ok()) << server.err().message;
  httplib::Client http((*server)->host(), (*server)->port());
  const reply refused = post(http, "/init_weight_transfer_engine", init_info(29500));
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("backend is disk"), std::string::npos) << refused.body;
  EXPECT_EQ(post(http, "/init_weight_transfer_engine", json{{"init_info", json::object()}}).status,
            200);
}

// ---- the ipc engine (a server on the learner's GPU): what it refuses on any machine. The
// transfer itself runs in tests/e2e/train_loop_test.cpp on a GPU. ----

TEST(TorchWeightIpc, TheEngineRefusesARendezvousAndAnUpdateThatDoesNotFitBeforeOpeningAnything) {
  two_models m;
  ASSERT_TRUE(m.old_model.ok() && m.new_model.ok());
  auto backend = make_torch_policy_backend(m.served_dir, {});
  ASSERT_TRUE(backend.ok()) << backend.err().message;
  policy::server_config sc;
  sc.threads = 4;
  sc.weight_transfer_backend = transfer_backend::ipc;
  auto server = policy::policy_server::start(sc, *backend);
  ASSERT_TRUE(server.ok()) << server.err().message;
  httplib::Client http((*server)->host(), (*server)->port());
  http.set_read_timeout(60s);
  // A trainer that expects nccl's rendezvous is told at once.
  const reply rendezvous = post(http, "/init_weight_transfer_engine", init_info(29500));
  EXPECT_EQ(rendezvous.status, 500) << rendezvous.body;
  EXPECT_NE(rendezvous.body.find("the ipc engine takes an empty init_info"), std::string::npos)
      << rendezvous.body;
  ASSERT_EQ(post(http, "/init_weight_transfer_engine", json{{"init_info", json::object()}}).status,
            200);

  // The layout of another model (a parameter this one lacks): refused naming it.
  learner::ipc_update_info info;
  std::uint64_t offset = 0;
  for (const auto& t : learner::broadcast_layout(*m.new_model)) {
    info.tensors.push_back({t.name, t.dtype, t.shape, offset});
    offset += 1 << 20;  // room for any tiny-model tensor, aligned
  }
  info.buffer_bytes = offset;
  info.pid = ::getppid();
  auto renamed = info;
  renamed.tensors[0].name = "model.elsewhere.weight";
  ASSERT_EQ(post(http, "/start_weight_update", json::object()).status, 200);
  const reply refused = post(http, "/update_weights",
                             json{{"update_info", learner::render_ipc_update_info(renamed)}});
  EXPECT_EQ(refused.status, 500) << refused.body;
  EXPECT_NE(refused.body.find("has no parameter 'model.elsewhere.weight'"), std::string::npos)
      << refused.body;
  // A malformed one: refused naming the key.
  ASSERT_EQ(post(http, "/start_weight_update", json::object()).status, 200);
  json bad = learner::render_ipc_update_info(info);
  bad["ipc_handle"] = "AAAA";
  const reply malformed = post(http, "/update_weights", json{{"update_info", bad}});
  EXPECT_EQ(malformed.status, 500) << malformed.body;
  EXPECT_NE(malformed.body.find("'ipc_handle' holds 3 bytes"), std::string::npos) << malformed.body;
  // One that fits, into a model on the CPU: the driver (missing here) or the device is named.
  ASSERT_EQ(post(http, "/start_weight_update", json::object()).status, 200);
  const reply fits =
      post(http, "/update_weights", json{{"update_info", learner::render_ipc_update_info(info)}});
  EXPECT_EQ(fits.status, 500) << fits.body;
  EXPECT_NE(fits.body.find("CUDA IPC needs"), std::string::npos) << fits.body;
  // Nothing was swapped in.
  EXPECT_EQ(post(http, "/finish_weight_update", json{{"weight_version", "1"}}).status, 400);
  EXPECT_EQ((*server)->weight_version(), 0);
  EXPECT_LT(gap_to(*m.old_model, complete(http)), 1e-4);
}

TEST(TorchWeightIpc, WithoutTheDriverTheRunsTrainerEndSaysSoAtOpen) {
  if (learner::cuda_ipc_available().ok()) {
    GTEST_SKIP() << "this machine has the NVIDIA driver";
  }
  two_models m;
  auto learner = learner_on(m.learner_dir, m.dir.path() / "run");
  ASSERT_TRUE(learner);
  auto transfer = torch_weight_transfer::open_ipc(learner);
  ASSERT_FALSE(transfer.ok());
  EXPECT_NE(transfer.err().message.find("policy.weight_sync ipc"), std::string::npos);
  EXPECT_NE(transfer.err().message.find("CUDA IPC needs the NVIDIA driver (libcuda.so.1): "),
            std::string::npos)
      << transfer.err().message;
}

}  // namespace
}  // namespace leap::actors
