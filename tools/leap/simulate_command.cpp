// `leap simulate CONFIG`: runs the config's gate, reward and advantage math against a synthetic
// policy (orchestrator/simulation.hpp) and prints what each step would cost and learn.
#include "orchestrator/config.hpp"
#include "orchestrator/simulation.hpp"
#include "tools/leap/command.hpp"

#include <array>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
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
  p.model = c.simulation;
  // As in `leap run`: without timing no speedup is measured.
  p.timed = c.verifier.timing_reps > 0;
  // As in `leap run`: only verifier.profile makes profiles, which the structural terms pay from.
  p.profiled = c.verifier.profile != "off";
  p.gate = c.gate;
  p.reward = c.reward;
  p.advantage = c.advantage;
  return p;
}

// The speed columns (fast_p past 0, the geomean speedup and the policy's median speedup) are
// printed when timed; the optimisation columns when gate.optimise is on; the structural columns
// when profiled: the mean term paid per pass, the clean share of each family with a weight (of
// all five when none has one), and the shares of scored passes the bound and half the gap capped.
struct table_shape {
  int max_turns = 1;
  bool timed = false;
  bool optimise = false;
  bool profiled = false;
  std::vector<std::size_t> families;
};

table_shape shape_of(const simulation_params& p) {
  table_shape shape{p.max_turns, p.timed, p.timed && p.gate.optimise.speedup > 0.0, p.profiled, {}};
  for (std::size_t f = 0; f < structural_families.size(); ++f) {
    if (p.reward.structural.weights[f] > 0 || !p.reward.structural.enabled()) {
      shape.families.push_back(f);
    }
  }
  return shape;
}

// A share of a count, "n/a" when the count is 0.
std::optional<double> share_of(std::size_t part, std::size_t whole) {
  if (whole == 0) {
    return std::nullopt;
  }
  return static_cast<double>(part) / static_cast<double>(whole);
}

// A mean over `count` things, "n/a" when there were none.
std::optional<double> if_any(std::size_t count, double mean) {
  return count == 0 ? std::nullopt : std::optional<double>(mean);
}

std::string speed_cell(const std::optional<double>& value, const char* format) {
  if (!value) {
    return "n/a";
  }
  std::array<char, 32> buffer{};
  std::snprintf(buffer.data(), buffer.size(), format, *value);
  return buffer.data();
}

void print_header(const table_shape& shape) {
  std::printf("%5s", "step");
  for (int m = 1; m <= shape.max_turns; ++m) {
    std::printf("  acc@%d", m);
  }
  std::printf(
      "  activated  recov/rollout  recov/group  turns/pass  verifications  E[acc@1]  fix_p");
  if (shape.timed) {
    for (std::size_t i = 1; i < fast_p_thresholds.size(); ++i) {
      std::printf("  %8s", fast_p_name(i).c_str());
    }
    std::printf("  %7s  %7s", "geomean", "E[spd]");
  }
  if (shape.optimise) {
    std::printf("  %9s  %8s  %6s  %6s  %8s  %7s  %7s", "optimised", "opt_turn", "kept", "broken",
                "kept_geo", "improve", "break");
  }
  if (shape.profiled) {
    std::printf("  %6s", "term");
    for (const std::size_t f : shape.families) {
      std::printf("  %14s", std::string(structural_families[f].name).c_str());
    }
    std::printf("  %5s  %5s", "bound", "gap");
  }
  std::printf("\n");
}

