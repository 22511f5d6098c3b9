// `leap simulate CONFIG`: runs the config's gate, reward and advantage math against a synthetic
// policy (orchestrator/simulation.hpp) and prints what each step would cost and learn.
#include "orchestrator/config.hpp"
#include "orchestrator/simulation.hpp"
#include "tools/leap/command.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

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
  p.profiled = c.verifier.profile != profile_mode::off;
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

// A cell of the per-step table and the CSV: a count, a figure, or nothing to show ("n/a" in the
// table, an empty CSV cell).
using cell = std::variant<std::monostate, std::size_t, double>;

cell count(std::size_t n) { return n; }

cell figure(const std::optional<double>& v) { return v ? cell(*v) : cell(); }

// One column of the per-step table and of the CSV, named, laid out and valued in one place so that
// the four (table header and rows, CSV header and rows) cannot drift apart. A column without a
// table name is in the CSV only, one without a CSV name in the table only.
struct column {
  std::string table_name;
  int width = 0;     // in the table, right-aligned; the name's length or more
  int decimals = 0;  // of a figure in the table (the CSV writes six significant digits)
  std::string csv_name;
  std::function<cell(const simulation_step&)> value;
};

// The columns in the table's and the CSV's order. The table shows a group only when it means
// something (table_shape says when); the CSV always has every column, so that a script reads the
// same header from every config, its cells empty where there is nothing to show. A column is
// listed twice, once for each, where the table shows a share of what the CSV counts (bound, gap)
// and where the two orders differ: the table keeps the policy's median speedup (E[spd]) with the
// speed columns and the kept kernels' geomean with the optimisation counts, the CSV the other way
// round.
std::vector<column> columns_of(const table_shape& shape) {
  const auto in_table = [](bool shown, const std::string& name) {
    return shown ? name : std::string();
  };
  const bool timed = shape.timed;
  const bool optimise = shape.optimise;
  const bool profiled = shape.profiled;
  // A count the CSV leaves empty when not profiled.
  const auto profiled_count = [profiled](std::size_t n) { return profiled ? count(n) : cell(); };
  std::vector<column> columns;
  columns.push_back({"step", 5, 0, "step", [](const simulation_step& s) {
                       return count(static_cast<std::size_t>(s.step));
                     }});
  for (int m = 1; m <= shape.max_turns; ++m) {
    const auto at = static_cast<std::size_t>(m - 1);
    columns.push_back({"acc@" + std::to_string(m), 5, 3, "acc_at_" + std::to_string(m),
                       [at](const simulation_step& s) { return cell(s.cumulative_accuracy[at]); }});
  }
  columns.insert(
      columns.end(),
      {
          {"activated", 9, 3, "activated_fraction",
           [](const simulation_step& s) { return cell(s.activated_fraction); }},
          {"recov/rollout", 13, 3, "recovery_per_rollout",
           [](const simulation_step& s) { return cell(s.recovery.per_rollout); }},
          {"recov/group", 11, 3, "recovery_per_group",
           [](const simulation_step& s) { return cell(s.recovery.per_group); }},
          {"turns/pass", 10, 3, "turns_per_pass",
           [](const simulation_step& s) { return cell(s.turns_per_pass); }},
          {"verifications", 13, 0, "verifications",
           [](const simulation_step& s) { return count(s.verifications); }},
          {"E[acc@1]", 8, 3, "expected_first_turn_accuracy",
           [](const simulation_step& s) { return cell(s.expected_first_turn_accuracy); }},
          {"fix_p", 5, 3, "debug_fix_probability",
           [](const simulation_step& s) { return cell(s.debug_fix_probability); }},
          {"", 0, 0, "signal_groups",
           [](const simulation_step& s) { return count(s.signal_groups); }},
          {"", 0, 0, "retried", [](const simulation_step& s) { return count(s.retried); }},
          {"", 0, 0, "recovered", [](const simulation_step& s) { return count(s.recovered); }},
          {"", 0, 0, "retry_verifications",
           [](const simulation_step& s) { return count(s.retry_verifications); }},
          {"", 0, 0, "buffered", [](const simulation_step& s) { return count(s.buffered); }},
          {"", 0, 0, "evicted", [](const simulation_step& s) { return count(s.retry.evicted); }},
      });
  // Speed, under `leap replay`'s names (fast_0, every pass, in the CSV only).
  for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
    columns.push_back({in_table(timed && i > 0, fast_p_name(i)), 8, 3, fast_p_name(i),
                       [i](const simulation_step& s) { return figure(s.speed.fast_p(i)); }});
  }
  const auto expected_speedup = [](const simulation_step& s) { return cell(s.expected_speedup); };
  const auto kept_geomean = [](const simulation_step& s) {
    return figure(s.kept_speed.geomean_speedup());
  };
  columns.insert(
      columns.end(),
      {
          {in_table(timed, "geomean"), 7, 3, "geomean_speedup",
           [](const simulation_step& s) { return figure(s.speed.geomean_speedup()); }},
          {in_table(timed, "E[spd]"), 7, 3, "", expected_speedup},
          {"", 0, 0, "kept_geomean_speedup", kept_geomean},
          {in_table(optimise, "optimised"), 9, 0, "optimised",
           [](const simulation_step& s) { return count(s.optimised); }},
          {in_table(optimise, "opt_turn"), 8, 0, "optimise_turns",
           [](const simulation_step& s) { return count(s.optimise_turns); }},
          {in_table(optimise, "kept"), 6, 0, "optimise_kept",
           [](const simulation_step& s) { return count(s.optimise_kept); }},
          {in_table(optimise, "broken"), 6, 0, "optimise_broken",
           [](const simulation_step& s) { return count(s.optimise_broken); }},
          {in_table(optimise, "kept_geo"), 8, 3, "", kept_geomean},
          {"", 0, 0, "expected_speedup", expected_speedup},
          {in_table(optimise, "improve"), 7, 3, "optimise_improve_probability",
           [](const simulation_step& s) { return cell(s.optimise_improve_probability); }},
          {in_table(optimise, "break"), 7, 3, "optimise_break_probability",
           [](const simulation_step& s) { return cell(s.optimise_break_probability); }},
          // Profiles and structural terms: the table's family columns are those shape_of picked.
          {"", 0, 0, "profiled_turns",
           [profiled_count](const simulation_step& s) { return profiled_count(s.profiled_turns); }},
          {"", 0, 0, "missing_profiles",
           [profiled_count](const simulation_step& s) {
             return profiled_count(s.missing_profiles);
           }},
          {in_table(profiled, "term"), 6, 4, "structural_term",
           [profiled](const simulation_step& s) {
             return profiled ? figure(if_any(s.passes, s.structural_term)) : cell();
           }},
      });
  for (std::size_t f = 0; f < structural_families.size(); ++f) {
    const std::string name(structural_families[f].name);
    const bool paid =
        std::find(shape.families.begin(), shape.families.end(), f) != shape.families.end();
    columns.push_back({in_table(profiled && paid, name), 14, 3, "clean_" + name,
                       [profiled, f](const simulation_step& s) {
                         return profiled ? figure(if_any(s.profiled_turns, s.clean_share[f]))
                                         : cell();
                       }});
  }
  for (std::size_t f = 0; f < structural_families.size(); ++f) {
    columns.push_back({"", 0, 0, "expected_clean_" + std::string(structural_families[f].name),
                       [profiled, f](const simulation_step& s) {
                         return profiled ? cell(s.expected_clean_share[f]) : cell();
                       }});
  }
  columns.insert(
      columns.end(),
      {
          {"", 0, 0, "scored_passes",
           [profiled_count](const simulation_step& s) { return profiled_count(s.scored_passes); }},
          {in_table(profiled, "bound"), 5, 2, "",
           [](const simulation_step& s) {
             return figure(share_of(s.capped_by_bound, s.scored_passes));
           }},
          {in_table(profiled, "gap"), 5, 2, "",
           [](const simulation_step& s) {
             return figure(share_of(s.capped_by_gap, s.scored_passes));
           }},
          {"", 0, 0, "capped_by_bound",
           [profiled_count](const simulation_step& s) {
             return profiled_count(s.capped_by_bound);
           }},
          {"", 0, 0, "capped_by_gap",
           [profiled_count](const simulation_step& s) { return profiled_count(s.capped_by_gap); }},
      });
  return columns;
}

