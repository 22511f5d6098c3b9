// The actor pipeline's benchmarks (issue 5), on the whole graph: experiment driver, gates,
// debug-turn actors, scorer, RocksDB store, learner, built by the composition library
// (tools/launch/launch.hpp) as `leap run` builds them; with the in-process instant services behind
// the real typed interfaces (tests/doubles/instant_services.hpp) in place of the policy, the
// verifier and the learner.
//
//   overhead   instant policy and verifier: rollout-turns per second through the graph.
//   schedules  the latency model (generation 5-60 s log-normal, compile 1-3 s, run 0.2-1 s,
//              time scaled down) on a paper-shaped step (B=32, G=8, M=3): streaming vs barrier vs
//              the ideal bound (the same sampled latencies with unlimited verifier capacity and no
//              orchestration cost: per group its slowest first-turn chain, then its slowest debug
//              chain; per step the slowest group), and max_staleness 1 over several steps with a
//              learner step of its own latency.
//   dcp        DCP vs full multi-turn on the same workload: verifier jobs and step time per step.
//
// Usage: bench_pipeline [overhead|schedules|dcp|all] [--steps N] [--threads T] [--scale S] ...
// (--help lists every option). Prints tables; writes nothing outside a temporary folder.
#include "actors/gate.hpp"
#include "orchestrator/config.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/doubles/instant_services.hpp"
#include "tools/bench/bench_main.hpp"
#include "tools/launch/launch.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using namespace leap;
using namespace leap::actors;
namespace fs = std::filesystem;

struct options {
  std::string what = "all";
  int threads = 2;
  int overhead_steps = 100;
  int schedule_steps = 4;
  int batch = 32;
  int group = 8;
  int turns = 3;
  int tasks = 64;
  double scale = 0.002;     // 1 s of the model = 2 ms
  double learner_s = 20.0;  // model seconds of one learner step (schedules)
  double fix_probability = 0.5;
  bool sync = false;
  std::uint64_t seed = 1;
};

struct run_result {
  double seconds = 0.0;
  run_summary summary;
  std::vector<step_record> steps;
  std::vector<std::vector<group_record>> groups;  // per step, training groups without tokens
};

// Tasks as the scripted policy server plays them (policy/scripted_backend.hpp's defaults): task i
// has difficulty 1 + i % 3 and passes its first turn with probability 0.7, 0.45 or 0.2; a debug
// turn fixes a wrong answer with probability --fix (0.5). Only their id and prompt are used.
std::vector<std::shared_ptr<const sandbox::task>> bench_tasks(const options& o,
                                                              instant_policy& policy) {
  static constexpr double first_turn_pass[3] = {0.7, 0.45, 0.2};
  std::vector<std::shared_ptr<const sandbox::task>> tasks;
  for (int i = 0; i < o.tasks; ++i) {
    auto t = std::make_shared<sandbox::task>();
    t->id = "bench/" + std::to_string(i);
    t->prompt = "task " + std::to_string(i);
    policy.first_turn_pass[t->prompt] = first_turn_pass[i % 3];
    tasks.push_back(std::move(t));
  }
  return tasks;
}

experiment_config bench_config(const options& o, int steps) {
  experiment_config c;
  c.experiment.name = "bench";
  c.experiment.seed = o.seed;
  c.experiment.steps = steps;
  c.data.batch_size = o.batch;
  c.rollout.group_size = o.group;
  c.rollout.max_turns = o.turns;
  c.rollout.validation.every = 0;
  return c;
}

