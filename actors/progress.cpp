#include "actors/progress.hpp"

#include <cmath>
#include <cstdio>

namespace leap::actors {
namespace {

std::string printf_string(const char* format, auto... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, format, args...);
  return buffer;
}

double metric(const step_record& r, const std::string& name) {
  auto it = r.metrics.find(name);
  return it != r.metrics.end() ? it->second : 0.0;
}

}  // namespace

std::string format_duration(double ms) {
  if (!(ms >= 0.0)) {
    ms = 0.0;
  }
  if (ms < 1000.0) {
    return printf_string("%.0fms", ms);
  }
  const double s = ms / 1000.0;
  if (s < 60.0) {
    return printf_string("%.1fs", s);
  }
  const auto total = static_cast<long long>(std::llround(s));
  if (total < 3600) {
    return printf_string("%lldm%02llds", total / 60, total % 60);
  }
  return printf_string("%lldh%02lldm", total / 3600, (total % 3600) / 60);
}

std::string format_step_line(const step_progress& p) {
  std::string line =
      printf_string("step %llu/%llu | groups %u", static_cast<unsigned long long>(p.step) + 1,
                    static_cast<unsigned long long>(p.total_steps), p.groups);
  if (p.groups_resumed > 0) {
    line += printf_string(" (%u resumed)", p.groups_resumed);
  }
  line += printf_string(" | activated %u", p.activated);
  if (p.probes > 0) {
    line += printf_string(" probes %u", p.probes);
  }
  line += " |";
  for (std::size_t m = 0; m < p.accuracy.size(); ++m) {
    line += printf_string(m == 0 ? " pass@%zu %.3f" : " @%zu %.3f", m + 1, p.accuracy[m]);
  }
  const auto& t = p.timings;
  line += " | " + format_duration(t.wall_ms) + " (gen " + format_duration(t.generation_ms) +
          " compile " + format_duration(t.compile_ms) + " run " + format_duration(t.run_ms) +
          " learn " + format_duration(t.learner_ms) + " idle " + format_duration(t.idle_ms) + ")";
  line += " | ETA " + format_duration(p.eta_ms);
  return line;
}

std::string format_validation_line(const validation_progress& p) {
  std::string line =
      printf_string("validation after step %llu | %u tasks, %u rollouts |",
                    static_cast<unsigned long long>(p.step) + 1, p.groups, p.rollouts);
  for (std::size_t m = 0; m < p.accuracy.size(); ++m) {
    line += printf_string(m == 0 ? " pass@%zu %.3f" : " @%zu %.3f", m + 1, p.accuracy[m]);
  }
  return line;
}

std::string format_summary_table(const std::vector<step_record>& steps, int max_turns) {
  std::string out = printf_string("%6s %7s %9s", "step", "groups", "activated");
  for (int m = 1; m <= max_turns; ++m) {
    out += printf_string(" %7s", ("pass@" + std::to_string(m)).c_str());
  }
  out += printf_string(" %10s %9s %7s %10s\n", "turns/pass", "verifier", "turns", "wall");
  // Totals weigh each step as the metrics do: accuracy by rollouts, turns per pass by passes.
  double groups = 0, activated = 0, jobs = 0, turns = 0, wall = 0, rollouts = 0, passed = 0,
         trained_turns = 0;
  std::vector<double> acc(static_cast<std::size_t>(std::max(0, max_turns)), 0.0);
  for (const auto& r : steps) {
    out += printf_string("%6llu %7u %9u", static_cast<unsigned long long>(r.step) + 1,
                         r.counts.groups, r.counts.activated_groups);
    for (int m = 1; m <= max_turns; ++m) {
      const double a = metric(r, "acc_at_" + std::to_string(m));
      acc[static_cast<std::size_t>(m - 1)] += a * r.counts.rollouts;
      out += printf_string(" %7.3f", a);
    }
    const double tpp = metric(r, "turns_per_pass");
    out += printf_string(" %10.2f %9u %7u %10s\n", tpp, r.counts.verifier_jobs, r.counts.turns,
                         format_duration(r.timings.wall_ms).c_str());
    groups += r.counts.groups;
    activated += r.counts.activated_groups;
    jobs += r.counts.verifier_jobs;
    turns += r.counts.turns;
    wall += r.timings.wall_ms;
    rollouts += r.counts.rollouts;
    passed += r.counts.passed_rollouts;
    trained_turns += tpp * r.counts.passed_rollouts;
  }
  out += printf_string("%6s %7.0f %9.0f", "total", groups, activated);
  for (double a : acc) {
    out += printf_string(" %7.3f", rollouts > 0 ? a / rollouts : 0.0);
  }
  out += printf_string(" %10.2f %9.0f %7.0f %10s\n", passed > 0 ? trained_turns / passed : 0.0,
                       jobs, turns, format_duration(wall).c_str());
  return out;
}

}  // namespace leap::actors
