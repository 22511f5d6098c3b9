#include "sandbox/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <sstream>

namespace leap::sandbox {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr uid_t k_uid_first = 61000;
constexpr uid_t k_uid_count = 1000;

std::string errno_text(int err) { return std::strerror(err); }

// Private uids are handed out one per concurrent run, so that RLIMIT_NPROC counts exactly that run's
// processes, `kill(-1)` inside the run reaches only the run, and no two runs can touch each other.
// Other orchestrator processes on the host use the same range: a uid is also claimed host-wide by
// binding an abstract unix socket named after it, which the kernel releases when the holder exits.
class uid_pool {
 public:
  uid_t acquire() {
    std::unique_lock lock(mutex_);
    for (;;) {
      for (uid_t i = 0; i < k_uid_count; ++i) {
        const uid_t slot = (next_ + i) % k_uid_count;
        if (claims_[slot] >= 0) continue;
        const int fd = claim(k_uid_first + slot);
        if (fd < 0) continue;
        claims_[slot] = fd;
        next_ = (slot + 1) % k_uid_count;
        return k_uid_first + slot;
      }
      // Every uid is busy (here or in other processes): wait for a release, or re-scan shortly.
      freed_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }
  void release(uid_t uid) {
    {
      std::lock_guard lock(mutex_);
      auto& fd = claims_[uid - k_uid_first];
      ::close(fd);
      fd = -1;
    }
    freed_.notify_one();
  }

 private:
  static int claim(uid_t uid) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const int len = std::snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "leap-sandbox-uid-%u", uid);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), static_cast<socklen_t>(sizeof(sa_family_t) + 1 + len)) < 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  std::mutex mutex_;
  std::condition_variable freed_;
  std::array<int, k_uid_count> claims_ = [] {
    std::array<int, k_uid_count> a{};
    a.fill(-1);
    return a;
  }();
  uid_t next_ = 0;
};

uid_pool& uids() {
  static uid_pool pool;
  return pool;
}

struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  explicit fd_guard(int f) : fd(f) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// What the supervisor (the clone child) reports through the status pipe.
enum report_kind : int { wait_status = 1, exec_failed = 2, setup_failed = 3 };
struct report {
  int kind;
  int value;  // wait status, or errno
  int step;   // which setup step failed
};

// Everything the clone child needs, prepared before clone: after clone in a multi-threaded process
// only async-signal-safe calls are allowed, so no allocation happens there.
struct child_plan {
  const char* exe = nullptr;
  std::vector<char*> argv;
  std::vector<char*> envp_private_tmp;  // HOME=TMPDIR=/tmp (working dir bound on /tmp)
  std::vector<char*> envp_workdir;      // HOME=TMPDIR=<working dir> (no private tmpfs)
  int workdir_fd = -1;
  const char* workdir_path = nullptr;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, status_fd = -1;
  int pass_fd = -1;  // becomes the command's descriptor 3; at least 10, so stdio's dup2 cannot hit it
  bool namespaces = false;
  bool drop_privileges = false;
  bool isolate_network = false;
  uid_t uid = 0;
  resource_limits limits;
  char tmpfs_options[64] = {};
};

void child_report(int fd, int kind, int value, int step) {
  report r{kind, value, step};
  // A short write to a pipe of this size is atomic; nothing useful can be done if it fails.
  [[maybe_unused]] auto n = ::write(fd, &r, sizeof r);
}

