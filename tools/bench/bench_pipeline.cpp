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
//   longtail   issue 33's long-tail workload: generation log-normal with a heavy tail (median 8 s,
//              sigma 1.3, 0.5-600 s: the slowest 10% of turns take about half of the generation
//              time, printed), compile 1.5-1.9 s and run 0.3-0.6 s (the H200 cuda quickstart's
//              medians: compile 1676 ms, p90 1859 ms; run 438 ms). Barrier, streaming and
//              bounded staleness 1 and 2, each also with partial rollouts (schedule.partial),
//              through the graph, beside a schedule model on the same samples (unlimited
//              capacity, no orchestration cost; orchestrator/partial_rollouts.hpp's decisions for
//              partial rollouts), per seed.
//
// Usage: bench_pipeline [overhead|schedules|dcp|longtail|all] [--steps N] [--threads T] [--scale S]
// ...
// (--help lists every option). Prints tables; writes nothing outside a temporary folder.
#include "actors/group.hpp"
#include "orchestrator/config.hpp"
#include "orchestrator/partial_rollouts.hpp"
#include "orchestrator/schedule.hpp"
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
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
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
  // longtail
  std::string seeds = "1,2,3";
  double gen_median_s = 8.0;
  double gen_sigma = 1.3;
  double gen_max_s = 600.0;
  int over_provision = 8;
  int max_carry = 8;
  bool no_graph = false;
};

struct run_result {
  double seconds = 0.0;
  run_summary summary;
  std::vector<step_record> steps;
  std::vector<std::vector<group_record>> groups;  // per step, training groups without tokens
  // Per group the learner trained: its version then minus the oldest weights among the group's
  // turns. The store keeps a carried group under the step that started it, so only the learner
  // sees which step trained it.
  std::vector<double> trained_staleness;
};

// The null learner (its sleep, one version per step) that also records each trained group's
// staleness.
class staleness_recorder final : public learner_backend {
 public:
  staleness_recorder(double step_seconds, std::uint64_t version, std::vector<double>* out)
      : inner_(step_seconds, version), version_(version), out_(out) {}
  result<backend_step> train(std::uint64_t step, std::vector<training_sequence> batch) override {
    std::map<std::pair<std::uint64_t, std::uint32_t>, std::uint64_t> oldest;  // (step, group)
    for (const auto& s : batch) {
      const auto key = std::make_pair(s.step, s.group);
      const auto it = oldest.find(key);
      oldest[key] = it == oldest.end() ? s.oldest_weight_version
                                       : std::min(it->second, s.oldest_weight_version);
    }
    for (const auto& [key, version] : oldest) {
      out_->push_back(static_cast<double>(version_ - std::min(version_, version)));
    }
    auto trained = inner_.train(step, std::move(batch));
    if (trained) {
      version_ = trained->weight_version;
    }
    return trained;
  }

 private:
  null_learner inner_;
  std::uint64_t version_;
  std::vector<double>* out_;
};

