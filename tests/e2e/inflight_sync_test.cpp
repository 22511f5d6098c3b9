// A `leap run` whose weight sync lands in the middle of a turn (policy.inflight_updates): the
// torch learner trains a tiny model for two steps with generation one step ahead
// (schedule.max_staleness 1), against `leap serve-policy --model` reached over SGLang's routes.
// The server holds one chosen generation after a few tokens (its `hold` fault) until something
// ends the hold; the only thing that can, short of the hold's own limit, is the sync after step 1
// pausing the server in abort mode. So whatever the machine's load, that turn's first tokens
// come from version 0 and the rest from version 1, and the store must say so: two weight
// segments, each token's log-prob its own version's, and the learner's staleness cap
// (learner.offpolicy.max_staleness 0) masking exactly the version-0 tokens of step 2. With
// inflight updates off the sync drains instead, the hold runs out, the turn is sampled by one
// version and the segment checks fail.
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
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <signal.h>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::leap_process;
using leap::e2e::run_leap;
using nlohmann::json;

// Tokens the held turn samples before its hold.
constexpr int inflight_hold_tokens = 4;

class inflight_dir : public leap::e2e::scratch_dir {
 public:
  inflight_dir() : scratch_dir("inflight", {"cpp/axpby", "python/two_sum"}) {}
  [[nodiscard]] std::string path(const std::string& name) const { return (root_ / name).string(); }

  // Two steps of both tasks, two rollouts each, one turn of at most 24 tokens, one turn in flight
  // at a time (so the server's arrivals come in the driver's order: step 1's four turns, then
  // step 2's), generation one step ahead of the learner.
  [[nodiscard]] std::string write_config(const std::string& url) const {
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
         << "policy:\n  flavour: sglang\n  endpoints: [\"" << url << "\"]\n  max_in_flight: 1\n"
         << "  weight_sync: disk\n  inflight_updates: true\n"
         << "verifier:\n  compile_workers: 2\n  gpu_slots: 0\n";
    const fs::path file = root_ / "config.yaml";
    std::ofstream(file) << yaml.str();
    return file.string();
  }
};