// Closes every descriptor from 3 up except those in `keep` (async-signal-safe: no allocation).
void close_all_except(std::initializer_list<int> keep) {
  std::array<int, 8> k{};
  std::size_t n = 0;
  for (int fd : keep) {
    if (fd >= 3 && n < k.size()) k[n++] = fd;
  }
  // Insertion sort: std::sort's unrolled paths make g++ warn about bounds it never reaches.
  for (std::size_t i = 1; i < n; ++i) {
    for (std::size_t j = i; j > 0 && k[j - 1] > k[j]; --j) std::swap(k[j - 1], k[j]);
  }
  const auto close_span = [](unsigned lo, unsigned hi) {
    if (::syscall(SYS_close_range, lo, hi, 0U) == 0) return;
    // Kernels before 5.9 lack close_range: close one by one up to the descriptor limit.
    rlimit rl{};
    const unsigned limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                               ? static_cast<unsigned>(std::min<rlim_t>(rl.rlim_cur, 1U << 20))
                               : 1U << 16;
    for (unsigned fd = lo; fd <= hi && fd < limit; ++fd) ::close(static_cast<int>(fd));
  };
  unsigned first = 3;
  for (std::size_t i = 0; i < n; ++i) {
    const auto fd = static_cast<unsigned>(k[i]);
    if (fd > first) close_span(first, fd - 1);
    first = std::max(first, fd + 1);
  }
  close_span(first, ~0U);
}

void set_limit(int resource, rlim_t value) {
  rlimit rl{value, value};
  ::setrlimit(resource, &rl);
}

// Runs in the clone child: the run's supervisor. In namespace mode it is pid 1 of a fresh pid
// namespace, so when it exits the kernel kills every process the command left behind.
[[noreturn]] void supervise(const child_plan& plan) {
  int status_fd = plan.status_fd;
  // First of all, drop every descriptor the orchestrator had open but this run does not need. Another
  // thread may be writing a candidate executable at this moment: a copy of that write descriptor held
  // here would make its exec fail with ETXTBSY for as long as this process keeps it.
  close_all_except({plan.stdin_fd, plan.stdout_fd, plan.stderr_fd, status_fd, plan.workdir_fd, plan.pass_fd});
  // Dies with the thread that started it, so an orchestrator crash leaves nothing behind.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::setsid() < 0) {
    child_report(status_fd, setup_failed, errno, 1);
    ::_exit(120);
  }
  bool private_tmp = false;
  if (plan.namespaces) {
    // Mount changes stay inside the new mount namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) {
      // The working directory becomes the command's /tmp, so whatever it writes to /tmp lands in the
      // scratch directory and is removed with it; /var/tmp and /dev/shm get small private tmpfs.
      private_tmp = ::mount(plan.workdir_path, "/tmp", nullptr, MS_BIND, nullptr) == 0;
      ::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, plan.tmpfs_options);
      ::mount("tmpfs", "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV, plan.tmpfs_options);
      // A /proc of the new pid namespace: the command sees only its own processes.
      ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
    }
  } else if (plan.isolate_network) {
    // Unprivileged fallback: a user namespace makes a network namespace possible where the kernel
    // allows unprivileged user namespaces. Failure leaves the network reachable (reported).
    ::unshare(CLONE_NEWUSER | CLONE_NEWNET);
  }
  if ((private_tmp ? ::chdir("/tmp") : ::fchdir(plan.workdir_fd)) < 0) {
    child_report(status_fd, setup_failed, errno, 2);
    ::_exit(120);
  }
  if (plan.drop_privileges && ::fchown(plan.workdir_fd, plan.uid, plan.uid) < 0) {
    child_report(status_fd, setup_failed, errno, 3);
    ::_exit(120);
  }
  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0) {
    child_report(status_fd, setup_failed, errno, 4);
    ::_exit(120);
  }
  if (plan.pass_fd >= 0) {
    if (status_fd == 3) status_fd = ::fcntl(3, F_DUPFD_CLOEXEC, 10);
    if (status_fd < 0 || ::dup2(plan.pass_fd, 3) < 0) {
      child_report(status_fd < 0 ? plan.status_fd : status_fd, setup_failed, errno, 4);
      ::_exit(120);
    }
  }
  // Keep only stdio, the passed descriptor and the status pipe (CLOEXEC, so exec drops it too).
  close_all_except({0, 1, 2, plan.pass_fd >= 0 ? 3 : 0, status_fd});

  // Raw clone, not glibc's fork(): this process was cloned from a multi-threaded one without glibc's
  // fork handling, so glibc's fork would take locks (malloc, stdio) that another thread of the
  // orchestrator may have held at clone time, and never return.
  const pid_t command = static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
  if (command < 0) {
    child_report(status_fd, setup_failed, errno, 5);
    ::_exit(120);
  }
  if (command == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    // The orchestrator's threads block the stop signals they route elsewhere; the command starts
    // with none blocked, so that SIGTERM at its deadline ends it.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const auto& l = plan.limits;
    if (l.cpu_seconds > 0) {
      rlimit rl{static_cast<rlim_t>(l.cpu_seconds), static_cast<rlim_t>(l.cpu_seconds) + 1};
      ::setrlimit(RLIMIT_CPU, &rl);
    }
    set_limit(RLIMIT_FSIZE, l.file_size_bytes);
    set_limit(RLIMIT_NOFILE, static_cast<rlim_t>(l.open_files));
    set_limit(RLIMIT_CORE, 0);
    if (l.address_space_bytes > 0) set_limit(RLIMIT_AS, l.address_space_bytes);
    if (plan.drop_privileges) {
      set_limit(RLIMIT_NPROC, static_cast<rlim_t>(l.processes));
      // Raw syscalls: glibc's wrappers would broadcast the change to the orchestrator's threads,
      // which it still believes exist here, and wait for them forever.
      if (::syscall(SYS_setgroups, 0, nullptr) < 0 || ::syscall(SYS_setresgid, plan.uid, plan.uid, plan.uid) < 0 ||
          ::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) < 0) {
        child_report(status_fd, setup_failed, errno, 6);
        ::_exit(120);
      }
    } else if (l.processes > 0) {
      set_limit(RLIMIT_NPROC, static_cast<rlim_t>(l.processes));
    }
    // No setuid binary can give the command privileges back.
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    char* const* envp = private_tmp ? plan.envp_private_tmp.data() : plan.envp_workdir.data();
    // ETXTBSY: a run cloned by another thread in the instant this run's executable was still open
    // for writing holds a copy of that descriptor until its first step closes it (microseconds).
    for (int attempt = 0;; ++attempt) {
      ::execve(plan.exe, plan.argv.data(), envp);
      if (errno != ETXTBSY || attempt == 200) break;
      timespec pause{0, 5'000'000};
      ::nanosleep(&pause, nullptr);
    }
    child_report(status_fd, exec_failed, errno, 0);
    ::_exit(127);
  }
  // The supervisor holds no end of the command's pipes, so their EOF means the command's side closed.
  ::close(0);
  ::close(1);
  ::close(2);
  for (;;) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    if (pid == command) {
      child_report(status_fd, wait_status, st, 0);
      ::_exit(0);
    }
    if (pid < 0 && errno != EINTR) ::_exit(121);
  }
}

