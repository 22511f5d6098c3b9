// The closed training loop with the real binary: `leap init-model` writes a tiny random byte-level
// model, `leap serve-policy --model` serves it (token ids and log-probs that are the model's own,
// a weight update that reloads), and `leap run` with learner.kind torch trains it for two steps
// while the generator's weight sync reloads each step's weights on the policy server, embedded or
// a separate process reached over SGLang's routes. The tiny model fails every task; that is fine:
// the loop, not the skill, is under test. Every wait is bounded.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT  // as Debian's libcpp-httplib is built; see policy/README.md
#endif
#include "e2e_support.hpp"
#include "learner/policy.hpp"
#include "learner/weight_broadcast.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using leap::e2e::leap_process;
using leap::e2e::run_leap;

// A private folder: a two-task suite copied from the project's, and models written by the binary.
class loop_dir : public leap::e2e::scratch_dir {
 public:
  loop_dir() : scratch_dir("loop", {"cpp/axpby", "python/two_sum"}) {}
  [[nodiscard]] std::string path(const std::string& name) const { return (root_ / name).string(); }

  // Two steps of both tasks, two rollouts each, one turn of at most 24 tokens: a few seconds.
  std::string write_config(const std::string& policy_yaml) const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: loop\n  seed: 3\n  run_dir: " << path("run") << "\n  steps: 2\n"
         << "data:\n  train: " << path("suite") << "\n  batch_size: 2\n"
         << "rollout:\n  group_size: 2\n  max_turns: 1\n"
         << "  sampling:\n    max_tokens: 24\n"
         << "  validation:\n    every: 0\n"
         << "gate:\n  policy: none\n"
         // Every rollout of a random model fails; a failure reward of -1 without normalisation
         // gives every rollout a non-zero advantage, so each step really moves the weights.
         << "reward:\n  kind: static\n  static_rewards: [1.0]\n  failure_reward: -1.0\n"
         << "advantage:\n  kind: none\n"
         << "learner:\n  kind: torch\n  model_path: " << path("model") << "\n  lr: 0.001\n"
         << "  checkpoint_every: 1\n"
         << policy_yaml << "verifier:\n  compile_workers: 2\n  gpu_slots: 0\n";
    const fs::path file = root_ / "config.yaml";
    std::ofstream(file) << yaml.str();
    return file.string();
  }
};

const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");

void init_model(const std::string& out, int seed) {
  const auto made = run_leap(
      {"init-model", "--preset", "tiny", "--out", out, "--seed", std::to_string(seed)},
      std::chrono::seconds(60));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  ASSERT_NE(made.output.find("wrote a random tiny byte-level model"), std::string::npos)
      << made.output;
}

// log pi of each generated id under the model in `dir`, recomputed by the learner.
std::vector<float> recomputed(const std::string& dir, const std::vector<std::int32_t>& prompt,
                              const std::vector<std::int32_t>& generated) {
  auto model = leap::learner::policy::load(dir);
  EXPECT_TRUE(model.ok()) << model.err().message;
  if (!model.ok()) return {};
  std::vector<std::int32_t> ids = prompt;
  ids.insert(ids.end(), generated.begin(), generated.end());
  auto scored = model->token_logprobs({ids});
  EXPECT_TRUE(scored.ok());
  if (!scored.ok()) return {};
  return {(*scored)[0].begin() + static_cast<std::ptrdiff_t>(prompt.size()), (*scored)[0].end()};
}

// Every stored turn of a run, as (step, weight_version, input ids, output ids, output log-probs).
struct stored_turn {
  std::uint64_t step = 0;
  std::uint64_t weight_version = 0;
  std::vector<std::int32_t> input;
  std::vector<std::int32_t> output;
  std::vector<float> logprobs;
};
std::vector<stored_turn> exported_turns(const loop_dir& dir) {
  const auto out = dir.path("export.jsonl");
  const auto exported = run_leap({"export", dir.path("run"), "--format", "jsonl", "--out", out},
                                 std::chrono::seconds(60));
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  std::vector<stored_turn> turns;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    const auto group = json::parse(line);
    for (const auto& rollout : group.at("rollouts")) {
      for (const auto& t : rollout.at("turns")) {
        turns.push_back({group.at("step").get<std::uint64_t>(),
                         t.at("weight_version").get<std::uint64_t>(),
                         t.at("input_tokens").get<std::vector<std::int32_t>>(),
                         t.at("output_tokens").get<std::vector<std::int32_t>>(),
                         t.at("output_logprobs").get<std::vector<float>>()});
      }
    }
  }
  return turns;
}

