#include "orchestrator/replay.hpp"

#include "orchestrator/group_flow.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

namespace leap {
namespace {

// Rounding residue (a reward mean of -2.8e-17) prints as 0.
double clean(double v) { return std::abs(v) < 1e-12 ? 0.0 : v; }

std::string num(double v) {
  v = clean(v);
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc{} ? std::string(buffer, end) : std::string("nan");
}

std::string printf_string(const char* format, auto... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, format, args...);
  return buffer;
}

// Calls fn(name, value, rule) for each field of `record` marked replay_mean, and of the records
// nested in it, in fields() order; `name` is the CSV export's column name (a nested record's
// fields take its csv_prefix, as the export names them), built only when `Names` (the per-turn
// walk needs the order, not the names).
template <bool Names, class Record, class Fn>
void for_each_replay_mean(const Record& record, Fn& fn, const std::string& prefix = {}) {
  for_each_field(record, [&](const auto& f) {
    using V = std::remove_cvref_t<decltype(f.value)>;
    if constexpr (field_listed<V>) {
      for_each_replay_mean<Names>(f.value, fn,
                                  Names ? prefix + std::string(f.options.csv) : std::string());
    } else if constexpr (std::is_arithmetic_v<V>) {
      if (f.options.replay_mean) {
        const auto name = f.options.csv.empty() ? f.name : f.options.csv;
        fn(Names ? prefix + std::string(name) : std::string(), static_cast<double>(f.value),
           f.options.json);
      }
    }
  });
}

std::vector<field_mean> turn_means_of(const group_record& group) {
  std::vector<field_mean> means(replay_turn_fields().size());
  for (const auto& r : group.rollouts) {
    for (const auto& t : r.turns) {
      std::size_t k = 0;
      auto add = [&](const std::string&, double v, json_unmeasured rule) {
        if (k < means.size() && measured(v, rule)) {
          means[k].sum += v;
          ++means[k].count;
        }
        ++k;
      };
      for_each_replay_mean<false>(t, add);
    }
  }
  return means;
}

// Calls row(step, "N") for each step of a report, numbered from 1 as the tables number them, and
// then row(total, "all").
template <class Report, class Row>
void rows_and_total(const Report& r, Row&& row) {
  for (const auto& s : r.steps) {
    row(s, std::to_string(s.step + 1));
  }
  row(r.total, std::string("all"));
}

group_summary trained_summary(const replay_group& g) { return {g.gate, g.trained, g.advantages}; }
group_summary probe_summary(const replay_group& g) {
  return {gate_decision::open, g.measured, g.advantages};
}

replay_step summarise(const std::vector<const replay_group*>& groups, int max_turns) {
  replay_step s;
  std::vector<group_summary> trained;
  std::vector<group_summary> probes;
  for (const auto* g : groups) {
    trained.push_back(trained_summary(*g));
    if (g->probe) {
      probes.push_back(probe_summary(*g));
    }
    s.activated += is_open(g->gate) ? 1 : 0;
    s.turns += g->turns;
    s.verifier_jobs += g->verifier_jobs;
    s.turn_means.resize(g->turn_means.size());
    for (std::size_t k = 0; k < g->turn_means.size(); ++k) {
      s.turn_means[k].add(g->turn_means[k]);
    }
    if (g->optimise && static_cast<std::size_t>(*g->optimise) < s.optimise_decisions.size()) {
      ++s.optimise_decisions[static_cast<std::size_t>(*g->optimise)];
    }
    s.signal_groups +=
        std::any_of(g->advantages.begin(), g->advantages.end(), [](double a) { return a != 0.0; })
            ? 1
            : 0;
    for (std::size_t i = 0; i < g->trained.size(); ++i) {
      s.speed.add(g->trained[i], speed_in(*g, i, g->trained[i]));
      s.compiled_speed.add(g->trained[i],
                           i < g->compiled_speeds.size() ? g->compiled_speeds[i] : pass_speed{});
    }
  }
  s.groups = static_cast<std::uint32_t>(groups.size());
  s.activated_fraction = activated_group_fraction(trained);
  s.accuracy = cumulative_accuracy(trained, max_turns);
  s.recovery = recovery(trained);
  s.probe_groups = static_cast<std::uint32_t>(probes.size());
  s.probe_recovery = recovery(probes);
  s.turns_per_pass = turns_per_pass(trained);
  return s;
}

std::string time_cell(const std::optional<step_timings>& t, double step_timings::*field) {
  return t ? printf_string("%.2f", (*t).*field / 1000.0) : std::string("-");
}

// "3", "3;4" (a validation measured partly after a resume), or "-" when none was recorded.
std::string versions_cell(const std::vector<std::uint64_t>& versions) {
  if (versions.empty()) {
    return "-";
  }
  std::string out;
  for (auto v : versions) {
    out += (out.empty() ? "" : ";") + std::to_string(v);
  }
  return out;
}

// A fast_p or speedup cell: "n/a" when nothing was timed.
std::string speed_cell(const std::optional<double>& v, const char* format) {
  return v ? printf_string(format, *v) : std::string("n/a");
}

bool any_timed(const replay_report& r, speed_summary replay_step::*speed,
               speed_summary replay_validation::*validation_speed) {
  return (r.total.*speed).timed_passes() > 0 ||
         std::any_of(r.validation.begin(), r.validation.end(),
                     [&](const auto& v) { return (v.*validation_speed).timed_passes() > 0; });
}

// Speed per step against one baseline, only for a run that timed something against it
// (verifier.timing_reps > 0).
std::string format_speed_block(const replay_report& r, const std::string& title,
                               speed_summary replay_step::*speed,
                               speed_summary replay_validation::*validation_speed) {
  if (!any_timed(r, speed, validation_speed)) {
    return {};
  }
  std::string out = "\n" + title + "\n";
  const auto header = [&](const char* first) {
    out += printf_string("%6s %8s %6s %6s", first, "rollouts", "passes", "timed");
    for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
      out += printf_string(" %8s", fast_p_name(i).c_str());
    }
    out += printf_string(" %8s\n", "geomean");
  };
  const auto row = [&](const speed_summary& s, const std::string& label) {
    out +=
        printf_string("%6s %8u %6u %6u", label.c_str(), s.rollouts(), s.passes(), s.timed_passes());
    for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
      out += printf_string(" %8s", speed_cell(s.fast_p(i), "%.3f").c_str());
    }
    out += printf_string(" %8s\n", speed_cell(s.geomean_speedup(), "%.3f").c_str());
  };
  header("step");
  for (const auto& s : r.steps) {
    row(s.*speed, std::to_string(s.step + 1));
  }
  row(r.total.*speed, "all");
  if (!r.validation.empty()) {
    out += "validation (after training step)\n";
    header("step");
    for (const auto& v : r.validation) {
      row(v.*validation_speed, std::to_string(v.step + 1));
    }
  }
  return out;
}

