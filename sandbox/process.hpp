// Isolated execution of one untrusted command: its own session and process group, namespaces where
// the kernel allows them, a fresh root holding only the system directories it needs, a size-limited
// scratch, a throw-away uid, a cgroup bounding the whole process tree, a seccomp filter, rlimits, a
// scrubbed environment, a wall-clock limit enforced from outside and output captured up to a byte
// cap. Nothing it starts outlives the call.
#pragma once

#include "common/result.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace leap::sandbox {

struct resource_limits {
  // Wall-clock limit, enforced by the caller's thread: SIGTERM to the group, SIGKILL after the
  // grace.
  std::chrono::milliseconds wall{10'000};     // Default: 10 s
  std::chrono::milliseconds kill_grace{200};  // Default: 200 ms
  // CPU seconds. Per process: RLIMIT_CPU (the kernel sends SIGXCPU, then SIGKILL one second later).
  // For the whole tree, where a cgroup's CPU usage can be read: the run is killed as soon as its
  // processes together used this much, and reported as SIGXCPU with run_result::cpu_exceeded.
  // 0: unlimited. Default: 10
  int cpu_seconds = 10;
  // RLIMIT_FSIZE: the largest file the command may write. Default: 64 MiB
  std::uint64_t file_size_bytes = 64ULL << 20;
  // RLIMIT_NOFILE. Default: 64
  int open_files = 64;
  // Processes and threads of the whole tree: the cgroup's pids.max, and RLIMIT_NPROC of the run's
  // private uid (only enforced when privileges were dropped, see run_result::isolation). Default:
  // 64
  int processes = 64;
  // Memory of the whole tree (the cgroup's limit; it also counts what the run keeps in its scratch
  // and private tmpfs, which live in memory). Past it the kernel's OOM killer ends the run and
  // run_result::memory_exceeded is set. 0: unlimited. Without a usable cgroup only the per-process
  // address_space_bytes applies (run_result::isolation says "no cgroup"). Default: 4 GiB
  std::uint64_t memory_bytes = 4ULL << 30;
  // RLIMIT_AS; 0 leaves it unlimited (CUDA reserves terabytes of virtual address space). Default: 4
  // GiB
  std::uint64_t address_space_bytes = 4ULL << 30;
  // Bytes of stdout and of stderr kept each: the first three quarters and the last quarter, with a
  // "[... N bytes not kept ...]" line between; the rest is read and discarded so the command never
  // blocks on a full pipe. Default: 64 KiB
  std::size_t output_cap_bytes = 64 << 10;
  // Size of the private tmpfs that is the run's root directory and holds its writable shared
  // folders (/dev/shm, /var/tmp, /run, /run/lock), together. Default: 256 MiB
  std::uint64_t tmpfs_bytes = 256ULL << 20;
  // Size of the private tmpfs that is the command's working directory (/tmp, HOME, TMPDIR): all it
  // may write there in total; past it writes fail with ENOSPC. Files are bounded too (one inode per
  // 16 KiB, at least 1024: scratch_entry_limit). It is also the budget of what the run may leave
  // in the working directory on the host, counted after every process of the run is dead: each
  // regular file its apparent size or its allocated blocks, whichever is larger (a sparse file
  // counts in full: the copy back writes its holes), rounded up to 4 KiB; each other entry 4 KiB
  // (a folder; in the fallback also a symlink, fifo or socket); each name of a hard-linked file on
  // its own. Over the budget, or with more than scratch_entry_limit files and folders, nothing is
  // copied back (the fallback empties the working directory) and run_result::scratch_exceeded is
  // set. Default: 256 MiB
  std::uint64_t scratch_bytes = 256ULL << 20;
};

struct run_request {
  // argv[0] is a path, or a name looked up in the PATH entry of `env`.
  std::vector<std::string> argv;
  // An existing directory on the host; the caller owns its lifetime (see scratch_dir). As root (see
  // run_result::isolation, "pivot_root") the command never sees it: its regular files and folders
  // are copied into the run's private scratch tmpfs (limits.scratch_bytes), which is the command's
  // working directory and /tmp, and when the command has ended and every process of the run is
  // dead, the regular files and folders it left there (symlinks, devices, fifos not; at most 8
  // levels deep) are copied back here, replacing files of the same name, when they fit the budget
  // (see resource_limits::scratch_bytes; otherwise none is). Use relative paths in argv. Without
  // namespaces (the fallback) the command runs in this directory itself (chown to the run's uid);
  // after the run, folders deeper than 8 levels are emptied, and a directory over the budget is
  // emptied whole.
  std::filesystem::path working_dir;
  // The complete environment of the command, besides HOME and TMPDIR which the run sets to a
  // private directory. Nothing of the caller's environment is inherited.
  std::vector<std::pair<std::string, std::string>> env;
  // Written to the command's stdin, which is then closed. At most 64 KiB.
  std::string stdin_data;
  resource_limits limits;
  // Try a network namespace (no interface but a loopback that is down). Default: true
  bool isolate_network = true;
  // With isolate_network: bring the namespace's own loopback up, so that the command's processes
  // can talk to each other over 127.0.0.1 (a profiler and the target it injected itself into).
  // The namespace has no other interface and no route out: a port bound there is reachable only
  // from inside this run, and nothing of the host's own loopback is. Failing to bring it up fails
  // the run (an error). Without a network namespace (the unprivileged fallback where user
  // namespaces are refused) the host's loopback is what the command sees anyway. Default: false
  bool loopback = false;
  // Host directories (or files) the command may read, bound read-only at the same path in its root,
  // besides the system ones it always sees (/usr, /etc, /bin, /sbin, /lib*, a fresh /proc and /sys,
  // a minimal /dev with the GPU's nodes): e.g. a CUDA toolkit or a python prefix outside /usr.
  // Paths that do not exist or lie under a system directory are skipped; one under a folder the
  // sandbox replaces with the run's own (/tmp, /run, /var/tmp, /dev, /proc, /sys) is an error,
  // since the command could not see it. Default: none
  std::vector<std::filesystem::path> readonly_paths;
  // A descriptor the command gets as its descriptor 3 (e.g. one end of a socketpair to another
  // sandboxed command), or -1 for none. The call takes ownership: it closes the caller's copy once
  // the command has started (or when the call fails), so that the peer sees end-of-file exactly
  // when the command and everything it started are gone. Default: -1
  int pass_fd = -1;
  // A command started ahead of its job (a judge that imports torch before a candidate arrives): a
  // descriptor the caller makes readable (writes a byte to, or closes the other end of) when the
  // job arrives. Until then the command runs within its memory, process and file limits but
  // without its wall-clock and CPU limits, and from then on with both whole: run_result::wall and
  // cpu count from that moment. The caller must open the gate eventually (also to abandon the
  // command, after telling it so); the call blocks until the command ends. The call takes
  // ownership, as of pass_fd. -1: the limits start with the command. Default: -1
  int start_gate_fd = -1;
  // The command's processes may read other processes' memory with process_vm_readv, which the
  // sandbox's seccomp filter otherwise refuses (process_vm_writev and ptrace stay refused), within
  // the kernel's ptrace rules: in practice a process reads the processes it started that are of
  // its uid and dumpable. For a judge that copies its candidate's outputs out of the candidate's
  // process; the judge fences that process (see fence_filter in sandbox/harness.cpp), which
  // refuses both calls, so the candidate cannot read the judge. Default: false
  bool read_child_memory = false;
  // Extra environment entries for GPU slots etc. are simply part of `env`.
};

struct run_result {
  bool exited = false;  // exited normally with exit_code
  int exit_code = -1;
  int signal = 0;          // the signal that ended it, when !exited (SIGKILL after a timeout)
  bool timed_out = false;  // the wall-clock limit was reached and the group was killed
  std::string stdout_text;
  std::string stderr_text;
  std::uint64_t stdout_bytes = 0;  // total written, including what was discarded past the cap
  std::uint64_t stderr_bytes = 0;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::chrono::microseconds wall{0};  // from the start, or from the start gate's opening
  // CPU time of the whole tree from its cgroup (from the start gate's opening where there is one);
  // 0 when no cgroup could count it.
  std::chrono::microseconds cpu{0};
  // The tree used more memory than limits.memory_bytes: the kernel's OOM killer ended a process of
  // the run, and the whole run was stopped (a runtime failure: "memory limit exceeded").
  bool memory_exceeded = false;
  // The tree's CPU time passed limits.cpu_seconds and it was killed (then also signal == SIGXCPU).
  bool cpu_exceeded = false;
  // What the run left in its working directory when it ended, as limits.scratch_bytes counts it
  // (the count stops once the entries pass scratch_entry_limit). 0 when it could not be measured.
  std::uint64_t scratch_left_bytes = 0;
  std::uint64_t scratch_left_entries = 0;
  // The run left more than limits.scratch_bytes or more than scratch_entry_limit files and folders
  // (or, in the fallback, a folder it could not measure): nothing of it reached the working
  // directory (the fallback emptied it). A runtime failure, however the command itself ended.
  bool scratch_exceeded = false;
  // What isolation was applied, e.g. "pid,mnt,ipc,net namespaces; pivot_root; seccomp; uid 61003;
  // cgroup v1 memory,pids,cpuacct", with "no cgroup: <why>" in place of the last part when no
  // cgroup could be used, or "fallback: session only (...)". Stable words so that tests and logs
  // can grep it.
  std::string isolation;
  // Host pid of the run's session leader (== its process group and session id). Diagnostics only:
  // by the time the call returns, nothing of the session is alive.
  pid_t session_id = 0;
  uid_t run_uid =
      0;  // the uid the command ran as (the caller's own when privileges were not dropped)
};

// Runs `request` to completion. Returns an error only when the run could not be started (missing
// executable, no working directory, pipes or clone failed); anything the command does — crash,
// hang, flood, fork bomb — is a run_result. Blocks the calling thread (poll on a pidfd and the
// pipes, no busy loop) for at most limits.wall + limits.kill_grace + a small drain margin.
// Thread-safe: concurrent calls use distinct uids and namespaces.
// On return no process of the run is alive, no zombie and no cgroup is left; the working directory
// and what the command wrote there (copied back, see run_request::working_dir) remain (the caller
// removes it).
result<run_result> run_isolated(const run_request& request);

// The most files and folders a run may leave in its working directory: the scratch tmpfs's inode
// count, one per 16 KiB of limits.scratch_bytes and at least 1024.
std::uint64_t scratch_entry_limit(const resource_limits& limits);

// Describes the strongest isolation this process can apply, without running anything
// (e.g. "namespaces+pivot_root+seccomp+uid; cgroup v1 memory,pids,cpuacct" as root, "fallback"
// otherwise). Cached after the first call.
std::string isolation_summary();

// The range of private uids runs switch to when the caller is root: [first, first + count).
struct uid_range {
  uid_t first;
  uid_t count;
};
uid_range sandbox_uids();

// Diagnostics for tests and the hostile-candidate checks, from a /proc scan: host pids of live
// processes (zombies included) whose real uid is in `range`, or whose session id is `sid`.
std::vector<pid_t> processes_with_uid_in(uid_range range);
std::vector<pid_t> processes_in_session(pid_t sid);

// A private directory under `root`, created 0700, removed (recursively, symlinks not followed) by
// the destructor. Move-only.
class scratch_dir {
 public:
  // Creates `root` (0711) if needed and a fresh directory below it named `<prefix>XXXXXX`.
  // Errors name the path and errno text.
  static result<scratch_dir> create(const std::filesystem::path& root, const std::string& prefix);

  scratch_dir(scratch_dir&& other) noexcept;
  scratch_dir& operator=(scratch_dir&& other) noexcept;
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir();

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  explicit scratch_dir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

// The default scratch root: $TMPDIR (or /tmp) / "leap-sandbox".
std::filesystem::path default_scratch_root();

// Writes `content` to `path` (0644, truncating), refusing to follow a symlink. Errors name the
// path.
status write_file(const std::filesystem::path& path, const std::string& content);
// Reads a regular file written by an untrusted command: symlinks are refused and at most
// `max_bytes` are read (more is an error). Errors name the path.
result<std::string> read_untrusted_file(const std::filesystem::path& path, std::size_t max_bytes);

// A signal number's name ("SIGSEGV"), or "signal N".
std::string signal_name(int signal);

}  // namespace leap::sandbox
