// The trajectory store's keys: byte strings whose bytewise order (RocksDB's default comparator) is
// the order a reader wants, so that every scan is one range of one column family.
//
// Ids (run id, task id, metric name) are written as their bytes followed by a NUL terminator, which
// the records forbid inside ids. The terminator sorts below every other byte, so all keys of run
// "a" come before those of run "ab", and "everything of run R" is the prefix "R\0".
// Numbers are fixed-width big-endian, so they sort numerically.
//
//   column family  key                                                     value
//   runs           run_id                                                  run_record
//   steps          run_id \0 step:u64be                                    step_record
//   groups         run_id \0 step:u64be split:u8 group:u32be               group_record
//   metrics        run_id \0 name \0 step:u64be                            f64 (IEEE-754 bits, LE)
//   by_task        task_id \0 run_id \0 step:u64be split:u8 group:u32be    empty
//   default        "leap.store.schema"                                     u32 LE schema version
//   default        "leap.turn" \0 run_id \0 step:u64be split:u8 group:u32be
//                  rollout:u32be turn:u32be                                turn_record
//   default        "leap.retry" \0 run_id \0 step:u64be                      retry_step_record
//   default        "leap.carry" \0 run_id \0 step:u64be                      partial_carry_record
//   default        "leap.optimise" \0 run_id \0 step:u64be split:u8 group:u32be
//                                                                          optimise_decision record
//   default        "leap.profile" \0 run_id \0 step:u64be split:u8 group:u32be
//                  rollout:u32be turn:u32be                                turn_profile_record
//
// The "leap.turn" keys hold the finished turns of groups not yet stored (per-turn resume); they
// live in the default family so that stores made before them open unchanged; so do the
// "leap.retry" keys, the retry buffer after each step (orchestrator/retry.hpp, issue 35), and the
// "leap.carry" keys, the groups each step carried into the next (orchestrator/partial_rollouts.hpp,
// issue 33), and the "leap.optimise" keys, the optimisation decision stored with a group
// (gate.optimise, issue 31), and the "leap.profile" keys, the profile of a turn made after its
// verdict (verifier.profile, issue 34).
//
// split: 0 train, 1 validation (leap::split_kind). All functions are pure and thread-safe.
#pragma once

#include "orchestrator/trajectory.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace leap {

// Names one stored group.
struct group_ref {
  std::string run_id;
  std::uint64_t step = 0;
  split_kind split = split_kind::train;
  std::uint32_t group_index = 0;

  friend bool operator==(const group_ref&, const group_ref&) = default;
};

[[nodiscard]] group_ref ref_of(const group_record& group);

namespace keys {

// The prefix of every key that belongs to `id` as a first component: id + '\0'.
[[nodiscard]] std::string id_prefix(std::string_view id);

[[nodiscard]] std::string run(std::string_view run_id);
[[nodiscard]] std::string step(std::string_view run_id, std::uint64_t step);
[[nodiscard]] std::string group(const group_ref& ref);
// The keys of all groups of one step (both splits) start with step(run_id, step).
[[nodiscard]] std::string metric(std::string_view run_id, std::string_view name,
                                 std::uint64_t step);
[[nodiscard]] std::string task(std::string_view task_id, const group_ref& ref);
// A finished turn of a group not yet stored; turn is 0-based.
[[nodiscard]] std::string turn(const group_ref& ref, std::uint32_t rollout, std::uint32_t turn);
// The prefix of every turn key of one group, and of one run.
[[nodiscard]] std::string turns_of_group(const group_ref& ref);
[[nodiscard]] std::string turns_of_run(std::string_view run_id);

// The retry buffer stored after a step, and the prefix of every such key of one run.
[[nodiscard]] std::string retry(std::string_view run_id, std::uint64_t step);
[[nodiscard]] std::string retries_of_run(std::string_view run_id);
// The carry decision stored with a step, and the prefix of every such key of one run.
[[nodiscard]] std::string carry(std::string_view run_id, std::uint64_t step);
[[nodiscard]] std::string carries_of_run(std::string_view run_id);
// The optimisation decision stored with a group (gate.optimise).
[[nodiscard]] std::string optimise(const group_ref& ref);
// The profile of a turn (verifier.profile; turn is 0-based), and the prefix of every such key of
// one run.
[[nodiscard]] std::string profile(const group_ref& ref, std::uint32_t rollout, std::uint32_t turn);
[[nodiscard]] std::string profiles_of_run(std::string_view run_id);

// The inverses; nullopt when the bytes are not such a key.
[[nodiscard]] std::optional<std::pair<std::string, std::uint64_t>> parse_step(std::string_view key);
[[nodiscard]] std::optional<group_ref> parse_group(std::string_view key);
struct metric_key {
  std::string run_id;
  std::string name;
  std::uint64_t step = 0;
};
[[nodiscard]] std::optional<metric_key> parse_metric(std::string_view key);
struct turn_key {
  group_ref group;
  std::uint32_t rollout = 0;
  std::uint32_t turn = 0;
};
[[nodiscard]] std::optional<turn_key> parse_turn(std::string_view key);
[[nodiscard]] std::optional<turn_key> parse_profile(std::string_view key);
// Returns the run id and the step.
[[nodiscard]] std::optional<std::pair<std::string, std::uint64_t>> parse_retry(
    std::string_view key);
// Returns the run id and the step.
[[nodiscard]] std::optional<std::pair<std::string, std::uint64_t>> parse_carry(
    std::string_view key);
// Returns the task id and the group.
[[nodiscard]] std::optional<std::pair<std::string, group_ref>> parse_task(std::string_view key);

// The least key greater than every key that starts with `prefix`: the exclusive upper bound of a
// prefix scan. An empty result means "no bound" (the prefix is empty or all 0xFF bytes).
[[nodiscard]] std::string prefix_end(std::string_view prefix);

// Encodings of numbers as the keys use them.
void append_u64be(std::string& out, std::uint64_t v);
void append_u32be(std::string& out, std::uint32_t v);

}  // namespace keys
}  // namespace leap
