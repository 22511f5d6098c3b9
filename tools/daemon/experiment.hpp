// One experiment of the daemon's queue: its record (what `leap status` shows and what survives a
// restart of the daemon), the state machine that moves it, and the scheduler's choice of what to
// start next. Pure: no processes, no files, no clocks (times are passed in).
//
//   queued ──start──► running ──exit 0──► succeeded
//     │                 │  ├──exit≠0, signal──► failed
//     │                 │  └──exit after a cancel──► cancelled
//     └──cancel──► cancelled        (daemon stop: stays running, child restarted on the next start)
//
// An experiment submitted with seeds (`?seeds=1-3`) runs one child per seed, one after the other,
// `leap run CONFIG --seeds N` (the command's own seeds launch: RUN_DIR/seed-N, experiment.seed N,
// a seed whose folder holds it finished is skipped). Each seed has its own state (queued ->
// running -> done | failed | cancelled); between two seeds the experiment stays running without a
// child, so the scheduler starts its next seed first, in the slot it holds. A failed seed is
// recorded and the next one runs; the experiment succeeds when every seed is done, fails when a
// seed failed, and a cancel cancels the seed that runs and every seed not yet started.
#pragma once

#include "common/result.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace leap::daemon {

enum class experiment_state : std::uint8_t { queued, running, succeeded, failed, cancelled };

[[nodiscard]] std::string to_string(experiment_state s);
[[nodiscard]] std::optional<experiment_state> parse_experiment_state(const std::string& name);
// succeeded, failed and cancelled: nothing moves the experiment any more.
[[nodiscard]] bool is_final(experiment_state s);

enum class seed_state : std::uint8_t { queued, running, done, failed, cancelled };

[[nodiscard]] std::string to_string(seed_state s);
[[nodiscard]] std::optional<seed_state> parse_seed_state(const std::string& name);

// One seed of an experiment submitted with seeds.
struct seed_record {
  std::uint64_t seed = 0;
  seed_state state = seed_state::queued;
  int starts = 0;                // children started for this seed; > 1 after daemon restarts
  std::optional<int> exit_code;  // of its last child
  std::string message;           // why it failed

  friend bool operator==(const seed_record&, const seed_record&) = default;
};

struct experiment_record {
  std::string id;         // "e<seq>", unique within a daemon home
  std::uint64_t seq = 0;  // submission order; the queue is served in this order
  std::string name;       // experiment.name of the config
  experiment_state state = experiment_state::queued;
  std::string config_source;  // the name the client gave the config (errors and status name it)
  std::string cwd;            // working folder of the child: relative paths mean what they did
  std::string run_dir;        // absolute run folder of the experiment
  std::int64_t submitted_unix_ms = 0;
  std::int64_t first_started_unix_ms = 0;  // 0 until the first start; the queue wait ends here
  std::int64_t started_unix_ms = 0;        // latest start of a child
  std::int64_t finished_unix_ms = 0;
  int pid = 0;     // child `leap run` (its process group), 0 when none runs
  int starts = 0;  // children started; > 1 after daemon restarts
  bool cancel_requested = false;
  std::int64_t cancel_deadline_unix_ms = 0;  // SIGKILL after this, while the child lives
  std::optional<int> exit_code;              // of the last child; 128 + N for signal N
  std::string message;                       // why it failed, or what happens next
  // The seed list as submitted ("1-3,7") and its seeds in order; both empty for a plain run of
  // the config. Seed N runs in run_dir/seed-N.
  std::string seeds_spec;
  std::vector<seed_record> seeds;

  friend bool operator==(const experiment_record&, const experiment_record&) = default;
};

// The record as the API and the state file spell it, and back. from_json names the bad field; a
// state file written before seeds existed (no "seeds" key) reads as a plain run. Each seed's
// JSON also names its run folder (run_dir/seed-N).
[[nodiscard]] nlohmann::json to_json(const experiment_record& r);
[[nodiscard]] result<experiment_record> record_from_json(const nlohmann::json& j);

// The id of sequence number `seq`: "e<seq>". ids are checked with is_valid_id before they touch a
// path, so a request can never name a file outside the home.
[[nodiscard]] std::string id_of(std::uint64_t seq);
[[nodiscard]] bool is_valid_id(const std::string& id);

// The seed a child of `r` runs or would run next: its running seed, else its first queued one;
// nullopt for a plain run and when every seed has ended.
[[nodiscard]] std::optional<std::uint64_t> current_seed(const experiment_record& r);

// --- transitions: each returns the new record or an error a client can read (HTTP 409) ---

// A child started for a queued experiment, or restarted for a running one whose child is gone
// (after a daemon restart, or between two seeds). With seeds, current_seed() is the one started.
[[nodiscard]] result<experiment_record> on_started(experiment_record r, int pid,
                                                   std::int64_t now_ms);

// How a child ended, as waitpid says it.
struct child_exit {
  bool signaled = false;
  int code = 0;  // exit status, or the signal number when signaled
};

// The child ended. `daemon_stopping`: the daemon is shutting down and sent the SIGTERM itself, so
// an interrupted run (status 130 or a signal) stays running and its child is started again on the
// next start of the daemon. `log_tail`: the last lines of its log, for the failure message.
// With seeds the child's seed ends (done, failed, cancelled; or stays running when interrupted by
// the daemon's stop) and, while seeds are left and no cancel came, the experiment stays running
// without a child so that its next seed starts.
[[nodiscard]] experiment_record on_exited(experiment_record r, child_exit how, bool daemon_stopping,
                                          const std::string& log_tail, std::int64_t now_ms);

// A cancel request. Queued (or running without a child): cancelled at once. Running with a child:
// cancel_requested, deadline now + grace; the caller sends SIGTERM, and SIGKILL after the deadline.
// Error for a finished experiment, or one whose cancel is already under way. Seeds not started
// (and, without a child, the interrupted one) are cancelled at once; the running one when its
// child ends.
[[nodiscard]] result<experiment_record> on_cancel(experiment_record r, std::int64_t now_ms,
                                                  std::int64_t grace_ms);

// Every seed of `r` that has not ended becomes cancelled (a cancel that found no child).
void cancel_open_seeds(experiment_record& r);

// --- scheduling ---

// Which experiments to start now, in order: running ones without a child first (a daemon restart
// interrupted them), then queued ones by seq, until `max_concurrent` children run. Children already
// running count against the limit; lowering the limit stops nothing. Nothing while stopping.
[[nodiscard]] std::vector<std::string> to_start(const std::vector<experiment_record>& records,
                                                int max_concurrent, bool stopping);

// The last `n` lines of `text` (all of it when it has fewer); a final line without '\n' counts.
[[nodiscard]] std::string tail_lines(const std::string& text, std::size_t n);

}  // namespace leap::daemon
