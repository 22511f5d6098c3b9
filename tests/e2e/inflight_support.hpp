// What the in-flight weight-update runs share (tests/e2e/inflight_*_test.cpp): a `leap run` whose
// weight sync lands in the middle of a turn (policy.inflight_updates), through one server and one
// way of syncing each. The torch learner trains a tiny model for two steps with generation one
// step ahead (schedule.max_staleness 1). The policy server holds one chosen generation after a few
// tokens (its `hold` fault: `leap serve-policy --faults`, or `leap run --server-faults` for the
// embedded server) until something ends the hold; the only thing that can, short of the hold's own
// limit, is the sync after step 1 pausing the server in abort mode. So whatever the machine's
// load, that turn's first tokens come from version 0 and the rest from version 1, and the store
// must say so (expect_the_sync_inside_one_turn): two weight segments, each token's log-prob its own
// version's, and the learner's staleness cap (learner.offpolicy.max_staleness 0) masking exactly
// the version-0 tokens of step 2. With in-flight updates off the sync drains instead, the hold runs
// out, the turn is sampled by one version and the segment checks fail: LEAP_E2E_INFLIGHT_OFF=1
// runs every such test that way (with a 10 s hold), to see each of them fail.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT  // as Debian's libcpp-httplib is built; see policy/README.md
#endif
#include "e2e_support.hpp"
#include "learner/policy.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <signal.h>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace leap::e2e::inflight {

// Tokens the held turn samples before its hold.
inline constexpr int hold_tokens = 4;

// LEAP_E2E_INFLIGHT_OFF=1: the runs go with policy.inflight_updates false (the tests must fail).
inline bool updates_off() {
  const char* off = std::getenv("LEAP_E2E_INFLIGHT_OFF");
  return off != nullptr && std::string(off) == "1";
}

// The server's fault spec: arrival 0 is the client's endpoint check, 1-4 step 1's turns, 5 step
// 2's first turn, held after its hold_tokens-th token for at most 120 s (the limit only matters
// when nothing pauses the server; 10 s with LEAP_E2E_INFLIGHT_OFF, where nothing does).
inline std::string hold_spec() {
  std::string spec = "script=";
  for (int i = 0; i < 5; ++i) {
    spec += "none:";
  }
  return spec + "hold,hold_tokens=" + std::to_string(hold_tokens) +
         ",hold_ms=" + (updates_off() ? "10000" : "120000");
}

// The server and the sync of one run.
struct run_setup {
  std::string flavour;      // policy.flavour: sglang, vllm or embedded
  std::string endpoint;     // the server's URL; empty for the embedded server
  std::string weight_sync;  // policy.weight_sync: disk or in_memory
};

class run_dir : public scratch_dir {
 public:
  explicit run_dir(const std::string& name) : scratch_dir(name, {"cpp/axpby", "python/two_sum"}) {}
  [[nodiscard]] std::string path(const std::string& name) const { return (root_ / name).string(); }

  // Two steps of both tasks, two rollouts each, one turn of at most 24 tokens, one turn in flight
  // at a time (so the server's arrivals come in the driver's order: step 1's four turns, then
  // step 2's), generation one step ahead of the learner. The embedded server serves the learner's
  // model folder.
  [[nodiscard]] std::string write_config(const run_setup& setup) const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: inflight\n  seed: 3\n  run_dir: " << path("run")
         << "\n  steps: 2\n"
         << "data:\n  train: " << path("suite") << "\n  batch_size: 2\n"
         << "rollout:\n  group_size: 2\n  max_turns: 1\n"
         << "  sampling:\n    max_tokens: 24\n  validation:\n    every: 0\n"
         << "gate:\n  policy: none\n"
         << "reward:\n  kind: static\n  static_rewards: [1.0]\n  failure_reward: -1.0\n"
         << "advantage:\n  kind: none\n"
         << "schedule:\n  mode: streaming\n  max_staleness: 1\n"
         << "learner:\n  kind: torch\n  model_path: " << path("model") << "\n  lr: 0.001\n"
         << "  checkpoint_every: 1\n  offpolicy:\n    max_staleness: 0\n"
         << "policy:\n  flavour: " << setup.flavour << "\n";
    if (setup.endpoint.empty()) {
      yaml << "  model: " << path("model") << "\n";
    } else {
      yaml << "  endpoints: [\"" << setup.endpoint << "\"]\n";
    }
    yaml << "  max_in_flight: 1\n  weight_sync: " << setup.weight_sync
         << "\n  inflight_updates: " << (updates_off() ? "false" : "true") << "\n"
         << "verifier:\n  compile_workers: 2\n  gpu_slots: 0\n";
    const std::filesystem::path file = root_ / "config.yaml";
    std::ofstream(file) << yaml.str();
    return file.string();
  }

  // The tiny model both the learner and the servers start from.
  void write_model() const {
    const auto made =
        run_leap({"init-model", "--preset", "tiny", "--out", path("model"), "--seed", "4"},
                 std::chrono::seconds(60));
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
};