std::string format_speed_table(const replay_report& r) {
  return format_speed_block(r,
                            "speed (fast_p: share of all rollouts that passed with a speedup > p "
                            "over the reference as written (eager); geomean: over the timed "
                            "passes; n/a: nothing timed)",
                            &replay_step::speed, &replay_validation::speed) +
         format_speed_block(r,
                            "speed against the reference under torch.compile (the same columns; "
                            "KernelBench tasks timed with a torch that has torch.compile)",
                            &replay_step::compiled_speed, &replay_validation::compiled_speed);
}

// The optimisation decisions the run stored, per step; empty when it stored none.
std::string format_optimise_table(const replay_report& r) {
  const auto& total = r.total.optimise_decisions;
  if (std::all_of(total.begin(), total.end(), [](std::uint32_t n) { return n == 0; })) {
    return {};
  }
  std::string out =
      "\noptimisation decisions stored by the run (gate.optimise; groups, by decision)\n";
  out += printf_string("%6s", "step");
  for (std::size_t d = 1; d < total.size(); ++d) {
    out += printf_string(" %14s", to_string(static_cast<optimise_decision>(d)).c_str());
  }
  out += "\n";
  auto row = [&](const replay_step& s, const std::string& label) {
    out += printf_string("%6s", label.c_str());
    for (std::size_t d = 1; d < s.optimise_decisions.size(); ++d) {
      out += printf_string(" %14u", s.optimise_decisions[d]);
    }
    out += "\n";
  };
  rows_and_total(r, row);
  return out;
}

}  // namespace

const std::vector<std::string>& replay_turn_fields() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    auto add = [&](const std::string& name, double, json_unmeasured) { out.push_back(name); };
    for_each_replay_mean<true>(turn_record{}, add);
    return out;
  }();
  return names;
}

replay_group replay_group_of(const group_record& group) {
  replay_group g;
  g.turn_means = turn_means_of(group);
  g.step = group.step;
  g.split = group.split;
  g.group = group.group_index;
  g.gate = group.gate;
  g.probe = group.probe;
  g.max_turns = group.max_turns;
  g.weight_version = group.weight_version;
  g.optimise = group.optimise;
  for (const auto& r : group.rollouts) {
    g.trained.push_back(r.outcome);
    g.measured.push_back(outcome_from_turns(r));
    g.first_speeds.push_back(speed_of(r, {1, 1}));
    g.measured_speeds.push_back(speed_of(r, g.measured.back()));
    g.kept_speeds.push_back(kept_speed_of(r));
    const auto kept = kept_turn(r);
    g.kept_turns.push_back(kept ? static_cast<int>(*kept) : -1);
    g.compiled_speeds.push_back(compiled_speed_of(r, r.outcome));
    g.rewards.push_back(r.reward);
    g.advantages.push_back(r.advantage);
    g.turns += static_cast<std::uint32_t>(r.turns.size());
    g.first_turns += r.turns.empty() ? 0 : 1;
    if (!r.turns.empty() && r.turns.front().passed) {
      g.optimise_turns += static_cast<std::uint32_t>(r.turns.size() - 1);
    }
    for (const auto& t : r.turns) {
      g.verifier_jobs += t.finish != finish_reason::error && !t.text.empty() ? 1 : 0;
    }
  }
  return g;
}

