#include "learner/rank_workers.hpp"

#include "learner/trainer.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawn's environment

namespace leap::learner {

result<rank_workers> rank_workers::spawn(const rank_workers_options& options) {
  if (options.world_size < 1) {
    return error{"data-parallel ranks: world_size must be >= 1, got " +
                 std::to_string(options.world_size)};
  }
  const auto world = static_cast<std::size_t>(options.world_size);
  if (!options.devices.empty() && options.devices.size() != world) {
    return error{"data-parallel ranks: " + std::to_string(options.devices.size()) +
                 " devices for world_size " + std::to_string(options.world_size)};
  }
  rank_workers out;
  if (world == 1) {
    return out;
  }
  if (::access(options.executable.c_str(), X_OK) != 0) {
    return error{options.executable +
                 ": cannot run the data-parallel rank worker: " + std::strerror(errno)};
  }
  for (std::size_t r = 1; r < world; ++r) {
    std::vector<std::string> args = {options.executable,
                                     "--master",
                                     options.master,
                                     "--rank",
                                     std::to_string(r),
                                     "--world-size",
                                     std::to_string(world),
                                     "--device",
                                     options.devices.empty() ? "cpu" : options.devices[r],
                                     "--timeout",
                                     std::to_string(options.timeout_seconds),
                                     "--parent",
                                     std::to_string(::getpid())};
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    pid_t pid = 0;
    // Only stdin, stdout and stderr reach a rank: a descriptor of ours opened without
    // close-on-exec (a socket of the policy server, a pipe) would otherwise stay open as long as
    // the rank lives, keeping a port bound or a pipe's end from seeing end-of-file.
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    const int e =
        ::posix_spawn(&pid, options.executable.c_str(), &actions, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    if (e != 0) {
      return error{options.executable + ": cannot spawn data-parallel rank " + std::to_string(r) +
                   ": " + std::strerror(e)};  // `out` kills the ranks spawned so far
    }
    out.children_.push_back(child{pid});
  }
  return out;
}

rank_workers::rank_workers(rank_workers&& other) noexcept
    : children_(std::exchange(other.children_, {})) {}

rank_workers& rank_workers::operator=(rank_workers&& other) noexcept {
  if (this != &other) {
    kill_all();
    children_ = std::exchange(other.children_, {});
  }
  return *this;
}

rank_workers::~rank_workers() { kill_all(); }

void rank_workers::reap(child& c, bool block) {
  if (c.pid <= 0) {
    return;
  }
  int st = 0;
  rusage usage{};
  pid_t got = 0;
  do {
    got = ::wait4(c.pid, &st, block ? 0 : WNOHANG, &usage);
  } while (got < 0 && errno == EINTR);
  if (got == c.pid || (got < 0 && errno == ECHILD)) {
    c.wait_status = got == c.pid ? st : 0;
    c.max_rss_kib = usage.ru_maxrss;
    c.pid = 0;
  }
}

void rank_workers::kill_all() {
  for (auto& c : children_) {
    reap(c, false);
    if (c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      c.killed_here = true;
      reap(c, true);
    }
  }
}

std::string rank_workers::describe(int rank, int wait_status) {
  std::string what;
  if (WIFEXITED(wait_status)) {
    what = "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  } else if (WIFSIGNALED(wait_status)) {
    what = "was killed by signal " + std::to_string(WTERMSIG(wait_status)) + " (" +
           strsignal(WTERMSIG(wait_status)) + ")";
  } else {
    what = "ended (wait status " + std::to_string(wait_status) + ")";
  }
  return "data-parallel rank " + std::to_string(rank) + " (leap-learner-rank) " + what;
}

status rank_workers::failures() const {
  std::string message;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const child& c = children_[i];
    if (c.pid != 0 || c.killed_here) {
      continue;
    }
    const bool failed =
        (WIFEXITED(c.wait_status) && WEXITSTATUS(c.wait_status) != 0) || WIFSIGNALED(c.wait_status);
    if (failed) {
      message += (message.empty() ? "" : "; ") + describe(static_cast<int>(i) + 1, c.wait_status);
    }
  }
  if (!message.empty()) {
    return error{message};
  }
  return ok_status();
}

status rank_workers::check_running() {
  std::string message;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    child& c = children_[i];
    reap(c, false);
    if (c.pid == 0) {
      message += (message.empty() ? "" : "; ") +
                 (c.killed_here ? "data-parallel rank " + std::to_string(i + 1) +
                                      " (leap-learner-rank) was killed here"
                                : describe(static_cast<int>(i) + 1, c.wait_status));
    }
  }
  if (!message.empty()) {
    return error{message};
  }
  return ok_status();
}

status rank_workers::wait() {
  for (auto& c : children_) {
    reap(c, true);
  }
  return failures();
}

status rank_workers::stop() {
  kill_all();
  return failures();
}

void rank_workers::signal(int rank, int sig) const {
  const pid_t p = pid(rank);
  if (p > 0) {
    ::kill(p, sig);
  }
}

void rank_workers::kill(int rank) {
  if (rank < 1 || rank >= world_size()) {
    return;
  }
  child& c = children_[static_cast<std::size_t>(rank - 1)];
  if (c.pid > 0) {
    ::kill(c.pid, SIGKILL);
    c.killed_here = true;
    reap(c, true);
  }
}

pid_t rank_workers::pid(int rank) const {
  if (rank < 1 || rank >= world_size()) {
    return 0;
  }
  return children_[static_cast<std::size_t>(rank - 1)].pid;
}

std::int64_t rank_workers::max_rss_kib(int rank) const {
  if (rank < 1 || rank >= world_size()) {
    return 0;
  }
  return children_[static_cast<std::size_t>(rank - 1)].max_rss_kib;
}

void start_ranks_when_listening(distributed_options& d, rank_workers_options options,
                                std::optional<rank_workers>& into) {
  d.master = "127.0.0.1:0";
  options.world_size = d.world_size;
  d.on_listening = [options, &into](const std::string& bound_master) mutable -> status {
    options.master = bound_master;
    auto spawned = rank_workers::spawn(options);
    if (!spawned) {
      return spawned.err();
    }
    into = std::move(*spawned);
    return ok_status();
  };
  d.check_ranks = [&into]() -> status { return into ? into->check_running() : ok_status(); };
}

}  // namespace leap::learner