// log pi of each generated id under the model in `dir`, recomputed by the learner.
inline std::vector<float> logprobs_under(const std::string& dir,
                                         const std::vector<std::int32_t>& prompt,
                                         const std::vector<std::int32_t>& generated) {
  auto model = learner::policy::load(dir);
  EXPECT_TRUE(model.ok()) << model.err().message;
  if (!model.ok()) {
    return {};
  }
  std::vector<std::int32_t> ids = prompt;
  ids.insert(ids.end(), generated.begin(), generated.end());
  auto scored = model->token_logprobs({ids});
  EXPECT_TRUE(scored.ok());
  if (!scored.ok()) {
    return {};
  }
  return {(*scored)[0].begin() + static_cast<std::ptrdiff_t>(prompt.size()), (*scored)[0].end()};
}

struct stored_turn {
  std::uint64_t step = 0;
  std::string key;  // task, group and rollout: one turn per rollout here
  std::uint64_t weight_version = 0;
  std::vector<std::pair<std::size_t, std::uint64_t>> segments;  // (first, version)
  std::vector<std::int32_t> input;
  std::vector<std::int32_t> output;
  std::vector<float> logprobs;
};

// Every stored turn of the run, through `leap export`.
inline std::vector<stored_turn> exported_turns(const run_dir& dir) {
  using nlohmann::json;
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
        stored_turn turn;
        turn.step = group.at("step").get<std::uint64_t>();
        turn.key = group.at("task_id").get<std::string>() + "/" +
                   std::to_string(group.at("group_index").get<int>()) + "/" +
                   std::to_string(rollout.at("index").get<int>());
        turn.weight_version = t.at("weight_version").get<std::uint64_t>();
        for (const auto& s : t.at("weight_segments")) {
          turn.segments.emplace_back(s.at("first").get<std::size_t>(),
                                     s.at("version").get<std::uint64_t>());
        }
        turn.input = t.at("input_tokens").get<std::vector<std::int32_t>>();
        turn.output = t.at("output_tokens").get<std::vector<std::int32_t>>();
        turn.logprobs = t.at("output_logprobs").get<std::vector<float>>();
        turns.push_back(std::move(turn));
      }
    }
  }
  return turns;
}

// How many of a turn's output tokens were sampled by a version below `version`.
inline std::size_t tokens_below(const stored_turn& t, std::uint64_t version) {
  std::size_t n = 0;
  for (std::size_t k = 0; k < t.segments.size(); ++k) {
    const std::size_t end = k + 1 < t.segments.size() ? t.segments[k + 1].first : t.output.size();
    if (t.segments[k].second < version) {
      n += end - t.segments[k].first;
    }
  }
  return n;
}