pass_speed speed_in(const replay_group& group, std::size_t i, const rollout_outcome& outcome) {
  if (outcome.passed_at_turn == 1 && i < group.first_speeds.size()) {
    return group.first_speeds[i];
  }
  if (outcome.passed() && i < group.measured.size() && i < group.measured_speeds.size() &&
      group.measured[i].passed_at_turn == outcome.passed_at_turn) {
    return group.measured_speeds[i];
  }
  return {};
}

namespace {

// A step record's partial.* metrics (the experiment driver writes them all or none).
std::optional<replay_partial_columns> partial_columns_of(const step_record& r) {
  if (r.metrics.count("partial.started") == 0) {
    return std::nullopt;
  }
  auto count = [&](const char* name) {
    auto it = r.metrics.find(name);
    return it == r.metrics.end() ? 0u : static_cast<std::uint32_t>(std::max(0.0, it->second));
  };
  return replay_partial_columns{count("partial.started"), count("partial.carried_in"),
                                count("partial.trained_carried"), count("partial.carried"),
                                count("partial.dropped")};
}

}  // namespace

std::map<std::uint64_t, double> elapsed_since_start(const std::vector<step_record>& steps,
                                                    std::int64_t fallback_start_unix_ms) {
  std::int64_t start = 0;
  for (const auto& s : steps) {
    if (s.started_unix_ms > 0 && (start == 0 || s.started_unix_ms < start)) {
      start = s.started_unix_ms;
    }
  }
  if (start == 0) {
    start = fallback_start_unix_ms;
  }
  std::map<std::uint64_t, double> out;
  if (start <= 0) {
    return out;
  }
  for (const auto& s : steps) {
    if (s.finished_unix_ms > 0) {
      out[s.step] = static_cast<double>(s.finished_unix_ms - start);
    }
  }
  return out;
}

replay_report build_replay_report(const replay_data& data, std::size_t buckets) {
  replay_report report;
  report.max_turns = data.max_turns;
  std::map<std::uint64_t, std::vector<const replay_group*>> train;
  std::map<std::uint64_t, std::vector<const replay_group*>> validation;
  std::vector<const replay_group*> all_train;
  for (const auto& g : data.groups) {
    if (g.split == split_kind::train) {
      train[g.step].push_back(&g);
      all_train.push_back(&g);
    } else {
      validation[g.step].push_back(&g);
    }
  }
  std::set<std::uint64_t> steps;
  for (const auto& [step, groups] : train) {
    steps.insert(step);
  }
  // A step whose groups were all dropped may still have profiles: their cost is shown.
  for (const auto& [step, counts] : data.profiles) {
    steps.insert(step);
  }
  for (const auto& r : data.steps) {
    steps.insert(r.step);
  }
  const auto elapsed = elapsed_since_start(data.steps, 0);
  for (auto step : steps) {
    replay_step s = summarise(train[step], data.max_turns);
    s.step = step;
    if (const auto e = elapsed.find(step); e != elapsed.end()) {
      s.elapsed_ms = e->second;
    }
    for (const auto& r : data.steps) {
      if (r.step == step) {
        s.timings = r.timings;
        s.partial = partial_columns_of(r);
      }
    }
    for (const auto& r : data.retries) {
      if (r.step == step) {
        s.retry = replay_retry_columns{static_cast<std::uint32_t>(r.retried.size()), r.counts,
                                       static_cast<std::uint32_t>(r.buffer.entries.size())};
      }
    }
    if (const auto p = data.profiles.find(step); p != data.profiles.end()) {
      s.profiles = p->second;
    }
    report.steps.push_back(std::move(s));
  }
  for (const auto& [step, groups] : validation) {
    replay_validation v;
    v.step = step;
    std::vector<group_summary> summaries;
    for (const auto* g : groups) {
      summaries.push_back(trained_summary(*g));
      v.rollouts += static_cast<std::uint32_t>(g->trained.size());
      for (std::size_t i = 0; i < g->trained.size(); ++i) {
        v.speed.add(g->trained[i], speed_in(*g, i, g->trained[i]));
        v.compiled_speed.add(g->trained[i],
                             i < g->compiled_speeds.size() ? g->compiled_speeds[i] : pass_speed{});
      }
      if (g->weight_version && std::find(v.weight_versions.begin(), v.weight_versions.end(),
                                         *g->weight_version) == v.weight_versions.end()) {
        v.weight_versions.push_back(*g->weight_version);
      }
    }
    std::sort(v.weight_versions.begin(), v.weight_versions.end());
    v.groups = static_cast<std::uint32_t>(groups.size());
    v.accuracy = cumulative_accuracy(summaries, data.max_turns);
    report.validation.push_back(std::move(v));
  }
  report.total = summarise(all_train, data.max_turns);
  for (const auto& s : report.steps) {
    report.total.profiles.add(s.profiles);
    if (s.partial) {
      auto& t = report.total.partial;
      if (!t) {
        t.emplace();
      }
      t->started += s.partial->started;
      t->carried_in += s.partial->carried_in;
      t->trained_carried += s.partial->trained_carried;
      t->carried += s.partial->carried;
      t->dropped += s.partial->dropped;
    }
    if (s.retry) {
      auto& t = report.total.retry;
      if (!t) {
        t.emplace();
      }
      t->retried += s.retry->retried;
      t->counts += s.retry->counts;
      t->buffered = s.retry->buffered;
    }
  }
  // The run's time: the sum of its completed steps'.
  if (!report.steps.empty() && std::all_of(report.steps.begin(), report.steps.end(),
                                           [](const auto& s) { return s.timings.has_value(); })) {
    step_timings sum;
    for (const auto& s : report.steps) {
      sum.wall_ms += s.timings->wall_ms;
      sum.generation_ms += s.timings->generation_ms;
      sum.compile_ms += s.timings->compile_ms;
      sum.run_ms += s.timings->run_ms;
      sum.learner_ms += s.timings->learner_ms;
      sum.idle_ms += s.timings->idle_ms;
    }
    report.total.timings = sum;
  }
  std::vector<group_summary> summaries;
  summaries.reserve(all_train.size());
  for (const auto* g : all_train) {
    summaries.push_back(trained_summary(*g));
  }
  report.composition = rollout_composition(summaries, buckets);
  return report;
}

