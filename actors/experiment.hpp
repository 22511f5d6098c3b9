// The experiment driver: owns one run. Step by step it samples the batch
// (orchestrator/schedule.hpp), spawns one gate per task (which starts the group's G first turns),
// collects the finished groups, asks the learner to train once all of a step's groups are in,
// writes the step record, tells the generators the new weight version, and reports progress. Every
// `validation.every` steps it runs the validation tasks (validation sampling, every failure
// debugged, never trained on).
//
// Schedules: streaming (every group runs on its own) or barrier (each step's rounds in lockstep,
// actors/barrier.hpp). With schedule.max_staleness k, step s starts once step s-1's groups are all
// in and the learner has finished step s-1-k, so generation runs ahead of the learner by at most k
// versions.
//
// Partial rollouts (schedule.partial): each step's batch decision carries leftover groups into the
// next step; the decision is stored in the step record's own commit, and a resumed run reads the
// one of its last completed step and puts those groups back into its first step's pool (complete
// ones from the store, the others going on from their stored turns).
//
// It answers `run` when the run has ended: finished, interrupted (stop), or failed (the first
// group_failed, learner or store error). The run record is the caller's (it knows whether the run
// is new or resumed).
#pragma once

#include "actors/generator.hpp"
#include "actors/group.hpp"
#include "actors/learner.hpp"
#include "actors/log_sink.hpp"
#include "actors/messages.hpp"
#include "actors/scorer.hpp"
#include "actors/store.hpp"
#include "actors/verifier.hpp"
#include "orchestrator/config.hpp"
#include "orchestrator/metrics.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace leap::actors {

// run: starts the run; answered when it has ended. stop: ends it early (in-flight groups are
// abandoned; a later run redoes them).
using experiment_actor = group_parent_actor::extend<caf::replies_to<run_atom>::with<run_summary>,
                                                    caf::reacts_to<stop_atom>>;

// One group as the experiment's adaptive gate recorded it: its first-turn failures and size.
struct gate_observation {
  int n_fail = 0;
  int group_size = 0;

  friend bool operator==(const gate_observation&, const gate_observation&) = default;
};

// What a resumed run finds in the store (tools/launch/resume.hpp builds it).
struct resume_plan {
  std::uint64_t first_step = 0;      // the first step without a step record
  std::uint64_t weight_version = 0;  // the weight version of the last completed step
  // Training groups already stored, per step >= first_step: they are handed to the learner again
  // instead of being redone.
  std::map<std::uint64_t, std::vector<std::uint32_t>> train_done;
  // Completed steps whose validation is due but incomplete, with the validation groups stored.
  std::map<std::uint64_t, std::vector<std::uint32_t>> validation_pending;
  // Policy dcp_adaptive: the stored training groups the gate had recorded, oldest first (at most
  // gate.adaptive_window), replayed into the fresh gate so that it decides as if never stopped.
  std::vector<gate_observation> gate_history;
  // Finished turns of the groups to redo (per-turn resume), per group and rollout: turn 0, 1, ...
  // of each rollout as far as they may be reused (see reusable_turns in tools/launch/resume.hpp).
  // The group's gate takes them instead of generating and verifying those turns again. They were
  // all sampled with weight_version, what the resumed run samples with until its next step
  // completes. Empty in the barrier schedule (its rounds count every turn).
  std::map<group_key, std::vector<std::vector<turn_record>>> partial_turns;
};

// One line of progress per finished step.
struct step_progress {
  std::uint64_t step = 0;  // 0-based
  std::uint64_t total_steps = 0;
  std::uint32_t groups = 0;
  std::uint32_t groups_resumed = 0;  // read back from the store
  std::uint32_t activated = 0;
  std::uint32_t probes = 0;
  std::vector<double> accuracy;  // cumulative pass rate at turn 1..M
  recovery_rates recovery;
  double turns_per_pass = 0.0;
  std::uint32_t turns = 0;
  std::uint32_t verifier_jobs = 0;
  step_timings timings;
  std::uint64_t weight_version = 0;
  double eta_ms = 0.0;  // remaining steps x mean step time so far
};

struct validation_progress {
  std::uint64_t step = 0;  // the training step after which it ran
  std::uint32_t groups = 0;
  std::uint32_t rollouts = 0;
  std::vector<double> accuracy;  // cumulative pass rate at turn 1..M
};

// Called on the driver's thread; must not block for long.
struct progress_sink {
  std::function<void(const step_progress&)> on_step;
  std::function<void(const validation_progress&)> on_validation;
  // Notable events, one line each, with the run's id and the step's or group's where the line is
  // about one (log_sink.hpp). Called on the driver's thread.
  log_sink on_log;
};

struct experiment_settings {
  std::string run_id;
  experiment_config config;
  std::vector<group_task> train_tasks;
  std::vector<group_task> validation_tasks;
  resume_plan resume;
  // Fraction of closed groups probed (gate.probe_fraction). Default: 0
  double probe_fraction = 0.0;
  progress_sink progress;
  // Live metrics; the groups' turns, the learner steps and each step's end update them, and each
  // step record gets their summary values ("telemetry.*"). Null: none. Default: null
  std::shared_ptr<telemetry::run_telemetry> telemetry;
};

struct experiment_services {
  generator_actor generator;
  verifier_actor verifier;
  scorer_actor scorer;
  store_actor store;
  learner_actor learner;
  // The verifier pool's profiles (profiles_of), for the turns after profiled verdicts; null when
  // the verifier profiles inline or not at all.
  profile_actor profiles;
  // Longest a turn waits for such a profile before it goes on without it (verifier.profile_wait_s).
  std::chrono::milliseconds profile_wait{60'000};
  // The same pool's profile summaries (profile_summaries_of), when the rewards have structural
  // terms (reward.structural); null otherwise.
  profile_summary_actor profile_summaries;
};

[[nodiscard]] experiment_actor spawn_experiment(caf::actor_system& system,
                                                experiment_settings settings,
                                                experiment_services services);

}  // namespace leap::actors