// What the store of a finished run must show: step 2's first turn sampled across step 1's sync.
inline void expect_the_sync_inside_one_turn(const run_dir& dir) {
  // Nothing lost, nothing twice: both steps' four turns (two groups of two), each rollout once.
  const auto turns = exported_turns(dir);
  std::set<std::tuple<std::uint64_t, std::string>> seen;
  int by_step[2] = {0, 0};
  for (const auto& t : turns) {
    ASSERT_LT(t.step, 2U);
    ++by_step[t.step];
    EXPECT_TRUE(seen.emplace(t.step, t.key).second)
        << "stored twice: step " << t.step << " " << t.key;
  }
  EXPECT_EQ(by_step[0], 4);
  EXPECT_EQ(by_step[1], 4);

  // Every turn's segments start at 0 with its starting version, rise strictly in both token and
  // version, and lie within its tokens; exactly one turn spans the sync, in step 2.
  const stored_turn* spanning = nullptr;
  for (const auto& t : turns) {
    ASSERT_FALSE(t.segments.empty());
    EXPECT_EQ(t.segments.front().first, 0U);
    EXPECT_EQ(t.segments.front().second, t.weight_version);
    for (std::size_t k = 1; k < t.segments.size(); ++k) {
      EXPECT_GT(t.segments[k].first, t.segments[k - 1].first);
      EXPECT_GT(t.segments[k].second, t.segments[k - 1].second);
      EXPECT_LT(t.segments[k].first, t.output.size());
    }
    if (t.segments.size() >= 2) {
      EXPECT_EQ(spanning, nullptr) << "more than one turn spans a sync";
      spanning = &t;
    }
  }
  ASSERT_NE(spanning, nullptr) << "no stored turn spans a weight sync";
  EXPECT_EQ(spanning->step, 1U);
  ASSERT_EQ(spanning->segments.size(), 2U);
  EXPECT_EQ(spanning->segments[0], (std::pair<std::size_t, std::uint64_t>{0, 0}));
  EXPECT_EQ(spanning->segments[1], (std::pair<std::size_t, std::uint64_t>{hold_tokens, 1}));
  ASSERT_GT(spanning->output.size(), static_cast<std::size_t>(hold_tokens));

  // Each token's stored log-prob is its own version's: the initial model's before the hold,
  // step 1's checkpoint's after it (and not the initial model's: the weights did change).
  const auto v0 = logprobs_under(dir.path("model"), spanning->input, spanning->output);
  const auto v1 =
      logprobs_under(dir.path("run/checkpoints/step-00000001"), spanning->input, spanning->output);
  ASSERT_EQ(v0.size(), spanning->logprobs.size());
  ASSERT_EQ(v1.size(), spanning->logprobs.size());
  double moved = 0;
  for (std::size_t i = 0; i < v0.size(); ++i) {
    const bool before = i < static_cast<std::size_t>(hold_tokens);
    EXPECT_NEAR(spanning->logprobs[i], before ? v0[i] : v1[i], 2e-4) << "token " << i;
    moved += std::abs(v0[i] - v1[i]);
  }
  EXPECT_GT(moved, 1e-3);

  // The learner saw each token's version: with max_staleness 0 it masked, in each step, exactly
  // the output tokens sampled by a version below the one it trained from (step 2: version 1), so
  // the spanning turn's first tokens and not its others (a turn-level version would mask all).
  const auto replay = run_leap({"replay", dir.path("run")}, std::chrono::seconds(60));
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  const auto learner = read_csv(dir.root() / "run" / "replay" / "learner.csv");
  ASSERT_EQ(learner.size(), 2U);
  for (const auto& row : learner) {
    SCOPED_TRACE("step " + row.at("step"));
    ASSERT_TRUE(row.contains("learner.offpolicy_masked_tokens"));
    // The replay's steps count from 0, as the store's: step s trains from version s.
    const auto step = std::stoull(row.at("step"));
    std::size_t stale = 0;
    for (const auto& t : turns) {
      if (t.step == step) {
        stale += tokens_below(t, step);
      }
    }
    EXPECT_EQ(std::stod(row.at("learner.offpolicy_masked_tokens")), static_cast<double>(stale));
  }
  EXPECT_GE(tokens_below(*spanning, 1), static_cast<std::size_t>(hold_tokens));
}

// The two steps against `leap serve-policy --model` holding the chosen turn, reached over
// `flavour`'s routes with disk sync; then the server's own account: the hold happened once, both
// syncs paused, loaded and resumed by `sync_routes` (the flavour's), and it ends on the last
// step's weights (version 2).
inline void run_against_a_served_model(const run_dir& dir, const std::string& flavour,
                                       const std::vector<std::string>& sync_routes) {
  dir.write_model();
  leap_process server(
      {"serve-policy", "--model", dir.path("model"), "--port", "0", "--faults", hold_spec()});
  const auto match = server.wait_for(std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"),
                                     std::chrono::seconds(60));
  ASSERT_TRUE(match) << server.output();
  const int port = std::stoi((*match)[1]);
  const auto config =
      dir.write_config({flavour, "http://127.0.0.1:" + std::to_string(port), "disk"});
  const auto run = run_leap({"run", config}, std::chrono::seconds(400));
  ASSERT_EQ(run.exit_code, 0) << run.output << "\nserver:\n" << server.output();
  EXPECT_NE(run.output.find("step 2/2"), std::string::npos) << run.output;

  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(10);
  const auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("leap_policy_faults_injected_total{kind=\"hold\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("leap_policy_weight_version 2"), std::string::npos) << metrics->body;
  for (const auto& route : sync_routes) {
    EXPECT_NE(metrics->body.find("leap_policy_requests_total{route=\"" + route + "\"} 2"),
              std::string::npos)
        << route << "\n"
        << metrics->body;
  }
  server.signal(SIGTERM);
  EXPECT_TRUE(server.wait(std::chrono::seconds(20)));
}

}  // namespace leap::e2e::inflight
