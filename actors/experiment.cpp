#include "actors/experiment.hpp"

#include "actors/barrier.hpp"
#include "orchestrator/gate.hpp"
#include "orchestrator/partial_rollouts.hpp"
#include "orchestrator/retry.hpp"
#include "orchestrator/run_telemetry.hpp"
#include "orchestrator/schedule.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>

namespace leap::actors {
namespace {

// schedule.partial (issue 33): what a step's batch took, carried and dropped, for its metrics.
struct partial_counts {
  std::uint32_t started = 0;          // new groups the step started
  std::uint32_t carried_in = 0;       // groups it took over from the previous step
  std::uint32_t trained_carried = 0;  // groups of its batch that an earlier step started
  std::uint32_t carried = 0;          // groups it carries into the next step
  std::uint32_t dropped_stale = 0;
  std::uint32_t dropped_over_carry = 0;
};

struct step_state {
  std::uint32_t groups_total = 0;
  std::uint32_t groups_done = 0;
  std::uint32_t groups_resumed = 0;
  std::vector<group_report> reports;
  double start_ms = 0.0;
  std::int64_t started_unix_ms = 0;
  bool training = false;
  barrier_actor barrier;
  // Time earlier processes spent on the groups read back from the store (resume).
  step_timings earlier;
  // The step's batch: the task of each slot and which slots are retries (gate.retry).
  retry_plan plan;
  std::optional<retry_step_record> retry;  // settled (gate.retry on)
  std::optional<partial_counts> partial;   // schedule.partial on
  bool batch_taken = false;                // schedule.partial: the batch is decided
  // schedule.partial: the groups the batch carried into the next step, stored with the step's
  // record so that a restarted run resumes them.
  std::optional<partial_carry_record> carry;
  // schedule.partial: the groups an earlier process stored are being read back; the batch waits
  // for them, so that none is left out of the step that started it.
  bool loading_stored = false;
};

// A training group of the partial-rollout pool: started, not yet trained or dropped.
struct partial_entry {
  std::uint64_t id = 0;     // start order: among unfinished groups the oldest is carried first
  std::uint64_t owner = 0;  // the step whose batch it may join (moves on when carried)
  std::size_t task = 0;     // index into the training tasks
  // The weights the generators held when it started. Its first turns may be sampled with newer
  // ones if a sync lands meanwhile; counting from the older keeps the staleness bound safe.
  std::uint64_t sampled_version = 0;
  bool complete = false;
  double finished_ms = 0.0;
  std::optional<group_report> report;  // complete groups
};

// The time earlier processes spent on a resumed step: the union of its stored groups' [started,
// finished] spans (the downtime between processes, and work on groups lost in flight, are not
// in it), split between generation, compile and run in proportion to the stored turns' times
// (what the stored records say; how they overlapped is not stored).
step_timings earlier_time(const std::vector<const group_record*>& groups) {
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  double generation = 0.0;
  double compile = 0.0;
  double run = 0.0;
  for (const auto* g : groups) {
    if (g->finished_unix_ms > g->started_unix_ms && g->started_unix_ms > 0) {
      spans.emplace_back(g->started_unix_ms, g->finished_unix_ms);
    }
    for (const auto& r : g->rollouts) {
      for (const auto& t : r.turns) {
        generation += t.timings.generation_ms;
        compile += t.timings.compile_ms;
        run += t.timings.run_ms;
      }
    }
  }
  std::sort(spans.begin(), spans.end());
  double wall = 0.0;
  std::int64_t covered = std::numeric_limits<std::int64_t>::min();
  for (const auto& [start, end] : spans) {
    const auto from = std::max(start, covered);
    if (end > from) {
      wall += static_cast<double>(end - from);
    }
    covered = std::max(covered, end);
  }
  step_timings t;
  t.wall_ms = wall;
  const double busy = generation + compile + run;
  if (busy > 0.0) {
    t.generation_ms = wall * generation / busy;
    t.compile_ms = wall * compile / busy;
    t.run_ms = wall * run / busy;
  } else {
    t.idle_ms = wall;
  }
  return t;
}

struct validation_state {
  std::uint32_t groups_total = 0;
  std::vector<group_report> reports;
  std::uint64_t weight_version = 0;  // every turn of its groups is sampled with this version
};

struct experiment_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  experiment_state() = default;
  experiment_settings settings;
  experiment_services services;
  std::unique_ptr<adaptive_gate> gate;
  // gate.retry's buffer: settled when a step's groups are all in, stored after every step, read
  // back by a resumed run before its first step.
  retry_buffer retry;
  std::map<std::uint64_t, step_state> steps;  // started, not completed
  std::map<std::uint64_t, validation_state> validations;
  std::map<group_key, group_actor> gates;  // in flight
  std::map<caf::actor_addr, group_key> gate_keys;
  std::map<group_key, partial_entry> partial;  // schedule.partial: the pool, by origin key
  std::uint64_t partial_ids = 0;
  std::uint64_t total_steps = 0;
  std::uint64_t next_step = 0;        // the next step to start
  std::uint64_t completed_steps = 0;  // steps with a step record: 0 .. completed_steps - 1
  std::uint64_t weight_version = 0;
  std::vector<double> step_wall_ms;  // of the steps completed by this process
  // Weight syncs waiting for validations measured with an older version to finish, or for the
  // previous step's sync (see sync_weights); retried whenever either ends.
  std::vector<std::function<void()>> held_syncs;
  caf::typed_response_promise<run_summary> done;
  run_summary summary;
  bool started = false;
  bool ended = false;
  static inline const char* name = "leap.experiment";
};

using experiment_pointer = experiment_actor::stateful_pointer<experiment_state>;

// Every line of the driver carries the run's id, and the step's, group's and rollout's that `ids`
// has (log_ids() of a group key, or a step alone).
void log(experiment_pointer self, log::level severity, std::string line, log::ids ids = {}) {
  ids.run = self->state.settings.run_id;
  emit(self->state.settings.progress.on_log, severity, std::move(line), std::move(ids));
}

log::ids step_ids(std::uint64_t step) {
  log::ids ids;
  ids.step = static_cast<std::int64_t>(step) + 1;
  return ids;
}

int max_turns(const experiment_state& st) { return st.settings.config.rollout.max_turns; }

bool partial_on(const experiment_state& st) {
  return st.settings.config.schedule.partial_over_provision > 0;
}

// The decisions' settings at `step`: the last step carries nothing (no step would train it).
partial_settings partial_of(const experiment_state& st, std::uint64_t step) {
  const auto& c = st.settings.config;
  partial_settings p;
  p.batch = static_cast<std::uint32_t>(std::max(0, c.data.batch_size));
  p.over_provision = static_cast<std::uint32_t>(c.schedule.partial_over_provision);
  p.max_carry =
      step + 1 >= st.total_steps ? 0 : static_cast<std::uint32_t>(c.schedule.partial_max_carry);
  p.max_staleness = partial_staleness_bound(c.schedule.max_staleness);
  return p;
}

// The weights step `step` trains: one version per step since those the run resumed with.
std::uint64_t training_version(const experiment_state& st, std::uint64_t step) {
  return st.settings.resume.weight_version + (step - st.settings.resume.first_step);
}

void end_run(experiment_pointer self, run_status status, std::string message = {}) {
  auto& st = self->state;
  if (st.ended) {
    return;
  }
  st.ended = true;
  for (auto& [key, gate] : st.gates) {
    self->send_exit(gate, caf::exit_reason::user_shutdown);
  }
  st.gates.clear();
  st.gate_keys.clear();
  for (auto& [step, s] : st.steps) {
    if (s.barrier) {
      self->send_exit(s.barrier, caf::exit_reason::user_shutdown);
    }
  }
  st.summary.status = status;
  st.summary.error = std::move(message);
  if (st.done.pending()) {
    st.done.deliver(st.summary);
  }
  self->quit();
}

void maybe_finish(experiment_pointer self) {
  auto& st = self->state;
  if (st.completed_steps >= st.total_steps && st.steps.empty() && st.validations.empty() &&
      st.gates.empty()) {
    end_run(self, run_status::finished);
  }
}

void publish_in_flight(const experiment_state& st) {
  if (auto* t = st.settings.telemetry.get()) {
    t->groups_in_flight.set(static_cast<double>(st.gates.size()));
  }
}

void watch(experiment_pointer self, const group_key& key, group_actor gate) {
  self->monitor(gate);
  self->state.gate_keys.emplace(gate.address(), key);
  self->state.gates.emplace(key, std::move(gate));
  publish_in_flight(self->state);
}

group_services services_for(experiment_pointer self, const barrier_actor& barrier, bool train) {
  auto& sv = self->state.services;
  group_services g;
  g.generator = barrier ? generation_actor{barrier} : generation_actor{sv.generator};
  g.verifier = barrier ? verifier_actor{barrier} : sv.verifier;
  g.profiles = sv.profiles;
  g.profile_wait = sv.profile_wait;
  g.profile_summaries = sv.profile_summaries;
  g.scorer = sv.scorer;
  g.store = sv.store;
  g.learner = train ? sv.learner : learner_actor{};
  g.parent = self;
  g.barrier = barrier;
  return g;
}

void on_step_groups_in(experiment_pointer self, std::uint64_t step);
void try_start_steps(experiment_pointer self);

// The finished turns an earlier process stored for the group (per-turn resume), handed over once.
std::vector<std::vector<turn_record>> take_resumed_turns(experiment_state& st,
                                                         const group_key& key) {
  auto it = st.settings.resume.partial_turns.find(key);
  if (it == st.settings.resume.partial_turns.end()) {
    return {};
  }
  auto turns = std::move(it->second);
  st.settings.resume.partial_turns.erase(it);
  for (const auto& rollout : turns) {
    st.summary.turns_resumed += rollout.size();
  }
  return turns;
}

// Retries the held weight syncs (each holds itself again if it still has to wait).
void release_held_syncs(experiment_pointer self) {
  auto held = std::move(self->state.held_syncs);
  self->state.held_syncs.clear();
  for (auto& sync : held) {
    sync();
  }
}

std::size_t count_turns(const std::vector<std::vector<turn_record>>& turns) {
  std::size_t n = 0;
  for (const auto& rollout : turns) {
    n += rollout.size();
  }
  return n;
}

void count_group(experiment_pointer self, group_report report, bool resumed) {
  auto& st = self->state;
  auto it = st.steps.find(report.key.step);
  if (it == st.steps.end()) {
    return;
  }
  auto& s = it->second;
  s.reports.push_back(std::move(report));
  ++s.groups_done;
  if (resumed) {
    ++st.summary.groups_resumed;
  } else {
    ++st.summary.groups_completed;
    if (auto* t = st.settings.telemetry.get()) {
      t->groups.inc();
      if (is_open(s.reports.back().gate)) {
        t->groups_activated.inc();
      }
    }
  }
  if (s.groups_done == s.groups_total) {
    on_step_groups_in(self, it->first);
  }
}

// ---- schedule.partial (issue 33) -------------------------------------------------------------
// The driver keeps every started training group in a pool until a batch takes it or it is
// dropped; orchestrator/partial_rollouts.hpp decides, the functions below carry it out.

// Hands the batch's groups to the learner, then trains the step. The gates did not (their
// groups' fate was open): each record is read back from the store, where it lies under the key
// of the step that started it, and reaches the learner under the training step (a carried group
// with index group + (batch + over_provision) * steps carried, unique within the step).
void hand_batch(experiment_pointer self, std::uint64_t step, const std::vector<group_key>& keys) {
  auto& st = self->state;
  if (keys.empty()) {
    on_step_groups_in(self, step);
    return;
  }
  std::map<std::uint64_t, std::set<std::uint32_t>> wanted;
  for (const auto& k : keys) {
    wanted[k.step].insert(k.group);
  }
  const auto width = static_cast<std::uint32_t>(st.settings.config.data.batch_size +
                                                st.settings.config.schedule.partial_over_provision);
  auto left = std::make_shared<std::size_t>(keys.size());
  for (const auto& [origin, groups] : wanted) {
    self->request(st.services.store, caf::infinite, load_atom_v, st.settings.run_id, origin,
                  split_kind::train)
        .then(
            [=, origin = origin, groups = groups](loaded_groups& loaded) {
              if (!loaded.error.empty()) {
                end_run(self, run_status::failed, "store: " + loaded.error);
                return;
              }
              std::size_t found = 0;
              for (auto& g : loaded.groups) {
                if (groups.count(g.group_index) == 0) {
                  continue;
                }
                ++found;
                g.group_index += width * static_cast<std::uint32_t>(step - origin);
                g.step = step;
                self->request(self->state.services.learner, caf::infinite, add_group_atom_v,
                              std::move(g))
                    .then(
                        [=](const ack& added) {
                          if (!added.ok()) {
                            end_run(self, run_status::failed, "learner: " + added.error);
                            return;
                          }
                          if (--*left == 0) {
                            on_step_groups_in(self, step);
                          }
                        },
                        [=](caf::error& e) {
                          end_run(self, run_status::failed, "learner: " + self->system().render(e));
                        });
              }
              if (found != groups.size()) {
                end_run(self, run_status::failed,
                        "store: step " + std::to_string(origin + 1) + ": " +
                            std::to_string(groups.size() - found) +
                            " group(s) of a batch are not stored");
              }
            },
            [=](caf::error& e) {
              end_run(self, run_status::failed, "store: " + self->system().render(e));
            });
  }
}

// A dropped group still in flight: its gate (and the debug turns linked to it) ends; its stored
// turns stay in the store, and it trains nowhere.
void stop_gate(experiment_pointer self, const group_key& key) {
  auto& st = self->state;
  auto it = st.gates.find(key);
  if (it == st.gates.end()) {
    return;
  }
  st.gate_keys.erase(it->second.address());
  self->demonitor(it->second.address());
  self->send_exit(it->second, caf::exit_reason::user_shutdown);
  st.gates.erase(it);
  publish_in_flight(st);
}

// Takes the step's batch once enough of its pool is complete: the batch trains, leftovers go on
// to the next step or are dropped, as split_partial says.
void check_batch(experiment_pointer self, std::uint64_t step) {
  auto& st = self->state;
  auto sit = st.steps.find(step);
  if (st.ended || sit == st.steps.end() || sit->second.batch_taken || sit->second.loading_stored) {
    return;
  }
  const auto settings = partial_of(st, step);
  const auto version = training_version(st, step);
  std::vector<partial_group> groups;
  std::map<std::uint64_t, group_key> by_id;
  for (const auto& [key, e] : st.partial) {
    if (e.owner != step) {
      continue;
    }
    groups.push_back({e.id, e.sampled_version, e.complete, e.finished_ms, 0.0});
    by_id.emplace(e.id, key);
  }
  if (!batch_ready(settings, groups, version)) {
    return;
  }
  auto& s = sit->second;
  s.batch_taken = true;
  if (!s.partial) {
    s.partial.emplace();
  }
  auto& counts = *s.partial;
  const auto split = split_partial(settings, groups, version);
  std::vector<group_key> batch;
  for (auto id : split.batch) {
    const auto key = by_id.at(id);
    auto it = st.partial.find(key);
    s.reports.push_back(std::move(*it->second.report));
    counts.trained_carried += key.step < step ? 1 : 0;
    st.partial.erase(it);
    batch.push_back(key);
  }
  // The decision as the store keeps it, in start order (ids count up as groups start), so that a
  // restarted run gives them back their order in the pool.
  std::vector<std::uint64_t> carried(split.carry.begin(), split.carry.end());
  std::sort(carried.begin(), carried.end());
  s.carry = partial_carry_record{step, {}};
  for (auto id : carried) {
    const auto key = by_id.at(id);
    auto& e = st.partial.at(key);
    e.owner = step + 1;
    s.carry->groups.push_back({key.step, key.group, e.task, st.settings.train_tasks[e.task].id,
                               e.sampled_version, e.complete});
  }
  counts.carried = static_cast<std::uint32_t>(split.carry.size());
  counts.dropped_stale = static_cast<std::uint32_t>(split.dropped_stale.size());
  counts.dropped_over_carry = static_cast<std::uint32_t>(split.dropped_over_carry.size());
  for (const auto* dropped : {&split.dropped_stale, &split.dropped_over_carry}) {
    for (auto id : *dropped) {
      const auto key = by_id.at(id);
      stop_gate(self, key);
      st.partial.erase(key);
    }
  }
  s.groups_done = s.groups_total = static_cast<std::uint32_t>(batch.size());
  log(self, log::level::info,
      "batch: " + std::to_string(batch.size()) + " groups (" +
          std::to_string(counts.trained_carried) + " started earlier), " +
          std::to_string(counts.carried) + " carried on, " + std::to_string(counts.dropped_stale) +
          " dropped as stale, " + std::to_string(counts.dropped_over_carry) +
          " dropped over max_carry",
      step_ids(step));
  hand_batch(self, step, batch);
}

// A partial-rollout group is complete (scored and stored, not handed to the learner).
void partial_group_done(experiment_pointer self, group_report report) {
  auto& st = self->state;
  auto it = st.partial.find(report.key);
  if (it == st.partial.end()) {
    return;  // dropped meanwhile
  }
  ++st.summary.groups_completed;
  if (auto* t = st.settings.telemetry.get()) {
    t->groups.inc();
    if (is_open(report.gate)) {
      t->groups_activated.inc();
    }
  }
  it->second.complete = true;
  it->second.finished_ms = clock_ms();
  it->second.report = std::move(report);
  check_batch(self, it->second.owner);
}

// The finished turns of a carried group that its restarted gate takes as they are: per rollout of
// the group, from turn 0 up to max_turns, ending at a pass (what follows a pass is redone). Unlike
// a redone group's (tools/launch/resume.hpp's reusable_turns) they keep whichever weights sampled
// them: the group was carried with those, and its sampled version bounds their staleness.
std::vector<std::vector<turn_record>> carried_turns(std::vector<std::vector<turn_record>> stored,
                                                    int group_size, int max_turns) {
  stored.resize(static_cast<std::size_t>(std::max(0, group_size)));
  for (auto& rollout : stored) {
    std::size_t keep = 0;
    while (keep < rollout.size() && keep < static_cast<std::size_t>(std::max(0, max_turns))) {
      ++keep;
      if (rollout[keep - 1].passed) {
        break;
      }
    }
    rollout.resize(keep);
  }
  return stored;
}

// A restarted run's pool (issue 33): the groups the last completed step carried into this run's
// first step, as the decision stored with that step lists them, back under the keys of the steps
// that started them. One stored whole since is complete; the others go on from their stored
// turns with the settings and request indices (so the seeds) their first process gave them. A
// group whose task is no longer the one recorded (the task list changed between the processes) is
// left out, with a warning.
void restore_carried(experiment_pointer self, loaded_carry& loaded) {
  auto& st = self->state;
  const auto& config = st.settings.config;
  const auto step = st.settings.resume.first_step;
  std::map<group_key, const group_record*> whole;
  for (const auto& g : loaded.stored) {
    whole.emplace(group_key{g.step, split_kind::train, g.group_index}, &g);
  }
  // As start_step spaces them. gate.retry is refused with partial rollouts, so a carried group is
  // never a retry and has the plain size.
  const auto& retry = config.gate.retry;
  const auto width = static_cast<std::uint64_t>(config.data.batch_size) +
                     static_cast<std::uint64_t>(config.schedule.partial_over_provision);
  const auto stride = static_cast<std::uint64_t>(config.rollout.group_size + retry.extra_rollouts) *
                      static_cast<std::uint64_t>(config.rollout.max_turns + retry.extra_turns);
  std::size_t from_store = 0;
  std::size_t rerun = 0;
  std::size_t turns_resumed = 0;
  for (std::size_t i = 0; i < loaded.record.groups.size(); ++i) {
    const auto& c = loaded.record.groups[i];
    const group_key key{c.origin_step, split_kind::train, c.group};
    if (c.task >= st.settings.train_tasks.size() ||
        st.settings.train_tasks[c.task].id != c.task_id) {
      log(self, log::level::warn,
          "carried into step " + std::to_string(step + 1) + " with task '" + c.task_id +
              "', which is no longer training task " + std::to_string(c.task) +
              ": not resumed (it trains nowhere)",
          log_ids(key));
      continue;
    }
    partial_entry e;
    e.id = st.partial_ids++;
    e.owner = step;
    e.task = c.task;
    e.sampled_version = c.sampled_version;
    if (auto it = whole.find(key); it != whole.end()) {
      e.complete = true;
      e.finished_ms = 0.0;  // in an earlier process: before any of this one's
      e.report = report_of(*it->second);
      ++st.summary.groups_resumed;
      ++from_store;
      st.partial.emplace(key, std::move(e));
      continue;
    }
    st.partial.emplace(key, e);
    group_settings gs;
    gs.run_id = st.settings.run_id;
    gs.key = key;
    gs.task = st.settings.train_tasks[c.task];
    gs.group_size = config.rollout.group_size;
    gs.max_turns = config.rollout.max_turns;
    gs.sampling = config.rollout.sampling;
    gs.request_index_base = (c.origin_step * width + c.group) * stride;
    gs.probe_if_closed =
        probe_group(config.experiment.seed, c.origin_step, c.group, st.settings.probe_fraction);
    gs.optimise = config.gate.optimise;
    gs.train = false;  // the driver hands it to the learner if a batch takes it
    gs.telemetry = st.settings.telemetry;
    gs.resumed_turns =
        carried_turns(i < loaded.turns.size() ? std::move(loaded.turns[i])
                                              : std::vector<std::vector<turn_record>>{},
                      gs.group_size, gs.max_turns);
    const auto n = count_turns(gs.resumed_turns);
    st.summary.turns_resumed += n;
    turns_resumed += n;
    ++rerun;
    watch(self, key, spawn_group(self->system(), std::move(gs), services_for(self, {}, true)));
  }
  log(self, log::level::info,
      "resumed the groups carried into this step: " + std::to_string(from_store) +
          " complete from the store, " + std::to_string(rerun) + " running on from " +
          std::to_string(turns_resumed) + " finished turns",
      step_ids(step));
}

void start_validation(experiment_pointer self, std::uint64_t step,
                      const std::vector<std::uint32_t>& already_stored) {
  auto& st = self->state;
  const auto& config = st.settings.config;
  const std::size_t tasks = st.settings.validation_tasks.size();
  if (tasks == 0) {
    return;
  }
  const std::set<std::uint32_t> stored(already_stored.begin(), already_stored.end());
  auto& v = st.validations[step];
  v.groups_total = static_cast<std::uint32_t>(tasks - std::min(tasks, stored.size()));
  // Measured with the weights the generators hold now: the step's own, or, for a validation a
  // resumed run redoes, those it resumed with. No sync moves them on until it is done.
  v.weight_version = st.weight_version;
  if (v.groups_total == 0) {
    st.validations.erase(step);
    return;
  }
  gate_config full;
  full.policy = gate_policy::full;
  const int n = config.rollout.validation.n;
  for (std::uint32_t i = 0; i < tasks; ++i) {
    if (stored.count(i) > 0) {
      continue;
    }
    group_settings g;
    g.run_id = st.settings.run_id;
    g.key = {step, split_kind::validation, i};
    g.task = st.settings.validation_tasks[i];
    g.group_size = n;
    g.max_turns = config.rollout.max_turns;
    g.sampling = config.rollout.validation.sampling;
    // Validation seeds live far above training's, so the two never share a request seed.
    g.request_index_base = (std::uint64_t{1} << 40) + (step * tasks + i) *
                                                          static_cast<std::uint64_t>(n) *
                                                          static_cast<std::uint64_t>(g.max_turns);
    g.local_gate = full;
    g.train = false;
    g.weight_version = st.weight_version;
    g.telemetry = st.settings.telemetry;
    g.resumed_turns = take_resumed_turns(st, g.key);
    if (!g.resumed_turns.empty()) {
      log(self, log::level::info,
          "validation group: " + std::to_string(count_turns(g.resumed_turns)) +
              " finished turns taken from the store",
          log_ids(g.key));
    }
    auto key = g.key;
    watch(self, key, spawn_group(self->system(), std::move(g), services_for(self, {}, false)));
  }
}

void on_validation_done(experiment_pointer self, group_report report) {
  auto& st = self->state;
  const std::uint64_t step = report.key.step;
  auto it = st.validations.find(step);
  if (it == st.validations.end()) {
    return;
  }
  it->second.reports.push_back(std::move(report));
  if (it->second.reports.size() < it->second.groups_total) {
    return;
  }
  std::vector<group_summary> summaries;
  validation_progress p;
  p.step = step;
  for (const auto& r : it->second.reports) {
    summaries.push_back(summary_of(r));
    p.rollouts += static_cast<std::uint32_t>(r.outcomes.size());
  }
  p.groups = static_cast<std::uint32_t>(summaries.size());
  p.accuracy = cumulative_accuracy(summaries, max_turns(st));
  st.validations.erase(it);
  if (st.settings.progress.on_validation) {
    st.settings.progress.on_validation(p);
  }
  release_held_syncs(self);
  maybe_finish(self);
}

step_record make_step_record(const experiment_state& st, std::uint64_t step, const step_state& s,
                             const learner_step_result& learned, double learner_start_ms,
                             double end_ms) {
  step_record r;
  r.run_id = st.settings.run_id;
  r.step = step;
  r.weight_version = learned.weight_version;
  r.started_unix_ms = s.started_unix_ms;
  r.finished_unix_ms = unix_ms();
  std::vector<activity> activities;
  std::vector<group_summary> summaries;
  std::vector<group_summary> probes;
  for (const auto& g : s.reports) {
    activities.insert(activities.end(), g.activities.begin(), g.activities.end());
    summaries.push_back(summary_of(g));
    if (g.probe) {
      probes.push_back(probe_summary_of(g));
    }
    ++r.counts.groups;
    r.counts.activated_groups += is_open(g.gate) ? 1 : 0;
    r.counts.probe_groups += g.probe ? 1 : 0;
    r.counts.rollouts += static_cast<std::uint32_t>(g.outcomes.size());
    for (const auto& o : g.outcomes) {
      r.counts.passed_rollouts += o.passed() ? 1 : 0;
    }
    r.counts.turns += g.turns;
    r.counts.verifier_jobs += g.verifier_jobs;
    r.counts.generated_tokens += g.generated_tokens;
  }
  activities.push_back({activity_kind::learner, learner_start_ms, end_ms});
  r.timings = attribute_step_time(activities, s.start_ms, end_ms);
  r.timings.wall_ms += s.earlier.wall_ms;
  r.timings.generation_ms += s.earlier.generation_ms;
  r.timings.compile_ms += s.earlier.compile_ms;
  r.timings.run_ms += s.earlier.run_ms;
  r.timings.idle_ms += s.earlier.idle_ms;
  const auto accuracy = cumulative_accuracy(summaries, max_turns(st));
  for (std::size_t m = 0; m < accuracy.size(); ++m) {
    r.metrics["acc_at_" + std::to_string(m + 1)] = accuracy[m];
  }
  r.metrics["activated_fraction"] = activated_group_fraction(summaries);
  const auto rec = recovery(summaries);
  r.metrics["recovery_per_rollout"] = rec.per_rollout;
  r.metrics["recovery_per_group"] = rec.per_group;
  r.metrics["turns_per_pass"] = turns_per_pass(summaries);
  // Speed (issue 31): only when something was timed, so that a run without timing records no 0.
  // The same against the reference under torch.compile, prefixed "compiled_".
  for (const auto& [prefix, speedups] :
       {std::pair{std::string(), &group_report::speedups},
        std::pair{std::string("compiled_"), &group_report::compiled_speedups}}) {
    speed_summary speed;
    for (const auto& g : s.reports) {
      for (std::size_t i = 0; i < g.outcomes.size(); ++i) {
        const double x = i < (g.*speedups).size() ? (g.*speedups)[i] : 0.0;
        speed.add(g.outcomes[i], measured_speedup(x) ? pass_speed{x, std::nullopt} : pass_speed{});
      }
    }
    if (speed.timed_passes() > 0) {
      r.metrics[prefix + "timed_passes"] = speed.timed_passes();
      for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
        r.metrics[prefix + fast_p_name(i)] = *speed.fast_p(i);
      }
      r.metrics[prefix + "speedup_geomean"] = *speed.geomean_speedup();
    }
  }
  if (s.retry) {
    // Recovered here: this step's retries that passed (settling counts them the same way).
    r.metrics["retry.retried"] = static_cast<double>(s.retry->retried.size());
    r.metrics["retry.recovered"] = s.retry->counts.recovered;
    r.metrics["retry.admitted"] = s.retry->counts.admitted;
    r.metrics["retry.exhausted"] = s.retry->counts.exhausted;
    r.metrics["retry.evicted"] = s.retry->counts.evicted;
    r.metrics["retry.buffered"] = static_cast<double>(s.retry->buffer.entries.size());
  }
  if (s.partial) {
    // schedule.partial (issue 33): where the step's groups went; `leap replay` shows them.
    const auto& p = *s.partial;
    r.metrics["partial.started"] = p.started;
    r.metrics["partial.carried_in"] = p.carried_in;
    r.metrics["partial.trained_carried"] = p.trained_carried;
    r.metrics["partial.carried"] = p.carried;
    r.metrics["partial.dropped"] = p.dropped_stale + p.dropped_over_carry;
    r.metrics["partial.dropped_stale"] = p.dropped_stale;
  }
  if (!probes.empty()) {
    const auto probe_rec = recovery(probes);
    r.metrics["probe_recovery_per_rollout"] = probe_rec.per_rollout;
    r.metrics["probe_recovery_per_group"] = probe_rec.per_group;
  }
  for (const auto& [name, value] : learned.metrics) {
    r.metrics["learner." + name] = value;
  }
  return r;
}

