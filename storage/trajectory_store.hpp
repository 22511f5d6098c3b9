// The trajectory store: runs, steps, groups and metrics of training runs in one RocksDB database.
//
// Column families and keys (storage/keys.hpp has the encoders; all numbers big-endian so that
// bytewise order is numeric order, ids NUL-terminated so that a run's keys are one prefix):
//
//   runs     run_id                                               -> run_record
//   steps    run_id \0 step:u64be                                 -> step_record
//   groups   run_id \0 step:u64be split:u8 group:u32be            -> group_record
//   metrics  run_id \0 name \0 step:u64be                         -> f64
//   by_task  task_id \0 run_id \0 step:u64be split:u8 group:u32be -> (empty)
//   default  "leap.turn" \0 run_id \0 step split group rollout:u32be turn:u32be -> turn_record
//   default  "leap.retry" \0 run_id \0 step:u64be                      -> retry_step_record
//   default  "leap.carry" \0 run_id \0 step:u64be                      -> partial_carry_record
//   default  "leap.optimise" \0 run_id \0 step split group            -> optimise_decision
//   default  "leap.profile" \0 run_id \0 step split group rollout turn -> turn_profile_record
//
// Values are orchestrator/trajectory.hpp's versioned binary records. A group and its by_task entry
// are one atomic write, as are a step and its metric snapshot, so a reader (or a restart after a
// crash) sees either all of such a write or none of it.
//
// Durability: every write returns once RocksDB has it in its write-ahead log. With
// store_options::sync (the default) the log is fsync'ed first, so the write survives a power loss;
// without it the write survives a crash or kill -9 of the process (it is in the OS page cache) but
// perhaps not a power loss or kernel crash.
//
// Lost writes are detected: after each write the store records RocksDB's sequence number of its
// last acknowledged write in a small sidecar file in the store's folder (LEAP-ACKNOWLEDGED; 24
// bytes rewritten in place, fsync'ed like the log). open() compares it with the last write the
// database holds; a store that lost writes it had acknowledged (a write-ahead log truncated or
// deleted, a disk that lost confirmed data) is refused, naming the counts, unless
// store_options::accept_lost_writes. A store without the file (made before it existed) is not
// checked until its first write creates it.
//
// Damage is never repaired in place: open() creates a store only in a folder that is missing or
// empty, and makes it in a private folder beside it (".NAME.creating-PID-RANDOM"), renamed onto
// the path once whole, so no other process sees a half-made store. A folder that is a mount point
// gets it made in place, under flock(2) on the folder held from before the first file until the
// store is whole. A folder that holds files but no RocksDB CURRENT file (a damaged store) is
// refused and left untouched, unless another process holds its LOCK or the folder's lock (it is
// in use, or being made: the error says so) or it holds only what a creation writes before
// CURRENT (LOCK, IDENTITY, MANIFEST, OPTIONS, the info log, empty write-ahead logs: no data),
// which a writable open removes and makes the store anew; repair_store_copy() recovers what a
// damaged store holds into a copy. Every open checks the
// checksum of every block of every table file (DB::VerifyChecksum, read-only, before a writable
// open may flush or compact; a writable open starts with compactions off and turns them on after
// the check) and refuses a damaged table the same way, naming the file.
//
// A full disk: a write that fails (RocksDB's I/O error) is an error naming the store, RocksDB's
// reason, the free space on the store's filesystem and what the write needed. From then on the
// store refuses every write without calling RocksDB (whose failed log writer must not be written
// or synced again), and RocksDB's background recovery is off: the next open recovers every
// acknowledged write from the log once space is freed. RocksDB's info log (LOG) is written line
// by line and loses lines, not the process, on a full disk.
//
// Resume: a run is resumable from what the store holds. A step is complete once its step_record is
// stored (write it after the learner has stepped); last_completed_step() gives the last one, and
// completed_groups() the groups already stored for the step in progress, which need not be redone.
// With partial rollouts the step's carry decision (get_carry) is stored in the step's own write:
// the groups it carried into the step in progress, kept under the keys of the steps that started
// them, whole or as in-progress turns.
//
// Per-turn resume: put_turn() stores one finished turn of a group still in flight, durably like a
// group; put_group() deletes the group's turns in the same atomic write. partial_turns() gives a
// restarted run the turns of the groups it has to redo, so that it redoes only the turns that were
// in flight (tools/launch/resume.hpp decides which of them may be reused).
//
// Thread-safety: a trajectory_store may be used from any number of threads at once (RocksDB's DB is
// thread-safe), except that close() and the destructor must not overlap any other call. Scans read
// one consistent snapshot, taken when the scan starts. A write_batch is not thread-safe.
#pragma once