// log pi of each generated id under the model in `dir`, recomputed by the learner.
std::vector<float> inflight_logprobs(const std::string& dir,
                                     const std::vector<std::int32_t>& prompt,
                                     const std::vector<std::int32_t>& generated) {
  auto model = leap::learner::policy::load(dir);
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

struct inflight_turn {
  std::uint64_t step = 0;
  std::string key;  // task, group and rollout: one turn per rollout here
  std::uint64_t weight_version = 0;
  std::vector<std::pair<std::size_t, std::uint64_t>> segments;  // (first, version)
  std::vector<std::int32_t> input;
  std::vector<std::int32_t> output;
  std::vector<float> logprobs;
};

std::vector<inflight_turn> inflight_exported(const inflight_dir& dir) {
  const auto out = dir.path("export.jsonl");
  const auto exported = run_leap({"export", dir.path("run"), "--format", "jsonl", "--out", out},
                                 std::chrono::seconds(60));
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  std::vector<inflight_turn> turns;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    const auto group = json::parse(line);
    for (const auto& rollout : group.at("rollouts")) {
      for (const auto& t : rollout.at("turns")) {
        inflight_turn turn;
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
std::size_t inflight_tokens_below(const inflight_turn& t, std::uint64_t version) {
  std::size_t n = 0;
  for (std::size_t k = 0; k < t.segments.size(); ++k) {
    const std::size_t end = k + 1 < t.segments.size() ? t.segments[k + 1].first : t.output.size();
    if (t.segments[k].second < version) {
      n += end - t.segments[k].first;
    }
  }
  return n;
}

TEST(LeapRunInflight, ASyncLandsInsideATurnAndTheTurnTrainsWithEachTokensVersion) {
  inflight_dir dir;
  const auto made =
      run_leap({"init-model", "--preset", "tiny", "--out", dir.path("model"), "--seed", "4"},
               std::chrono::seconds(60));
  ASSERT_EQ(made.exit_code, 0) << made.output;

  // Arrival 0 is the client's preflight, 1-4 step 1's turns, 5 step 2's first turn: held after
  // its 4th token, for at most 120 s (the limit only matters when nothing pauses the server).
  std::string script = "script=";
  for (int i = 0; i < 5; ++i) {
    script += "none:";
  }
  script += "hold";
  leap_process server(
      {"serve-policy", "--model", dir.path("model"), "--port", "0", "--faults",
       script + ",hold_tokens=" + std::to_string(inflight_hold_tokens) + ",hold_ms=120000"});
  const auto match = server.wait_for(std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"),
                                     std::chrono::seconds(60));
  ASSERT_TRUE(match) << server.output();
  const int port = std::stoi((*match)[1]);
  const auto config = dir.write_config("http://127.0.0.1:" + std::to_string(port));
  const auto run = run_leap({"run", config}, std::chrono::seconds(400));
  ASSERT_EQ(run.exit_code, 0) << run.output << "\nserver:\n" << server.output();
  EXPECT_NE(run.output.find("step 2/2"), std::string::npos) << run.output;

  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(10);
  const auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  // The hold happened (once), and the server ends on the last step's weights.
  EXPECT_NE(metrics->body.find("leap_policy_faults_injected_total{kind=\"hold\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("leap_policy_weight_version 2"), std::string::npos) << metrics->body;
  server.signal(SIGTERM);
  EXPECT_TRUE(server.wait(std::chrono::seconds(20)));

  // Nothing lost, nothing twice: both steps' four turns (two groups of two), each rollout once.
  const auto turns = inflight_exported(dir);
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
  const inflight_turn* spanning = nullptr;
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
  EXPECT_EQ(spanning->segments[1],
            (std::pair<std::size_t, std::uint64_t>{inflight_hold_tokens, 1}));
  ASSERT_GT(spanning->output.size(), static_cast<std::size_t>(inflight_hold_tokens));

  // Each token's stored log-prob is its own version's: the initial model's before the hold,
  // step 1's checkpoint's after it (and not the initial model's: the weights did change).
  const auto v0 = inflight_logprobs(dir.path("model"), spanning->input, spanning->output);
  const auto v1 = inflight_logprobs(dir.path("run/checkpoints/step-00000001"), spanning->input,
                                    spanning->output);
  ASSERT_EQ(v0.size(), spanning->logprobs.size());
  ASSERT_EQ(v1.size(), spanning->logprobs.size());
  double moved = 0;
  for (std::size_t i = 0; i < v0.size(); ++i) {
    const bool before = i < static_cast<std::size_t>(inflight_hold_tokens);
    EXPECT_NEAR(spanning->logprobs[i], before ? v0[i] : v1[i], 2e-4) << "token " << i;
    moved += std::abs(v0[i] - v1[i]);
  }
  EXPECT_GT(moved, 1e-3);

  // The learner saw each token's version: with max_staleness 0 it masked, in each step, exactly
  // the output tokens sampled by a version below the one it trained from (step 2: version 1), so
  // the spanning turn's first tokens and not its others (a turn-level version would mask all).
  const auto replay = run_leap({"replay", dir.path("run")}, std::chrono::seconds(60));
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  const auto learner = leap::e2e::read_csv(dir.root() / "run" / "replay" / "learner.csv");
  ASSERT_EQ(learner.size(), 2U);
  for (const auto& row : learner) {
    SCOPED_TRACE("step " + row.at("step"));
    ASSERT_TRUE(row.contains("learner.offpolicy_masked_tokens"));
    // The replay's steps count from 0, as the store's: step s trains from version s.
    const auto step = std::stoull(row.at("step"));
    std::size_t stale = 0;
    for (const auto& t : turns) {
      if (t.step == step) {
        stale += inflight_tokens_below(t, step);
      }
    }
    EXPECT_EQ(std::stod(row.at("learner.offpolicy_masked_tokens")), static_cast<double>(stale));
  }
  EXPECT_GE(inflight_tokens_below(*spanning, 1), static_cast<std::size_t>(inflight_hold_tokens));
}

}  // namespace