// A step's end in the live metrics: the step's rates and the new weight version, then the whole
// snapshot's summary values into the record (cumulative since this process started), so that a
// replay shows what the live metrics said at each step.
void record_step_telemetry(const experiment_state& st, step_record& r) {
  auto* t = st.settings.telemetry.get();
  if (t == nullptr) {
    return;
  }
  auto metric = [&](const std::string& name) {
    auto found = r.metrics.find(name);
    return found != r.metrics.end() ? found->second : 0.0;
  };
  t->first_turn_pass_rate.set(metric("acc_at_1"));
  t->final_pass_rate.set(metric("acc_at_" + std::to_string(max_turns(st))));
  t->activated_fraction.set(metric("activated_fraction"));
  t->weight_version.set(static_cast<double>(r.weight_version));
  // A step that timed nothing shows NaN (a gap on a dashboard), never 0.
  const auto speed = [&](const std::string& name) {
    auto found = r.metrics.find(name);
    return found != r.metrics.end() ? found->second : std::numeric_limits<double>::quiet_NaN();
  };
  for (std::size_t i = 0; i < fast_p_thresholds.size(); ++i) {
    t->fast_p[i]->set(speed(fast_p_name(i)));
  }
  t->speedup_geomean.set(speed("speedup_geomean"));
  t->steps.inc();
  for (const auto& [name, value] :
       telemetry::summary_values(t->source.take(unix_ms()), "telemetry.")) {
    r.metrics[name] = value;
  }
}

