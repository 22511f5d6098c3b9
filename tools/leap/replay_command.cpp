// `leap replay RUN_DIR`: recomputes from a run's store what the paper reports (accuracy at each
// turn per step and on validation, activated fraction, recovery of gated groups and of probes,
// turns per pass, step time and its breakdown, rollout composition by pass rate), prints the tables
// and writes them as CSV; with --gate/--reward/... or --what-if CONFIG it re-gates and re-scores
// the stored verdicts and shows how rewards, advantages and the activated fraction would change.
// Reads the store only (it may run beside a live run).
#include "orchestrator/config.hpp"
#include "orchestrator/run_telemetry.hpp"
#include "storage/replay_data.hpp"
#include "storage/trajectory_store.hpp"
#include "tools/leap/command.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace leap::cli {
namespace {

struct replay_options {
  std::string run_dir;
  std::string run_id;
  std::string out_dir;  // "": RUN_DIR/replay
  int buckets = 5;
  std::string what_if_config;
  std::string gate;
  std::optional<double> tau_min;
  std::optional<double> tau_max;
  std::string unit;
  std::string reward;
  std::string static_rewards;
  std::optional<double> echo;
  std::string advantage;
  std::optional<double> gamma;
  std::optional<double> optimise_speedup;
  bool optimise_train = false;
  std::string structural;
};

// --structural "coalescing=0.02,bound=0.05": the named reward.structural weights (and bound) over
// the alternative's; "off" sets every weight to 0.
status apply_structural(const std::string& text, structural_config& config) {
  if (text == "off") {
    config.weights = {};
    return ok_status();
  }
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    double value = 0;
    try {
      std::size_t used = 0;
      value = eq == std::string::npos ? -1 : std::stod(item.substr(eq + 1), &used);
      if (eq == std::string::npos || used != item.size() - eq - 1 || !(value >= 0)) {
        throw std::invalid_argument(item);
      }
    } catch (const std::exception&) {
      return error{"--structural: '" + item + "' is not NAME=VALUE with a number >= 0"};
    }
    if (name == "bound") {
      config.bound = value;
      continue;
    }
    bool known = false;
    std::string names;
    for (std::size_t f = 0; f < structural_families.size(); ++f) {
      names += std::string(structural_families[f].name) + ", ";
      if (structural_families[f].name == name) {
        config.weights[f] = value;
        known = true;
      }
    }
    if (!known) {
      return error{"--structural: unknown family '" + name + "' (" + names + "bound, or off)"};
    }
  }
  return ok_status();
}

// An override's value names one value of `E`'s table (common/enums); the error lists them all.
template <class E>
result<E> parse_override(std::string_view option, std::string_view what, const std::string& name) {
  if (auto value = enum_names::parse<E>(name, what)) {
    return *value;
  }
  return error{std::string(option) + ": unknown " + std::string(what) + " '" + name + "' (" +
               enum_names::valid_names<E>() + ")"};
}

// "What-if gate.unit: count, fraction": an option's help with its values from `E`'s table.
template <class E>
std::string choices_help(const std::string& text) {
  return text + ": " + enum_names::valid_names<E>();
}

int fail(const std::string& message) {
  std::cerr << "leap replay: error: " << message << "\n";
  return 1;
}

// A folder the user may not write to (a run folder that is read-only, or someone else's) is the
// common case: the message says why and how to write elsewhere.
status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return error{path.string() + ": cannot open for writing: " + std::strerror(errno) +
                 " (--out DIR writes the CSV files elsewhere)"};
  }
  out << text;
  out.flush();
  if (!out) {
    return error{path.string() + ": write failed: " + std::strerror(errno)};
  }
  return ok_status();
}

bool has_overrides(const replay_options& o) {
  return !o.gate.empty() || o.tau_min || o.tau_max || !o.unit.empty() || !o.reward.empty() ||
         !o.static_rewards.empty() || o.echo || !o.advantage.empty() || o.gamma ||
         o.optimise_speedup || o.optimise_train || !o.structural.empty();
}