#include "common/result.hpp"
#include "orchestrator/trajectory.hpp"
#include "storage/keys.hpp"
#include "storage/record_codec.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap {

struct store_options {
  // fsync the write-ahead log before a write returns (see "Durability" above). Default: true
  bool sync = true;
  // Create the database (and its column families) when the folder holds none. Default: true
  bool create_if_missing = true;
  // Open without taking the database's lock, so that another process may write to it meanwhile
  // (export, replay of a live run). Writes then fail. Default: false
  bool read_only = false;
  // Open a store that lost writes it had acknowledged (see "Durability" above) instead of refusing
  // it: lost_writes() then describes the loss, and a writable open takes the store as it now is as
  // the new mark, so that the loss is reported once. Default: false
  bool accept_lost_writes = false;
};

// What open() found when a store holds fewer writes than it had acknowledged. Counts are RocksDB
// sequence numbers: one per record key written (a group is 3: record, index entry, its
// in-progress turns deleted, and 1 for its optimisation decision if it has one; a finished turn
// 1, a step 1 plus one per metric of its snapshot and 1 for its carry decision if it has one, a
// run 1).
struct lost_writes_report {
  std::uint64_t acknowledged = 0;  // the last write the store had acknowledged
  std::uint64_t present = 0;       // the last write the store holds now
  bool mark_unreadable = false;    // the sidecar file was damaged: the loss is unknown
  // One sentence for a message: the counts and the likely cause.
  [[nodiscard]] std::string describe() const;
};

// The sidecar file of acknowledged writes, in the store's folder.
inline constexpr const char* acknowledged_mark_file = "LEAP-ACKNOWLEDGED";

// The layout version of the keys and column families, kept in the default column family. A store
// written with a newer layout is refused at open.
inline constexpr std::uint32_t store_schema_version = 1;

// Where a run directory keeps its store: RUN_DIR/trajectories.
[[nodiscard]] std::filesystem::path store_path_of_run_dir(const std::filesystem::path& run_dir);

// Which groups a scan visits. Keys are visited in order: run id, step, split (train first), group.
struct group_query {
  std::string run_id;                                                   // empty: every run
  std::uint64_t first_step = 0;                                         // Default: 0
  std::uint64_t last_step = std::numeric_limits<std::uint64_t>::max();  // inclusive. Default: all
  std::optional<split_kind> split;                                      // Default: both splits
  decode_options decode;                                                // Default: with tokens
};

// Called once per group of a scan. Returning an error stops the scan, which returns that error.
using group_visitor = std::function<status(group_record&&)>;

struct metric_point {
  std::uint64_t step = 0;
  double value = 0.0;

  friend bool operator==(const metric_point&, const metric_point&) = default;
};

// A finished turn of a group that is not stored yet (see "Per-turn resume" above).
struct stored_turn {
  group_ref group;
  std::uint32_t rollout = 0;
  std::uint32_t turn = 0;  // 0-based
  turn_record record;

  friend bool operator==(const stored_turn&, const stored_turn&) = default;
};

class trajectory_store;

// Writes gathered for one atomic commit: trajectory_store::write() applies all of them or none,
// with a single log sync, which is how a stream of groups is stored at a high rate (commit every
// few groups, or whenever the oldest pending group has waited long enough). Created by
// trajectory_store::batch(); must not outlive its store. Not thread-safe.
class write_batch {
 public:
  write_batch(write_batch&&) noexcept;
  write_batch& operator=(write_batch&&) noexcept;
  ~write_batch();

  // Each put validates the record (validate() in orchestrator/trajectory.hpp) and encodes it now;
  // an invalid record is an error and leaves the batch as it was. Nothing is stored until write().
  status put_run(const run_record& run);
  // Also deletes the group's in-progress turns (put_turn), and puts its optimisation decision
  // when it has one, in the same commit.
  status put_group(const group_record& group);
  // One finished turn of a group in flight. Errors: an empty run id or one with a NUL byte, as
  // many log-probs as output tokens missing.
  status put_turn(const group_ref& group, std::uint32_t rollout, std::uint32_t turn,
                  const turn_record& record);
  status put_step(const step_record& step);  // also puts each metric of the step's snapshot
  // The retry buffer after a step (issue 35). Errors: an empty run id or one with a NUL byte.
  status put_retry(std::string_view run_id, const retry_step_record& retry);
  // The groups a step's batch carried into the next step (schedule.partial, issue 33); put it in
  // the batch of the step's put_step, so that the step is stored with its decision or not at all.
  // Errors: an empty run id or one with a NUL byte.
  status put_carry(std::string_view run_id, const partial_carry_record& carry);
  // The profile of one turn (verifier.profile, issue 34), under its turn's ids; rewriting it
  // replaces it. Errors: an empty run id or one with a NUL byte.
  status put_profile(const turn_profile_record& profile);
  status put_metric(std::string_view run_id, std::uint64_t step, std::string_view name,
                    double value);