// One run of the whole graph, built by the composition library (tools/launch/launch.hpp) as
// `leap run` builds it, with the instant policy and verifier and a null learner in place of the
// config's.
run_result run_graph(const options& o, const experiment_config& config,
                     const latency_profile& latency, double learner_seconds) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("leap-bench-pipeline-" + std::to_string(::getpid()) + "-" +
       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  run_result out;
  {
    instant_policy policy;
    policy.seed = o.seed;
    policy.fix_probability = o.fix_probability;
    policy.latency = latency;
    launch::run_preflight checked;
    checked.config = config;
    checked.config.experiment.run_dir = dir.string();
    checked.tasks.train = bench_tasks(o, policy);

    launch::run_options ro;
    ro.store.sync = o.sync;
    ro.write_metrics = false;
    ro.scheduler_threads = static_cast<std::size_t>(o.threads);
    ro.services.generator = [&policy](caf::actor_system& system) {
      return spawn_instant_generator(system, policy);
    };
    ro.services.verifier = [&latency, seed = o.seed](caf::actor_system& system) {
      return spawn_instant_verifier(system, latency, seed);
    };
    ro.services.learner = [step_s = learner_seconds * latency.time_scale](std::uint64_t version) {
      return std::make_shared<null_learner>(step_s, version);
    };
    launch::run run(std::move(checked), std::move(ro));
    auto outcome = [&]() -> result<launch::run_outcome> {
      if (auto started = run.start(); !started) {
        return started.err();
      }
      return run.wait();
    }();
    if (!outcome) {
      std::fprintf(stderr, "bench_pipeline: error: %s\n", outcome.err().message.c_str());
      std::exit(1);
    }
    out.summary = outcome->summary;
    out.seconds = outcome->run_seconds;
    if (out.summary.status != run_status::finished) {
      std::fprintf(stderr, "bench_pipeline: error: the run did not finish: %s\n",
                   out.summary.error.c_str());
      std::exit(1);
    }
    const auto store = run.store();
    auto steps = store->steps("bench");
    if (steps) {
      out.steps = std::move(*steps);
    }
    for (const auto& s : out.steps) {
      group_query q;
      q.run_id = "bench";
      q.first_step = q.last_step = s.step;
      q.split = split_kind::train;
      q.decode.tokens = false;
      auto g = store->groups(q);
      out.groups.push_back(g ? std::move(*g) : std::vector<group_record>{});
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out;
}

// The ideal step time (ms) of one step's groups under `latency`: unlimited capacity, no overhead.
double ideal_step_ms(const std::vector<group_record>& groups, const latency_profile& latency,
                     std::uint64_t seed) {
  double step = 0.0;
  for (const auto& g : groups) {
    double first = 0.0;
    double debug = 0.0;
    for (const auto& r : g.rollouts) {
      double chain = 0.0;
      for (std::size_t t = 0; t < r.turns.size(); ++t) {
        const auto id = turn_request_id("bench", {g.step, g.split, g.group_index}, r.index,
                                        static_cast<int>(t));
        const auto l = sample_latency(latency, seed, id);
        const double ms = (l.generation_s + l.compile_s + l.run_s) * latency.time_scale * 1e3;
        if (t == 0) {
          first = std::max(first, ms);
        } else {
          chain += ms;
        }
      }
      debug = std::max(debug, chain);
    }
    step = std::max(step, first + debug);
  }
  return step;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

void overhead(const options& o) {
  const auto config = bench_config(o, o.overhead_steps);
  const auto r = run_graph(o, config, latency_profile{}, 0.0);
  std::uint64_t turns = 0;
  std::uint64_t rollouts = 0;
  for (const auto& s : r.steps) {
    turns += s.counts.turns;
    rollouts += s.counts.rollouts;
  }
  std::printf(
      "overhead: instant policy and verifier, %d steps x %d groups x %d rollouts, up to %d "
      "turns, %d scheduler threads, RocksDB store (sync %s), null learner\n",
      o.overhead_steps, o.batch, o.group, o.turns, o.threads, o.sync ? "on" : "off");
  std::printf(
      "  %llu rollout-turns (%llu rollouts) in %.3f s: %.0f rollout-turns/s, %.0f groups/s\n\n",
      static_cast<unsigned long long>(turns), static_cast<unsigned long long>(rollouts), r.seconds,
      static_cast<double>(turns) / r.seconds,
      static_cast<double>(o.overhead_steps) * o.batch / r.seconds);
}

latency_profile model(const options& o) {
  latency_profile l;
  l.time_scale = o.scale;
  return l;
}

struct schedule_row {
  std::string name;
  run_result result;
  std::vector<double> step_ms;
};

void schedules(const options& o) {
  const auto latency = model(o);
  std::vector<schedule_row> rows;
  auto add = [&](const std::string& name, schedule_mode mode, int staleness, double learner_s) {
    auto config = bench_config(o, o.schedule_steps);
    config.schedule.mode = mode;
    config.schedule.max_staleness = staleness;
    schedule_row row{name, run_graph(o, config, latency, learner_s), {}};
    for (const auto& s : row.result.steps) {
      row.step_ms.push_back(s.timings.wall_ms);
    }
    rows.push_back(std::move(row));
  };
  // Step time without a learner: the pipeline alone.
  add("streaming", schedule_mode::streaming, 0, 0.0);
  add("barrier", schedule_mode::barrier, 0, 0.0);
  std::vector<double> ideal;
  for (const auto& g : rows[0].result.groups) {
    ideal.push_back(ideal_step_ms(g, latency, o.seed));
  }

  std::printf(
      "schedules: B=%d G=%d M=%d, generation 5-60 s log-normal, compile 1-3 s, run 0.2-1 s, "
      "time x %g (1 model s = %.1f ms), unlimited verifier capacity, %d scheduler threads\n",
      o.batch, o.group, o.turns, o.scale, o.scale * 1e3, o.threads);
  std::printf("  %-10s", "step");
  for (std::size_t s = 0; s < ideal.size(); ++s) {
    std::printf(" %9zu", s + 1);
  }
  std::printf(" %9s\n", "mean");
  std::printf("  %-10s", "ideal ms");
  for (double v : ideal) {
    std::printf(" %9.1f", v);
  }
  std::printf(" %9.1f\n", mean(ideal));
  for (const auto& row : rows) {
    std::printf("  %-10s", (row.name + " ms").c_str());
    for (double v : row.step_ms) {
      std::printf(" %9.1f", v);
    }
    std::printf(" %9.1f\n", mean(row.step_ms));
  }
  const double streaming = mean(rows[0].step_ms);
  const double barrier = mean(rows[1].step_ms);
  std::printf("  barrier / streaming: %.3fx   streaming / ideal: %.3fx   barrier / ideal: %.3fx\n",
              barrier / streaming, streaming / mean(ideal), barrier / mean(ideal));
  bool same = rows[0].result.groups.size() == rows[1].result.groups.size();
  for (std::size_t s = 0; same && s < rows[0].result.steps.size(); ++s) {
    same = rows[0].result.steps[s].counts.turns == rows[1].result.steps[s].counts.turns;
  }
  std::printf("  (same workload in both schedules: %s)\n\n", same ? "yes, identical turns" : "NO");

  // Several steps with a learner step of its own: staleness lets generation overlap it.
  std::vector<schedule_row> with_learner;
  rows.clear();
  add("streaming", schedule_mode::streaming, 0, o.learner_s);
  add("barrier", schedule_mode::barrier, 0, o.learner_s);
  add("stale-1", schedule_mode::streaming, 1, o.learner_s);
  double ideal_total = 0.0;
  for (const auto& g : rows[0].result.groups) {
    ideal_total += ideal_step_ms(g, latency, o.seed);
  }
  ideal_total += o.learner_s * o.scale * 1e3 * o.schedule_steps;
  std::printf("with a learner step of %.0f model s (%.1f ms), %d steps, total wall time:\n",
              o.learner_s, o.learner_s * o.scale * 1e3, o.schedule_steps);
  std::printf("  ideal on-policy (sum of ideal steps + learner): %9.1f ms\n", ideal_total);
  for (const auto& row : rows) {
    std::printf("  %-10s %9.1f ms  (%.3fx ideal on-policy)\n", row.name.c_str(),
                row.result.seconds * 1e3, row.result.seconds * 1e3 / ideal_total);
  }
  std::printf("\n");
}

void dcp_vs_full(const options& o) {
  const auto latency = model(o);
  std::printf(
      "DCP vs full multi-turn: B=%d G=%d M=%d, same workload and latency model, streaming\n",
      o.batch, o.group, o.turns);
  std::printf("  %-22s %12s %12s %12s %12s %12s\n", "gate", "jobs/step", "turns/step", "activated",
              "step ms", "pass@M");
  for (auto policy : {gate_policy::dcp, gate_policy::full}) {
    auto config = bench_config(o, o.schedule_steps);
    config.gate.policy = policy;
    const auto r = run_graph(o, config, latency, 0.0);
    std::vector<double> jobs, turns, activated, ms, pass;
    for (const auto& s : r.steps) {
      jobs.push_back(s.counts.verifier_jobs);
      turns.push_back(s.counts.turns);
      activated.push_back(static_cast<double>(s.counts.activated_groups) / s.counts.groups);
      ms.push_back(s.timings.wall_ms);
      auto it = s.metrics.find("acc_at_" + std::to_string(o.turns));
      pass.push_back(it != s.metrics.end() ? it->second : 0.0);
    }
    const std::string name =
        policy == gate_policy::dcp ? "dcp [0.5, 1.0] of G" : "full (every failure)";
    std::printf("  %-22s %12.1f %12.1f %12.3f %12.1f %12.3f\n", name.c_str(), mean(jobs),
                mean(turns), mean(activated), mean(ms), mean(pass));
  }
  std::printf("\n");
}

int run(int argc, char** argv) {
  options o;
  CLI::App app{"Benchmarks of the actor pipeline: overhead, schedules, DCP vs full"};
  app.add_option("what", o.what, "overhead, schedules, dcp or all")
      ->check(CLI::IsMember({"overhead", "schedules", "dcp", "all"}));
  app.add_option("--threads", o.threads, "CAF scheduler threads")->check(CLI::PositiveNumber);
  app.add_option("--overhead-steps", o.overhead_steps, "Steps of the overhead run");
  app.add_option("--steps", o.schedule_steps, "Steps of the schedule and DCP runs");
  app.add_option("--batch", o.batch, "Tasks per step (B)");
  app.add_option("--group", o.group, "Rollouts per task (G)");
  app.add_option("--turns", o.turns, "Most turns per rollout (M)");
  app.add_option("--tasks", o.tasks, "Distinct tasks (first-turn pass rates spread over (0, 1))");
  app.add_option("--scale", o.scale, "Real seconds per model second of the latency model");
  app.add_option("--learner-s", o.learner_s, "Model seconds of one learner step (schedules)");
  app.add_option("--fix", o.fix_probability, "Probability that a debug turn fixes the answer");
  app.add_flag("--sync", o.sync, "fsync the store's log on every commit");
  app.add_option("--seed", o.seed, "Seed of outcomes and latencies");
  CLI11_PARSE(app, argc, argv);
  if (o.what == "overhead" || o.what == "all") {
    overhead(o);
  }
  if (o.what == "schedules" || o.what == "all") {
    schedules(o);
  }
  if (o.what == "dcp" || o.what == "all") {
    dcp_vs_full(o);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return leap::bench::main_of("bench_pipeline", run, argc, argv); }