void step_completed(experiment_pointer self, std::uint64_t step, const step_record& record) {
  auto& st = self->state;
  auto it = st.steps.find(step);
  const std::uint32_t resumed = it != st.steps.end() ? it->second.groups_resumed : 0;
  if (it != st.steps.end()) {
    st.steps.erase(it);
  }
  st.completed_steps = std::max(st.completed_steps, step + 1);
  ++st.summary.steps_completed;
  st.step_wall_ms.push_back(record.timings.wall_ms);

  if (st.settings.progress.on_step) {
    step_progress p;
    p.step = step;
    p.total_steps = st.total_steps;
    p.groups = record.counts.groups;
    p.groups_resumed = resumed;
    p.activated = record.counts.activated_groups;
    p.probes = record.counts.probe_groups;
    for (int m = 1; m <= max_turns(st); ++m) {
      auto metric = record.metrics.find("acc_at_" + std::to_string(m));
      p.accuracy.push_back(metric != record.metrics.end() ? metric->second : 0.0);
    }
    auto metric = [&](const char* name) {
      auto found = record.metrics.find(name);
      return found != record.metrics.end() ? found->second : 0.0;
    };
    p.recovery = {metric("recovery_per_rollout"), metric("recovery_per_group")};
    p.turns_per_pass = metric("turns_per_pass");
    p.turns = record.counts.turns;
    p.verifier_jobs = record.counts.verifier_jobs;
    p.timings = record.timings;
    p.weight_version = record.weight_version;
    const double mean = std::accumulate(st.step_wall_ms.begin(), st.step_wall_ms.end(), 0.0) /
                        static_cast<double>(st.step_wall_ms.size());
    p.eta_ms = mean * static_cast<double>(st.total_steps - std::min(st.total_steps, step + 1));
    st.settings.progress.on_step(p);
  }
  if (validation_due(step, st.total_steps, st.settings.config.rollout.validation.every)) {
    start_validation(self, step, {});
  }
  try_start_steps(self);
  release_held_syncs(self);
  maybe_finish(self);
}

