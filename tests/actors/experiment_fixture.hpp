// The experiment configs, task lists, policies and wired test doubles that the driver's, the
// gate's and the resume tests (tests/actors/experiment_test.cpp, tests/actors/group_test.cpp,
// tests/launch/resume_test.cpp) share: one graph of doubles on one hub and a private RocksDB
// store, on CAF's deterministic test coordinator (tests/actors/test_support.hpp).
#pragma once

#include "tests/actors/test_support.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace leap::actors::testing {

// A DCP gate that opens a group whose failures are within [lo, hi] of G.
inline gate_config dcp_gate(double lo, double hi) {
  gate_config g;
  g.policy = gate_policy::dcp;
  g.unit = threshold_unit::fraction;
  g.tau_min = lo;
  g.tau_max = hi;
  return g;
}

// Run "run", seed 11: `steps` steps of `batch` tasks, G = `group`, up to `turns` turns, no
// validation, a DCP gate over [0.25, 1] of G.
inline experiment_config small_config(int steps, int batch, int group, int turns) {
  experiment_config c;
  c.experiment.name = "run";
  c.experiment.seed = 11;
  c.experiment.steps = steps;
  c.data.batch_size = batch;
  c.rollout.group_size = group;
  c.rollout.max_turns = turns;
  c.rollout.validation.every = 0;
  c.gate = dcp_gate(0.25, 1.0);
  return c;
}

// Tasks "<prefix>0".. "<prefix>n-1", each with a prompt of its own.
inline std::vector<group_task> tasks(int n, const std::string& prefix = "t") {
  std::vector<group_task> out;
  out.reserve(static_cast<std::size_t>(std::max(n, 0)));
  for (int i = 0; i < n; ++i) {
    out.push_back({prefix + std::to_string(i), prefix + " prompt " + std::to_string(i)});
  }
  return out;
}

// A turn passes with probability `pass` (first turn) or `fix` (debug turn), a function of its
// request id: two runs of the same workload see the same verdicts.
inline instant_policy coin_policy(double pass = 0.5, double fix = 0.5) {
  instant_policy p;
  p.seed = 3;
  p.default_pass = pass;
  p.fix_probability = fix;
  return p;
}

// Every turn fails: every group opens and every rollout runs all its turns.
inline instant_policy failing_policy() {
  instant_policy p;
  p.correct = [](const std::string&, const std::string&, int) { return false; };
  return p;
}

// The test doubles of the services behind the driver or a gate, on one hub and one store.
struct doubles {
  temp_dir dir;
  coordinator c;
  std::shared_ptr<hub> shared = std::make_shared<hub>();
  std::shared_ptr<trajectory_store> store = open_store(dir.path());

  doubles() { shared->store = store; }

  // Fills the generator, verifier, scorer, store and learner of `experiment_services` or
  // `group_services` (the real scorer and store actor, the doubles for the rest).
  template <class Services>
  void spawn_services(Services& services, instant_policy policy) {
    services.generator = c.keep(c.system().spawn(test_generator, std::move(policy), shared));
    services.verifier = c.keep(c.system().spawn(test_verifier, shared));
    services.scorer = c.keep(spawn_scorer(c.system(), reward_config{}, advantage_config{}));
    store_actor_config sc;
    sc.detached = false;
    services.store = c.keep(spawn_store(c.system(), store, sc));
    services.learner = new_learner();
  }

  // A fresh learner double, as a restarted process has.
  learner_actor new_learner() { return c.keep(c.system().spawn(test_learner, shared)); }
};

// The driver over the doubles; it records the progress it reports.
struct driver_fixture : doubles {
  experiment_services services;
  std::vector<step_progress> steps;
  std::vector<validation_progress> validations;
  std::vector<log_line> logs;

  explicit driver_fixture(instant_policy policy) { spawn_services(services, std::move(policy)); }

  experiment_actor start(experiment_settings settings,
                         const std::shared_ptr<std::optional<run_summary>>& out) {
    settings.run_id = "run";
    settings.progress.on_step = [this](const step_progress& p) { steps.push_back(p); };
    settings.progress.on_validation = [this](const validation_progress& p) {
      validations.push_back(p);
    };
    settings.progress.on_log = [this](const log_line& l) { logs.push_back(l); };
    auto driver = c.keep(spawn_experiment(c.system(), std::move(settings), services));
    request_run(c, driver, out);
    return driver;
  }

  void release_generation(const std::string& prefix) {
    caf::anon_send(caf::actor_cast<test_generator_actor>(services.generator), release_atom_v,
                   prefix);
  }
  void release_training() {
    caf::anon_send(caf::actor_cast<test_learner_actor>(services.learner), release_atom_v);
  }
};

}  // namespace leap::actors::testing