// The alternative scoring: the what-if config's sections, else the run's own, then the overrides.
result<scoring_config> alternative_scoring(const replay_options& o,
                                           const experiment_config& run_config,
                                           std::string* description) {
  scoring_config s{run_config.gate, run_config.reward, run_config.advantage};
  std::vector<std::string> parts;
  if (!o.what_if_config.empty()) {
    auto other = load_config(o.what_if_config);
    if (!other) {
      return other.err();
    }
    s = {other->gate, other->reward, other->advantage};
    parts.push_back(o.what_if_config);
  }
  if (!o.gate.empty()) {
    auto p = parse_override<gate_policy>("--gate", "policy", o.gate);
    if (!p) {
      return p.err();
    }
    s.gate.policy = *p;
  }
  if (!o.unit.empty()) {
    auto u = parse_override<threshold_unit>("--unit", "unit", o.unit);
    if (!u) {
      return u.err();
    }
    s.gate.unit = *u;
  }
  if (o.tau_min) {
    s.gate.tau_min = *o.tau_min;
  }
  if (o.tau_max) {
    s.gate.tau_max = *o.tau_max;
  }
  if (!o.reward.empty()) {
    auto k = parse_override<reward_kind>("--reward", "kind", o.reward);
    if (!k) {
      return k.err();
    }
    s.reward.kind = *k;
  }
  if (o.echo) {
    s.reward.echo = *o.echo;
  }
  if (!o.static_rewards.empty()) {
    s.reward.static_rewards.clear();
    std::stringstream in(o.static_rewards);
    for (std::string item; std::getline(in, item, ',');) {
      try {
        std::size_t used = 0;
        s.reward.static_rewards.push_back(std::stod(item, &used));
        if (used != item.size()) {
          throw std::invalid_argument(item);
        }
      } catch (const std::exception&) {
        return error{"--static-rewards: '" + item + "' is not a number"};
      }
    }
  }
  if (!o.advantage.empty()) {
    auto k = parse_override<advantage_kind>("--advantage", "kind", o.advantage);
    if (!k) {
      return k.err();
    }
    s.advantage.kind = *k;
  }
  if (o.gamma) {
    s.advantage.gamma = *o.gamma;
  }
  if (o.optimise_speedup) {
    s.gate.optimise.speedup = *o.optimise_speedup;
  }
  if (o.optimise_train) {
    s.gate.optimise.train = true;
  }
  if (!o.structural.empty()) {
    if (auto applied = apply_structural(o.structural, s.reward.structural); !applied) {
      return applied.err();
    }
  }
  // The rule `leap run` holds a config to (orchestrator/detail/schema_gate.cpp), for the
  // alternative the options made.
  if (s.gate.optimise.train && s.gate.optimise.speedup <= 0) {
    return error{
        "--optimise-train: gate.optimise.speedup is 0 and opens no optimisation turn; "
        "add --optimise-speedup F"};
  }
  if (s.gate.optimise.train && !pays_for_speed(s.reward)) {
    return error{"--optimise-train: reward.kind " + to_string(s.reward.kind) +
                 " pays nothing for speed; add --reward rank_speed"};
  }
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "gate %s [%g, %g] (%s), reward %s, advantage %s, gamma %g",
                to_string(s.gate.policy).c_str(), s.gate.tau_min, s.gate.tau_max,
                to_string(s.gate.unit).c_str(), to_string(s.reward.kind).c_str(),
                to_string(s.advantage.kind).c_str(), s.advantage.gamma);
  parts.push_back(buffer);
  if (s.gate.optimise.speedup > 0) {
    std::snprintf(buffer, sizeof buffer, ", optimise above %gx (up to %d turns%s)",
                  s.gate.optimise.speedup, s.gate.optimise.max_turns,
                  s.gate.optimise.train ? ", trained on" : "");
    parts.back() += buffer;
  }
  if (s.reward.structural.enabled()) {
    std::snprintf(buffer, sizeof buffer, ", structural terms (bound %g)",
                  s.reward.structural.bound);
    parts.back() += buffer;
  }
  *description = parts.size() == 2 ? parts[0] + ": " + parts[1] : parts.back();
  return s;
}