std::string table_text(const cell& value, int decimals) {
  if (const auto* n = std::get_if<std::size_t>(&value)) {
    return std::to_string(*n);
  }
  if (const auto* v = std::get_if<double>(&value)) {
    std::string text(static_cast<std::size_t>(std::snprintf(nullptr, 0, "%.*f", decimals, *v)),
                     '\0');
    std::snprintf(text.data(), text.size() + 1, "%.*f", decimals, *v);
    return text;
  }
  return "n/a";
}

// Prints one table line: a cell per table column, right-aligned in its width, two spaces apart.
void print_line(const std::vector<column>& columns,
                const std::function<std::string(const column&)>& text) {
  const char* gap = "";
  for (const auto& c : columns) {
    if (!c.table_name.empty()) {
      std::printf("%s%*s", gap, c.width, text(c).c_str());
      gap = "  ";
    }
  }
  std::printf("\n");
}

void print_header(const std::vector<column>& columns) {
  print_line(columns, [](const column& c) { return c.table_name; });
}

void print_step(const std::vector<column>& columns, const simulation_step& s) {
  print_line(columns, [&s](const column& c) { return table_text(c.value(s), c.decimals); });
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

status write_csv(const std::string& path, const std::vector<column>& columns,
                 const std::vector<simulation_step>& steps) {
  std::ofstream out(path);
  if (!out) {
    return error{path + ": cannot open for writing"};
  }
  const auto write_line = [&out, &columns](const auto& write_cell) {
    const char* comma = "";
    for (const auto& c : columns) {
      if (!c.csv_name.empty()) {
        out << comma;
        write_cell(c);
        comma = ",";
      }
    }
    out << '\n';
  };
  write_line([&out](const column& c) { out << c.csv_name; });
  for (const auto& s : steps) {
    write_line([&out, &s](const column& c) {
      const cell value = c.value(s);
      if (const auto* n = std::get_if<std::size_t>(&value)) {
        out << *n;
      } else if (const auto* v = std::get_if<double>(&value)) {
        out << *v;
      }
    });
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
  const std::vector<column> columns = columns_of(shape);
  print_header(columns);
  const auto steps =
      simulate(params, [&columns](const simulation_step& s) { print_step(columns, s); });

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
    if (auto written = write_csv(options.csv_path, columns, steps); !written) {
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
