#include "sandbox/cgroup.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <thread>
#include <unistd.h>

namespace leap::sandbox {
namespace {

constexpr long k_cgroup2_magic = 0x63677270;  // CGROUP2_SUPER_MAGIC
constexpr const char* k_root = "/sys/fs/cgroup";

std::string read_small(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool write_text(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  errno = err;
  return ok;
}

bool has_word(const std::string& text, const std::string& word) {
  std::istringstream ss(text);
  for (std::string w; ss >> w;) {
    if (w == word) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream ss(s);
  while (std::getline(ss, part, sep)) {
    out.push_back(part);
  }
  return out;
}

// "key N" in a flat-keyed cgroup file (memory.events, memory.oom_control, cpu.stat).
std::int64_t keyed_value(const std::string& text, const std::string& key) {
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (line.rfind(key + " ", 0) == 0) {
      return std::strtoll(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return -1;
}

std::vector<pid_t> procs_of(const std::string& dir) {
  std::vector<pid_t> pids;
  std::istringstream ss(read_small(dir + "/cgroup.procs"));
  for (long p = 0; ss >> p;) {
    pids.push_back(static_cast<pid_t>(p));
  }
  return pids;
}

void kill_dir(const std::string& dir, int version) {
  if (version == 2) {
    write_text(dir + "/cgroup.kill", "1");  // kernels from 5.14
  }
  // What cgroup.kill did not reach (older kernels, v1): signal each process until none is left.
  // Killed processes leave the list once reaped, which for a pid namespace happens within the
  // namespace's own teardown, so this converges in a few rounds.
  for (int round = 0; round < 400; ++round) {
    const auto pids = procs_of(dir);
    if (pids.empty()) {
      return;
    }
    for (pid_t p : pids) {
      ::kill(p, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 20 ? 1 : 5));
  }
}

bool remove_dir(const std::string& dir, int version) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) {
      return true;
    }
    if (errno != EBUSY) {
      return false;
    }
    kill_dir(dir, version);
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 20 ? 1 : 5));
  }
  return false;
}

cgroup_host detect_v2() {
  cgroup_host h;
  std::string path;
  std::istringstream lines(read_small("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0) {
      path = line.substr(3);
    }
  }
  if (path.empty()) {
    h.why_not = "no cgroup: cgroup v2 without an entry in /proc/self/cgroup";
    return h;
  }
  const std::string dir = path == "/" ? std::string(k_root) : k_root + path;
  // memory is what matters most; pids where it is delegated too (some container hosts hand down
  // memory alone: then RLIMIT_NPROC of the private uid still bounds processes).
  const std::string controllers = read_small(dir + "/cgroup.controllers");
  if (!has_word(controllers, "memory")) {
    h.why_not = "no cgroup: cgroup v2 at " + dir + " has no memory controller to delegate";
    return h;
  }
  const bool pids = has_word(controllers, "pids");
  const std::string wanted = pids ? "+memory +pids" : "+memory";
  auto delegated = [&] {
    const std::string sub = read_small(dir + "/cgroup.subtree_control");
    return has_word(sub, "memory") && (!pids || has_word(sub, "pids"));
  };
  if (!delegated() && !write_text(dir + "/cgroup.subtree_control", wanted)) {
    // "No internal processes": a cgroup that hands controllers to its children holds no process
    // itself. Move its processes (this orchestrator and whatever shares its cgroup, as a
    // container's init does for nested containers) into a leaf beside the runs, then delegate.
    const int err = errno;
    if (err != EBUSY) {
      h.why_not = "no cgroup: cannot enable " + wanted + " in " + dir +
                  "/cgroup.subtree_control: " + std::strerror(err);
      return h;
    }
    const std::string leaf = dir + "/leap-main";
    ::mkdir(leaf.c_str(), 0755);
    for (int round = 0; round < 5 && !procs_of(dir).empty(); ++round) {
      for (pid_t p : procs_of(dir)) {
        write_text(leaf + "/cgroup.procs", std::to_string(p));
      }
    }
    if (!write_text(dir + "/cgroup.subtree_control", wanted)) {
      h.why_not = "no cgroup: cannot enable " + wanted + " in " + dir +
                  "/cgroup.subtree_control: " + std::strerror(errno);
      return h;
    }
  }
  h.v2_pids = pids;
  h.version = 2;
  h.parent = dir;
  h.words = pids ? "cgroup v2 memory,pids,cpu" : "cgroup v2 memory,cpu";
  return h;
}

cgroup_host detect_v1() {
  cgroup_host h;
  // Where each controller's hierarchy is mounted (and which of its directories is that mount's
  // root), and our cgroup in it: our directory is mountpoint + (our path - mount root).
  auto our_dir = [](const std::string& controller) -> std::string {
    std::string root, point;
    std::istringstream mounts(read_small("/proc/self/mountinfo"));
    for (std::string line; std::getline(mounts, line);) {
      const auto dash = line.find(" - ");
      if (dash == std::string::npos) {
        continue;
      }
      std::istringstream tail(line.substr(dash + 3));
      std::string fstype, source, options;
      tail >> fstype >> source >> options;
      if (fstype != "cgroup") {
        continue;
      }
      bool match = false;
      for (const auto& o : split(options, ',')) {
        match = match || o == controller;
      }
      if (!match) {
        continue;
      }
      std::istringstream head(line.substr(0, dash));
      std::string id, parent, devno;
      head >> id >> parent >> devno >> root >> point;
      break;
    }
    if (point.empty()) {
      return {};
    }
    std::istringstream lines(read_small("/proc/self/cgroup"));
    for (std::string line; std::getline(lines, line);) {
      const auto a = line.find(':');
      const auto b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) {
        continue;
      }
      bool match = false;
      for (const auto& c : split(line.substr(a + 1, b - a - 1), ',')) {
        match = match || c == controller;
      }
      if (!match) {
        continue;
      }
      std::string path = line.substr(b + 1);
      if (root != "/" && path.rfind(root, 0) == 0) {
        path = path.substr(root.size());
      }
      const std::string dir = path == "/" || path.empty() ? point : point + path;
      return ::access(dir.c_str(), W_OK) == 0 ? dir : std::string{};
    }
    return {};
  };
  h.memory_parent = our_dir("memory");
  h.pids_parent = our_dir("pids");
  h.cpu_parent = our_dir("cpuacct");
  if (h.memory_parent.empty() && h.pids_parent.empty() && h.cpu_parent.empty()) {
    h.why_not = "no cgroup: no writable memory, pids or cpuacct hierarchy under /sys/fs/cgroup";
    return h;
  }
  h.version = 1;
  h.words = "cgroup v1 ";
  std::string list;
  if (!h.memory_parent.empty()) {
    list += "memory";
  }
  if (!h.pids_parent.empty()) {
    list += std::string(list.empty() ? "" : ",") + "pids";
  }
  if (!h.cpu_parent.empty()) {
    list += std::string(list.empty() ? "" : ",") + "cpuacct";
  }
  h.words += list;
  return h;
}

