// A group as the experiment driver counts it: the key that names a group of a run, the wall-clock
// activities of its turns, and the compact report of a finished group (no tokens, no text) that
// progress, metrics and step-time attribution read. Plain structs; their CAF inspectors live in
// actors/messages.hpp, so that this module stays free of CAF.
#pragma once

#include "common/log.hpp"
#include "orchestrator/trajectory.hpp"
#include "orchestrator/vocabulary.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace leap {

// Identifies one group of a run: its step, split and index within them.
struct group_key {
  std::uint64_t step = 0;
  split_kind split = split_kind::train;
  std::uint32_t group = 0;

  friend bool operator==(const group_key&, const group_key&) = default;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads a defaulted operator<=> (its 0).
  friend auto operator<=>(const group_key&, const group_key&) = default;
};

// "step 13 | train group 5": the group named in an error message. Steps are shown 1-based, as in
// the progress lines; groups by their 0-based index. Pure function.
[[nodiscard]] std::string to_string(const group_key& key);

// The log ids of the group (`rollout`: of one of its rollouts, -1 for none): its step (1-based)
// and group index; the split is not an id, a line about a validation group says so in its text.
// Pure function.
[[nodiscard]] log::ids log_ids(const group_key& key, std::int64_t rollout = -1);

// The request id of one turn: "<run>/<step>/<split>/<group>/<rollout>/<turn>" (step and turn
// 0-based), what the generator and the verifier (local or a remote node) know a turn by. Pure.
[[nodiscard]] std::string turn_request_id(const std::string& run_id, const group_key& key,
                                          std::uint32_t rollout, int turn);

// The log ids of the turn a request id names (turn_request_id's form): run, step (1-based), group
// and rollout; no ids at all when `request_id` is not of that form (a client's own id). The run id
// may itself hold '/': the fields are taken from the right. Pure function.
[[nodiscard]] log::ids log_ids_of_request(std::string_view request_id);

// Wall-clock interval of one stage of one turn (or of the learner), in milliseconds on the
// process's steady clock (actors::clock_ms()).
enum class activity_kind : std::uint8_t { generation, compile, run, learner };

struct activity {
  activity_kind kind = activity_kind::generation;
  double start_ms = 0.0;
  double end_ms = 0.0;

  friend bool operator==(const activity&, const activity&) = default;
};

// A finished group as the driver needs it for progress and metrics (no tokens, no text).
struct group_report {
  group_key key;
  std::string task_id;
  gate_decision gate = gate_decision::closed_no_debug;
  int n_fail = 0;
  bool probe = false;
  std::vector<rollout_outcome> outcomes;  // what training used
  std::vector<rollout_outcome> measured;  // from the turns themselves (a probe's debug turns count)
  std::vector<double> advantages;
  // Per rollout, the speedup of the turn `outcomes` passed at when it was timed; 0 otherwise.
  std::vector<double> speedups;
  std::vector<double> compiled_speedups;  // the same over the reference under torch.compile
  std::uint32_t turns = 0;                // generated turns
  std::uint32_t verifier_jobs = 0;        // turns sent to verification
  std::uint64_t generated_tokens = 0;
  std::vector<activity> activities;  // empty for a group read back from the store

  friend bool operator==(const group_report& a, const group_report& b) {
    auto same = [](const std::vector<rollout_outcome>& x, const std::vector<rollout_outcome>& y) {
      if (x.size() != y.size()) {
        return false;
      }
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (x[i].passed_at_turn != y[i].passed_at_turn ||
            x[i].generated_turns != y[i].generated_turns) {
          return false;
        }
      }
      return true;
    };
    return a.key == b.key && a.task_id == b.task_id && a.gate == b.gate && a.n_fail == b.n_fail &&
           a.probe == b.probe && same(a.outcomes, b.outcomes) && same(a.measured, b.measured) &&
           a.advantages == b.advantages && a.speedups == b.speedups &&
           a.compiled_speedups == b.compiled_speedups && a.turns == b.turns &&
           a.verifier_jobs == b.verifier_jobs && a.generated_tokens == b.generated_tokens &&
           a.activities == b.activities;
  }
};

}  // namespace leap