  [[nodiscard]] std::size_t groups() const;   // groups put since the last commit
  [[nodiscard]] std::size_t records() const;  // every put since the last commit
  [[nodiscard]] std::size_t bytes() const;    // encoded size of the pending writes
  [[nodiscard]] bool empty() const { return records() == 0; }
  void clear();

 private:
  friend class trajectory_store;
  struct impl;
  explicit write_batch(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

class trajectory_store {
 public:
  // Opens (and with create_if_missing, creates) the store in the folder `path`. A store is created
  // only in a folder that is missing or empty; what a creation killed mid-way left beside it (its
  // process gone) is removed by the next creation of that path.
  // Errors name the path and carry RocksDB's status text: a folder that holds no store (with
  // create_if_missing off, or read_only), a folder with files but no CURRENT file (a damaged store:
  // the message names repair_store_copy's command, and nothing in the folder is changed), lost
  // acknowledged writes (unless accept_lost_writes), a damaged table file (named; nothing changed
  // or compacted), a lock held by another process (also while it creates the store), a store of a
  // newer schema version, a missing column family in read-only mode, I/O errors (a full disk:
  // with the free space).
  [[nodiscard]] static result<std::unique_ptr<trajectory_store>> open(
      const std::filesystem::path& path, const store_options& options = {});

  // Closes if close() was not called; an error of that close is dropped, so call close() to see it.
  ~trajectory_store();
  trajectory_store(const trajectory_store&) = delete;
  trajectory_store& operator=(const trajectory_store&) = delete;

  // Flushes nothing extra (every write is already in the log) and releases the database and its
  // lock. Later calls on this object return an error. Calling it twice is fine.
  status close();

  [[nodiscard]] const std::filesystem::path& path() const;
  [[nodiscard]] const store_options& options() const;
  // The loss open() accepted (store_options::accept_lost_writes); empty when none was found.
  [[nodiscard]] const std::optional<lost_writes_report>& lost_writes() const;

  // ---- writes: each returns only once the write is durable as store_options::sync says, and the
  // acknowledged-writes mark is updated; on an error of RocksDB nothing of it is stored (an error
  // updating the mark comes after the write is durable, and says so). After either error every
  // later write is refused ("takes no more writes since a write failed: ..."); reopen to go on.
  // Rewriting a key replaces its record (a redone group replaces the earlier copy whole).

  [[nodiscard]] write_batch batch();
  // Commits every write of the batch atomically, then clears it. On error the batch keeps its
  // writes, so the caller may retry or report them.
  status write(write_batch& batch);

  status put_run(const run_record& run);
  // A group and its by_task index entry, atomically; the group's in-progress turns are deleted in
  // the same write, and its optimisation decision (group_record::optimise), when it has one, is
  // stored in it under a key of its own. Every read of a group sets that field back.
  status put_group(const group_record& group);
  // One finished turn of a group in flight (per-turn resume); rewriting it replaces it.
  status put_turn(const group_ref& group, std::uint32_t rollout, std::uint32_t turn,
                  const turn_record& record);
  // A step and its metric snapshot, atomically: the step counts as completed from then on.
  status put_step(const step_record& step);
  status put_metric(std::string_view run_id, std::uint64_t step, std::string_view name,
                    double value);
  // The retry buffer after a step (orchestrator/retry.hpp); rewriting it replaces it.
  status put_retry(std::string_view run_id, const retry_step_record& retry);
  // A step, its metric snapshot and the groups its batch carried into the next step
  // (schedule.partial, issue 33), atomically. Errors: put_step's, and a carry record of another
  // step.
  status put_step(const step_record& step, const partial_carry_record& carry);
  // The profile of one turn, made after its verdict (verifier.profile, issue 34): stored on its
  // own, whenever it arrives, before or after its group; one key, so never half written.
  status put_profile(const turn_profile_record& profile);

  // ---- reads: "not found" is an empty optional or an empty vector, never an error. Errors are
  // I/O errors and records that do not decode (naming the key).

  [[nodiscard]] result<std::optional<run_record>> get_run(std::string_view run_id) const;
  [[nodiscard]] result<std::vector<run_record>> runs() const;  // ordered by id

  [[nodiscard]] result<std::optional<group_record>> get_group(const group_ref& ref,
                                                              decode_options decode = {}) const;
  // Visits the groups the query selects, in key order. Memory stays at one group at a time.
  status for_each_group(const group_query& query, const group_visitor& visit) const;
  // The same, gathered into a vector: for queries known to be small.
  [[nodiscard]] result<std::vector<group_record>> groups(const group_query& query) const;
  // Visits the groups of one task (of one run, or of every run when run_id is empty), ordered by
  // run, step, split, group. An index entry left by a group since rewritten with another task is
  // skipped; one whose group is missing (damage: the two are written together) is an error.
  status for_each_group_of_task(std::string_view task_id, std::string_view run_id,
                                const group_visitor& visit, decode_options decode = {}) const;

  [[nodiscard]] result<std::optional<step_record>> get_step(std::string_view run_id,
                                                            std::uint64_t step) const;
  // Steps of a run in [first, last], ascending.
  [[nodiscard]] result<std::vector<step_record>> steps(
      std::string_view run_id, std::uint64_t first = 0,
      std::uint64_t last = std::numeric_limits<std::uint64_t>::max()) const;

  // One metric of a run over time, ascending by step.
  [[nodiscard]] result<std::vector<metric_point>> metric_series(std::string_view run_id,
                                                                std::string_view name) const;
  // The metric names a run has, sorted.
  [[nodiscard]] result<std::vector<std::string>> metric_names(std::string_view run_id) const;

  // ---- resume

  // Indices of the groups of `split` stored for the step, ascending. Decodes no record, so a
  // damaged group still counts as stored (get_group reports the damage).
  [[nodiscard]] result<std::vector<std::uint32_t>> completed_groups(
      std::string_view run_id, std::uint64_t step, split_kind split = split_kind::train) const;
  // The in-progress turns of a run (put_turn, not yet deleted by their group's put_group), ordered
  // by step, split, group, rollout, turn. Errors: I/O, a turn that does not decode (naming it).
  [[nodiscard]] result<std::vector<stored_turn>> partial_turns(std::string_view run_id) const;
  // The retry buffers stored after the steps of a run, ascending by step (empty when the run never
  // had gate.retry on, and in stores made before it), and the one after `step`.
  [[nodiscard]] result<std::vector<retry_step_record>> retry_steps(std::string_view run_id) const;
  [[nodiscard]] result<std::optional<retry_step_record>> get_retry(std::string_view run_id,
                                                                   std::uint64_t step) const;
  // The carry decisions stored with the steps of a run, ascending by step (empty without
  // schedule.partial, and in stores made before the decision was stored), and the one of `step`.
  [[nodiscard]] result<std::vector<partial_carry_record>> carry_steps(
      std::string_view run_id) const;
  [[nodiscard]] result<std::optional<partial_carry_record>> get_carry(std::string_view run_id,
                                                                      std::uint64_t step) const;
  // The profiles stored for the turns of a run, ordered by step, split, group, rollout, turn
  // (empty without verifier.profile, and in stores made before profiles were stored). A profile
  // of a group that was dropped or never stored is listed too.
  [[nodiscard]] result<std::vector<turn_profile_record>> profiles(std::string_view run_id) const;
  // The highest step that has a step_record; nullopt when none has.
  [[nodiscard]] result<std::optional<std::uint64_t>> last_completed_step(
      std::string_view run_id) const;

 private:
  struct impl;
  explicit trajectory_store(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

struct repair_report {
  std::size_t runs = 0;
  std::size_t steps = 0;
  std::size_t groups = 0;
  // The damaged store's acknowledged writes against what the repaired copy holds.
  std::optional<lost_writes_report> lost;
};

// Recovers a damaged store (for example one that lost its CURRENT file) into a copy: copies the
// folder `damaged` to `copy` (which must be missing or empty), runs RocksDB's RepairDB on the copy
// (it rebuilds the manifest from the table files and the write-ahead logs it finds), opens the copy
// as a trajectory store and counts what it holds. `damaged` is only read. Check the copy (`leap
// replay` on a folder holding it as `trajectories`) before putting it in place of the damaged one.
// Errors: `copy` not empty, copy or repair failures, a copy that still does not open.
[[nodiscard]] result<repair_report> repair_store_copy(const std::filesystem::path& damaged,
                                                      const std::filesystem::path& copy);

}  // namespace leap