// The checks both loop tests share: two step lines, checkpoints of both steps, step 2's turns
// sampled from step 1's weights (their stored log-probs are those of checkpoint 1, not of the
// initial model).
void expect_a_closed_loop(const loop_dir& dir, const std::string& output) {
  EXPECT_NE(output.find("step 2/2"), std::string::npos) << output;
  EXPECT_TRUE(fs::exists(dir.root() / "run" / "checkpoints" / "step-00000001" / "config.json"));
  EXPECT_TRUE(fs::exists(dir.root() / "run" / "checkpoints" / "step-00000002" / "config.json"));
  const auto turns = exported_turns(dir);
  int by_step[2] = {0, 0};
  int compared = 0;  // turns whose log-probs were recomputed (a turn may be empty)
  for (const auto& t : turns) {
    ASSERT_LT(t.step, 2U);
    ++by_step[t.step];
    EXPECT_EQ(t.weight_version, t.step) << "a turn of step " << t.step + 1;
    if (t.output.empty()) continue;
    ++compared;
    // The log-probs stored with the turn are the serving model's: recompute them under the
    // weights of that version. Sequences here are all prompt (first turn): input is the prompt.
    const auto expected = recomputed(
        t.step == 0 ? dir.path("model") : dir.path("run/checkpoints/step-00000001"), t.input,
        t.output);
    ASSERT_EQ(expected.size(), t.logprobs.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(t.logprobs[i], expected[i], 2e-4) << "step " << t.step + 1 << " token " << i;
    }
    if (t.step == 1) {
      // ... and not the initial model's: the server did reload.
      const auto initial = recomputed(dir.path("model"), t.input, t.output);
      double diff = 0;
      for (std::size_t i = 0; i < initial.size(); ++i) diff += std::abs(initial[i] - expected[i]);
      EXPECT_GT(diff, 1e-3);
    }
  }
  EXPECT_EQ(by_step[0], 4);
  EXPECT_EQ(by_step[1], 4);
  EXPECT_GT(compared, 0);
}

TEST(ServePolicyModel, ServesTheModelsOwnLogprobsAndReloadsWeights) {
  loop_dir dir;
  init_model(dir.path("a"), 1);
  init_model(dir.path("b"), 2);
  leap_process server({"serve-policy", "--model", dir.path("a"), "--port", "0"});
  const auto match = server.wait_for(listening, std::chrono::seconds(60));
  ASSERT_TRUE(match) << server.output();
  EXPECT_NE(server.output().find("torch backend"), std::string::npos) << server.output();
  httplib::Client http("127.0.0.1", std::stoi((*match)[1]));
  http.set_connection_timeout(10);
  http.set_read_timeout(60);

  const auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "a");

  const json messages = json::array({{{"role", "user"}, {"content", "write digits summing to 7"}}});
  const auto tokenized = http.Post("/tokenize", json{{"messages", messages}}.dump(), "application/json");
  ASSERT_TRUE(tokenized);
  ASSERT_EQ(tokenized->status, 200) << tokenized->body;
  const auto prompt = json::parse(tokenized->body)["tokens"].get<std::vector<std::int32_t>>();
  const std::string request = json{{"model", "a"},
                                   {"prompt", prompt},
                                   {"max_tokens", 24},
                                   {"seed", 3},
                                   {"return_token_ids", true},
                                   {"logprobs", 0}}
                                  .dump();
  auto complete = [&](std::int64_t version, const std::string& model_dir) {
    const auto r = http.Post("/v1/completions", request, "application/json");
    EXPECT_TRUE(r);
    if (!r) return std::vector<float>{};
    EXPECT_EQ(r->status, 200) << r->body;
    const auto body = json::parse(r->body);
    EXPECT_EQ(body["weight_version"], version);
    const auto& choice = body["choices"][0];
    const auto ids = choice["token_ids"].get<std::vector<std::int32_t>>();
    const auto logprobs = choice["logprobs"]["token_logprobs"].get<std::vector<float>>();
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(ids.size(), logprobs.size());
    const auto expected = recomputed(model_dir, prompt, ids);
    EXPECT_EQ(expected.size(), logprobs.size());
    for (std::size_t i = 0; i < std::min(expected.size(), logprobs.size()); ++i) {
      EXPECT_NEAR(logprobs[i], expected[i], 2e-4) << "token " << i;
    }
    return logprobs;
  };
  const auto before = complete(0, dir.path("a"));

  // The weight-update route reloads from the folder it names (SGLang's, as the client's weight
  // sync drives it) and every later response reports the new version.
  const auto updated =
      http.Post("/update_weights_from_disk",
                json{{"model_path", dir.path("b")}, {"weight_version", "7"}}.dump(),
                "application/json");
  ASSERT_TRUE(updated);
  ASSERT_EQ(updated->status, 200) << updated->body;
  EXPECT_EQ(json::parse(updated->body)["success"], true);
  const auto after = complete(7, dir.path("b"));
  EXPECT_NE(before, after);
  const auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("leap_policy_weight_version 7"), std::string::npos)
      << metrics->body;

  // A folder that is no model: refused, the served weights and version unchanged.
  const auto bad = http.Post("/update_weights_from_disk",
                             json{{"model_path", dir.path("missing")}, {"weight_version", "8"}}.dump(),
                             "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("missing"), std::string::npos) << bad->body;
  complete(7, dir.path("b"));

  server.signal(SIGTERM);
  const auto code = server.wait(std::chrono::seconds(20));
  ASSERT_TRUE(code) << server.output();
  EXPECT_EQ(*code, 0) << server.output();
}