namespace {

// The stored profiles of the training turns by group (step, group), for the structural terms.
using profiles_by_group =
    std::map<std::pair<std::uint64_t, std::uint32_t>, std::vector<const turn_profile_record*>>;

profiles_by_group index_profiles(const std::vector<turn_profile_record>& profiles) {
  profiles_by_group out;
  for (const auto& p : profiles) {
    if (p.turn.split == split_kind::train) {
      out[{p.turn.step, p.turn.group}].push_back(&p);
    }
  }
  return out;
}

// The structural score of rollout i's paid turn (0-based `turn`) in a group's stored profiles.
double stored_turn_score(const structural_config& config,
                         const std::vector<const turn_profile_record*>& profiles, std::size_t i,
                         int turn) {
  for (const auto* p : profiles) {
    if (p->turn.rollout == i && static_cast<int>(p->turn.turn) == turn) {
      return paid_structural_score(config, *p);
    }
  }
  return 0.0;
}

}  // namespace

whatif_report what_if(const replay_data& data, const scoring_config& alternative) {
  whatif_report report;
  const bool structural = alternative.reward.structural.enabled() && !data.turn_profiles.empty();
  const profiles_by_group stored_profiles =
      structural ? index_profiles(data.turn_profiles) : profiles_by_group{};
  adaptive_gate gate(alternative.gate);
  std::map<std::uint64_t, whatif_step> steps;
  struct sums {
    double reward_before = 0, reward_after = 0, abs_before = 0, abs_after = 0;
    std::uint32_t nonzero_before = 0, nonzero_after = 0, rollouts = 0, activated_before = 0,
                  activated_after = 0, optimised_before = 0, optimised_after = 0;
  };
  std::map<std::uint64_t, sums> step_sums;
  sums total_sums;
  auto add = [](whatif_step& w, sums& s, const replay_group& g, gate_decision after,
                bool unobserved, const std::vector<double>& rewards,
                const std::vector<double>& advantages, std::uint32_t turns_after,
                bool optimise_after) {
    ++w.groups;
    // What the run decided, as it stored it; a group stored without a decision shows it only by
    // the optimisation turns it ran.
    const bool opened_before =
        g.optimise ? *g.optimise == optimise_decision::open : g.optimise_turns > 0;
    s.optimised_before += opened_before ? 1 : 0;
    s.optimised_after += optimise_after ? 1 : 0;
    w.unobserved_optimise += optimise_after && g.optimise_turns == 0 ? 1 : 0;
    s.activated_before += is_open(g.gate) ? 1 : 0;
    s.activated_after += is_open(after) ? 1 : 0;
    w.changed_decisions += g.gate != after ? 1 : 0;
    w.unobserved_opens += unobserved ? 1 : 0;
    w.turns_before += g.turns;
    w.turns_after += turns_after;
    for (std::size_t i = 0; i < rewards.size(); ++i) {
      const double before = i < g.advantages.size() ? g.advantages[i] : 0.0;
      s.reward_before += i < g.rewards.size() ? g.rewards[i] : 0.0;
      s.reward_after += rewards[i];
      s.abs_before += std::abs(before);
      s.abs_after += std::abs(advantages[i]);
      s.nonzero_before += before != 0.0 ? 1 : 0;
      s.nonzero_after += advantages[i] != 0.0 ? 1 : 0;
      w.sign_flips +=
          (before > 0 && advantages[i] < 0) || (before < 0 && advantages[i] > 0) ? 1 : 0;
      ++s.rollouts;
    }
  };
  for (const auto& g : data.groups) {
    if (g.split != split_kind::train) {
      continue;
    }
    const int group_size = static_cast<int>(g.measured.size());
    int n_fail = 0;
    for (const auto& o : g.measured) {
      n_fail += o.passed_at_turn != 1 ? 1 : 0;
    }
    const gate_decision after = gate.decide_and_record(n_fail, group_size);
    const bool observed = is_open(g.gate) || g.probe;
    std::vector<rollout_outcome> outcomes;
    std::uint32_t turns_after = 0;
    if (is_open(after) && observed) {
      for (const auto& o : g.measured) {
        // A first-turn pass's later turns are optimisation turns: counted below, never scored.
        outcomes.push_back(o.passed_at_turn == 1 ? rollout_outcome{1, 1} : o);
        turns_after += static_cast<std::uint32_t>(outcomes.back().generated_turns);
      }
    } else {
      for (const auto& o : g.measured) {
        outcomes.push_back({o.passed_at_turn == 1 ? 1 : 0, 1});
      }
      turns_after = g.first_turns;
    }
    const bool unobserved = is_open(after) && !observed;
    std::vector<double> pass_speedups;
    for (std::size_t i = 0; i < g.measured.size(); ++i) {
      if (g.measured[i].passed_at_turn == 1) {
        pass_speedups.push_back(i < g.first_speeds.size() ? g.first_speeds[i].speedup.value_or(0.0)
                                                          : 0.0);
      }
    }
    const bool optimise_after = decide_optimise(alternative.gate.optimise, pass_speedups,
                                                g.max_turns - 1) == optimise_decision::open;
    if (optimise_after) {
      turns_after += g.optimise_turns;
    }
    // Trained on, the optimisation turns the group ran pay a first-turn pass for the kernel it
    // ended with; its rank stays a pass at turn 1 (score_group).
    const bool pays_kept =
        alternative.gate.optimise.train && optimise_after && !g.probe && g.optimise_turns > 0;
    std::vector<pass_speed> speeds;
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      const bool kept = pays_kept && outcomes[i].passed_at_turn == 1 && i < g.kept_speeds.size();
      speeds.push_back(kept ? g.kept_speeds[i] : speed_in(g, i, outcomes[i]));
    }
    auto rewards = compute_rewards(alternative.reward, outcomes, g.max_turns, speeds);
    if (const auto found = stored_profiles.find({g.step, g.group});
        found != stored_profiles.end()) {
      std::vector<double> scores;
      for (std::size_t i = 0; i < outcomes.size(); ++i) {
        const bool kept = pays_kept && outcomes[i].passed_at_turn == 1 && i < g.kept_turns.size() &&
                          g.kept_turns[i] >= 0;
        const int turn = kept ? g.kept_turns[i] : outcomes[i].passed_at_turn - 1;
        scores.push_back(outcomes[i].passed() ? stored_turn_score(alternative.reward.structural,
                                                                  found->second, i, turn)
                                              : 0.0);
      }
      const auto terms = structural_terms(outcomes, rewards, scores);
      for (std::size_t i = 0; i < rewards.size(); ++i) {
        rewards[i] += terms[i];
      }
    }
    const auto advantages = compute_advantages(alternative.advantage, rewards);
    auto& w = steps[g.step];
    w.step = g.step;
    add(w, step_sums[g.step], g, after, unobserved, rewards, advantages, turns_after,
        optimise_after);
    add(report.total, total_sums, g, after, unobserved, rewards, advantages, turns_after,
        optimise_after);
  }
  auto finish = [](whatif_step& w, const sums& s) {
    const double groups = std::max(1u, w.groups);
    const double rollouts = std::max(1u, s.rollouts);
    w.activated_before = s.activated_before / groups;
    w.activated_after = s.activated_after / groups;
    w.optimised_before = s.optimised_before / groups;
    w.optimised_after = s.optimised_after / groups;
    w.mean_reward_before = s.reward_before / rollouts;
    w.mean_reward_after = s.reward_after / rollouts;
    w.mean_abs_advantage_before = s.abs_before / rollouts;
    w.mean_abs_advantage_after = s.abs_after / rollouts;
    w.nonzero_advantage_before = s.nonzero_before / rollouts;
    w.nonzero_advantage_after = s.nonzero_after / rollouts;
  };
  for (auto& [step, w] : steps) {
    finish(w, step_sums[step]);
    report.steps.push_back(w);
  }
  finish(report.total, total_sums);
  return report;
}