cgroup_host detect() {
  if (::geteuid() != 0) {
    cgroup_host h;
    h.why_not = "no cgroup: not root";
    return h;
  }
  struct statfs fs {};
  if (::statfs(k_root, &fs) == 0 && static_cast<long>(fs.f_type) == k_cgroup2_magic) {
    return detect_v2();
  }
  return detect_v1();
}

}  // namespace

const cgroup_host& host_cgroups() {
  static const cgroup_host host = detect();
  return host;
}

run_cgroup::~run_cgroup() { destroy(); }

void run_cgroup::close_enter_fds() {
  for (int fd : enter_fds) {
    ::close(fd);
  }
  enter_fds.clear();
}

bool run_cgroup::create(const cgroup_host& host, uid_t uid, std::uint64_t memory_bytes,
                        int processes, std::string* why) {
  version_ = host.version;
  const std::string name = "/leap-run-" + std::to_string(uid);
  auto make = [&](const std::string& dir) {
    if (::mkdir(dir.c_str(), 0755) < 0) {
      if (errno != EEXIST) {
        return false;
      }
      // Left by an orchestrator that died mid-run (the uid is ours now, so nothing else uses it).
      if (!remove_dir(dir, version_) || ::mkdir(dir.c_str(), 0755) < 0) {
        return false;
      }
    }
    dirs_.push_back(dir);
    return true;
  };
  auto fail = [&](const std::string& what) {
    *why = "no cgroup: " + what + ": " + std::strerror(errno);
    destroy();
    return false;
  };
  auto open_procs = [&](const std::string& dir) {
    const int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      enter_fds.push_back(fd);
    }
    return fd >= 0;
  };
  const std::string mem_limit = memory_bytes > 0 ? std::to_string(memory_bytes) : "max";
  const std::string pids_limit =
      processes > 0 ? std::to_string(processes + 1) : "max";  // + the supervisor
  if (version_ == 2) {
    const std::string dir = host.parent + name;
    if (!make(dir)) {
      return fail("mkdir " + dir);
    }
    if (!write_text(dir + "/memory.max", mem_limit)) {
      return fail(dir + "/memory.max");
    }
    write_text(dir + "/memory.swap.max", "0");  // absent without swap accounting
    // One OOM kill ends the whole tree, not just its largest process.
    write_text(dir + "/memory.oom.group", "1");
    if (host.v2_pids && !write_text(dir + "/pids.max", pids_limit)) {
      return fail(dir + "/pids.max");
    }
    memory_dir_ = dir;
    cpu_fd_ = ::open((dir + "/cpu.stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (!open_procs(dir)) {
      return fail(dir + "/cgroup.procs");
    }
    return true;
  }
  if (!host.memory_parent.empty()) {
    const std::string dir = host.memory_parent + name;
    if (!make(dir)) {
      return fail("mkdir " + dir);
    }
    if (memory_bytes > 0) {
      if (!write_text(dir + "/memory.limit_in_bytes", mem_limit)) {
        return fail(dir + "/memory.limit_in_bytes");
      }
      write_text(dir + "/memory.memsw.limit_in_bytes",
                 mem_limit);  // no swapping past it either, where accounted
    }
    memory_dir_ = dir;
    // OOM notification: the whole tree is stopped at the first OOM kill (v1 kills one process).
    oom_event_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int control = ::open((dir + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC);
    if (oom_event_fd >= 0 && control >= 0) {
      write_text(dir + "/cgroup.event_control",
                 std::to_string(oom_event_fd) + " " + std::to_string(control));
    }
    if (control >= 0) {
      ::close(control);
    }
    if (!open_procs(dir)) {
      return fail(dir + "/cgroup.procs");
    }
  }
  if (!host.pids_parent.empty()) {
    const std::string dir = host.pids_parent + name;
    if (!make(dir)) {
      return fail("mkdir " + dir);
    }
    if (!write_text(dir + "/pids.max", pids_limit)) {
      return fail(dir + "/pids.max");
    }
    if (!open_procs(dir)) {
      return fail(dir + "/cgroup.procs");
    }
  }
  if (!host.cpu_parent.empty()) {
    const std::string dir = host.cpu_parent + name;
    if (!make(dir)) {
      return fail("mkdir " + dir);
    }
    cpu_fd_ = ::open((dir + "/cpuacct.usage").c_str(), O_RDONLY | O_CLOEXEC);
    if (!open_procs(dir)) {
      return fail(dir + "/cgroup.procs");
    }
  }
  return true;
}

std::int64_t run_cgroup::cpu_ns() const {
  if (cpu_fd_ < 0) {
    return -1;
  }
  char buf[512];
  const ssize_t n = ::pread(cpu_fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) {
    return -1;
  }
  buf[n] = '\0';
  if (version_ == 1) {
    return std::strtoll(buf, nullptr, 10);
  }
  const std::int64_t usec = keyed_value(buf, "usage_usec");
  return usec < 0 ? -1 : usec * 1000;
}

std::uint64_t run_cgroup::oom_kills() const {
  if (memory_dir_.empty()) {
    return 0;
  }
  const std::int64_t n = keyed_value(
      read_small(memory_dir_ + (version_ == 2 ? "/memory.events" : "/memory.oom_control")),
      "oom_kill");
  return n > 0 ? static_cast<std::uint64_t>(n) : 0;
}

void run_cgroup::kill_all() const {
  for (const auto& dir : dirs_) {
    kill_dir(dir, version_);
  }
}

void run_cgroup::destroy() {
  close_enter_fds();
  if (oom_event_fd >= 0) {
    ::close(oom_event_fd);
  }
  oom_event_fd = -1;
  if (cpu_fd_ >= 0) {
    ::close(cpu_fd_);
  }
  cpu_fd_ = -1;
  for (const auto& dir : dirs_) {
    remove_dir(dir, version_);
  }
  dirs_.clear();
  memory_dir_.clear();
}

}  // namespace leap::sandbox