// Tells the generators the step's new weights, then completes the step. The sync waits while a
// validation measured with older weights is in flight (its turns must all be sampled with its
// version), and until the previous step has completed, so that syncs go out in step order and a
// validation starts (at its step's completion) before the next sync.
void sync_weights(experiment_pointer self, std::uint64_t step, const step_record& record,
                  const learner_step_result& learned) {
  auto& st = self->state;
  if (st.ended) {
    return;
  }
  const bool validating = std::any_of(st.validations.begin(), st.validations.end(), [&](auto& v) {
    return v.second.weight_version < learned.weight_version;
  });
  if (validating || st.completed_steps < step) {
    st.held_syncs.push_back([=] { sync_weights(self, step, record, learned); });
    return;
  }
  weight_update update{learned.weight_version, learned.weights_path};
  self->request(st.services.generator, caf::infinite, weights_atom_v, update)
      .then(
          [=](const ack& synced) {
            if (!synced.ok()) {
              end_run(self, run_status::failed, "generator: " + synced.error);
              return;
            }
            self->state.weight_version = learned.weight_version;
            step_completed(self, step, record);
          },
          [=](caf::error& e) {
            end_run(self, run_status::failed, "generator: " + self->system().render(e));
          });
}

// gate.retry: the step's all-failed groups enter the buffer and its retries are settled before the
// next step plans its batch; the buffer is then stored (in order before the step record, so that a
// completed step always has it). A store error ends the run as the step record's would.
void settle_retries(experiment_pointer self, std::uint64_t step, step_state& s) {
  auto& st = self->state;
  const auto& config = st.settings.config.gate.retry;
  if (!retry_enabled(config)) {
    return;
  }
  std::vector<retry_outcome> outcomes(s.plan.tasks.size());
  for (std::size_t g = 0; g < outcomes.size(); ++g) {
    outcomes[g].task = s.plan.tasks[g];
    outcomes[g].retry = s.plan.retries[g];
  }
  for (const auto& report : s.reports) {
    if (report.key.group < outcomes.size()) {
      outcomes[report.key.group].all_failed =
          std::none_of(report.outcomes.begin(), report.outcomes.end(),
                       [](const rollout_outcome& o) { return o.passed(); });
    }
  }
  retry_step_record record;
  record.step = step;
  record.counts = settle(st.retry, config, step, outcomes);
  record.buffer = st.retry;
  for (std::size_t g = 0; g < outcomes.size(); ++g) {
    if (outcomes[g].retry) {
      record.retried.push_back(static_cast<std::uint32_t>(g));
    }
  }
  s.retry = record;
  const auto& c = record.counts;
  log(self, log::level::info,
      "retry: " + std::to_string(record.retried.size()) + " retried, " +
          std::to_string(c.recovered) + " recovered, " + std::to_string(c.admitted) +
          " admitted, " + std::to_string(c.requeued) + " requeued, " + std::to_string(c.exhausted) +
          " given up, " + std::to_string(c.evicted) + " evicted; " +
          std::to_string(st.retry.entries.size()) + " waiting",
      step_ids(step));
  self->request(st.services.store, caf::infinite, put_retry_atom_v, st.settings.run_id, record)
      .then(
          [=](const ack& stored) {
            if (!stored.ok()) {
              end_run(self, run_status::failed, "store: retry buffer: " + stored.error);
            }
          },
          [=](caf::error& e) {
            end_run(self, run_status::failed, "store: " + self->system().render(e));
          });
}

