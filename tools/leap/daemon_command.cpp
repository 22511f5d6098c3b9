// `leap daemon`: runs experiments from a queue until stopped, with a control API on 127.0.0.1
// (see tools/daemon/daemon.hpp and the README's "Daemon" section).
#include "tools/daemon/daemon.hpp"
#include "tools/daemon/home.hpp"
#include "tools/launch/launch.hpp"
#include "tools/leap/command.hpp"

#include <iostream>
#include <memory>
#include <string>

namespace leap::cli {
namespace {

void add_daemon(CLI::App& app, int* exit_code) {
  auto home = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "daemon",
      "Run experiments from a queue until stopped: each submitted config runs as a child `leap "
      "run` (up to max_concurrent at once), with a control API on 127.0.0.1 (submit, list, "
      "status, cancel, logs, /metrics) that needs the bearer token in HOME/token. A submission "
      "with seeds (`leap submit CONFIG --seeds 1-3`, POST /v1/experiments?seeds=1-3) runs one "
      "child `leap run CONFIG --seeds N` per seed, one after the other in one slot, each in "
      "RUN_DIR/seed-N; its record lists every seed's state (queued, running, done, failed, "
      "cancelled). SIGTERM stops the children cleanly and exits; the next start resumes them "
      "(finished seeds are not run again). SIGHUP reloads HOME/daemon.yaml (port, "
      "max_concurrent, grace_period_s).");
  cmd->add_option("--home", *home,
                  "Daemon home (settings, token, queue, logs). Default: $LEAP_HOME, else "
                  "$XDG_STATE_HOME/leap, else ~/.local/state/leap");
  cmd->callback([home, exit_code] {
    auto dir = daemon::resolve_home(*home);
    if (!dir) {
      std::cerr << "leap daemon: error: " << dir.err().message << "\n";
      *exit_code = 1;
      return;
    }
    daemon::daemon_options options;
    options.home = *dir;
    // A submission is checked as its `leap run` will check it, so that a queued experiment never
    // fails at its start for a reason of its config.
    options.check_submission = [](const std::string& yaml, const std::string& source,
                                  const std::filesystem::path& cwd) -> status {
      auto checked = launch::preflight_run_text(yaml, source, cwd);
      if (!checked) {
        return checked.err();
      }
      return ok_status();
    };
    *exit_code = daemon::run_daemon(options);
  });
}

}  // namespace

LEAP_COMMAND("daemon", add_daemon);

}  // namespace leap::cli