// Tasks as the scripted policy server plays them (policy/server/server.hpp's scripted backend, its
// defaults): task i has difficulty 1 + i % 3 and passes its first turn with probability 0.7, 0.45
// or 0.2; a debug turn fixes a wrong answer with probability --fix (0.5). Only their id and prompt
// are used.
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
    ro.services.learner = [step_s = learner_seconds * latency.time_scale,
                           staleness = &out.trained_staleness](std::uint64_t version) {
      return std::make_shared<staleness_recorder>(step_s, version, staleness);
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

// --- longtail (issue 33) ---

latency_profile longtail_model(const options& o) {
  latency_profile l;
  l.time_scale = o.scale;
  l.generation_median_s = o.gen_median_s;
  l.generation_sigma = o.gen_sigma;
  l.generation_min_s = 0.5;
  l.generation_max_s = o.gen_max_s;
  l.compile_min_s = 1.5;
  l.compile_max_s = 1.9;
  l.run_min_s = 0.3;
  l.run_max_s = 0.6;
  return l;
}

// One group of the model in model seconds, played as the graph plays it with gate `full`: every
// rollout's first turn, the gate once they are all in, then each failed rollout's debug turns
// until it passes or runs out of turns. The same request ids, latencies and coins as the graph.
struct model_group {
  double first_s = 0.0;                          // the slowest first turn
  double debug_s = 0.0;                          // the slowest debug chain after the gate
  std::vector<std::vector<turn_latency>> turns;  // per rollout
  [[nodiscard]] double seconds() const { return first_s + debug_s; }
};

model_group play_group(const options& o, const instant_policy& policy,
                       const latency_profile& latency, std::uint64_t step, std::uint32_t g,
                       const std::string& prompt) {
  model_group out;
  const group_key key{step, split_kind::train, g};
  bool any_failed = false;
  std::vector<char> passed(static_cast<std::size_t>(o.group), 0);
  out.turns.resize(static_cast<std::size_t>(o.group));
  for (int t = 0; t < o.turns; ++t) {
    if (t > 0 && !any_failed) {
      break;  // the gate closes a group without failures
    }
    for (int r = 0; r < o.group; ++r) {
      auto& done = passed[static_cast<std::size_t>(r)];
      if (done != 0) {
        continue;
      }
      generation_request request;
      request.request_id = turn_request_id("bench", key, static_cast<std::uint32_t>(r), t);
      if (t == 0) {
        request.append.push_back({"user", prompt});
      }
      const auto l = sample_latency(latency, policy.seed, request.request_id);
      out.turns[static_cast<std::size_t>(r)].push_back(l);
      done = instant_correct(policy, request) ? 1 : 0;
      any_failed = any_failed || (t == 0 && done == 0);
    }
  }
  for (const auto& rollout : out.turns) {
    double chain = 0.0;
    for (std::size_t t = 0; t < rollout.size(); ++t) {
      const double s = rollout[t].generation_s + rollout[t].compile_s + rollout[t].run_s;
      if (t == 0) {
        out.first_s = std::max(out.first_s, s);
      } else {
        chain += s;
      }
    }
    out.debug_s = std::max(out.debug_s, chain);
  }
  return out;
}

// The model's groups, by (the step that started it, its index), computed once.
class group_book {
 public:
  group_book(const options& o, const latency_profile& latency)
      : o_(o), latency_(latency), tasks_(bench_tasks(o, policy_)) {
    policy_.seed = o.seed;
    policy_.fix_probability = o.fix_probability;
  }
  const model_group& get(std::uint64_t step, std::uint32_t g) {
    auto [it, fresh] = groups_.try_emplace({step, g});
    if (fresh) {
      // The batch's groups run the graph's tasks; groups beyond it take further tasks.
      const auto batch =
          step_batch(o_.seed, step, tasks_.size(), static_cast<std::size_t>(o_.batch));
      const std::size_t task = g < batch.size() ? batch[g] : (step * 7919 + g) % tasks_.size();
      it->second = play_group(o_, policy_, latency_, step, g, tasks_[task]->prompt);
    }
    return it->second;
  }

 private:
  options o_;
  latency_profile latency_;
  instant_policy policy_;
  std::vector<std::shared_ptr<const sandbox::task>> tasks_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, model_group> groups_;
};

struct schedule_outcome {
  double seconds = 0.0;  // model seconds from the first step's start to the last step's sync
  std::vector<double> staleness;  // per trained group: training version - first turn's version
  std::uint64_t carried = 0;
  std::uint64_t dropped_stale = 0;
  std::uint64_t dropped_over_carry = 0;
  std::uint64_t over_provisioned = 0;
};

double mean_of(const std::vector<double>& v) { return mean(v); }
double max_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// The barrier schedule in the model: each round's generations in lockstep, then its
// verifications in lockstep, then the learner.
schedule_outcome model_barrier(const options& o, group_book& book, double learner_s) {
  schedule_outcome out;
  for (int s = 0; s < o.schedule_steps; ++s) {
    for (int t = 0; t < o.turns; ++t) {
      double gen = 0.0;
      double verify = 0.0;
      for (int g = 0; g < o.batch; ++g) {
        for (const auto& rollout : book.get(s, g).turns) {
          if (static_cast<int>(rollout.size()) > t) {
            gen = std::max(gen, rollout[t].generation_s);
            verify = std::max(verify, rollout[t].compile_s + rollout[t].run_s);
          }
        }
      }
      out.seconds += gen + verify;
    }
    out.seconds += learner_s;
    out.staleness.insert(out.staleness.end(), static_cast<std::size_t>(o.batch), 0.0);
  }
  return out;
}

// Streaming (k = 0) and bounded staleness k in the model, as the driver's may_start rule plays
// them: step s starts when step s-1's batch is in and step s-1-k has synced; the learner trains
// steps in order. With `partial`, each step keeps batch + over_provision groups in flight and
// takes its batch as split_partial says, the moment batch_ready holds.
schedule_outcome model_streaming(const options& o, group_book& book, double learner_s, int k,
                                 const partial_settings* partial) {
  schedule_outcome out;
  struct flight {
    std::uint64_t id;
    double start;
    double seconds;
    std::uint64_t version;
  };
  std::vector<flight> pool;
  std::vector<double> synced;  // per step: when its weights reached the generators
  double in_prev = 0.0;
  for (int s = 0; s < o.schedule_steps; ++s) {
    double start = in_prev;
    if (s - 1 - k >= 0) {
      start = std::max(start, synced[static_cast<std::size_t>(s - 1 - k)]);
    }
    const auto version = static_cast<std::uint64_t>(
        std::count_if(synced.begin(), synced.end(), [&](double t) { return t <= start; }));
    const auto carried = static_cast<std::uint32_t>(pool.size());
    const std::uint32_t fresh = partial != nullptr ? groups_to_start(*partial, carried)
                                                   : static_cast<std::uint32_t>(o.batch);
    for (std::uint32_t g = 0; g < fresh; ++g) {
      pool.push_back(
          {(static_cast<std::uint64_t>(s) << 32) | g, start, book.get(s, g).seconds(), version});
    }
    double in = 0.0;
    std::vector<flight> trained;
    if (partial == nullptr) {
      for (const auto& f : pool) {
        in = std::max(in, f.start + f.seconds);
      }
      trained = std::move(pool);
      pool.clear();
    } else {
      out.over_provisioned += pool.size() > static_cast<std::size_t>(o.batch)
                                  ? pool.size() - static_cast<std::size_t>(o.batch)
                                  : 0;
      std::vector<double> finishes;
      for (const auto& f : pool) {
        if (f.version + partial->max_staleness >= static_cast<std::uint64_t>(s)) {
          finishes.push_back(f.start + f.seconds);
        }
      }
      std::sort(finishes.begin(), finishes.end());
      in = finishes[std::min(finishes.size(), static_cast<std::size_t>(o.batch)) - 1];
      std::vector<partial_group> groups;
      for (const auto& f : pool) {
        const double end = f.start + f.seconds;
        groups.push_back(
            {f.id, f.version, end <= in, end * 1e3, end <= in ? 1.0 : (in - f.start) / f.seconds});
      }
      const auto split = split_partial(*partial, groups, static_cast<std::uint64_t>(s));
      std::map<std::uint64_t, flight> by_id;
      for (const auto& f : pool) {
        by_id.emplace(f.id, f);
      }
      for (auto id : split.batch) {
        trained.push_back(by_id.at(id));
      }
      pool.clear();
      for (auto id : split.carry) {
        pool.push_back(by_id.at(id));
      }
      out.carried += split.carry.size();
      out.dropped_stale += split.dropped_stale.size();
      out.dropped_over_carry += split.dropped_over_carry.size();
    }
    for (const auto& f : trained) {
      out.staleness.push_back(static_cast<double>(static_cast<std::uint64_t>(s) -
                                                  std::min<std::uint64_t>(s, f.version)));
    }
    const double train_start = std::max(in, synced.empty() ? 0.0 : synced.back());
    synced.push_back(train_start + learner_s);
    in_prev = in;
  }
  out.seconds = synced.empty() ? 0.0 : synced.back();
  return out;
}

std::vector<std::uint64_t> parse_seeds(const std::string& text) {
  std::vector<std::uint64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) {
      out.push_back(std::stoull(item));
    }
  }
  return out;
}