int run_replay(const replay_options& o) {
  store_options so;
  so.read_only = true;
  so.create_if_missing = false;
  so.accept_lost_writes = true;  // reading changes nothing: warn and show what is there
  auto opened = trajectory_store::open(store_path_of_run_dir(o.run_dir), so);
  if (!opened) {
    return fail(opened.err().message);
  }
  const auto& store = **opened;
  if (const auto& lost = store.lost_writes()) {
    std::fprintf(stderr,
                 "leap replay: WARNING: %s: %s. What follows is what the store still holds "
                 "(a run shown as running may have finished)\n",
                 store.path().c_str(), lost->describe().c_str());
  }

  std::string run_id = o.run_id;
  auto runs = store.runs();
  if (!runs) {
    return fail(runs.err().message);
  }
  std::optional<run_record> run;
  for (const auto& r : *runs) {
    if (run_id.empty() || r.id == run_id) {
      run = r;
    }
  }
  if (run_id.empty() && runs->size() > 1) {
    std::string ids;
    for (const auto& r : *runs) {
      ids += " " + r.id;
    }
    return fail(o.run_dir + " holds several runs; pick one with --run-id:" + ids);
  }
  if (!run) {
    return fail(o.run_dir + ": no run" + (run_id.empty() ? std::string{} : " '" + run_id + "'") +
                " in the store");
  }
  auto run_config = parse_config(run->config_yaml, o.run_dir + " (stored config)");
  if (!run_config) {
    return fail(run_config.err().message);
  }

  auto data = load_replay_data(store, run->id);
  if (!data) {
    return fail(data.err().message);
  }
  const auto report = build_replay_report(*data, static_cast<std::size_t>(o.buckets));
  std::printf("run '%s' (%s): %zu steps with groups or records, %zu groups\n\n", run->id.c_str(),
              to_string(run->status).c_str(), report.steps.size(), data->groups.size());
  std::printf("%s", format_replay_tables(report).c_str());
  if (const auto retry = format_retry_table(report); !retry.empty()) {
    std::printf("\n%s", retry.c_str());
  }
  if (const auto profiles = format_profile_table(report); !profiles.empty()) {
    std::printf("\n%s", profiles.c_str());
  }

  const std::filesystem::path out_dir = o.out_dir.empty()
                                            ? std::filesystem::path(o.run_dir) / "replay"
                                            : std::filesystem::path(o.out_dir);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return fail(out_dir.string() + ": cannot create: " + ec.message() +
                " (--out DIR writes the CSV files elsewhere)");
  }
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"steps.csv", steps_csv(report)},
        {"validation.csv", validation_csv(report)},
        {"composition.csv", composition_csv(report)}}) {
    if (auto written = write_text(out_dir / name, text); !written) {
      return fail(written.err().message);
    }
  }
  if (const auto retry = retry_csv(report); !retry.empty()) {
    if (auto written = write_text(out_dir / "retry.csv", retry); !written) {
      return fail(written.err().message);
    }
  }
  if (const auto profiles = profile_csv(report); !profiles.empty()) {
    if (auto written = write_text(out_dir / "profiles.csv", profiles); !written) {
      return fail(written.err().message);
    }
  }

  if (!o.what_if_config.empty() || has_overrides(o)) {
    std::string description;
    auto alternative = alternative_scoring(o, *run_config, &description);
    if (!alternative) {
      return fail(alternative.err().message);
    }
    if (retry_enabled(alternative->gate.retry) != retry_enabled(run_config->gate.retry)) {
      // A what-if re-scores the stored verdicts; a retry needs new samples of the task.
      description +=
          "; gate.retry not applied: the groups are re-scored as they ran (a what-if "
          "cannot sample retried groups)";
    }
    const auto whatif = what_if(*data, *alternative);
    std::printf("\n%s", format_whatif_table(whatif, description).c_str());
    if (auto written = write_text(out_dir / "whatif.csv", whatif_csv(whatif)); !written) {
      return fail(written.err().message);
    }
  }
  // What the live metrics said at each step's end, as `leap run` stored it (not recomputed).
  auto records = store.steps(run->id);
  if (!records) {
    return fail(records.err().message);
  }
  if (const auto table = telemetry::format_telemetry_table(*records); !table.empty()) {
    std::printf("\n%s", table.c_str());
    if (auto written = write_text(out_dir / "telemetry.csv", telemetry::telemetry_csv(*records));
        !written) {
      return fail(written.err().message);
    }
  }
  if (const auto table = telemetry::format_learner_table(*records); !table.empty()) {
    std::printf("\n%s", table.c_str());
    if (auto written = write_text(out_dir / "learner.csv",
                                  telemetry::prefixed_metrics_csv(*records, "learner."));
        !written) {
      return fail(written.err().message);
    }
  }
  std::printf("\nwrote CSV to %s\n", out_dir.string().c_str());
  return 0;
}

