// `leap run CONFIG`: the main job, a thin command over the composition library
// (tools/launch/launch.hpp), which builds the run (store, tasks, model, servers, weight transfer,
// actor graph) and runs it. This file parses, routes the signals to the run and prints: a progress
// line per step and a summary table at the end. A run folder that already holds the run continues
// it. SIGINT and SIGTERM stop cleanly: in-flight groups are abandoned (a later `leap run` redoes
// them). With --seeds the config runs once per seed, one after the other, each in
// RUN_DIR/seed-N (launch.hpp, "seeds"); a second launch skips the finished seeds and continues the
// others.
#include "actors/log_sink.hpp"
#include "actors/progress.hpp"
#include "common/log.hpp"
#include "common/signals.hpp"
#include "policy/server/server.hpp"
#include "tools/launch/launch.hpp"
#include "tools/launch/resume.hpp"
#include "tools/leap/command.hpp"
#include "tools/leap/torch/torch.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <signal.h>
#include <string>
#include <vector>

namespace leap::cli {
namespace {

struct run_options {
  std::string config_path;
  std::string seeds;  // --seeds as given; empty: one run of the config as it is
  bool quiet = false;
  bool accept_lost_writes = false;
  double metrics_interval_s = 5.0;
  std::string server_faults;    // --server-faults as given; empty: none
  policy::fault_config faults;  // parsed from it
};

int fail(const std::string& message) {
  std::cerr << "leap run: error: " << message << "\n";
  return 1;
}

// `prefix` starts every progress line ("[seed 2] " in a --seeds launch, else "").
launch::run_events print_events(const experiment_config& c, const log::ids& ids,
                                const std::string& prefix) {
  launch::run_events events;
  events.on_resume = [&c, prefix](const actors::resume_plan& plan) {
    if (const auto line = launch::describe_resume(plan, c); !line.empty()) {
      std::printf("%s%s\n", prefix.c_str(), line.c_str());
    }
  };
  events.on_model_written = [seed = c.experiment.seed, prefix](const launch::written_model& w) {
    std::printf("%swrote a random %s %s model (%lld parameters, seed %lld) to %s\n", prefix.c_str(),
                w.preset.c_str(),
                w.tokenizer_dir.empty() ? "byte-level" : ("tokenizer " + w.tokenizer_dir).c_str(),
                static_cast<long long>(w.parameters), static_cast<long long>(seed), w.path.c_str());
  };
  events.on_stopping = [ids] {
    log::info("waiting for the compiles and runs in flight to end (signal again to exit at once)",
              ids);
  };
  events.progress.on_step = [prefix](const actors::step_progress& p) {
    std::printf("%s%s\n", prefix.c_str(), actors::format_step_line(p).c_str());
    std::fflush(stdout);
  };
  events.progress.on_validation = [prefix](const actors::validation_progress& p) {
    std::printf("%s%s\n", prefix.c_str(), actors::format_validation_line(p).c_str());
    std::fflush(stdout);
  };
  events.progress.on_log = actors::program_log(ids);
  return events;
}

// One run of a checked config, to its end; its exit status (0, 130 interrupted, 1 failed).
int run_one(launch::run_preflight checked, const run_options& options,
            launch::signal_watcher& watcher, const std::string& prefix) {
  const experiment_config c = checked.config;
  // experiment.log_level from here on; --quiet keeps warnings and errors only.
  log::set_level(options.quiet ? std::max(c.experiment.log_level, log_verbosity::warn)
                               : c.experiment.log_level);
  launch::run_options run_options;
  run_options.store.accept_lost_writes = options.accept_lost_writes;
  run_options.metrics_interval_s = options.metrics_interval_s;
  run_options.events = print_events(c, log::ids{c.experiment.name}, prefix);
  run_options.server_faults = options.faults;
  launch::run run(std::move(checked), std::move(run_options));
  // Cleared before `run` goes away; a second signal still exits at once.
  const launch::stop_on_signal stop(watcher, [&run] { run.stop(); });

  if (auto started = run.start(); !started) {
    return fail(prefix + started.err().message);
  }
  std::printf("%s%s\n", prefix.c_str(),
              launch::describe_start(run.checked(), run.endpoints().front()).c_str());
  if (options.faults.any()) {
    std::printf("%sthe embedded server injects faults: %s\n", prefix.c_str(),
                options.server_faults.c_str());
  }
  std::fflush(stdout);

  auto outcome = run.wait();
  if (!outcome) {
    return fail(prefix + outcome.err().message);
  }
  auto steps = run.store()->steps(c.experiment.name);
  if (steps && !steps->empty()) {
    std::printf("\n%s", actors::format_summary_table(*steps, c.rollout.max_turns).c_str());
  }
  std::printf(
      "%s%s\n", prefix.c_str(),
      launch::describe_outcome(*outcome, c.experiment.name, run.store()->path().string()).c_str());
  if (outcome->status == run_status::failed) {
    return fail(prefix + outcome->summary.error);
  }
  return launch::exit_status(outcome->status);
}

// --seeds: each seed in turn. A failed seed is reported and the next one runs (seeds are
// independent: one seed's bad luck, e.g. a diverged model, says nothing of the others); a signal
// ends the launch (the interrupted seed and those after it are what a second launch runs).
int run_seeds(const experiment_config& base, const std::vector<std::uint64_t>& seeds,
              const run_options& options, launch::signal_watcher& watcher) {
  std::vector<std::string> failed;
  std::size_t finished = 0;
  std::size_t skipped = 0;
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const std::uint64_t seed = seeds[i];
    const std::string dir = launch::seed_run_dir(base.experiment.run_dir, seed);
    const std::string prefix = "[seed " + std::to_string(seed) + "] ";
    if (watcher.signal() != 0) {
      break;
    }
    auto done = launch::run_finished(dir, base.experiment.name, base.experiment.steps);
    if (!done) {
      (void)fail(prefix + done.err().message);
      failed.push_back(std::to_string(seed) + " (exit 1)");
      continue;
    }
    if (*done) {
      std::printf("seed %llu (%zu of %zu): %s holds it finished; skipped\n",
                  static_cast<unsigned long long>(seed), i + 1, seeds.size(), dir.c_str());
      ++skipped;
      continue;
    }
    std::printf("seed %llu (%zu of %zu): %s\n", static_cast<unsigned long long>(seed), i + 1,
                seeds.size(), dir.c_str());
    std::fflush(stdout);
    auto checked = launch::preflight_seed(base, seed, options.config_path);
    const int status = checked ? run_one(std::move(*checked), options, watcher, prefix)
                               : fail(prefix + checked.err().message);
    if (status == 0) {
      ++finished;
    } else if (status == 130) {
      std::printf("seeds: interrupted at seed %llu; `leap run %s --seeds %s` continues\n",
                  static_cast<unsigned long long>(seed), options.config_path.c_str(),
                  options.seeds.c_str());
      return status;
    } else {
      failed.push_back(std::to_string(seed) + " (exit " + std::to_string(status) + ")");
    }
  }
  std::string line = "seeds of '" + base.experiment.name + "': " + std::to_string(finished) +
                     " finished, " + std::to_string(skipped) + " finished before, " +
                     std::to_string(failed.size()) + " failed";
  for (std::size_t i = 0; i < failed.size(); ++i) {
    line += (i == 0 ? ": seed " : ", seed ") + failed[i];
  }
  std::printf("%s | folders %s/seed-N\n", line.c_str(), base.experiment.run_dir.c_str());
  if (watcher.signal() != 0) {
    return 130;
  }
  return failed.empty() ? 0 : 1;
}

// Whether the config asks for LibTorch (launch::needs_torch). A config that does not parse does
// not: the preflight reports it.
bool config_needs_torch(const std::string& path) {
  auto text = read_config_file(path);
  if (!text) {
    return false;
  }
  auto parsed = parse_config(*text, path);
  return parsed && launch::needs_torch(*parsed);
}

int run_experiment(run_options options) {
  // `leap` links no LibTorch: such a run goes to leap-torch (tools/leap/torch/torch.hpp) before
  // this process starts anything or prints a line.
  if (!torch::linked() && config_needs_torch(options.config_path)) {
    return fail(torch::hand_over().message);
  }
  // Before any thread of ours exists, so that they inherit the mask; only the watcher takes them.
  if (auto routed = signals::route({SIGINT, SIGTERM}); !routed) {
    return fail(routed.err().message);
  }
  launch::signal_watcher watcher;
  log::setup("leap run");
  auto faults = policy::parse_fault_spec(options.server_faults);
  if (!faults) {
    return fail("--server-faults: " + faults.err().message);
  }
  options.faults = std::move(*faults);

  // Every config rule lives in the preflight, which `leap config check` applies too.
  auto preflight = launch::preflight_run(options.config_path);
  if (!preflight) {
    return fail(preflight.err().message);
  }
  if (options.seeds.empty()) {
    return run_one(std::move(*preflight), options, watcher, "");
  }
  auto seeds = launch::parse_seeds(options.seeds);
  if (!seeds) {
    return fail(seeds.err().message);
  }
  return run_seeds(preflight->config, *seeds, options, watcher);
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
  cmd->add_option("--seeds", options->seeds,
                  "Run the config once per seed, one after the other: 1,2,3 or 1-3 (or 1-3,7). "
                  "Seed N runs in RUN_DIR/seed-N with experiment.seed N; paths the config keeps "
                  "inside RUN_DIR (learner.model_path, policy.model, ...) move there too. A seed "
                  "that fails is reported and the others still run (exit 1); running the same "
                  "command again skips the finished seeds and continues the others. "
                  "`leap report RUN_DIR/seed-*` draws them as one group: mean and +/- one "
                  "standard deviation");
  cmd->add_flag("--quiet", options->quiet, "Only progress lines and the summary; no event log");
  cmd->add_flag("--accept-lost-writes", options->accept_lost_writes,
                "Go on with a store that lost writes it had acknowledged (a deleted or truncated "
                "write-ahead log), which is otherwise refused; the lost groups are redone");
  cmd->add_option("--metrics-interval", options->metrics_interval_s,
                  "Seconds between writes of RUN_DIR/metrics.prom and metrics.json (also written "
                  "at each step's end and at exit); 0: only then")
      ->default_val(5.0)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--server-faults", options->server_faults,
                  "For tests: fault injection in the embedded server (policy.flavour embedded "
                  "only), the spec of `leap serve-policy --faults`, e.g. "
                  "script=none:none:hold,hold_tokens=4 holds the third generation after 4 tokens "
                  "until the next weight sync pauses the server (see policy/README.md)");
  cmd->callback([options, exit_code] { *exit_code = run_experiment(*options); });
}

}  // namespace

LEAP_COMMAND("run", add_run);

}  // namespace leap::cli