void on_step_groups_in(experiment_pointer self, std::uint64_t step) {
  auto& st = self->state;
  auto& s = st.steps[step];
  if (s.training) {
    return;
  }
  s.training = true;
  const double learner_start = clock_ms();
  if (st.settings.telemetry) {
    st.settings.telemetry->learner_queue.add(1);
  }
  settle_retries(self, step, s);
  // The next step may start generating now, if staleness allows.
  try_start_steps(self);
  self->request(st.services.learner, caf::infinite, train_atom_v, step)
      .then(
          [=](const learner_step_result& learned) {
            auto& st = self->state;
            if (auto* t = st.settings.telemetry.get()) {
              t->learner_queue.add(-1);
              t->learner_seconds.observe(learned.learner_ms / 1000.0);
            }
            if (!learned.error.empty()) {
              end_run(self, run_status::failed, learned.error);
              return;
            }
            const double end = clock_ms();
            auto record = make_step_record(st, step, st.steps[step], learned, learner_start, end);
            record_step_telemetry(st, record);
            auto on_stored = [=](const ack& stored) {
              if (!stored.ok()) {
                end_run(self, run_status::failed, "store: step record: " + stored.error);
                return;
              }
              sync_weights(self, step, record, learned);
            };
            auto on_error = [=](caf::error& e) {
              end_run(self, run_status::failed, "store: " + self->system().render(e));
            };
            if (const auto& carry = st.steps[step].carry) {
              // In one commit with the step: a restarted run finds the step with its decision.
              self->request(st.services.store, caf::infinite, put_step_atom_v, record, *carry)
                  .then(on_stored, on_error);
            } else {
              self->request(st.services.store, caf::infinite, put_step_atom_v, record)
                  .then(on_stored, on_error);
            }
          },
          [=](caf::error& e) {
            end_run(self, run_status::failed, "learner: " + self->system().render(e));
          });
}

