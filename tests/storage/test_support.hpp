// Shared by the storage tests: a scratch folder that removes itself, and groups with every field
// set.
#pragma once

#include "orchestrator/trajectory.hpp"
#include "storage/trajectory_store.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

namespace leap::test {

// A fresh folder under the system's temp folder, removed (with its content) on destruction.
class scratch_dir {
 public:
  scratch_dir() {
    auto pattern = (std::filesystem::temp_directory_path() / "leap-storage-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern << " failed";
    }
    path_ = pattern;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const {
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

// A deterministic group whose content depends on all its arguments, so that a wrong or mixed-up
// record never compares equal to the expected one. `turns_per_rollout` turns, the last passing
// for even rollouts.
inline group_record make_group(const std::string& run, std::uint64_t step, std::uint32_t index,
                               split_kind split = split_kind::train, const std::string& task = "",
                               int rollouts = 4, int turns_per_rollout = 2) {
  group_record g;
  g.run_id = run;
  g.step = step;
  g.split = split;
  g.group_index = index;
  g.task_id = task.empty() ? "task-" + std::to_string((step * 31 + index) % 7) : task;
  g.max_turns = turns_per_rollout;
  g.gate = gate_decision::open;
  g.n_fail = rollouts / 2;
  g.thresholds = {1, rollouts};
  g.started_unix_ms = static_cast<std::int64_t>(1'700'000'000'000 + step * 1000 + index);
  g.gated_unix_ms = g.started_unix_ms + 10;
  g.finished_unix_ms = g.started_unix_ms + 20;
  const auto seed = static_cast<token_id>(step * 1000 + std::uint64_t{index} * 10);
  for (int r = 0; r < rollouts; ++r) {
    rollout_record ro;
    ro.index = static_cast<std::uint32_t>(r);
    for (int t = 0; t < turns_per_rollout; ++t) {
      turn_record turn;
      for (int k = 0; k < 16; ++k) {
        turn.input_tokens.push_back(seed + r * 100 + t * 10 + k);
      }
      for (int k = 0; k < 24; ++k) {
        turn.output_tokens.push_back(seed + 50'000 + r * 100 + t * 10 + k);
        turn.output_logprobs.push_back(-0.01F * static_cast<float>(k + r + t));
      }
      const bool last = t + 1 == turns_per_rollout;
      turn.passed = last && r % 2 == 0;
      turn.verdict = turn.passed ? verdict_category::pass : verdict_category::wrong_answer;
      turn.text = "answer of run " + run + " step " + std::to_string(step) + " group " +
                  std::to_string(index) + " rollout " + std::to_string(r) + " turn " +
                  std::to_string(t);
      turn.feedback = turn.passed ? "" : "mismatch at element 3, \"expected\" 1.0\ngot 2.0";
      turn.code_hash = "h" + std::to_string(seed + r + t);
      turn.timings = {100.0 + r, 20.0 + t, 5.5, 1.0, 2.0, 3.0};
      turn.weight_version = step;
      turn.weight_segments = {{0, step}};  // as the generator pool records a turn
      turn.endpoint = "http://127.0.0.1:8000";
      ro.turns.push_back(std::move(turn));
    }
    ro.outcome = outcome_from_turns(ro);
    ro.rank = ro.outcome.passed() ? 1 : 0;
    ro.reward = ro.outcome.passed() ? 1.0 : -1.0;
    ro.advantage = ro.reward * 0.5;
    g.rollouts.push_back(std::move(ro));
  }
  return g;
}

// The store at `path`, opened; a test failure (and null) when it does not open.
inline std::unique_ptr<trajectory_store> open_ok(const std::filesystem::path& path,
                                                 store_options options = {}) {
  auto store = trajectory_store::open(path, options);
  if (!store.ok()) {
    ADD_FAILURE() << store.err().message;
    return nullptr;
  }
  return std::move(store).value();
}

}  // namespace leap::test
