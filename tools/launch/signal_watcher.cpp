#include "common/log.hpp"
#include "common/signals.hpp"
#include "tools/launch/launch.hpp"

#include <chrono>
#include <cstdlib>
#include <signal.h>
#include <string>
#include <utility>

namespace leap::launch {

signal_watcher::signal_watcher() : thread_([this] { watch(); }) {}

signal_watcher::~signal_watcher() {
  done_ = true;
  thread_.join();
}

void signal_watcher::on_first_signal(std::function<void()> stop) {
  std::lock_guard lock(mutex_);
  stop_ = std::move(stop);
  if (signal_ != 0 && stop_) {
    stop_();
  }
}

stop_on_signal::stop_on_signal(signal_watcher& watcher, std::function<void()> stop)
    : watcher_(watcher) {
  watcher_.on_first_signal(std::move(stop));
}

stop_on_signal::~stop_on_signal() { watcher_.on_first_signal({}); }

void signal_watcher::watch() {
  while (!done_) {
    const int sig = signals::wait(std::chrono::milliseconds(100));
    if (sig == 0) {
      continue;
    }
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (signal_ != 0) {
      log::warn(std::string(name) +
                " again: exiting now; the groups stored so far are kept, the groups in flight "
                "are redone by the next `leap run`");
      // The README's status for an interrupted run, whichever signal: a later `leap run`
      // continues it, as after the first signal's clean stop.
      std::_Exit(launch::exit_status(run_status::interrupted));
    }
    signal_ = sig;
    log::warn(std::string(name) + ": stopping (again to exit at once)");
    std::lock_guard lock(mutex_);
    if (stop_) {
      stop_();
    }
  }
}

}  // namespace leap::launch
