// Isolated execution of one untrusted command: its own session and process group, namespaces where
// the kernel allows them, a throw-away uid, rlimits, a scrubbed environment, a wall-clock limit
// enforced from outside and output captured up to a byte cap. Nothing it starts outlives the call.
#pragma once

#include "common/result.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace leap::sandbox {

struct resource_limits {
  // Wall-clock limit, enforced by the caller's thread: SIGTERM to the group, SIGKILL after the grace.
  std::chrono::milliseconds wall{10'000};  // Default: 10 s
  std::chrono::milliseconds kill_grace{200};  // Default: 200 ms
  // RLIMIT_CPU in seconds; the kernel sends SIGXCPU, then SIGKILL one second later. 0: unlimited.
  int cpu_seconds = 10;  // Default: 10
  // RLIMIT_FSIZE: the largest file the command may write. Default: 64 MiB
  std::uint64_t file_size_bytes = 64ULL << 20;
  // RLIMIT_NOFILE. Default: 64
  int open_files = 64;
  // RLIMIT_NPROC of the run's private uid (only enforced when privileges were dropped, see
  // run_result::isolation). Default: 64
  int processes = 64;
  // RLIMIT_AS; 0 leaves it unlimited (CUDA reserves terabytes of virtual address space). Default: 4 GiB
  std::uint64_t address_space_bytes = 4ULL << 30;
  // Bytes of stdout and of stderr kept each: the first three quarters and the last quarter, with a
  // "[... N bytes not kept ...]" line between; the rest is read and discarded so the command never
  // blocks on a full pipe. Default: 64 KiB
  std::size_t output_cap_bytes = 64 << 10;
  // Size of the private tmpfs mounted on /dev/shm and /var/tmp inside the mount namespace (the
  // working directory itself is bound on /tmp and becomes HOME and TMPDIR).
  // Default: 256 MiB
  std::uint64_t tmpfs_bytes = 256ULL << 20;
};

struct run_request {
  // argv[0] is a path, or a name looked up in the PATH entry of `env`.
  std::vector<std::string> argv;
  // An existing directory, the command's working directory. The run makes it its own (chown to the
  // run's uid); the caller owns its lifetime (see scratch_dir).
  std::filesystem::path working_dir;
  // The complete environment of the command, besides HOME and TMPDIR which the run sets to a private
  // directory. Nothing of the caller's environment is inherited.
  std::vector<std::pair<std::string, std::string>> env;
  // Written to the command's stdin, which is then closed. At most 64 KiB.
  std::string stdin_data;
  resource_limits limits;
  // Try a network namespace (no interface but a loopback that is down). Default: true
  bool isolate_network = true;
  // A descriptor the command gets as its descriptor 3 (e.g. one end of a socketpair to another
  // sandboxed command), or -1 for none. The call takes ownership: it closes the caller's copy once the
  // command has started (or when the call fails), so that the peer sees end-of-file exactly when the
  // command and everything it started are gone. Default: -1
  int pass_fd = -1;
  // Extra environment entries for GPU slots etc. are simply part of `env`.
};

struct run_result {
  bool exited = false;     // exited normally with exit_code
  int exit_code = -1;
  int signal = 0;          // the signal that ended it, when !exited (SIGKILL after a timeout)
  bool timed_out = false;  // the wall-clock limit was reached and the group was killed
  std::string stdout_text;
  std::string stderr_text;
  std::uint64_t stdout_bytes = 0;  // total written, including what was discarded past the cap
  std::uint64_t stderr_bytes = 0;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::chrono::microseconds wall{0};
  // What isolation was applied, e.g. "pid,mnt,ipc,net namespaces; uid 61003" or
  // "fallback: session only (...)". Stable words so that tests and logs can grep it.
  std::string isolation;
  // Host pid of the run's session leader (== its process group and session id). Diagnostics only:
  // by the time the call returns, nothing of the session is alive.
  pid_t session_id = 0;
  uid_t run_uid = 0;  // the uid the command ran as (the caller's own when privileges were not dropped)
};

// Runs `request` to completion. Returns an error only when the run could not be started (missing
// executable, no working directory, pipes or clone failed); anything the command does — crash,
// hang, flood, fork bomb — is a run_result. Blocks the calling thread (poll on a pidfd and the
// pipes, no busy loop) for at most limits.wall + limits.kill_grace + a small drain margin.
// Thread-safe: concurrent calls use distinct uids and namespaces.
// On return no process of the run is alive and no zombie is left; the working directory and what
// the command wrote there remain (the caller removes it).
result<run_result> run_isolated(const run_request& request);

// Describes the strongest isolation this process can apply, without running anything
// (e.g. "namespaces+uid" as root, "fallback" otherwise). Cached after the first call.
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

// Writes `content` to `path` (0644, truncating), refusing to follow a symlink. Errors name the path.
status write_file(const std::filesystem::path& path, const std::string& content);
// Reads a regular file written by an untrusted command: symlinks are refused and at most
// `max_bytes` are read (more is an error). Errors name the path.
result<std::string> read_untrusted_file(const std::filesystem::path& path, std::size_t max_bytes);

// A signal number's name ("SIGSEGV"), or "signal N".
std::string signal_name(int signal);

}  // namespace leap::sandbox