TEST(ServePolicyModel, RefusesWhatItCannotServe) {
  loop_dir dir;
  const auto missing = run_leap({"serve-policy", "--model", dir.path("none"), "--port", "0"},
                                std::chrono::seconds(30));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("leap serve-policy: error: --model: cannot open"),
            std::string::npos)
      << missing.output;
  const auto both = run_leap(
      {"serve-policy", "--model", dir.path("none"), "--suite", dir.path("suite"), "--port", "0"},
      std::chrono::seconds(30));
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("--suite is for the scripted backend"), std::string::npos)
      << both.output;
  init_model(dir.path("m"), 1);
  const auto again = run_leap({"init-model", "--out", dir.path("m")}, std::chrono::seconds(30));
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("already holds a model"), std::string::npos) << again.output;
}

TEST(LeapRunTorch, EmbeddedServerReloadsEachStepsWeights) {
  loop_dir dir;
  init_model(dir.path("model"), 4);
  const auto config = dir.write_config("policy:\n  flavour: embedded\n  model: " +
                                       dir.path("model") + "\n  max_in_flight: 4\n");
  const auto run = run_leap({"run", config}, std::chrono::seconds(300));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_a_closed_loop(dir, run.output);
}

// `leap run` against `leap serve-policy --model` reached as `flavour`, to a closed loop; the
// server's /metrics text at the end (empty after a failure, which is reported).
std::string run_against_a_separate_server(const std::string& flavour, int seed) {
  loop_dir dir;
  init_model(dir.path("model"), seed);
  leap_process server({"serve-policy", "--model", dir.path("model"), "--port", "0"});
  const auto match = server.wait_for(listening, std::chrono::seconds(60));
  if (!match) {
    ADD_FAILURE() << server.output();
    return "";
  }
  const std::string url = "http://127.0.0.1:" + std::string((*match)[1]);
  const auto config = dir.write_config("policy:\n  flavour: " + flavour + "\n  endpoints: [\"" +
                                       url + "\"]\n  max_in_flight: 4\n");
  const auto run = run_leap({"run", config}, std::chrono::seconds(300));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  if (run.exit_code != 0) return "";
  expect_a_closed_loop(dir, run.output);
  httplib::Client http("127.0.0.1", std::stoi((*match)[1]));
  http.set_read_timeout(10);
  const auto metrics = http.Get("/metrics");
  EXPECT_TRUE(metrics);
  server.signal(SIGTERM);
  EXPECT_TRUE(server.wait(std::chrono::seconds(20)));
  return metrics ? metrics->body : "";
}

