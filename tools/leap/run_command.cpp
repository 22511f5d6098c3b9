// `leap run CONFIG`: the main job, a thin command over the composition library
// (tools/launch/launch.hpp), which builds the run (store, tasks, model, servers, weight transfer,
// actor graph) and runs it. This file parses, routes the signals to the run and prints: a progress
// line per step and a summary table at the end. A run folder that already holds the run continues
// it. SIGINT and SIGTERM stop cleanly: in-flight groups are abandoned (a later `leap run` redoes
// them).
#include "actors/log_sink.hpp"
#include "actors/progress.hpp"
#include "common/log.hpp"
#include "common/signals.hpp"
#include "tools/launch/launch.hpp"
#include "tools/launch/resume.hpp"
#include "tools/leap/command.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <signal.h>
#include <string>

namespace leap::cli {
namespace {

struct run_options {
  std::string config_path;
  bool quiet = false;
  bool accept_lost_writes = false;
  double metrics_interval_s = 5.0;
};

int fail(const std::string& message) {
  std::cerr << "leap run: error: " << message << "\n";
  return 1;
}

launch::run_events print_events(const experiment_config& c, const log::ids& ids) {
  launch::run_events events;
  events.on_resume = [&c](const actors::resume_plan& plan) {
    if (const auto line = launch::describe_resume(plan, c); !line.empty()) {
      std::printf("%s\n", line.c_str());
    }
  };
  events.on_model_written = [seed = c.experiment.seed](const launch::written_model& w) {
    std::printf("wrote a random %s %s model (%lld parameters, seed %lld) to %s\n", w.preset.c_str(),
                w.tokenizer_dir.empty() ? "byte-level" : ("tokenizer " + w.tokenizer_dir).c_str(),
                static_cast<long long>(w.parameters), static_cast<long long>(seed), w.path.c_str());
  };
  events.on_stopping = [ids] {
    log::info("waiting for the compiles and runs in flight to end (signal again to exit at once)",
              ids);
  };
  events.progress.on_step = [](const actors::step_progress& p) {
    std::printf("%s\n", actors::format_step_line(p).c_str());
    std::fflush(stdout);
  };
  events.progress.on_validation = [](const actors::validation_progress& p) {
    std::printf("%s\n", actors::format_validation_line(p).c_str());
    std::fflush(stdout);
  };
  events.progress.on_log = actors::program_log(ids);
  return events;
}

int run_experiment(const run_options& options) {
  // Before any thread of ours exists, so that they inherit the mask; only the watcher takes them.
  if (auto routed = signals::route({SIGINT, SIGTERM}); !routed) {
    return fail(routed.err().message);
  }
  launch::signal_watcher watcher;
  log::setup("leap run");

  // Every config rule lives in the preflight, which `leap config check` applies too.
  auto preflight = launch::preflight_run(options.config_path);
  if (!preflight) {
    return fail(preflight.err().message);
  }
  const experiment_config c = preflight->config;
  // experiment.log_level from here on; --quiet keeps warnings and errors only.
  log::set_level(options.quiet ? std::max(c.experiment.log_level, log_verbosity::warn)
                               : c.experiment.log_level);
  launch::run_options run_options;
  run_options.store.accept_lost_writes = options.accept_lost_writes;
  run_options.metrics_interval_s = options.metrics_interval_s;
  run_options.events = print_events(c, log::ids{c.experiment.name});
  launch::run run(std::move(*preflight), std::move(run_options));
  // Cleared before `run` goes away; a second signal still exits at once.
  const launch::stop_on_signal stop(watcher, [&run] { run.stop(); });

  if (auto started = run.start(); !started) {
    return fail(started.err().message);
  }
  std::printf("%s\n", launch::describe_start(run.checked(), run.endpoints().front()).c_str());
  std::fflush(stdout);

  auto outcome = run.wait();
  if (!outcome) {
    return fail(outcome.err().message);
  }
  auto steps = run.store()->steps(c.experiment.name);
  if (steps && !steps->empty()) {
    std::printf("\n%s", actors::format_summary_table(*steps, c.rollout.max_turns).c_str());
  }
  std::printf(
      "%s\n",
      launch::describe_outcome(*outcome, c.experiment.name, run.store()->path().string()).c_str());
  if (outcome->status == run_status::failed) {
    return fail(outcome->summary.error);
  }
  return launch::exit_status(outcome->status);
}

void add_run(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<run_options>();
  auto* cmd = app.add_subcommand(
      "run",
      "Run an experiment: sample tasks, generate G rollouts each, verify them in the sandbox, gate "
      "groups into debug turns (DCP), score, store every trajectory in the run folder and hand the "
      "batches to the learner. Prints a line per step and a summary table. Running it again on "
      "the same run folder continues the run (completed groups are kept, in-flight ones redone). "
      "SIGINT/SIGTERM stop cleanly.");
  cmd->add_option("config", options->config_path, "Experiment config (YAML)")->required();
  cmd->add_flag("--quiet", options->quiet, "Only progress lines and the summary; no event log");
  cmd->add_flag("--accept-lost-writes", options->accept_lost_writes,
                "Go on with a store that lost writes it had acknowledged (a deleted or truncated "
                "write-ahead log), which is otherwise refused; the lost groups are redone");
  cmd->add_option("--metrics-interval", options->metrics_interval_s,
                  "Seconds between writes of RUN_DIR/metrics.prom and metrics.json (also written "
                  "at each step's end and at exit); 0: only then")
      ->default_val(5.0)
      ->check(CLI::NonNegativeNumber);
  cmd->callback([options, exit_code] { *exit_code = run_experiment(*options); });
}

}  // namespace

LEAP_COMMAND("run", add_run);

}  // namespace leap::cli