namespace {

std::string mean_cell(const field_mean& m) {
  const auto v = m.mean();
  if (!v) {
    return "-";
  }
  return printf_string(std::abs(*v) >= 100 ? "%.0f" : "%.3g", clean(*v));
}

// The per-turn means of the turn fields marked replay_mean, one column each.
std::string format_turn_means(const replay_report& r) {
  const auto& names = replay_turn_fields();
  if (names.empty()) {
    return {};
  }
  std::string out =
      "\ntraining turns, per step: each turn field's mean over the turns that measured it\n";
  out += printf_string("%6s %6s", "step", "turns");
  for (const auto& name : names) {
    out += printf_string(" %*s", static_cast<int>(std::max<std::size_t>(9, name.size())),
                         name.c_str());
  }
  out += "\n";
  auto row = [&](const replay_step& s, const std::string& label) {
    out += printf_string("%6s %6u", label.c_str(), s.turns);
    for (std::size_t k = 0; k < names.size(); ++k) {
      out += printf_string(
          " %*s", static_cast<int>(std::max<std::size_t>(9, names[k].size())),
          mean_cell(k < s.turn_means.size() ? s.turn_means[k] : field_mean{}).c_str());
    }
    out += "\n";
  };
  rows_and_total(r, row);
  return out;
}

}  // namespace

