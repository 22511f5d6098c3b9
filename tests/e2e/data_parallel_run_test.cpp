// `leap run` with learner.world_size 2 on cpu: rank 0 trains in leap's process, rank 1 is a
// leap-learner-rank process leap spawns beside itself (gloo on loopback). The run ends, its
// checkpoints load, and no rank outlives it. `leap config check` refuses a devices list of the
// wrong length, naming the key.
#include "e2e_support.hpp"
#include "learner/policy.hpp"
#include "learner/weight_broadcast.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::run_leap;

bool has_gloo() {
  const auto b = leap::learner::broadcast_backends();
  return std::find(b.begin(), b.end(), "gloo") != b.end();
}

class dp_dir : public leap::e2e::scratch_dir {
 public:
  dp_dir() : scratch_dir("dp", {"cpp/axpby", "python/two_sum"}) {}
  [[nodiscard]] std::string path(const std::string& name) const { return (root_ / name).string(); }

  // Two steps of both tasks, two rollouts each, one turn of at most 24 tokens, the embedded
  // server on the learner's model; `learner_extra` adds keys under learner.
  [[nodiscard]] std::string write_config(const std::string& learner_extra) const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: dp\n  seed: 3\n  run_dir: " << path("run") << "\n  steps: 2\n"
         << "data:\n  train: " << path("suite") << "\n  batch_size: 2\n"
         << "rollout:\n  group_size: 2\n  max_turns: 1\n  sampling:\n    max_tokens: 24\n"
         << "  validation:\n    every: 0\n"
         << "gate:\n  policy: none\n"
         // Every rollout of a random model fails; -1 without normalisation moves the weights.
         << "reward:\n  kind: static\n  static_rewards: [1.0]\n  failure_reward: -1.0\n"
         << "advantage:\n  kind: none\n"
         << "learner:\n  kind: torch\n  model_path: " << path("model") << "\n  lr: 0.001\n"
         << "  checkpoint_every: 1\n  init_preset: tiny\n"
         << learner_extra << "policy:\n  flavour: embedded\n  model: " << path("model")
         << "\n  max_in_flight: 4\n"
         << "verifier:\n  compile_workers: 2\n  gpu_slots: 0\n";
    const fs::path file = root_ / "config.yaml";
    std::ofstream(file) << yaml.str();
    return file.string();
  }
};

// Processes of this user whose environment holds `marker` (our own process excluded): what a
// leap run started with that marker in its environment left behind, ranks included (they inherit
// leap's environment).
std::vector<int> processes_with(const std::string& marker) {
  std::vector<int> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) {
      continue;
    }
    const int pid = std::stoi(name);
    if (pid == ::getpid()) {
      continue;
    }
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(marker) != std::string::npos) {
      found.push_back(pid);
    }
  }
  return found;
}

TEST(LeapRunDataParallel, TwoRanksOnCpuRunToTheEndAndLeaveNoRankBehind) {
  if (!has_gloo()) {
    GTEST_SKIP() << "this build has no c10d gloo (Debian: libgloo-dev): no data-parallel learner "
                    "on cpu";
  }
  dp_dir dir;
  const auto config = dir.write_config("  world_size: 2\n");
  const std::string marker = "LEAP_E2E_DP_RUN=" + std::to_string(::getpid()) + "-" + dir.path("");
  ::setenv("LEAP_E2E_DP_RUN", marker.substr(marker.find('=') + 1).c_str(), 1);
  const auto run = run_leap({"run", config}, std::chrono::seconds(300));
  ::unsetenv("LEAP_E2E_DP_RUN");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("step 2/2"), std::string::npos) << run.output;
  EXPECT_TRUE(processes_with(marker).empty()) << "a leap-learner-rank outlived its run";
  for (const char* step : {"step-00000001", "step-00000002"}) {
    const auto checkpoint = dir.root() / "run" / "checkpoints" / step;
    ASSERT_TRUE(fs::exists(checkpoint / "config.json")) << checkpoint;
    auto loaded = leap::learner::policy::load(checkpoint.string());
    EXPECT_TRUE(loaded.ok()) << checkpoint << ": " << loaded.err().message;
  }
}

TEST(LeapRunDataParallel, ConfigCheckRefusesADevicesListOfTheWrongLength) {
  dp_dir dir;
  const auto config = dir.write_config("  world_size: 2\n  devices: [cpu, cpu, cpu]\n");
  const auto out = run_leap({"config", "check", config}, std::chrono::seconds(60));
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("learner.devices: must list one device per rank, learner.world_size "
                            "= 2 entries, got 3"),
            std::string::npos)
      << out.output;
}

}  // namespace
