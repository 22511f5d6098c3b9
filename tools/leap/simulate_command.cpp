// `leap simulate CONFIG`: runs the config's gate, reward and advantage math against a synthetic
// policy (orchestrator/simulation.hpp) and prints what each step would cost and learn.
#include "orchestrator/config.hpp"
#include "orchestrator/simulation.hpp"
#include "tools/leap/command.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

namespace leap::cli {
namespace {

struct simulate_options {
  std::string config_path;
  int steps = 0;           // 0: the config's experiment.steps
  std::int64_t seed = -1;  // -1: the config's experiment.seed
  std::string csv_path;
  int buckets = 5;
};

simulation_params to_params(const experiment_config& c) {
  simulation_params p;
  p.steps = c.experiment.steps;
  p.batch_size = c.data.batch_size;
  p.group_size = c.rollout.group_size;
  p.max_turns = c.rollout.max_turns;
  p.seed = c.experiment.seed;
  p.tasks = c.simulation.tasks;
  p.difficulty_alpha = c.simulation.difficulty_alpha;
  p.difficulty_beta = c.simulation.difficulty_beta;
  p.debug_fix_probability = c.simulation.debug_fix_probability;
  p.skill_gain = c.simulation.skill_gain;
  p.gate = c.gate;
  p.reward = c.reward;
  p.advantage = c.advantage;
  return p;
}

void print_header(int max_turns) {
  std::printf("%5s", "step");
  for (int m = 1; m <= max_turns; ++m) {
    std::printf("  acc@%d", m);
  }
  std::printf(
      "  activated  recov/rollout  recov/group  turns/pass  verifications  E[acc@1]  fix_p\n");
}

void print_step(const simulation_step& s) {
  std::printf("%5d", s.step);
  for (double a : s.cumulative_accuracy) {
    std::printf("  %5.3f", a);
  }
  std::printf("  %9.3f  %13.3f  %11.3f  %10.3f  %13zu  %8.3f  %5.3f\n", s.activated_fraction,
              s.recovery.per_rollout, s.recovery.per_group, s.turns_per_pass, s.verifications,
              s.expected_first_turn_accuracy, s.debug_fix_probability);
  std::fflush(stdout);
}

void print_composition(const std::vector<simulation_step>& steps, int buckets) {
  std::vector<group_summary> all;
  for (const auto& s : steps) {
    all.insert(all.end(), s.groups.begin(), s.groups.end());
  }
  const auto composition = rollout_composition(all, static_cast<std::size_t>(buckets));
  std::printf("\nrollouts with a non-zero advantage by group pass rate (all steps):\n");
  std::printf("%-11s  %12s  %12s  %12s  %12s  %12s  %12s\n", "pass rate", "turn1 pass+",
              "turn1 pass-", "debug pass+", "debug pass-", "failure+", "failure-");
  for (const auto& b : composition) {
    std::printf("[%.2f,%.2f%c", b.lo, b.hi, b.hi >= 1.0 ? ']' : ')');
    for (const auto& kind : b.counts) {
      std::printf("  %12zu  %12zu", kind[1], kind[0]);
    }
    std::printf("\n");
  }
}

status write_csv(const std::string& path, const std::vector<simulation_step>& steps) {
  std::ofstream out(path);
  if (!out) {
    return error{path + ": cannot open for writing"};
  }
  out << "step";
  const std::size_t turns = steps.empty() ? 0 : steps.front().cumulative_accuracy.size();
  for (std::size_t m = 1; m <= turns; ++m) {
    out << ",acc_at_" << m;
  }
  out << ",activated_fraction,recovery_per_rollout,recovery_per_group,turns_per_pass,"
         "verifications,expected_first_turn_accuracy,debug_fix_probability,signal_groups,"
         "retried,recovered,retry_verifications,buffered,evicted\n";
  for (const auto& s : steps) {
    out << s.step;
    for (double a : s.cumulative_accuracy) {
      out << ',' << a;
    }
    out << ',' << s.activated_fraction << ',' << s.recovery.per_rollout << ','
        << s.recovery.per_group << ',' << s.turns_per_pass << ',' << s.verifications << ','
        << s.expected_first_turn_accuracy << ',' << s.debug_fix_probability << ','
        << s.signal_groups << ',' << s.retried << ',' << s.recovered << ',' << s.retry_verifications
        << ',' << s.buffered << ',' << s.retry.evicted << '\n';
  }
  out.flush();
  if (!out) {
    return error{path + ": write failed"};
  }
  return ok_status();
}

int run_simulate(const simulate_options& options) {
  auto config = load_config(options.config_path);
  if (!config) {
    std::cerr << "leap simulate: error: " << config.err().message << "\n";
    return 1;
  }
  if (options.steps > 0) {
    config->experiment.steps = options.steps;
  }
  if (options.seed >= 0) {
    config->experiment.seed = static_cast<std::uint64_t>(options.seed);
  }
  const auto params = to_params(*config);
  std::printf(
      "simulating %s: %d steps x %d tasks x %d rollouts, up to %d turns, gate %s, reward %s\n",
      options.config_path.c_str(), params.steps, params.batch_size, params.group_size,
      params.max_turns, to_string(params.gate.policy).c_str(),
      to_string(params.reward.kind).c_str());
  print_header(params.max_turns);
  const auto steps = simulate(params, print_step);

  std::size_t verifications = 0;
  double activated = 0.0;
  std::size_t groups = 0;
  std::size_t signal = 0;
  std::size_t retried = 0;
  std::size_t recovered = 0;
  std::size_t retry_verifications = 0;
  retry_counts retry;
  for (const auto& s : steps) {
    verifications += s.verifications;
    activated += s.activated_fraction;
    groups += s.groups.size();
    signal += s.signal_groups;
    retried += s.retried;
    recovered += s.recovered;
    retry_verifications += s.retry_verifications;
    retry += s.retry;
  }
  print_composition(steps, options.buckets);
  std::printf("\ntotal verifications %zu, mean activated fraction %.3f\n", verifications,
              steps.empty() ? 0.0 : activated / static_cast<double>(steps.size()));
  // The training signal: groups with a non-zero advantage (an all-failed or all-passed group has
  // none), the quantity buffered retry tries to raise.
  std::printf("groups with training signal %zu of %zu (%.3f)\n", signal, groups,
              groups == 0 ? 0.0 : static_cast<double>(signal) / static_cast<double>(groups));
  if (retry_enabled(params.gate.retry)) {
    std::printf(
        "retry: %zu groups retried, %zu recovered, %zu verifications on retries (%.3f of all); "
        "admitted %u, requeued %u, exhausted %u, evicted %u, %zu waiting at the end\n",
        retried, recovered, retry_verifications,
        verifications == 0
            ? 0.0
            : static_cast<double>(retry_verifications) / static_cast<double>(verifications),
        retry.admitted, retry.requeued, retry.exhausted, retry.evicted,
        steps.empty() ? std::size_t{0} : steps.back().buffered);
  }
  if (!options.csv_path.empty()) {
    if (auto written = write_csv(options.csv_path, steps); !written) {
      std::cerr << "leap simulate: error: " << written.err().message << "\n";
      return 1;
    }
    std::printf("wrote %s\n", options.csv_path.c_str());
  }
  return 0;
}

void add_simulate(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<simulate_options>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Run the config's gate, reward and advantage math against a synthetic policy (no model, no "
      "server, no GPU) and print per-step accuracy, activated groups, recovery and verification "
      "cost: a cheap way to choose thresholds before spending GPU time.");
  cmd->add_option("config", options->config_path, "Experiment config (YAML)")->required();
  cmd->add_option("--steps", options->steps, "Override experiment.steps")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", options->seed, "Override experiment.seed")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--csv", options->csv_path, "Also write the per-step table to this CSV file");
  cmd->add_option("--buckets", options->buckets, "Pass-rate buckets of the composition table")
      ->check(CLI::Range(1, 100));
  cmd->callback([options, exit_code] { *exit_code = run_simulate(*options); });
}

}  // namespace

LEAP_COMMAND("simulate", add_simulate);

}  // namespace leap::cli