std::string format_replay_tables(const replay_report& r) {
  std::string out =
      "training, per step (recovery of gated groups; probes: closed groups debugged "
      "for measurement only)\n";
  out += printf_string("%6s %6s %9s", "step", "groups", "activated");
  for (int m = 1; m <= r.max_turns; ++m) {
    out += printf_string(" %7s", ("pass@" + std::to_string(m)).c_str());
  }
  out += printf_string(" %9s %9s %6s %9s %9s %10s %8s %8s %8s %8s %8s %8s\n", "recov/rol",
                       "recov/grp", "probes", "probe/rol", "probe/grp", "turns/pass", "wall_s",
                       "gen_s", "compile", "run_s", "learn_s", "idle_s");
  auto row = [&](const replay_step& s, const std::string& label) {
    out += printf_string("%6s %6u %9.3f", label.c_str(), s.groups, s.activated_fraction);
    for (double a : s.accuracy) {
      out += printf_string(" %7.3f", a);
    }
    out += printf_string(" %9.3f %9.3f %6u %9.3f %9.3f %10.2f", s.recovery.per_rollout,
                         s.recovery.per_group, s.probe_groups, s.probe_recovery.per_rollout,
                         s.probe_recovery.per_group, s.turns_per_pass);
    out += printf_string(" %8s %8s %8s %8s %8s %8s\n",
                         time_cell(s.timings, &step_timings::wall_ms).c_str(),
                         time_cell(s.timings, &step_timings::generation_ms).c_str(),
                         time_cell(s.timings, &step_timings::compile_ms).c_str(),
                         time_cell(s.timings, &step_timings::run_ms).c_str(),
                         time_cell(s.timings, &step_timings::learner_ms).c_str(),
                         time_cell(s.timings, &step_timings::idle_ms).c_str());
  };
  for (const auto& s : r.steps) {
    row(s, std::to_string(s.step + 1) + (s.timings ? "" : "*"));
  }
  row(r.total, "all");
  if (std::any_of(r.steps.begin(), r.steps.end(), [](const auto& s) { return !s.timings; })) {
    out += "* the step did not complete (no step record): its groups so far\n";
  }
  if (r.total.partial) {
    out +=
        "\npartial rollouts, per step (the groups above are those each step started; trained "
        "earlier: groups of its batch started by an earlier step)\n";
    out += printf_string("%6s %8s %10s %15s %8s %8s\n", "step", "started", "carried_in",
                         "trained_earlier", "carried", "dropped");
    auto partial_row = [&](const std::optional<replay_partial_columns>& p,
                           const std::string& label) {
      if (!p) {
        out += printf_string("%6s %8s %10s %15s %8s %8s\n", label.c_str(), "-", "-", "-", "-", "-");
        return;
      }
      out += printf_string("%6s %8u %10u %15u %8u %8u\n", label.c_str(), p->started, p->carried_in,
                           p->trained_carried, p->carried, p->dropped);
    };
    for (const auto& s : r.steps) {
      partial_row(s.partial, std::to_string(s.step + 1));
    }
    partial_row(r.total.partial, "all");
  }
  out += format_turn_means(r);
  if (!r.validation.empty()) {
    out += "\nvalidation (after training step)\n";
    out += printf_string("%6s %6s %8s", "step", "tasks", "rollouts");
    for (int m = 1; m <= r.max_turns; ++m) {
      out += printf_string(" %7s", ("pass@" + std::to_string(m)).c_str());
    }
    out += printf_string(" %7s\n", "weights");
    for (const auto& v : r.validation) {
      out += printf_string("%6llu %6u %8u", static_cast<unsigned long long>(v.step) + 1, v.groups,
                           v.rollouts);
      for (double a : v.accuracy) {
        out += printf_string(" %7.3f", a);
      }
      out += printf_string(" %7s\n", versions_cell(v.weight_versions).c_str());
    }
  }
  out += format_speed_table(r);
  out += format_optimise_table(r);
  out += "\nrollouts with a non-zero advantage by group pass rate (all training groups)\n";
  out += printf_string("%-11s %12s %12s %12s %12s %12s %12s\n", "pass rate", "turn1 pass+",
                       "turn1 pass-", "debug pass+", "debug pass-", "failure+", "failure-");
  for (const auto& b : r.composition) {
    out += printf_string("[%.2f,%.2f%c", b.lo, b.hi, b.hi >= 1.0 ? ']' : ')');
    for (const auto& kind : b.counts) {
      out += printf_string(" %12zu %12zu", kind[1], kind[0]);
    }
    out += "\n";
  }
  return out;
}