int do_clone3(std::uint64_t flags, int* pidfd) {
  clone_args args{};
  args.flags = flags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<std::uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return static_cast<int>(::syscall(SYS_clone3, &args, sizeof args));
}

std::string resolve_executable(const std::string& name,
                               const std::vector<std::pair<std::string, std::string>>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& [k, v] : env) {
    if (k == "PATH") path = v;
  }
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

void kill_uid_processes(uid_t uid) {
  // A process switched to the run's uid may signal exactly the run's processes: kill(-1) from it
  // reaches every one of them, including those that left the session.
  const pid_t killer = ::fork();
  if (killer == 0) {
    if (::setresuid(uid, uid, uid) == 0) ::kill(-1, SIGKILL);
    ::_exit(0);
  }
  if (killer > 0) {
    int st = 0;
    while (::waitpid(killer, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

bool read_proc_status(pid_t pid, uid_t* uid, pid_t* sid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::ifstream stat(path);
  std::string line;
  if (!std::getline(stat, line)) return false;
  // Fields after the command name (which may contain spaces): state ppid pgrp session ...
  const auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  char state = 0;
  pid_t ppid = 0, pgrp = 0, session = 0;
  rest >> state >> ppid >> pgrp >> session;
  *sid = session;
  std::snprintf(path, sizeof path, "/proc/%d/status", pid);
  std::ifstream status(path);
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) == 0) {
      *uid = static_cast<uid_t>(std::stoul(line.substr(4)));
      return true;
    }
  }
  return false;
}

template <class Pred>
std::vector<pid_t> scan_processes(Pred pred) {
  std::vector<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    uid_t uid = 0;
    pid_t sid = 0;
    if (read_proc_status(static_cast<pid_t>(pid), &uid, &sid) && pred(uid, sid)) {
      found.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(dir);
  return found;
}

// Keeps the first bytes of a stream and its last quarter-cap, so that the final lines (a harness's
// error report after a flood of device printf) survive truncation.
class capture {
 public:
  explicit capture(std::size_t cap) : head_cap_(cap - cap / 4), tail_cap_(cap / 4) {}
  void append(const char* data, std::size_t n) {
    total_ += n;
    const std::size_t to_head = std::min(n, head_cap_ - std::min(head_cap_, head_.size()));
    head_.append(data, to_head);
    data += to_head;
    n -= to_head;
    if (n == 0) return;
    truncated_ = true;
    tail_.append(data, n);
    if (tail_.size() > 2 * tail_cap_ + 65536) tail_.erase(0, tail_.size() - tail_cap_);
  }
  void finish(std::string* text, std::uint64_t* total, bool* truncated) {
    if (tail_.size() > tail_cap_) tail_.erase(0, tail_.size() - tail_cap_);
    const std::uint64_t dropped = total_ - head_.size() - tail_.size();
    *text = head_;
    if (dropped > 0) *text += "\n[... " + std::to_string(dropped) + " bytes not kept ...]\n";
    *text += tail_;
    *total = total_;
    *truncated = truncated_ && dropped > 0;
  }

 private:
  std::size_t head_cap_;
  std::size_t tail_cap_;
  std::string head_;
  std::string tail_;
  std::uint64_t total_ = 0;
  bool truncated_ = false;
};

}  // namespace

uid_range sandbox_uids() { return {k_uid_first, k_uid_count}; }

std::string signal_name(int signal) {
  static const std::array<std::pair<int, const char*>, 16> names{{
      {SIGSEGV, "SIGSEGV"}, {SIGABRT, "SIGABRT"}, {SIGFPE, "SIGFPE"},   {SIGBUS, "SIGBUS"},
      {SIGILL, "SIGILL"},   {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGPIPE, "SIGPIPE"}, {SIGTRAP, "SIGTRAP"}, {SIGINT, "SIGINT"},
      {SIGHUP, "SIGHUP"},   {SIGSYS, "SIGSYS"},   {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
  }};
  for (const auto& [n, name] : names) {
    if (n == signal) return name;
  }
  return "signal " + std::to_string(signal);
}

std::string isolation_summary() {
  static const std::string summary = ::geteuid() == 0 ? "namespaces+uid" : "fallback";
  return summary;
}

std::vector<pid_t> processes_with_uid_in(uid_range range) {
  return scan_processes(
      [&](uid_t uid, pid_t) { return uid >= range.first && uid < range.first + range.count; });
}

std::vector<pid_t> processes_in_session(pid_t sid) {
  return scan_processes([&](uid_t, pid_t s) { return s == sid; });
}

result<run_result> run_isolated(const run_request& request) {
  // The passed descriptor is the call's from here on, closed on every return (see run_request).
  fd_guard passed(request.pass_fd);
  if (request.argv.empty()) return error{"run_isolated: empty argv"};
  if (request.stdin_data.size() > (64U << 10)) return error{"run_isolated: stdin_data over 64 KiB"};
  const std::string exe = resolve_executable(request.argv[0], request.env);
  if (exe.empty()) return error{"run_isolated: '" + request.argv[0] + "' not found on the run's PATH"};

  fd_guard workdir(::open(request.working_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (workdir.fd < 0) {
    return error{"run_isolated: working directory " + request.working_dir.string() + ": " +
                 errno_text(errno)};
  }

  // Argument and environment storage outlives the clone child's use of it (the child execs or exits
  // before this frame returns).
  std::vector<std::string> env_private, env_workdir;
  for (const auto& [k, v] : request.env) {
    if (k == "HOME" || k == "TMPDIR") continue;
    env_private.push_back(k + "=" + v);
  }
  env_workdir = env_private;
  env_private.push_back("HOME=/tmp");
  env_private.push_back("TMPDIR=/tmp");
  const std::string wd = std::filesystem::absolute(request.working_dir).string();
  env_workdir.push_back("HOME=" + wd);
  env_workdir.push_back("TMPDIR=" + wd);

  child_plan plan;
  plan.exe = exe.c_str();
  auto to_ptrs = [](std::vector<std::string>& strings, std::vector<char*>& out) {
    for (auto& s : strings) out.push_back(s.data());
    out.push_back(nullptr);
  };
  std::vector<std::string> argv = request.argv;
  to_ptrs(argv, plan.argv);
  to_ptrs(env_private, plan.envp_private_tmp);
  to_ptrs(env_workdir, plan.envp_workdir);
  plan.limits = request.limits;
  plan.isolate_network = request.isolate_network;
  std::snprintf(plan.tmpfs_options, sizeof plan.tmpfs_options, "size=%llu,mode=1777",
                static_cast<unsigned long long>(request.limits.tmpfs_bytes));
  plan.workdir_fd = workdir.fd;
  plan.workdir_path = wd.c_str();
  fd_guard pass_high;
  if (passed.fd >= 0) {
    pass_high.fd = ::fcntl(passed.fd, F_DUPFD_CLOEXEC, 10);
    if (pass_high.fd < 0) return error{"run_isolated: pass_fd: " + errno_text(errno)};
    passed.reset();
    plan.pass_fd = pass_high.fd;
  }

  int p_in[2], p_out[2], p_err[2], p_status[2];
  if (::pipe2(p_in, O_CLOEXEC) < 0) return error{"run_isolated: pipe: " + errno_text(errno)};
  fd_guard in_r(p_in[0]), in_w(p_in[1]);
  if (::pipe2(p_out, O_CLOEXEC) < 0) return error{"run_isolated: pipe: " + errno_text(errno)};
  fd_guard out_r(p_out[0]), out_w(p_out[1]);
  if (::pipe2(p_err, O_CLOEXEC) < 0) return error{"run_isolated: pipe: " + errno_text(errno)};
  fd_guard err_r(p_err[0]), err_w(p_err[1]);
  if (::pipe2(p_status, O_CLOEXEC) < 0) return error{"run_isolated: pipe: " + errno_text(errno)};
  fd_guard status_r(p_status[0]), status_w(p_status[1]);
  plan.stdin_fd = in_r.fd;
  plan.stdout_fd = out_w.fd;
  plan.stderr_fd = err_w.fd;
  plan.status_fd = status_w.fd;

  const bool root = ::geteuid() == 0;
  plan.drop_privileges = root;
  run_result out;
  if (root) {
    plan.uid = uids().acquire();
    out.run_uid = plan.uid;
  } else {
    out.run_uid = ::getuid();
  }
  struct uid_release {
    bool active;
    uid_t uid;
    ~uid_release() {
      if (active) uids().release(uid);
    }
  } release_uid{root, plan.uid};

  const auto started = clock_type::now();
  int pidfd = -1;
  int pid = -1;
  std::string isolation;
  if (root) {
    std::uint64_t flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC;
    if (request.isolate_network) flags |= CLONE_NEWNET;
    plan.namespaces = true;
    pid = do_clone3(flags, &pidfd);
    if (pid == 0) supervise(plan);
    if (pid < 0) {
      isolation = "fallback: namespaces refused (" + errno_text(errno) + "); session and uid only";
      plan.namespaces = false;
    } else {
      isolation = std::string("pid,mnt,ipc") + (request.isolate_network ? ",net" : "") +
                  " namespaces; uid " + std::to_string(plan.uid);
    }
  }
  if (pid < 0) {
    pid = do_clone3(0, &pidfd);
    if (pid == 0) supervise(plan);
    if (pid < 0) return error{"run_isolated: clone3: " + errno_text(errno)};
    if (isolation.empty()) {
      isolation = "fallback: not root, session and rlimits only (no private uid; network namespace only "
                  "where unprivileged user namespaces are allowed)";
    }
  }
  fd_guard pid_guard(pidfd);
  out.isolation = isolation;
  out.session_id = pid;
  in_r.reset();
  out_w.reset();
  err_w.reset();
  status_w.reset();
  pass_high.reset();

  // Feed stdin (fits the pipe buffer, so this never blocks), then close it.
  if (!request.stdin_data.empty()) {
    ::fcntl(in_w.fd, F_SETFL, O_NONBLOCK);
    [[maybe_unused]] auto n = ::write(in_w.fd, request.stdin_data.data(), request.stdin_data.size());
  }
  in_w.reset();

  ::fcntl(out_r.fd, F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.fd, F_SETFL, O_NONBLOCK);
  auto deadline = started + request.limits.wall;
  bool term_sent = false;
  bool reaped = false;
  bool out_open = true, err_open = true;
  siginfo_t info{};
  std::array<char, 65536> buffer{};

  capture out_capture(request.limits.output_cap_bytes), err_capture(request.limits.output_cap_bytes);
  auto drain = [&](int fd, capture& into, bool& open) {
    for (;;) {
      const ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n > 0) {
        into.append(buffer.data(), static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0) open = false;
      if (n < 0 && errno == EINTR) continue;
      return;
    }
  };

  while (!reaped) {
    const auto now = clock_type::now();
    if (now >= deadline) {
      if (!term_sent) {
        out.timed_out = true;
        term_sent = true;
        ::kill(-pid, SIGTERM);
        deadline = now + request.limits.kill_grace;
      } else {
        ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
        ::kill(-pid, SIGKILL);
        deadline = now + std::chrono::seconds(5);  // the kernel reaps a killed group promptly
      }
      continue;
    }
    std::array<pollfd, 3> fds{};
    nfds_t count = 0;
    fds[count++] = {pidfd, POLLIN, 0};
    const nfds_t out_index = out_open ? count : 99;
    if (out_open) fds[count++] = {out_r.fd, POLLIN, 0};
    const nfds_t err_index = err_open ? count : 99;
    if (err_open) fds[count++] = {err_r.fd, POLLIN, 0};
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    const int ready = ::poll(fds.data(), count, static_cast<int>(wait_ms));
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (out_index != 99 && fds[out_index].revents != 0) {
      drain(out_r.fd, out_capture, out_open);
    }
    if (err_index != 99 && fds[err_index].revents != 0) {
      drain(err_r.fd, err_capture, err_open);
    }
    if (fds[0].revents != 0) {
      if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED) == 0) {
        reaped = true;
      }
    }
  }
  out.wall = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - started);
  if (!reaped) {
    // poll failed: still never leave a zombie.
    ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);
  }

  // Outside a pid namespace the supervisor's exit kills nothing: kill the group, then everything of
  // the run's uid (processes that left the session).
  if (!plan.namespaces) {
    ::kill(-pid, SIGKILL);
    if (plan.drop_privileges) kill_uid_processes(plan.uid);
    for (pid_t p : processes_in_session(pid)) ::kill(p, SIGKILL);
  }

  // Everything that could write is dead (namespace mode) or killed; collect the rest, bounded in
  // time in case a process outside our reach still holds a pipe open.
  const auto drain_deadline = clock_type::now() + std::chrono::milliseconds(200);
  while ((out_open || err_open) && clock_type::now() < drain_deadline) {
    std::array<pollfd, 2> fds{};
    nfds_t count = 0;
    if (out_open) fds[count++] = {out_r.fd, POLLIN, 0};
    if (err_open) fds[count++] = {err_r.fd, POLLIN, 0};
    if (::poll(fds.data(), count, 50) <= 0) break;
    if (out_open) drain(out_r.fd, out_capture, out_open);
    if (err_open) drain(err_r.fd, err_capture, err_open);
  }

  out_capture.finish(&out.stdout_text, &out.stdout_bytes, &out.stdout_truncated);
  err_capture.finish(&out.stderr_text, &out.stderr_bytes, &out.stderr_truncated);

  report r{};
  const ssize_t n = ::read(status_r.fd, &r, sizeof r);
  if (n == static_cast<ssize_t>(sizeof r) && r.kind == wait_status) {
    if (WIFEXITED(r.value)) {
      out.exited = true;
      out.exit_code = WEXITSTATUS(r.value);
    } else if (WIFSIGNALED(r.value)) {
      out.signal = WTERMSIG(r.value);
    }
  } else if (n == static_cast<ssize_t>(sizeof r) && r.kind == exec_failed) {
    return error{"run_isolated: cannot execute '" + exe + "': " + errno_text(r.value)};
  } else if (n == static_cast<ssize_t>(sizeof r) && r.kind == setup_failed) {
    return error{"run_isolated: sandbox setup step " + std::to_string(r.step) + " failed: " +
                 errno_text(r.value)};
  } else {
    // The supervisor died before the command finished: killed at the deadline, or by the command.
    out.signal = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED ? info.si_status : SIGKILL;
  }
  if (out.timed_out && out.exited) {
    // It finished within the grace period after SIGTERM: still a timeout.
    out.exited = false;
    out.signal = SIGTERM;
  }
  return out;
}

