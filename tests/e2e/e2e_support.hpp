// Helpers shared by the end-to-end tests: a child `leap` process read through a pipe, a one-shot
// `leap` run, a shell runner, a scratch folder holding a few tasks of sandbox/suite, and a file
// reader. Every wait takes a deadline, so a hang fails a test instead of stalling it.
// Header-only; LEAP_BINARY and LEAP_SOURCE_DIR come from tests/CMakeLists.txt.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <poll.h>
#include <regex>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace leap::e2e {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// How a child that is still running when its `leap_process` is destroyed gets stopped.
enum class stop_with {
  sigkill,  // SIGKILL, then reaped.
  sigterm,  // SIGTERM and up to 60 s for a clean exit (a daemon stops its children), then SIGKILL.
};

// A child `leap` process whose stdout and stderr are read through one non-blocking pipe.
// Guarantees: every read/wait has a deadline; the child never outlives this object (it is stopped
// as `stop` says and reaped in the destructor); `cwd`, when not empty, is the child's folder.
class leap_process {
 public:
  explicit leap_process(const std::vector<std::string>& args, const std::string& cwd = "",
                        stop_with stop = stop_with::sigkill)
      : stop_(stop) {
    // Everything the child needs is made before the fork: in a process with other threads (a
    // test's HTTP server), the child may only make async-signal-safe calls, no allocation.
    std::string binary = LEAP_BINARY;
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    argv.push_back(binary.data());
    for (auto& a : copy) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe(fds) != 0) {
      return;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
        ::_exit(126);
      }
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~leap_process() {
    if (pid_ > 0 && !exited_) {
      if (stop_ == stop_with::sigterm) {
        ::kill(pid_, SIGTERM);
        if (!wait(std::chrono::seconds(60))) {
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, nullptr, 0);
        }
      } else {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
    }
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  leap_process(const leap_process&) = delete;
  leap_process& operator=(const leap_process&) = delete;

  // Reads output until `done(output)` holds or the deadline passes; returns whether it held.
  template <class Predicate>
  bool read_until(Predicate done, std::chrono::seconds timeout) {
    const auto deadline = clock_type::now() + timeout;
    while (!done(output_)) {
      if (clock_type::now() > deadline) {
        return false;
      }
      if (!pump(100)) {
        return done(output_);  // the pipe closed: the process is gone; one last look
      }
    }
    return true;
  }

  // Reads output until `pattern` matches or the deadline passes; returns the match.
  std::optional<std::smatch> wait_for(const std::regex& pattern, std::chrono::seconds timeout) {
    const auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
      std::smatch m;
      if (std::regex_search(output_, m, pattern)) {
        return m;
      }
      if (!pump(100)) {
        break;
      }
    }
    std::smatch m;
    if (std::regex_search(output_, m, pattern)) {
      return m;
    }
    return std::nullopt;
  }

  // Reads what is there, waiting at most `timeout_ms` for something to come.
  void drain(int timeout_ms) {
    pump(timeout_ms);
    while (has_more() && pump(0)) {
    }
  }

  // Waits for the exit, reading output meanwhile; nullopt on timeout (the process keeps running
  // until it is signalled or this object is destroyed).
  std::optional<int> wait(std::chrono::seconds timeout) {
    const auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
      pump(100);
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        while (pump(0)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return std::nullopt;
  }

  void signal(int sig) const { ::kill(pid_, sig); }
  [[nodiscard]] pid_t pid() const { return pid_; }

  // SIGKILL and reap now.
  void kill9() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    exited_ = true;
  }

  [[nodiscard]] const std::string& output() const { return output_; }

 private:
  bool has_more() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  // false once the pipe is closed.
  bool pump(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) {
      return true;
    }
    char buffer[4096];
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n > 0) {
      output_.append(buffer, static_cast<std::size_t>(n));
      return true;
    }
    return n < 0 && errno == EAGAIN;
  }

  stop_with stop_ = stop_with::sigkill;
  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  std::string output_;
};

struct finished {
  int exit_code = -1;
  std::string output;
};

// Runs `leap args` (in `cwd` when not empty) to its end; a run past `timeout` fails the test
// (EXPECT) and gives exit code -1, and the process is then stopped as `stop` says.
inline finished run_leap(const std::vector<std::string>& args, std::chrono::seconds timeout,
                         const std::string& cwd = "", stop_with stop = stop_with::sigkill) {
  leap_process p(args, cwd, stop);
  auto code = p.wait(timeout);
  EXPECT_TRUE(code.has_value()) << "leap timed out:\n" << p.output();
  return {code.value_or(-1), p.output()};
}

struct run_output {
  int exit_code = -1;
  std::string text;  // stdout (and stderr when asked)
};

// Runs a shell command under `timeout`, so that a hang fails the test instead of stalling it.
// The exit code is -1 when the command did not exit normally.
inline run_output shell(const std::string& command, int timeout_s, bool with_stderr = true) {
  const std::string line = "timeout " + std::to_string(timeout_s) + " " + command +
                           (with_stderr ? " 2>&1" : " 2>/dev/null");
  run_output out;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) {
    return out;
  }
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) {
    out.text += buffer.data();
  }
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// `s` in single quotes, for a shell line (s must hold no single quote).
inline std::string quoted(const std::string& s) { return "'" + s + "'"; }

// `leap ARGS` through the shell (ARGS is shell text), stdout and stderr together, bounded.
inline run_output leap_shell(const std::string& args, int timeout_s = 60) {
  return shell(quoted(LEAP_BINARY) + " " + args, timeout_s);
}

// The whole file; empty when it cannot be read.
inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Copies the named tasks of the project's sandbox/suite to ROOT/suite/TASK.
inline void copy_suite_tasks(const fs::path& root, std::initializer_list<const char*> tasks) {
  const fs::path suite = fs::path(LEAP_SOURCE_DIR) / "sandbox" / "suite";
  for (const char* task : tasks) {
    fs::create_directories(root / "suite" / task);
    fs::copy(suite / task, root / "suite" / task, fs::copy_options::recursive);
  }
}

// A private folder, TMP/leap-e2e-NAME-PID-N (N unique within the process), holding the given
// tasks under root()/suite; created fresh and removed, with everything in it, at the end.
// A CSV file as rows of name -> value.
inline std::vector<std::map<std::string, std::string>> read_csv(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::map<std::string, std::string>> rows;
  std::string header_line;
  if (!std::getline(in, header_line)) {
    return rows;
  }
  std::vector<std::string> header;
  std::stringstream hs(header_line);
  for (std::string h; std::getline(hs, h, ',');) {
    header.push_back(h);
  }
  for (std::string line; std::getline(in, line);) {
    std::map<std::string, std::string> row;
    std::stringstream ls(line);
    std::size_t i = 0;
    for (std::string cell; std::getline(ls, cell, ',') && i < header.size(); ++i) {
      row[header[i]] = cell;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

class scratch_dir {
 public:
  scratch_dir(const std::string& name, std::initializer_list<const char*> tasks) {
    root_ = fs::temp_directory_path() / ("leap-e2e-" + name + "-" + std::to_string(::getpid()) +
                                         "-" + std::to_string(counter++));
    fs::remove_all(root_);
    fs::create_directories(root_ / "suite");
    copy_suite_tasks(root_, tasks);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  [[nodiscard]] const fs::path& root() const { return root_; }

 protected:
  fs::path root_;

 private:
  static inline int counter = 0;
};

}  // namespace leap::e2e