std::string format_whatif_table(const whatif_report& r, const std::string& description) {
  std::string out =
      "what-if: the stored verdicts re-gated and re-scored under " + description + "\n";
  out += printf_string("%6s %6s %17s %8s %10s %15s %15s %15s %6s %13s\n", "step", "groups",
                       "activated", "changed", "unobserved", "mean reward", "mean |adv|",
                       "adv != 0", "flips", "turns");
  auto row = [&](const whatif_step& w, const std::string& label) {
    out += printf_string(
        "%6s %6u %7.3f -> %5.3f %8u %10u %6.3f -> %5.3f %6.3f -> %5.3f "
        "%6.3f -> %5.3f %6u %5u -> %5u\n",
        label.c_str(), w.groups, w.activated_before, w.activated_after, w.changed_decisions,
        w.unobserved_opens, clean(w.mean_reward_before), clean(w.mean_reward_after),
        w.mean_abs_advantage_before, w.mean_abs_advantage_after, w.nonzero_advantage_before,
        w.nonzero_advantage_after, w.sign_flips, w.turns_before, w.turns_after);
  };
  rows_and_total(r, row);
  if (r.total.unobserved_opens > 0) {
    out +=
        "unobserved: groups the alternative would open but the run closed without a probe; "
        "their debug turns never ran, so they are scored on their first turns\n";
  }
  if (r.total.optimised_before > 0 || r.total.optimised_after > 0) {
    out += printf_string(
        "optimisation turns (gate.optimise): groups opened %.3f -> %.3f, %u opened that ran "
        "none (their optimisation turns never ran; not in the turns column)\n",
        r.total.optimised_before, r.total.optimised_after, r.total.unobserved_optimise);
  }
  return out;
}

namespace {

// CSV rows are built cell by cell: GCC 12 warns falsely (-Wrestrict) on long chains of
// `"," + std::string`.
class csv_row {
 public:
  explicit csv_row(std::string& out) : out_(out) {}
  ~csv_row() { out_ += '\n'; }
  csv_row(const csv_row&) = delete;
  csv_row& operator=(const csv_row&) = delete;
  csv_row& operator<<(const std::string& text) {
    if (!first_) {
      out_ += ',';
    }
    first_ = false;
    out_ += text;
    return *this;
  }
  csv_row& operator<<(double v) { return *this << num(v); }
  csv_row& operator<<(std::uint64_t v) { return *this << std::to_string(v); }
  csv_row& operator<<(std::uint32_t v) { return *this << std::to_string(v); }

 private:
  std::string& out_;
  bool first_ = true;
};

// ",passes,timed_passes,fast_0,...,geomean_speedup"; a cell is empty when nothing was timed.
std::string speed_csv_header() {
  std::string out = ",passes,timed_passes";
  for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
    out += "," + fast_p_name(i);
  }
  return out + ",geomean_speedup";
}

void add_speed_cells(csv_row& row, const speed_summary& s) {
  row << s.passes() << s.timed_passes();
  for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
    const auto v = s.fast_p(i);
    row << (v ? num(*v) : std::string());
  }
  const auto g = s.geomean_speedup();
  row << (g ? num(*g) : std::string());
}

}  // namespace

std::string format_retry_table(const replay_report& r) {
  if (!r.total.retry) {
    return {};
  }
  std::string out =
      "buffered retry, per step (signal: groups with a non-zero advantage; recovered: retries "
      "with a pass; waiting: in the buffer after the step)\n";
  out += printf_string("%6s %6s %7s %8s %9s %9s %9s %9s %8s %8s\n", "step", "groups", "signal",
                       "retried", "recovered", "admitted", "requeued", "exhausted", "evicted",
                       "waiting");
  auto row = [&](const replay_step& s, const std::string& label) {
    const auto c = s.retry.value_or(replay_retry_columns{});
    out += printf_string("%6s %6u %7u %8u %9u %9u %9u %9u %8u %8s\n", label.c_str(), s.groups,
                         s.signal_groups, c.retried, c.counts.recovered, c.counts.admitted,
                         c.counts.requeued, c.counts.exhausted, c.counts.evicted,
                         s.retry ? std::to_string(c.buffered).c_str() : "-");
  };
  rows_and_total(r, row);
  return out;
}

std::string retry_csv(const replay_report& r) {
  if (!r.total.retry) {
    return {};
  }
  std::string out =
      "step,groups,signal_groups,retried,recovered,admitted,requeued,exhausted,evicted,buffered\n";
  for (const auto& s : r.steps) {
    csv_row row(out);
    row << s.step << s.groups << s.signal_groups;
    if (s.retry) {
      row << s.retry->retried << s.retry->counts.recovered << s.retry->counts.admitted
          << s.retry->counts.requeued << s.retry->counts.exhausted << s.retry->counts.evicted
          << s.retry->buffered;
    } else {
      for (int i = 0; i < 7; ++i) {
        row << std::string();
      }
    }
  }
  return out;
}