void longtail(const options& base) {
  const auto latency = longtail_model(base);
  const auto seeds = parse_seeds(base.seeds);
  std::printf(
      "longtail: B=%d G=%d M=%d, gate full, %d steps, learner %.0f model s; generation "
      "log-normal median %.1f s sigma %.2f in [%.1f, %.0f] s, compile 1.5-1.9 s, run 0.3-0.6 s "
      "(H200 cuda quickstart), time x %g; partial rollouts: over_provision %d, max_carry %d\n",
      base.batch, base.group, base.turns, base.schedule_steps, base.learner_s,
      latency.generation_median_s, latency.generation_sigma, latency.generation_min_s,
      latency.generation_max_s, base.scale, base.over_provision, base.max_carry);
  std::printf(
      "  model: the same request ids, latencies and coins; unlimited capacity, no orchestration "
      "cost (the ideal of each schedule). graph: the actor graph as `leap run` builds it.\n");
  struct row_key {
    std::string name;
    int k;  // -1: barrier
    bool partial;
  };
  const std::vector<row_key> rows = {{"barrier", -1, false},         {"streaming", 0, false},
                                     {"stale-1", 1, false},          {"stale-2", 2, false},
                                     {"streaming+partial", 0, true}, {"stale-1+partial", 1, true},
                                     {"stale-2+partial", 2, true}};
  std::map<std::string, std::vector<double>> model_speedups;
  std::map<std::string, std::vector<double>> graph_speedups;
  for (const auto seed : seeds) {
    auto o = base;
    o.seed = seed;
    group_book book(o, latency);
    // The generation share of the slowest 10% of the batch's turns.
    std::vector<double> gen;
    for (int s = 0; s < o.schedule_steps; ++s) {
      for (int g = 0; g < o.batch; ++g) {
        for (const auto& rollout : book.get(s, g).turns) {
          for (const auto& t : rollout) {
            gen.push_back(t.generation_s);
          }
        }
      }
    }
    std::sort(gen.begin(), gen.end(), std::greater<>());
    const double all = std::accumulate(gen.begin(), gen.end(), 0.0);
    const double top = std::accumulate(
        gen.begin(), gen.begin() + static_cast<std::ptrdiff_t>(gen.size() / 10), 0.0);
    std::printf(
        "\n seed %llu: %zu turns, the slowest 10%% take %.1f%% of generation time "
        "(median %.1f s, max %.0f s)\n",
        static_cast<unsigned long long>(seed), gen.size(), 100.0 * top / all, gen[gen.size() / 2],
        gen.front());
    std::printf("  %-18s %11s %11s %9s %9s %11s %7s %7s %6s %7s %7s\n", "schedule", "model s",
                "graph s", "graph/mod", "x barrier", "x barr.(gr)", "st.mean", "st.max", "carry",
                "dropped", "over");
    double barrier_model = 0.0;
    double barrier_graph = 0.0;
    for (const auto& row : rows) {
      partial_settings ps;
      ps.batch = static_cast<std::uint32_t>(o.batch);
      ps.over_provision = static_cast<std::uint32_t>(o.over_provision);
      ps.max_carry = static_cast<std::uint32_t>(o.max_carry);
      ps.max_staleness = partial_staleness_bound(row.k);
      const auto m =
          row.k < 0 ? model_barrier(o, book, o.learner_s)
                    : model_streaming(o, book, o.learner_s, row.k, row.partial ? &ps : nullptr);
      double graph_s = 0.0;
      std::vector<double> staleness = m.staleness;
      std::string graph_partial;  // the graph's own partial-rollout counts, per step
      if (!o.no_graph) {
        auto config = bench_config(o, o.schedule_steps);
        config.gate.policy = gate_policy::full;
        config.schedule.mode = row.k < 0 ? schedule_mode::barrier : schedule_mode::streaming;
        config.schedule.max_staleness = std::max(0, row.k);
        if (row.partial) {
          config.schedule.partial_over_provision = o.over_provision;
          config.schedule.partial_max_carry = o.max_carry;
        }
        const auto r = run_graph(o, config, latency, o.learner_s);
        graph_s = r.seconds / o.scale;
        staleness = r.trained_staleness;
        if (row.partial) {
          std::map<std::string, double> sums;
          for (const auto& step : r.steps) {
            for (const auto& [name, value] : step.metrics) {
              if (name.rfind("partial.", 0) == 0) {
                sums[name] += value;
              }
            }
          }
          const double n = std::max<double>(1.0, static_cast<double>(r.steps.size()));
          char text[200];
          std::snprintf(text, sizeof text,
                        "    graph, per step: carried %.1f, trained carried %.1f, dropped %.1f, "
                        "started %.1f; staleness of the trained groups mean %.2f\n",
                        sums["partial.carried"] / n, sums["partial.trained_carried"] / n,
                        sums["partial.dropped"] / n, sums["partial.started"] / n,
                        mean_of(staleness));
          graph_partial = text;
        }
      }
      if (row.k < 0) {
        barrier_model = m.seconds;
        barrier_graph = graph_s;
      }
      model_speedups[row.name].push_back(barrier_model / m.seconds);
      if (graph_s > 0.0) {
        graph_speedups[row.name].push_back(barrier_graph / graph_s);
      }
      const auto steps = static_cast<double>(o.schedule_steps);
      char graph_text[32] = "-";
      char ratio_text[32] = "-";
      char graph_speed[32] = "-";
      if (graph_s > 0.0) {
        std::snprintf(graph_text, sizeof graph_text, "%.1f", graph_s);
        std::snprintf(ratio_text, sizeof ratio_text, "%.3f", graph_s / m.seconds);
        std::snprintf(graph_speed, sizeof graph_speed, "%.2fx", barrier_graph / graph_s);
      }
      std::printf("  %-18s %11.1f %11s %9s %8.2fx %11s %7.2f %7.0f %6.1f %7.1f %7.1f\n",
                  row.name.c_str(), m.seconds, graph_text, ratio_text, barrier_model / m.seconds,
                  graph_speed, mean_of(staleness), max_of(staleness),
                  static_cast<double>(m.carried) / steps,
                  static_cast<double>(m.dropped_stale + m.dropped_over_carry) / steps,
                  static_cast<double>(m.over_provisioned) / steps);
      std::fputs(graph_partial.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  std::printf("\n speedup over barrier per seed (model; graph in brackets where run):\n");
  for (const auto& row : rows) {
    std::printf("  %-18s", row.name.c_str());
    const auto& m = model_speedups[row.name];
    const auto& g = graph_speedups[row.name];
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (i < g.size()) {
        std::printf("  %5.2fx (%5.2fx)", m[i], g[i]);
      } else {
        std::printf("  %5.2fx         ", m[i]);
      }
    }
    std::printf("\n");
  }
  std::printf("  (carry, dropped and over are per step; st. is staleness in versions)\n\n");
}

int run(int argc, char** argv) {
  options o;
  CLI::App app{"Benchmarks of the actor pipeline: overhead, schedules, DCP vs full"};
  app.add_option("what", o.what, "overhead, schedules, dcp, longtail or all")
      ->check(CLI::IsMember({"overhead", "schedules", "dcp", "longtail", "all"}));
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
  app.add_option("--seeds", o.seeds, "longtail: seeds side by side, comma-separated");
  app.add_option("--gen-median", o.gen_median_s, "longtail: median generation model seconds");
  app.add_option("--gen-sigma", o.gen_sigma, "longtail: log-space sigma of generation");
  app.add_option("--gen-max", o.gen_max_s, "longtail: longest generation, model seconds");
  app.add_option("--over", o.over_provision, "longtail: partial rollouts' over_provision");
  app.add_option("--carry", o.max_carry, "longtail: partial rollouts' max_carry");
  app.add_flag("--no-graph", o.no_graph, "longtail: the schedule model only, no graph runs");
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
  if (o.what == "longtail" || o.what == "all") {
    longtail(o);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return leap::bench::main_of("bench_pipeline", run, argc, argv); }