void add_replay(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<replay_options>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Recompute a run's metrics from its store: accuracy at each turn per step and on validation, "
      "activated-group fraction, recovery (gated groups and probes), turns per pass, step time "
      "breakdown, rollout composition by pass rate. Prints tables and writes CSV. With --gate, "
      "--tau-min, --tau-max, --unit, --reward, --static-rewards, --advantage, --gamma, "
      "--optimise-speedup, --optimise-train, --structural or "
      "--what-if CONFIG, re-gates and re-scores the stored verdicts and shows what would change.");
  cmd->add_option("run_dir", o->run_dir, "The run folder (experiment.run_dir)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--run-id", o->run_id, "The run to replay when the folder holds several");
  cmd->add_option("--out", o->out_dir, "Folder for the CSV files (default: RUN_DIR/replay)");
  cmd->add_option("--buckets", o->buckets, "Pass-rate buckets of the composition table")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--what-if", o->what_if_config,
                  "Re-score under this config's gate, reward and advantage sections")
      ->check(CLI::ExistingFile);
  cmd->add_option("--gate", o->gate, choices_help<gate_policy>("What-if gate policy"));
  cmd->add_option("--tau-min", o->tau_min, "What-if gate.tau_min");
  cmd->add_option("--tau-max", o->tau_max, "What-if gate.tau_max");
  cmd->add_option("--unit", o->unit, choices_help<threshold_unit>("What-if gate.unit"));
  cmd->add_option("--reward", o->reward, choices_help<reward_kind>("What-if reward kind"));
  cmd->add_option("--echo", o->echo, "What-if reward.echo (prime_echo), in [0, 1]")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--static-rewards", o->static_rewards,
                  "What-if reward.static_rewards, comma-separated (e.g. 1,0.5,0.25)");
  cmd->add_option("--advantage", o->advantage,
                  choices_help<advantage_kind>("What-if advantage kind"));
  cmd->add_option("--gamma", o->gamma, "What-if advantage.gamma");
  cmd->add_option("--optimise-speedup", o->optimise_speedup,
                  "What-if gate.optimise.speedup: which groups optimisation turns would open "
                  "(0: none)")
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_flag("--optimise-train", o->optimise_train,
                "What-if gate.optimise.train: first-turn passes of the groups that ran "
                "optimisation turns are paid for their last passing turn's speed (needs "
                "--optimise-speedup and a reward that pays for speed)");
  cmd->add_option("--structural", o->structural,
                  "What-if reward.structural, from the stored profiles: NAME=WEIGHT for "
                  "coalescing, bank_conflicts, occupancy, parallelism, dram_traffic, and "
                  "bound=B, comma-separated (e.g. coalescing=0.02,bound=0.05); off: none");
  cmd->callback([o, exit_code] { *exit_code = run_replay(*o); });
}

}  // namespace

LEAP_COMMAND("replay", add_replay);

}  // namespace leap::cli