std::string format_profile_table(const replay_report& r) {
  if (r.total.profiles.profiles == 0) {
    return {};
  }
  std::string out =
      "profiles, per step (profiled: training turns with a stored profile; then their kernels by "
      "bottleneck class; seconds: the profiling runs' wall time)\n";
  out += printf_string("%6s %8s %7s %8s %8s %7s %8s %9s\n", "step", "profiled", "memory", "compute",
                       "latency", "launch", "unknown", "seconds");
  auto row = [&](const profile_counts& p, const std::string& label) {
    const auto& k = p.kernels;
    out += printf_string("%6s %8u %7u %8u %8u %7u %8u %9.1f\n", label.c_str(), p.profiles, k[0],
                         k[1], k[2], k[3], k[4], p.seconds);
  };
  for (const auto& s : r.steps) {
    row(s.profiles, std::to_string(s.step + 1));
  }
  row(r.total.profiles, "all");
  return out;
}

std::string profile_csv(const replay_report& r) {
  if (r.total.profiles.profiles == 0) {
    return {};
  }
  std::string out = "step,profiled";
  for (std::size_t i = 0; i < bottleneck_class_names.size(); ++i) {
    out += "," + profile_metric_of_class(i).substr(std::string_view("profile.").size());
  }
  out += ",seconds\n";
  for (const auto& s : r.steps) {
    csv_row row(out);
    row << s.step << s.profiles.profiles;
    for (const auto k : s.profiles.kernels) {
      row << k;
    }
    row << s.profiles.seconds;
  }
  return out;
}

std::string steps_csv(const replay_report& r) {
  std::string out = "step,groups,activated,activated_fraction";
  for (int m = 1; m <= r.max_turns; ++m) {
    out += ",acc_at_" + std::to_string(m);
  }
  out +=
      ",recovery_per_rollout,recovery_per_group,probe_groups,probe_recovery_per_rollout,"
      "probe_recovery_per_group,turns_per_pass,turns,verifier_jobs,completed,wall_ms,"
      "generation_ms,compile_ms,run_ms,learner_ms,idle_ms,elapsed_ms";
  for (const auto& name : replay_turn_fields()) {
    out += ",turn_mean_" + name;
  }
  out += speed_csv_header() + "\n";
  for (const auto& s : r.steps) {
    csv_row row(out);
    row << s.step << s.groups << s.activated << s.activated_fraction;
    for (double a : s.accuracy) {
      row << a;
    }
    row << s.recovery.per_rollout << s.recovery.per_group << s.probe_groups
        << s.probe_recovery.per_rollout << s.probe_recovery.per_group << s.turns_per_pass << s.turns
        << s.verifier_jobs << std::string(s.timings ? "1" : "0");
    const step_timings t = s.timings.value_or(step_timings{});
    row << t.wall_ms << t.generation_ms << t.compile_ms << t.run_ms << t.learner_ms << t.idle_ms;
    if (s.elapsed_ms) {
      row << *s.elapsed_ms;
    } else {
      row << std::string();
    }
    for (std::size_t k = 0; k < replay_turn_fields().size(); ++k) {
      const auto mean = k < s.turn_means.size() ? s.turn_means[k].mean() : std::nullopt;
      if (mean) {
        row << *mean;
      } else {
        row << std::string();
      }
    }
    add_speed_cells(row, s.speed);
  }
  return out;
}

std::string validation_csv(const replay_report& r) {
  std::string out = "step,groups,rollouts";
  for (int m = 1; m <= r.max_turns; ++m) {
    out += ",acc_at_" + std::to_string(m);
  }
  out += ",weight_version" + speed_csv_header() + "\n";
  for (const auto& v : r.validation) {
    csv_row row(out);
    row << v.step << v.groups << v.rollouts;
    for (double a : v.accuracy) {
      row << a;
    }
    row << versions_cell(v.weight_versions);
    add_speed_cells(row, v.speed);
  }
  return out;
}

std::string composition_csv(const replay_report& r) {
  std::string out = "lo,hi,kind,positive,negative\n";
  for (const auto& b : r.composition) {
    for (std::size_t k = 0; k < b.counts.size(); ++k) {
      csv_row row(out);
      row << b.lo << b.hi << to_string(static_cast<outcome_kind>(k))
          << static_cast<std::uint64_t>(b.counts[k][1])
          << static_cast<std::uint64_t>(b.counts[k][0]);
    }
  }
  return out;
}

std::string whatif_csv(const whatif_report& r) {
  std::string out =
      "step,groups,activated_before,activated_after,changed_decisions,"
      "unobserved_opens,mean_reward_before,mean_reward_after,"
      "mean_abs_advantage_before,mean_abs_advantage_after,nonzero_advantage_before,"
      "nonzero_advantage_after,sign_flips,turns_before,turns_after,optimised_before,"
      "optimised_after,unobserved_optimise\n";
  auto add = [&](const whatif_step& w, const std::string& label) {
    csv_row row(out);
    row << label << w.groups << w.activated_before << w.activated_after << w.changed_decisions
        << w.unobserved_opens << w.mean_reward_before << w.mean_reward_after
        << w.mean_abs_advantage_before << w.mean_abs_advantage_after << w.nonzero_advantage_before
        << w.nonzero_advantage_after << w.sign_flips << w.turns_before << w.turns_after
        << w.optimised_before << w.optimised_after << w.unobserved_optimise;
  };
  for (const auto& w : r.steps) {
    add(w, std::to_string(w.step));
  }
  add(r.total, "all");
  return out;
}

}  // namespace leap
