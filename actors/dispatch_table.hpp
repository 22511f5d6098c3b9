// The bookkeeping of the verifier dispatcher (remote_verifier.hpp), as plain code: which job runs
// where, which target has free slots, what goes back into the queue when a target is lost, and
// which verdict counts. No CAF, no clock: the dispatcher actor calls it and sends what it says.
//
// Targets are the remote verifier nodes and, optionally, the local pool. A job waits in a FIFO
// queue until some target that is up has a free slot; it is then sent to the target with the most
// free slots (ties: the lowest index). Each send is an attempt that holds one slot of its target
// until its verdict (or an error) comes back or the target is lost. A lost target's attempts are
// dropped and their jobs, unless already judged, go back to the front of the queue (re-sent).
// The first verdict of a job counts; any later one (a node that was declared lost answering
// after all, a re-sent copy) is a duplicate and is dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace leap::actors {

class dispatch_table {
 public:
  using job_id = std::uint64_t;
  using target_id = std::size_t;

  struct assignment {
    job_id job = 0;
    target_id target = 0;
    friend bool operator==(const assignment&, const assignment&) = default;
  };

  enum class verdict_kind {
    accepted,   // the job's first verdict: deliver it
    duplicate,  // the job was judged already (or is unknown): drop it
  };

  struct target_stats {
    std::string name;
    bool up = false;
    std::size_t capacity = 0;   // slots the target offers
    std::size_t in_flight = 0;  // attempts outstanding on it
    std::uint64_t sent = 0;     // attempts sent to it in all
    std::uint64_t judged = 0;   // verdicts of it that counted
    std::uint64_t lost = 0;     // attempts lost with it (re-sent elsewhere)
    std::uint64_t joins = 0;    // times it came up
  };

  struct totals {
    std::uint64_t jobs = 0;        // jobs added
    std::uint64_t judged = 0;      // verdicts delivered (one per job)
    std::uint64_t resent = 0;      // jobs put back in the queue after a loss
    std::uint64_t duplicates = 0;  // verdicts dropped
  };

  // Adds a target, down, with no slots; returns its id (0, 1, ... in order).
  target_id add_target(std::string name);
  // The target answers: it takes up to `capacity` attempts at once.
  void set_up(target_id target, std::size_t capacity);
  // A live target reports a new capacity (with each verdict). Ignored while it is down.
  void set_capacity(target_id target, std::size_t capacity);
  // The target is lost (died, cut off, refused): its outstanding attempts are dropped and the jobs
  // not yet judged go back to the front of the queue, oldest first. Returns those jobs.
  std::vector<job_id> set_down(target_id target);

  // Queues a new job; returns its id (1, 2, ... in order).
  job_id add_job();
  // Takes queued jobs onto targets with free slots, as many as fit, in queue order. The caller
  // sends each assignment.
  [[nodiscard]] std::vector<assignment> assign();
  // A verdict of `job` came back from `target`: frees the attempt's slot; says whether it counts.
  verdict_kind complete(job_id job, target_id target);
  // The attempt of `job` on `target` failed without a verdict (an error reply): frees its slot
  // and, if the job has no verdict and no other attempt, queues it again at the front. Returns
  // whether it was queued again.
  bool fail(job_id job, target_id target);

  [[nodiscard]] std::size_t queued() const { return queue_.size(); }
  // Jobs not judged yet (queued or running).
  [[nodiscard]] std::size_t open_jobs() const;
  // Free slots of the targets that are up.
  [[nodiscard]] std::size_t free_slots() const;
  [[nodiscard]] bool any_up() const;
  [[nodiscard]] const target_stats& target(target_id id) const { return targets_.at(id); }
  [[nodiscard]] std::size_t targets() const { return targets_.size(); }
  [[nodiscard]] const totals& counts() const { return totals_; }

 private:
  struct job_state {
    bool judged = false;
    std::vector<target_id> attempts;  // targets with an attempt outstanding
  };

  // Removes one outstanding attempt of `job` on `target`; false when there was none.
  bool drop_attempt(job_state& job, target_id target);
  void forget_if_settled(job_id id);

  std::vector<target_stats> targets_;
  std::unordered_map<job_id, job_state> jobs_;
  std::deque<job_id> queue_;
  job_id next_job_ = 1;
  totals totals_;
};

}  // namespace leap::actors
