// Signals as events, for programs whose libraries start threads of their own before main()
// (OpenBLAS's thread pool does, when it provides libblas.so.3 for LibTorch). A process-directed
// signal goes to any thread that does not block it, so blocking SIGTERM in the program's own
// threads is not enough: in a library's thread SIGTERM's default action ends the process at once
// and SIGCHLD's drops it. route() installs a handler for each signal that writes the signal's
// number to a pipe, whatever thread it lands in; wait() reads the next one.
//
//   signals::route({SIGINT, SIGTERM});   // first thing, before the program's own threads start
//   ...
//   const int sig = signals::wait_forever();
#pragma once

#include "common/result.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <initializer_list>
#include <poll.h>
#include <pthread.h>
#include <string>
#include <unistd.h>

namespace leap::signals {
namespace detail {

inline int pipe_fds[2] = {-1, -1};
inline sigset_t routed;

inline void on_signal(int sig) {
  const int saved = errno;  // a handler must leave errno as it found it
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const auto n = ::write(pipe_fds[1], &byte, 1);
  errno = saved;
}

}  // namespace detail

// Routes `signals` to wait(), and blocks them in the calling thread, so that the threads it starts
// afterwards inherit the mask and their system calls are not interrupted by them. Call it once,
// before the program's own threads start. Errors: the pipe or a handler could not be set up.
[[nodiscard]] inline status route(std::initializer_list<int> signals) {
  if (detail::pipe_fds[0] < 0 && ::pipe2(detail::pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return error{std::string("signal pipe: ") + std::strerror(errno)};
  }
  sigemptyset(&detail::routed);
  for (const int sig : signals) {
    sigaddset(&detail::routed, sig);
    struct sigaction action {};
    action.sa_handler = detail::on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (::sigaction(sig, &action, nullptr) != 0) {
      return error{std::string("signal handler for ") + strsignal(sig) + ": " +
                   std::strerror(errno)};
    }
  }
  ::pthread_sigmask(SIG_BLOCK, &detail::routed, nullptr);
  return ok_status();
}

// The next routed signal's number, or 0 when none came within `timeout`. The calling thread takes
// the routed signals from here on (someone has to when no library thread exists).
[[nodiscard]] inline int wait(std::chrono::milliseconds timeout) {
  ::pthread_sigmask(SIG_UNBLOCK, &detail::routed, nullptr);
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    unsigned char byte = 0;
    if (::read(detail::pipe_fds[0], &byte, 1) == 1) {
      return byte;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return 0;
    }
    pollfd ready{detail::pipe_fds[0], POLLIN, 0};
    // EINTR (the signal landed in this thread) and readiness both go round to the read.
    ::poll(&ready, 1, static_cast<int>(left.count()));
  }
}

// wait() without a time limit.
[[nodiscard]] inline int wait_forever() {
  while (true) {
    if (const int sig = wait(std::chrono::hours(1)); sig != 0) {
      return sig;
    }
  }
}

}  // namespace leap::signals