void print_step(const table_shape& shape, const simulation_step& s) {
  std::printf("%5d", s.step);
  for (double a : s.cumulative_accuracy) {
    std::printf("  %5.3f", a);
  }
  std::printf("  %9.3f  %13.3f  %11.3f  %10.3f  %13zu  %8.3f  %5.3f", s.activated_fraction,
              s.recovery.per_rollout, s.recovery.per_group, s.turns_per_pass, s.verifications,
              s.expected_first_turn_accuracy, s.debug_fix_probability);
  if (shape.timed) {
    for (std::size_t i = 1; i < fast_p_thresholds.size(); ++i) {
      std::printf("  %8s", speed_cell(s.speed.fast_p(i), "%.3f").c_str());
    }
    std::printf("  %7s  %7.3f", speed_cell(s.speed.geomean_speedup(), "%.3f").c_str(),
                s.expected_speedup);
  }
  if (shape.optimise) {
    std::printf("  %9zu  %8zu  %6zu  %6zu  %8s  %7.3f  %7.3f", s.optimised, s.optimise_turns,
                s.optimise_kept, s.optimise_broken,
                speed_cell(s.kept_speed.geomean_speedup(), "%.3f").c_str(),
                s.optimise_improve_probability, s.optimise_break_probability);
  }
  if (shape.profiled) {
    std::printf("  %6s", speed_cell(if_any(s.passes, s.structural_term), "%.4f").c_str());
    for (const std::size_t f : shape.families) {
      std::printf("  %14s", speed_cell(if_any(s.profiled_turns, s.clean_share[f]), "%.3f").c_str());
    }
    std::printf("  %5s  %5s",
                speed_cell(share_of(s.capped_by_bound, s.scored_passes), "%.2f").c_str(),
                speed_cell(share_of(s.capped_by_gap, s.scored_passes), "%.2f").c_str());
  }
  std::printf("\n");
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

status write_csv(const std::string& path, const std::vector<simulation_step>& steps,
                 bool profiled) {
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
         "retried,recovered,retry_verifications,buffered,evicted";
  // Speed, under `leap replay`'s names (a cell is empty when nothing was timed), then the kept
  // kernels' geomean, the optimisation turns and the synthetic policy's speed skills.
  for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
    out << ',' << fast_p_name(i);
  }
  out << ",geomean_speedup,kept_geomean_speedup,optimised,optimise_turns,optimise_kept,"
         "optimise_broken,expected_speedup,optimise_improve_probability,"
         "optimise_break_probability";
  // Profiles and structural terms (cells empty when not profiled, or nothing to average).
  out << ",profiled_turns,missing_profiles,structural_term";
  for (const auto& family : structural_families) {
    out << ",clean_" << family.name;
  }
  for (const auto& family : structural_families) {
    out << ",expected_clean_" << family.name;
  }
  out << ",scored_passes,capped_by_bound,capped_by_gap\n";
  for (const auto& s : steps) {
    out << s.step;
    for (double a : s.cumulative_accuracy) {
      out << ',' << a;
    }
    out << ',' << s.activated_fraction << ',' << s.recovery.per_rollout << ','
        << s.recovery.per_group << ',' << s.turns_per_pass << ',' << s.verifications << ','
        << s.expected_first_turn_accuracy << ',' << s.debug_fix_probability << ','
        << s.signal_groups << ',' << s.retried << ',' << s.recovered << ',' << s.retry_verifications
        << ',' << s.buffered << ',' << s.retry.evicted;
    const auto cell = [&out](const std::optional<double>& v) {
      out << ',';
      if (v) {
        out << *v;
      }
    };
    for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
      cell(s.speed.fast_p(i));
    }
    cell(s.speed.geomean_speedup());
    cell(s.kept_speed.geomean_speedup());
    out << ',' << s.optimised << ',' << s.optimise_turns << ',' << s.optimise_kept << ','
        << s.optimise_broken << ',' << s.expected_speedup << ',' << s.optimise_improve_probability
        << ',' << s.optimise_break_probability;
    const auto count = [&out, profiled](std::size_t n) {
      out << ',';
      if (profiled) {
        out << n;
      }
    };
    count(s.profiled_turns);
    count(s.missing_profiles);
    cell(profiled ? if_any(s.passes, s.structural_term) : std::nullopt);
    for (const double share : s.clean_share) {
      cell(profiled ? if_any(s.profiled_turns, share) : std::nullopt);
    }
    for (const double share : s.expected_clean_share) {
      cell(profiled ? std::optional<double>(share) : std::nullopt);
    }
    count(s.scored_passes);
    count(s.capped_by_bound);
    count(s.capped_by_gap);
    out << '\n';
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
  const table_shape shape = shape_of(params);
  print_header(shape);
  const auto steps = simulate(params, [&shape](const simulation_step& s) { print_step(shape, s); });

  std::size_t verifications = 0;
  double activated = 0.0;
  std::size_t groups = 0;
  std::size_t signal = 0;
  std::size_t retried = 0;
  std::size_t recovered = 0;
  std::size_t retry_verifications = 0;
  retry_counts retry;
  speed_summary speed;
  speed_summary kept_speed;
  std::size_t optimised = 0;
  std::size_t optimise_turns = 0;
  std::size_t optimise_kept = 0;
  std::size_t optimise_broken = 0;
  std::size_t passes = 0;
  double term_sum = 0.0;
  std::size_t scored = 0;
  std::size_t capped_by_bound = 0;
  std::size_t capped_by_gap = 0;
  std::size_t profiled_turns = 0;
  std::size_t missing_profiles = 0;
  for (const auto& s : steps) {
    passes += s.passes;
    term_sum += s.structural_term * static_cast<double>(s.passes);
    scored += s.scored_passes;
    capped_by_bound += s.capped_by_bound;
    capped_by_gap += s.capped_by_gap;
    profiled_turns += s.profiled_turns;
    missing_profiles += s.missing_profiles;
    speed.merge(s.speed);
    kept_speed.merge(s.kept_speed);
    optimised += s.optimised;
    optimise_turns += s.optimise_turns;
    optimise_kept += s.optimise_kept;
    optimise_broken += s.optimise_broken;
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
  if (shape.timed) {
    std::printf(
        "speed (all steps): %s 1.0 %s, 1.2 %s, 1.5 %s, 2.0 %s; geomean speedup %s\n", "fast_p at",
        speed_cell(speed.fast_p(1), "%.3f").c_str(), speed_cell(speed.fast_p(2), "%.3f").c_str(),
        speed_cell(speed.fast_p(3), "%.3f").c_str(), speed_cell(speed.fast_p(4), "%.3f").c_str(),
        speed_cell(speed.geomean_speedup(), "%.3f").c_str());
  }
  if (shape.optimise) {
    std::printf(
        "optimisation turns (gate.optimise above %gx%s): %zu groups opened of %zu, %zu turns, "
        "%zu kept, %zu broken; geomean speedup of the kept kernels %s\n",
        params.gate.optimise.speedup, params.gate.optimise.train ? ", trained on" : "", optimised,
        groups, optimise_turns, optimise_kept, optimise_broken,
        speed_cell(kept_speed.geomean_speedup(), "%.3f").c_str());
  }
  if (shape.profiled && !steps.empty()) {
    std::printf(
        "structural (all steps): %zu passing turns profiled, %zu missing; mean term per pass %s; "
        "of %zu passes scored > 0 the bound capped %s and half the gap %s\n",
        profiled_turns, missing_profiles,
        speed_cell(if_any(passes, passes == 0 ? 0.0 : term_sum / static_cast<double>(passes)),
                   "%.4f")
            .c_str(),
        scored, speed_cell(share_of(capped_by_bound, scored), "%.3f").c_str(),
        speed_cell(share_of(capped_by_gap, scored), "%.3f").c_str());
    std::printf("expected clean share, step 1 -> %d:", steps.back().step);
    for (const std::size_t f : shape.families) {
      std::printf(" %s %.3f -> %.3f%s", std::string(structural_families[f].name).c_str(),
                  steps.front().expected_clean_share[f], steps.back().expected_clean_share[f],
                  f == shape.families.back() ? "" : ",");
    }
    std::printf("\n");
  }
  if (!options.csv_path.empty()) {
    if (auto written = write_csv(options.csv_path, steps, params.profiled); !written) {
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