TEST(LeapRunTorch, SeparateServerReloadsOverSglangRoutes) {
  const std::string metrics = run_against_a_separate_server("sglang", 5);
  // The server itself now serves the weights of the last step.
  EXPECT_NE(metrics.find("leap_policy_weight_version 2"), std::string::npos) << metrics;
}

TEST(LeapRunTorch, SeparateServerReloadsOverVllmRoutes) {
  // vLLM's full-weight reload: /collective_rpc reload_weights with the step's folder.
  const std::string metrics = run_against_a_separate_server("vllm", 6);
  EXPECT_NE(metrics.find("leap_policy_requests_total{route=\"/collective_rpc\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("leap_policy_weight_version 2"), std::string::npos) << metrics;
}

// The server's own log-probs of a fixed continuation, at the version it must report (its
// /v1/completions with echo-free scoring: it samples, then the learner recomputes the same ids).
void expect_served_weights(httplib::Client& http, const std::string& model, std::int64_t version,
                           const std::string& weights_dir) {
  const std::vector<std::int32_t> prompt = {60, 61, 62, 63, 64, 65, 66, 67};
  const auto r = http.Post("/v1/completions",
                           json{{"model", model},
                                {"prompt", prompt},
                                {"max_tokens", 12},
                                {"seed", 5},
                                {"return_token_ids", true},
                                {"logprobs", 0}}
                               .dump(),
                           "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto body = json::parse(r->body);
  EXPECT_EQ(body["weight_version"], version);
  const auto& choice = body["choices"][0];
  const auto ids = choice["token_ids"].get<std::vector<std::int32_t>>();
  const auto logprobs = choice["logprobs"]["token_logprobs"].get<std::vector<float>>();
  ASSERT_FALSE(ids.empty());
  const auto expected = recomputed(weights_dir, prompt, ids);
  ASSERT_EQ(expected.size(), logprobs.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(logprobs[i], expected[i], 2e-4) << "token " << i;
  }
}

// policy.weight_sync nccl against `leap serve-policy --model` with vLLM's nccl weight-transfer
// engine (gloo on this CPU build): the server joins the learner's group once, every step's weights
// arrive by broadcast between /start_weight_update and /finish_weight_update (no step folder is
// written), the step-2 turns are sampled from step 1's weights, and at the end the server serves
// exactly the final checkpoint's weights under version 2.
TEST(LeapRunTorch, SeparateServerTakesEachStepByNcclBroadcast) {
  const auto backends = leap::learner::broadcast_backends();
  if (backends.empty()) GTEST_SKIP() << "this LibTorch has neither gloo nor NCCL";
  loop_dir dir;
  init_model(dir.path("model"), 7);
  leap_process server({"serve-policy", "--model", dir.path("model"), "--port", "0",
                       "--weight-transfer-config", R"({"backend": "nccl"})"});
  const auto match = server.wait_for(listening, std::chrono::seconds(60));
  ASSERT_TRUE(match) << server.output();
  const std::string url = "http://127.0.0.1:" + std::string((*match)[1]);
  const auto config = dir.write_config("policy:\n  flavour: vllm\n  endpoints: [\"" + url +
                                       "\"]\n  max_in_flight: 4\n  weight_sync: nccl\n");
  const auto run = run_leap({"run", config}, std::chrono::seconds(300));
  ASSERT_EQ(run.exit_code, 0) << run.output << "\nserver:\n" << server.output();
  expect_a_closed_loop(dir, run.output);
  // No folder is written for the sync (checkpoints are, for resume).
  EXPECT_TRUE(!fs::exists(dir.root() / "run" / "weights") ||
              fs::is_empty(dir.root() / "run" / "weights"));

  httplib::Client http("127.0.0.1", std::stoi((*match)[1]));
  http.set_read_timeout(60);
  expect_served_weights(http, "model", 2, dir.path("run/checkpoints/step-00000002"));
  const auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  // One rendezvous; one transfer at the start (the learner's weights, version 0) and one per step.
  EXPECT_NE(metrics->body.find("leap_policy_requests_total{route=\"/init_weight_transfer_engine\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("leap_policy_requests_total{route=\"/update_weights\"} 3"),
            std::string::npos)
      << metrics->body;
  server.signal(SIGTERM);
  EXPECT_TRUE(server.wait(std::chrono::seconds(20)));
}

}  // namespace