std::filesystem::path default_scratch_root() {
  std::error_code ec;
  auto tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return tmp / "leap-sandbox";
}

result<scratch_dir> scratch_dir::create(const std::filesystem::path& root, const std::string& prefix) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return error{"scratch root " + root.string() + ": " + ec.message()};
  ::chmod(root.c_str(), 0711);
  std::string templ = (root / (prefix + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) {
    return error{"scratch directory under " + root.string() + ": " + errno_text(errno)};
  }
  return scratch_dir(templ);
}

scratch_dir::scratch_dir(scratch_dir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }

scratch_dir& scratch_dir::operator=(scratch_dir&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

scratch_dir::~scratch_dir() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // best effort: a destructor has no one to report to
  }
}

status write_file(const std::filesystem::path& path, const std::string& content) {
  fd_guard fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (fd.fd < 0) return error{"cannot write " + path.string() + ": " + errno_text(errno)};
  std::size_t done_bytes = 0;
  while (done_bytes < content.size()) {
    const ssize_t n = ::write(fd.fd, content.data() + done_bytes, content.size() - done_bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return error{"cannot write " + path.string() + ": " + errno_text(errno)};
    }
    done_bytes += static_cast<std::size_t>(n);
  }
  return ok_status();
}

result<std::string> read_untrusted_file(const std::filesystem::path& path, std::size_t max_bytes) {
  fd_guard fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (fd.fd < 0) return error{"cannot read " + path.filename().string() + ": " + errno_text(errno)};
  struct stat st {};
  if (::fstat(fd.fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    return error{path.filename().string() + " is not a regular file"};
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return error{path.filename().string() + " is larger than " + std::to_string(max_bytes) + " bytes"};
  }
  std::string content(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < content.size()) {
    const ssize_t n = ::read(fd.fd, content.data() + got, content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  content.resize(got);
  return content;
}

}  // namespace leap::sandbox
