// Ranks 1..world_size-1 of a data-parallel learner as leap-learner-rank child processes: the one
// spawner that `leap run`, the tests and bench_learner share. Rank 0 is the caller's trainer
// (trainer_options::distributed), which hosts the c10d store at `master`.
// start_ranks_when_listening spawns them once that store listens, on the port it bound.
#pragma once

#include "common/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace leap::learner {

struct rank_workers_options {
  std::string executable;  // path of leap-learner-rank. Required
  std::string master;      // "host:port" of the store rank 0's trainer hosts. Required
  int world_size = 1;      // ranks 1..world_size-1 are spawned; 1 spawns none. Default: 1
  // The device of every rank, rank 0's first (it is not spawned; listed so that index = rank);
  // empty: every rank on "cpu". Default: empty
  std::vector<std::string> devices;
  double timeout_seconds = 300;  // leap-learner-rank --timeout. Default: 300
};

// The running ranks. Destroying it (or stop()) kills what is still running and reaps every child,
// so no rank outlives its owner's scope; a rank that ends on its own (rank 0's trainer destroyed)
// exits 0. Not thread-safe. Move-only.
class rank_workers {
 public:
  // Spawns ranks 1..world_size-1. Each rank is SIGKILLed when the calling thread dies
  // (leap-learner-rank sets PR_SET_PDEATHSIG): call it from a thread that outlives the ranks.
  // Errors: invalid options (world_size < 1, devices not world_size long), the executable missing
  // or not executable (naming its path), a spawn failing (the ranks already spawned are killed).
  [[nodiscard]] static result<rank_workers> spawn(const rank_workers_options& options);

  rank_workers(rank_workers&& other) noexcept;
  rank_workers& operator=(rank_workers&& other) noexcept;
  rank_workers(const rank_workers&) = delete;
  rank_workers& operator=(const rank_workers&) = delete;
  ~rank_workers();

  // Waits until every rank has exited. Errors: ranks that exited non-zero or by a signal, each
  // named with its rank and exit status.
  [[nodiscard]] status wait();
  // Reaps the ranks that have exited, kills (SIGKILL) and reaps the others; being killed here is
  // no error. Errors: ranks that had exited non-zero or by a signal before, named as by wait().
  [[nodiscard]] status stop();
  // Reaps the ranks that have exited, without waiting. Errors: every rank no longer running
  // (whatever its exit status: while the group forms, none may end), named as by wait().
  [[nodiscard]] status check_running();

  // Sends `sig` to rank `rank` (1..world_size-1) if it still runs (tests: SIGSTOP, SIGKILL).
  void signal(int rank, int sig) const;
  // Kills rank `rank` and waits until it is gone.
  void kill(int rank);
  // The process id of rank `rank`; 0 once reaped.
  [[nodiscard]] pid_t pid(int rank) const;
  // The peak resident memory of rank `rank` in KiB, known once it is reaped (else 0).
  [[nodiscard]] std::int64_t max_rss_kib(int rank) const;
  [[nodiscard]] int world_size() const { return static_cast<int>(children_.size()) + 1; }

 private:
  struct child {
    pid_t pid = 0;
    int wait_status = 0;  // waitpid's, once reaped
    bool killed_here = false;
    std::int64_t max_rss_kib = 0;
  };
  rank_workers() = default;
  void reap(child& c, bool block);
  [[nodiscard]] status failures() const;
  [[nodiscard]] static std::string describe(int rank, int wait_status);
  void kill_all();
  std::vector<child> children_;
};

struct distributed_options;

// Makes rank 0's `d` start ranks 1..d.world_size-1 into `into` once its store listens: d.master
// becomes "127.0.0.1:0" (the kernel picks the port when the store binds; no other process can
// take it before the ranks are given it), d.on_listening spawns them with `options` (master set to
// the bound one, world_size to d's), d.check_ranks fails the forming at once when one of them has
// exited. `into` must outlive trainer::create and is where the ranks are owned afterwards.
void start_ranks_when_listening(distributed_options& d, rank_workers_options options,
                                std::optional<rank_workers>& into);

}  // namespace leap::learner