void start_step(experiment_pointer self, std::uint64_t step) {
  auto& st = self->state;
  const auto& config = st.settings.config;
  const auto batch_size = static_cast<std::size_t>(config.data.batch_size);
  const auto& retry = config.gate.retry;
  auto& s = st.steps[step];
  // schedule.partial: the step's tasks are batch + over_provision a step, a function of (seed,
  // step) as without it; a step that took carried groups over starts only the first of them (the
  // rest of its tasks are not seen this epoch).
  const bool partial = partial_on(st);
  const auto width =
      batch_size + (partial ? static_cast<std::size_t>(config.schedule.partial_over_provision) : 0);
  std::uint32_t carried_in = 0;
  if (partial) {
    for (const auto& [key, e] : st.partial) {
      carried_in += e.owner == step ? 1 : 0;
    }
  }
  s.plan =
      plan_step(st.retry, retry, step,
                step_batch(config.experiment.seed, step, st.settings.train_tasks.size(), width));
  if (partial) {
    const auto started = groups_to_start(partial_of(st, step), carried_in);
    s.plan.tasks.resize(std::min<std::size_t>(s.plan.tasks.size(), started));
    s.plan.retries.resize(s.plan.tasks.size());
    s.partial = partial_counts{};
    s.partial->started = static_cast<std::uint32_t>(s.plan.tasks.size());
    s.partial->carried_in = carried_in;
  }
  const auto& batch = s.plan.tasks;
  s.groups_total = static_cast<std::uint32_t>(partial ? batch_size : batch.size());
  s.start_ms = clock_ms();
  s.started_unix_ms = unix_ms();

  std::set<std::uint32_t> stored;
  if (auto it = st.settings.resume.train_done.find(step);
      it != st.settings.resume.train_done.end()) {
    for (auto g : it->second) {
      if (g < batch.size()) {
        stored.insert(g);
      }
    }
  }
  s.groups_resumed = static_cast<std::uint32_t>(stored.size());
  s.loading_stored = partial && !stored.empty();
  if (!stored.empty()) {
    // Completed groups are not redone: the learner gets them back from the store.
    const auto tasks_of_step = batch;
    self->request(st.services.store, caf::infinite, load_atom_v, st.settings.run_id, step,
                  split_kind::train)
        .then(
            [=](loaded_groups& loaded) {
              if (!loaded.error.empty()) {
                end_run(self, run_status::failed, "store: " + loaded.error);
                return;
              }
              std::vector<const group_record*> kept;
              for (const auto& g : loaded.groups) {
                if (stored.count(g.group_index) > 0) {
                  kept.push_back(&g);
                }
              }
              if (auto it = self->state.steps.find(step); it != self->state.steps.end()) {
                it->second.earlier = earlier_time(kept);
                for (const auto* g : kept) {
                  if (g->started_unix_ms > 0) {
                    it->second.started_unix_ms =
                        std::min(it->second.started_unix_ms, g->started_unix_ms);
                  }
                }
              }
              for (auto& g : loaded.groups) {
                if (stored.count(g.group_index) == 0) {
                  continue;
                }
                if (partial_on(self->state)) {
                  // Into the pool, complete: the batch decides whether it trains.
                  partial_entry e;
                  e.id = self->state.partial_ids++;
                  e.owner = step;
                  e.task = tasks_of_step.at(g.group_index);
                  e.sampled_version = std::numeric_limits<std::uint64_t>::max();
                  for (const auto& r : g.rollouts) {
                    for (const auto& t : r.turns) {
                      e.sampled_version = std::min(e.sampled_version, t.weight_version);
                    }
                  }
                  if (e.sampled_version == std::numeric_limits<std::uint64_t>::max()) {
                    e.sampled_version = self->state.weight_version;
                  }
                  e.complete = true;
                  e.finished_ms = 0.0;  // in an earlier process: before any of this one's
                  e.report = report_of(g);
                  ++self->state.summary.groups_resumed;
                  self->state.partial.emplace(group_key{step, split_kind::train, g.group_index},
                                              std::move(e));
                  continue;
                }
                auto report = report_of(g);
                self->request(self->state.services.learner, caf::infinite, add_group_atom_v,
                              std::move(g))
                    .then(
                        [=](const ack& added) mutable {
                          if (!added.ok()) {
                            end_run(self, run_status::failed, "learner: " + added.error);
                            return;
                          }
                          count_group(self, std::move(report), true);
                        },
                        [=](caf::error& e) {
                          end_run(self, run_status::failed, "learner: " + self->system().render(e));
                        });
              }
              if (partial_on(self->state)) {
                if (auto it = self->state.steps.find(step); it != self->state.steps.end()) {
                  it->second.loading_stored = false;
                }
                check_batch(self, step);
              }
            },
            [=](caf::error& e) {
              end_run(self, run_status::failed, "store: " + self->system().render(e));
            });
  }

  // A retried group runs gate.retry's extra rollouts and turns; request indices are spaced for
  // the largest group so that no two groups share one (unchanged with retry off).
  const auto size_of = [&](std::uint32_t g) {
    return config.rollout.group_size + (s.plan.retries[g] ? retry.extra_rollouts : 0);
  };
  const auto turns_of = [&](std::uint32_t g) {
    return config.rollout.max_turns + (s.plan.retries[g] ? retry.extra_turns : 0);
  };
  const auto stride = static_cast<std::uint64_t>(config.rollout.group_size + retry.extra_rollouts) *
                      static_cast<std::uint64_t>(config.rollout.max_turns + retry.extra_turns);
  const std::uint32_t missing =
      static_cast<std::uint32_t>(batch.size()) - static_cast<std::uint32_t>(stored.size());
  if (missing > 0 && config.schedule.mode == schedule_mode::barrier) {
    std::uint32_t rollouts = 0;
    for (std::uint32_t g = 0; g < batch.size(); ++g) {
      rollouts += stored.count(g) > 0 ? 0 : static_cast<std::uint32_t>(size_of(g));
    }
    s.barrier =
        spawn_barrier(self->system(), st.services.generator, st.services.verifier, rollouts);
  }
  std::size_t turns_resumed = 0;
  for (std::uint32_t g = 0; g < batch.size(); ++g) {
    if (stored.count(g) > 0) {
      continue;
    }
    group_settings gs;
    gs.run_id = st.settings.run_id;
    gs.key = {step, split_kind::train, g};
    gs.task = st.settings.train_tasks[batch[g]];
    gs.group_size = size_of(g);
    gs.max_turns = turns_of(g);
    gs.sampling = config.rollout.sampling;
    gs.request_index_base = (step * width + g) * stride;
    gs.probe_if_closed = probe_group(config.experiment.seed, step, g, st.settings.probe_fraction);
    gs.optimise = config.gate.optimise;  // training groups only: validation measures correctness
    // schedule.partial: the driver hands the group to the learner if a batch takes it.
    gs.train = !partial;
    gs.telemetry = st.settings.telemetry;
    if (partial) {
      partial_entry e;
      e.id = st.partial_ids++;
      e.owner = step;
      e.task = batch[g];
      e.sampled_version = st.weight_version;
      st.partial.emplace(gs.key, e);
    }
    if (!s.barrier) {
      gs.resumed_turns = take_resumed_turns(st, gs.key);
    }
    turns_resumed += count_turns(gs.resumed_turns);
    auto key = gs.key;
    watch(self, key,
          spawn_group(self->system(), std::move(gs), services_for(self, s.barrier, true)));
  }
  log(self, log::level::info,
      "started: " + std::to_string(missing) + " groups to run, " + std::to_string(stored.size()) +
          " from the store, " + std::to_string(turns_resumed) +
          " finished turns of them from the store" +
          (retry_enabled(retry) ? ", " + std::to_string(s.plan.retried()) + " retries" : "") +
          (partial ? ", " + std::to_string(carried_in) + " carried in" : ""),
      step_ids(step));
  if (partial) {
    check_batch(self, step);  // the carried groups may make the batch already
  }
}

