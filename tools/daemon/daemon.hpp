// The daemon itself: a supervisor that runs each experiment as a child `leap run CONFIG` (this
// same binary) in its own process group, with stdout and stderr appended to the experiment's log,
// and serves the control API (api.hpp) on 127.0.0.1 with cpp-httplib.
//
// Threads: the caller's thread is the supervisor. It is the only one that forks and reaps, so a
// child's PR_SET_PDEATHSIG (SIGTERM when the daemon dies) is tied to a thread that lives as long
// as the daemon. It waits on the signals (SIGTERM, SIGINT, SIGHUP, SIGCHLD) with a 50 ms tick,
// reaps children, sends SIGKILL after a cancel's grace period and starts what the scheduler
// chooses. httplib's workers serve requests; they only change records under the mutex and send
// SIGTERM for a cancel. Every change of a record is written to its state file before the reply.
#pragma once

#include "common/result.hpp"

#include <filesystem>
#include <functional>
#include <string>

namespace leap::daemon {

struct daemon_options {
  std::filesystem::path home;  // created (mode 0700) when missing
  // Checks a submitted config as `leap run` will (`yaml`, its name for messages, the folder its run
  // starts in); an error refuses the submission with 400 and the message. Empty: only the keys are
  // checked. `leap daemon` passes the run's own preflight (tools/launch/launch.hpp).
  std::function<status(const std::string& yaml, const std::string& source,
                       const std::filesystem::path& cwd)>
      check_submission;
};

// Runs until SIGTERM or SIGINT, then stops admitting, sends SIGTERM to every child (SIGKILL after
// the grace period), records the interrupted experiments as running so that the next start
// resumes them, and returns 0. SIGHUP reloads HOME/daemon.yaml; a bad file keeps the settings in
// force and logs why. Start-up errors (home, settings, token, port, another daemon on the home)
// are printed and give 1. Logs go to stderr, one line per event. Call once per process, from the
// main thread, before any other thread exists (it blocks the signals for every thread it starts).
int run_daemon(const daemon_options& options);

}  // namespace leap::daemon
