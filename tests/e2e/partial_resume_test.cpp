// Partial rollouts across a kill -9, end to end (issue 33): the real `leap run` with
// schedule.partial against `leap serve-policy` (scripted backend) on loopback, killed with SIGKILL
// once step 0's record (and with it the group step 0 carried into step 1) is stored and before step
// 1 completes, then run again to its end. The restarted run takes the carried group back into step
// 1's pool, and no group reaches the learner twice (the record learner's batch files name the
// group of every trained sequence).
#include "e2e_support.hpp"
#include "storage/trajectory_store.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

// Named within the anonymous namespace: in a unity build this file shares a unit with others
// whose helpers (read_store, write_config, ...) have the same names.
namespace {
namespace partial_resume {

namespace fs = std::filesystem;
using leap::e2e::clock_type;
using leap::e2e::leap_process;
using leap::e2e::run_leap;
using namespace std::chrono_literals;

// Batch 2, one group over-provisioned and carried; three training tasks (python: quick to verify).
std::string write_config(const fs::path& root, const std::string& url) {
  std::ostringstream yaml;
  yaml << "experiment:\n  name: partial\n  seed: 5\n  run_dir: " << (root / "run").string()
       << "\n  steps: 3\n"
       << "data:\n  train: " << (root / "suite").string()
       << "\n  validation_fraction: 0.25\n  batch_size: 2\n"
       << "rollout:\n  group_size: 2\n  max_turns: 2\n  sampling:\n    seed: 100\n"
       << "  validation:\n    every: 0\n"
       << "schedule:\n  partial:\n    over_provision: 1\n    max_carry: 1\n"
       << "gate:\n  policy: dcp\n  unit: fraction\n  tau_min: 0.25\n  tau_max: 1.0\n"
       << "learner:\n  kind: record\n"
       << "policy:\n  flavour: vllm\n  model: e2e\n  endpoints: [\"" << url << "\"]\n"
       << "  max_in_flight: 8\n"
       << "verifier:\n  compile_workers: 1\n  gpu_slots: 0\n";
  const fs::path path = root / "config.yaml";
  std::ofstream(path) << yaml.str();
  return path.string();
}

std::unique_ptr<leap::trajectory_store> read_store(const fs::path& path) {
  auto store = leap::trajectory_store::open(path, {.read_only = true, .accept_lost_writes = true});
  return store ? std::move(*store) : nullptr;
}

// The last completed step and the groups the decision stored with step 0 carried; nullopt while
// step 0 has no record.
struct store_state {
  std::optional<std::uint64_t> last_step;
  std::size_t carried_by_step_0 = 0;
};

store_state look(const fs::path& store_path) {
  store_state out;
  auto store = read_store(store_path);
  if (!store) {
    return out;
  }
  if (auto last = store->last_completed_step("partial"); last && *last) {
    out.last_step = **last;
  }
  if (auto carry = store->get_carry("partial", 0); carry && *carry) {
    out.carried_by_step_0 = (*carry)->groups.size();
  }
  return out;
}

double step_metric(const fs::path& store_path, std::uint64_t step, const std::string& name) {
  auto store = read_store(store_path);
  if (!store) {
    return -1.0;
  }
  auto record = store->get_step("partial", step);
  if (!record || !*record) {
    return -1.0;
  }
  auto it = (*record)->metrics.find(name);
  return it == (*record)->metrics.end() ? -1.0 : it->second;
}

TEST(PartialRolloutsE2E, KilledWhileAGroupIsCarriedTheRestartTrainsEachGroupOnce) {
  leap::e2e::scratch_dir dir("partial", {"python/flatten", "python/two_sum",
                                         "python/balanced_brackets", "python/binary_search_left"});
  leap_process server({"serve-policy", "--backend", "scripted", "--suite",
                       (dir.root() / "suite").string(), "--port", "0", "--seed", "7",
                       "--model-name", "e2e", "--latency-ttft-ms", "400", "--tokens-per-s", "2000"},
                      "", leap::e2e::stop_with::sigterm);
  const auto listening =
      server.wait_for(std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"), 60s);
  ASSERT_TRUE(listening.has_value()) << server.output();
  const auto config = write_config(dir.root(), "http://127.0.0.1:" + (*listening)[1].str());
  const fs::path store = dir.root() / "run" / "trajectories";

  {
    leap_process run({"run", config});
    const auto deadline = clock_type::now() + 180s;
    store_state seen;
    while (clock_type::now() < deadline) {
      seen = look(store);
      if (seen.last_step) {
        break;
      }
      run.drain(50);
    }
    ASSERT_TRUE(seen.last_step.has_value()) << run.output();
    run.kill9();
    // The kill has to fall while step 1, which took the carried group over, is in progress.
    const auto after = look(store);
    ASSERT_EQ(after.last_step, std::optional<std::uint64_t>{0})
        << "step 1 completed before the kill:\n"
        << run.output();
    ASSERT_EQ(after.carried_by_step_0, 1u) << run.output();
  }

  const auto last = run_leap({"run", config}, 300s);
  ASSERT_EQ(last.exit_code, 0) << last.output;
  EXPECT_NE(last.output.find("resumed the groups carried into this step"), std::string::npos)
      << last.output;
  // Step 1 took the carried group over, as the stopped process had, and started 2 groups.
  EXPECT_EQ(step_metric(store, 1, "partial.carried_in"), 1.0);
  EXPECT_EQ(step_metric(store, 1, "partial.started"), 2.0);

  // Every trained sequence, mapped back to the group as started: (step - group / 3, group % 3).
  // A group trains in one step at most, with all its rollouts there.
  std::map<std::tuple<std::uint64_t, std::uint64_t>, std::set<std::uint64_t>> steps_of_group;
  std::map<std::tuple<std::uint64_t, std::uint64_t>, std::size_t> sequences_of_group;
  for (const auto& entry : fs::directory_iterator(dir.root() / "run" / "batches")) {
    std::istringstream in(leap::e2e::read_file(entry.path()));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      const auto step = j.at("step").get<std::uint64_t>();
      const auto group = j.at("group").get<std::uint64_t>();
      const auto origin = std::tuple{step - group / 3, group % 3};
      steps_of_group[origin].insert(step);
      ++sequences_of_group[origin];
    }
  }
  EXPECT_EQ(steps_of_group.size(), 6u);  // 3 steps of 2 groups
  for (const auto& [origin, steps] : steps_of_group) {
    SCOPED_TRACE("group " + std::to_string(std::get<1>(origin)) + " of step " +
                 std::to_string(std::get<0>(origin)));
    EXPECT_EQ(steps.size(), 1u);
    EXPECT_EQ(sequences_of_group[origin], 2u);  // G = 2, once
  }
}

}  // namespace partial_resume
}  // namespace