bool may_start(const experiment_state& st, std::uint64_t step) {
  if (st.ended || step >= st.total_steps) {
    return false;
  }
  const auto first = st.settings.resume.first_step;
  if (step > first) {
    // The previous step's groups must all be in (or the step completed).
    auto prev = st.steps.find(step - 1);
    if (prev != st.steps.end() && prev->second.groups_done < prev->second.groups_total) {
      return false;
    }
    if (prev == st.steps.end() && st.completed_steps < step) {
      return false;
    }
  }
  // Generation may run ahead of the learner by max_staleness versions.
  const auto staleness =
      static_cast<std::uint64_t>(std::max(0, st.settings.config.schedule.max_staleness));
  return st.completed_steps + staleness >= step;
}

void try_start_steps(experiment_pointer self) {
  auto& st = self->state;
  while (may_start(st, st.next_step)) {
    start_step(self, st.next_step++);
  }
}

gate_ruling rule(adaptive_gate& gate, int n_fail, int group_size) {
  gate_ruling r;
  r.thresholds = gate.ruling_range(group_size);
  r.decision = gate.decide_and_record(n_fail, group_size);
  return r;
}

experiment_actor::behavior_type experiment(experiment_pointer self, experiment_settings settings,
                                           experiment_services services) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.services = std::move(services);
  st.gate = std::make_unique<adaptive_gate>(st.settings.config.gate);
  // A resumed run's gate starts from the groups decided before the stop, not from the static
  // thresholds (empty unless dcp_adaptive).
  for (const auto& g : st.settings.resume.gate_history) {
    st.gate->record(g.n_fail, g.group_size);
  }
  st.total_steps = static_cast<std::uint64_t>(std::max(0, st.settings.config.experiment.steps));
  st.next_step = st.settings.resume.first_step;
  st.completed_steps = st.settings.resume.first_step;
  st.weight_version = st.settings.resume.weight_version;
  st.summary.first_step = st.settings.resume.first_step;
  // However the driver ends, its gates (and their linked debug-turn actors) end with it.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    end_run(self, run_status::interrupted, "stopped: " + self->system().render(msg.reason));
    self->quit(msg.reason);
  });
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    auto it = st.gate_keys.find(down.source);
    if (it == st.gate_keys.end()) {
      return;
    }
    const group_key key = it->second;
    st.gate_keys.erase(it);
    const bool in_flight = st.gates.erase(key) > 0;
    if (in_flight && !st.ended) {
      end_run(
          self, run_status::failed,
          to_string(key) + ": the gate ended unexpectedly: " + self->system().render(down.reason));
    }
  });
  return {
      [=](run_atom) -> caf::result<run_summary> {
        auto& st = self->state;
        if (st.started) {
          return caf::make_error(caf::sec::runtime_error, "the run has started already");
        }
        st.started = true;
        st.done = self->make_response_promise<run_summary>();
        if (st.settings.train_tasks.empty()) {
          end_run(self, run_status::failed, "no training tasks");
          return st.done;
        }
        auto start = [=] {
          auto& st = self->state;
          for (const auto& [step, stored] : st.settings.resume.validation_pending) {
            start_validation(self, step, stored);
          }
          try_start_steps(self);
          maybe_finish(self);
        };
        const auto first = st.settings.resume.first_step;
        // schedule.partial: a resumed run first puts back the groups the last completed step
        // carried into its first step (none stored: partial rollouts were off, or the store was
        // made before the decision was stored).
        auto begin = [=] {
          auto& st = self->state;
          if (!partial_on(st) || first == 0 || first >= st.total_steps) {
            start();
            return;
          }
          self->request(st.services.store, caf::infinite, get_carry_atom_v, st.settings.run_id,
                        first - 1)
              .then(
                  [=](loaded_carry& loaded) {
                    if (!loaded.error.empty()) {
                      end_run(self, run_status::failed, "store: carry decision: " + loaded.error);
                      return;
                    }
                    if (loaded.found) {
                      restore_carried(self, loaded);
                    }
                    start();
                  },
                  [=](caf::error& e) {
                    end_run(self, run_status::failed, "store: " + self->system().render(e));
                  });
        };
        if (!retry_enabled(st.settings.config.gate.retry) || first == 0) {
          begin();
          return st.done;
        }
        // A resumed run plans its first step from the buffer stored after the last completed
        // one, as the run that stopped would have (none stored: retry was off until now).
        self->request(st.services.store, caf::infinite, get_retry_atom_v, st.settings.run_id,
                      first - 1)
            .then(
                [=](loaded_retry& loaded) {
                  if (!loaded.error.empty()) {
                    end_run(self, run_status::failed, "store: retry buffer: " + loaded.error);
                    return;
                  }
                  if (loaded.found) {
                    self->state.retry = std::move(loaded.record.buffer);
                  }
                  log(self, log::level::info,
                      "resumed the retry buffer: " +
                          std::to_string(self->state.retry.entries.size()) + " waiting");
                  begin();
                },
                [=](caf::error& e) {
                  end_run(self, run_status::failed, "store: " + self->system().render(e));
                });
        return st.done;
      },
      [=](stop_atom) {
        log(self, log::level::warn,
            "stopping: in-flight groups are abandoned and redone by the next run");
        end_run(self, run_status::interrupted);
      },
      [=](decide_atom, const group_key&, std::int32_t n_fail, std::int32_t group_size) {
        return rule(*self->state.gate, n_fail, group_size);
      },
      [=](group_done_atom, group_report& report) {
        auto& st = self->state;
        auto it = st.gates.find(report.key);
        if (it != st.gates.end()) {
          st.gate_keys.erase(it->second.address());
          self->demonitor(it->second.address());
          st.gates.erase(it);
        }
        publish_in_flight(st);
        if (st.ended) {
          return;
        }
        if (report.key.split == split_kind::validation) {
          on_validation_done(self, std::move(report));
        } else if (partial_on(st)) {
          partial_group_done(self, std::move(report));
        } else {
          count_group(self, std::move(report), false);
        }
      },
      [=](group_failed_atom, const group_key& key, const std::string& message) {
        auto& st = self->state;
        if (auto it = st.gates.find(key); it != st.gates.end()) {
          st.gate_keys.erase(it->second.address());
          self->demonitor(it->second.address());
          st.gates.erase(it);
        }
        end_run(self, run_status::failed, to_string(key) + ": " + message);
      },
  };
}

}  // namespace

experiment_actor spawn_experiment(caf::actor_system& system, experiment_settings settings,
                                  experiment_services services) {
  return system.spawn(experiment, std::move(settings), std::move(services));
}

}  // namespace leap::actors
