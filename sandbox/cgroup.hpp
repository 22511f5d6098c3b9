// One cgroup per sandboxed run (internal to process.cpp): memory, processes and CPU time of the
// whole process tree, on cgroup v1 (one directory per controller hierarchy) or v2 (unified).
#pragma once

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace leap::sandbox {

// What this process can use, found once (thread-safe, cached): the hierarchy, the directories under
// which runs' cgroups are created (our own cgroup in each), and the words for run_result::isolation
// ("cgroup v1 memory,pids,cpuacct"). `usable` is false when not root, when no hierarchy is mounted
// writable, or when v2 cannot delegate the memory controller; `why_not` says which.
struct cgroup_host {
  int version = 0;                                     // 1, 2, or 0 when unusable
  std::string memory_parent, pids_parent, cpu_parent;  // v1: one per controller (empty: absent)
  std::string parent;                                  // v2: the unified directory
  bool v2_pids = false;                                // v2: the pids controller is delegated too
  std::string words;
  std::string why_not;
  [[nodiscard]] bool usable() const { return version != 0; }
};
const cgroup_host& host_cgroups();

// The cgroup of one run, named after its private uid (unique host-wide while the run holds it).
// create() makes it (removing a stale one of the same name), sets the limits and opens what the
// clone child needs: `enter_fds` (cgroup.procs, the child writes "0" to each before anything else).
// The destructor kills whatever is still inside and removes it. Not thread-safe (one run's thread).
class run_cgroup {
 public:
  run_cgroup() = default;
  run_cgroup(const run_cgroup&) = delete;
  run_cgroup& operator=(const run_cgroup&) = delete;
  ~run_cgroup();

  // Returns false (and says why) when the cgroup could not be made; nothing is left then.
  bool create(const cgroup_host& host, uid_t uid, std::uint64_t memory_bytes, int processes,
              std::string* why);

  // Descriptors the clone child writes "0" to (O_CLOEXEC); close_enter_fds() after the clone.
  std::vector<int> enter_fds;
  void close_enter_fds();
  // v1: an eventfd that becomes readable when the memory controller meets OOM (-1 otherwise; v2
  // kills the whole group itself, memory.oom.group).
  int oom_event_fd = -1;

  // CPU time of everything that ran in it, in nanoseconds; -1 when no controller counts it.
  [[nodiscard]] std::int64_t cpu_ns() const;
  // Processes the OOM killer ended in it so far.
  [[nodiscard]] std::uint64_t oom_kills() const;
  // SIGKILL to every process inside, until it is empty (bounded).
  void kill_all() const;

 private:
  void destroy();
  int version_ = 0;
  std::vector<std::string> dirs_;  // what create() made, removed by the destructor
  std::string memory_dir_;
  int cpu_fd_ = -1;
};

}  // namespace leap::sandbox
