// The group actor: thin around group_flow, which decides every next step; it only carries the
// flow's actions out and records what comes back.
#include "actors/group.hpp"

#include "actors/debug_turn.hpp"
#include "orchestrator/group_flow.hpp"
#include "orchestrator/run_telemetry.hpp"
#include "orchestrator/schedule.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <memory>

namespace leap::actors {

std::int64_t turn_seed(const group_settings& settings, std::uint32_t rollout, int turn) {
  if (settings.sampling.seed < 0) {
    return -1;
  }
  const std::uint64_t index =
      settings.request_index_base +
      std::uint64_t{rollout} * static_cast<std::uint64_t>(settings.max_turns) +
      static_cast<std::uint64_t>(turn);
  return settings.sampling.seed + static_cast<std::int64_t>(index);
}

namespace {

struct group_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  group_state() = default;
  group_settings settings;
  group_services services;
  std::unique_ptr<group_flow> flow;
  std::optional<gate_ruling> ruling;  // set before the flow sees the G-th first-turn result
  group_record record;
  std::vector<activity> activities;
  std::vector<std::optional<generation_result>> first_answers;  // being verified
  int first_results = 0;
  std::vector<debug_turn_actor> debug_actors;
  bool failed = false;
  static inline const char* name = "leap.gate";
};

using group_pointer = group_actor::stateful_pointer<group_state>;

void fail_group(group_pointer self, const std::string& message) {
  auto& st = self->state;
  if (st.failed) {
    return;
  }
  st.failed = true;
  self->send(st.services.parent, group_failed_atom_v, st.settings.key, message);
  // Linked debug-turn actors end with us.
  self->quit(caf::exit_reason::user_shutdown);
}

void tell_barrier(group_pointer self, int ended) {
  if (ended > 0 && self->state.services.barrier) {
    self->send(self->state.services.barrier, resolve_atom_v, static_cast<std::uint32_t>(ended));
  }
}

void complete_group(group_pointer self) {
  auto& st = self->state;
  group_report report = report_of(st.record);
  report.activities = std::move(st.activities);
  self->send(st.services.parent, group_done_atom_v, std::move(report));
  self->quit();
}

// Live metrics of the store stage: a put is queued from its request to its answer.
void store_put_answered(const group_settings& settings, double started_ms) {
  if (auto* t = settings.telemetry.get()) {
    t->store_queue.add(-1);
    t->store_wait.observe((clock_ms() - started_ms) / 1000.0);
  }
}

// Whether turn `turn` of `rollout` is one handed in from an earlier process.
bool resumed_turn(const group_state& st, std::uint32_t rollout, std::size_t turn) {
  return rollout < st.settings.resumed_turns.size() &&
         turn < st.settings.resumed_turns[rollout].size();
}

// Stores a finished turn on its own (per-turn resume). The store keeps puts in order, so the
// group's put, which deletes its turns, comes after every one of them.
void store_turn(group_pointer self, std::uint32_t rollout, std::size_t turn,
                const turn_record& record) {
  auto& st = self->state;
  if (!st.services.store) {
    return;
  }
  self->request(st.services.store, caf::infinite, put_turn_atom_v, st.settings.run_id,
                st.settings.key, rollout, static_cast<std::uint32_t>(turn), record)
      .then(
          [=](const ack& stored) {
            if (!stored.ok()) {
              fail_group(self, "store: turn: " + stored.error);
            }
          },
          [=](caf::error& e) { fail_group(self, "store: turn: " + self->system().render(e)); });
}

void score_and_store(group_pointer self, std::vector<turn_profile_record> profiles);

// Pulls the profile summaries of the group's passing turns (each waits at most profile_wait; all
// at once, so the group waits no longer than that), then scores. A summary that does not come in
// time, or an error, leaves its turn without one: a structural term of 0, never a failed group.
void finish_group(group_pointer self) {
  auto& st = self->state;
  st.record.finished_unix_ms = unix_ms();
  if (!st.services.profile_summaries) {
    score_and_store(self, {});
    return;
  }
  std::vector<std::string> ids;
  for (std::uint32_t r = 0; r < st.record.rollouts.size(); ++r) {
    const auto& turns = st.record.rollouts[r].turns;
    for (std::size_t t = 0; t < turns.size(); ++t) {
      if (turns[t].passed) {
        ids.push_back(turn_request_id(st.settings.run_id, st.settings.key, r, static_cast<int>(t)));
      }
    }
  }
  if (ids.empty()) {
    score_and_store(self, {});
    return;
  }
  struct pulled {
    std::size_t left = 0;
    std::vector<turn_profile_record> profiles;
  };
  auto shared = std::make_shared<pulled>();
  shared->left = ids.size();
  const auto one_done = [self, shared] {
    if (--shared->left == 0) {
      score_and_store(self, std::move(shared->profiles));
    }
  };
  for (const auto& id : ids) {
    self->request(st.services.profile_summaries, st.services.profile_wait, profiled_atom_v, id)
        .then(
            [shared, one_done](std::vector<turn_profile_record>& got) {
              for (auto& p : got) {
                shared->profiles.push_back(std::move(p));
              }
              one_done();
            },
            [one_done](const caf::error&) { one_done(); });
  }
}

// Score, store (durable), then hand to the learner: a group reaches the learner only once stored.
void score_and_store(group_pointer self, std::vector<turn_profile_record> profiles) {
  auto& st = self->state;
  self->request(st.services.scorer, caf::infinite, score_atom_v, st.record, std::move(profiles))
      .then(
          [=](group_record& scored) {
            self->state.record = std::move(scored);
            const double put_ms = clock_ms();
            if (auto* t = self->state.settings.telemetry.get()) {
              t->store_queue.add(1);
            }
            self->request(self->state.services.store, caf::infinite, put_group_atom_v,
                          self->state.record)
                .then(
                    [=](const ack& stored) {
                      auto& st = self->state;
                      store_put_answered(st.settings, put_ms);
                      if (!stored.ok()) {
                        fail_group(self, "store: " + stored.error);
                        return;
                      }
                      if (!st.settings.train || !st.services.learner) {
                        complete_group(self);
                        return;
                      }
                      self->request(st.services.learner, caf::infinite, add_group_atom_v, st.record)
                          .then(
                              [=](const ack& added) {
                                if (!added.ok()) {
                                  fail_group(self, "learner: " + added.error);
                                  return;
                                }
                                complete_group(self);
                              },
                              [=](caf::error& e) {
                                fail_group(self, "learner: " + self->system().render(e));
                              });
                    },
                    [=](caf::error& e) {
                      store_put_answered(self->state.settings, put_ms);
                      fail_group(self, "store: " + self->system().render(e));
                    });
          },
          [=](caf::error& e) { fail_group(self, "scorer: " + self->system().render(e)); });
}

void spawn_debug(group_pointer self, std::uint32_t rollout) {
  auto& st = self->state;
  const auto& turns = st.record.rollouts[rollout].turns;
  debug_turn_settings s;
  s.group = st.settings;
  s.rollout = rollout;
  s.turn = static_cast<int>(turns.size());
  for (const auto& t : turns) {
    s.history.insert(s.history.end(), t.input_tokens.begin(), t.input_tokens.end());
    s.history.insert(s.history.end(), t.output_tokens.begin(), t.output_tokens.end());
  }
  s.last = turns.back();
  if (rollout < st.settings.resumed_turns.size()) {
    s.resumed = st.settings.resumed_turns[rollout];
  }
  auto actor = spawn_debug_turn(self->system(), std::move(s), st.services, self);
  self->link_to(actor);
  st.debug_actors.push_back(std::move(actor));
}

// Carries out the flow's actions; `consumed` rollout-turns were resolved by the event (for the
// barrier's accounting: those not sent on have ended).
void apply(group_pointer self, const flow_actions& actions, int consumed) {
  auto& st = self->state;
  if (actions.gate) {
    st.record.gate = *actions.gate;
    st.record.n_fail = st.flow->n_fail();
    st.record.thresholds = st.ruling ? st.ruling->thresholds : fail_range{};
    st.record.probe = st.flow->probe();
    st.record.gated_unix_ms = unix_ms();
    // Stored with the group, so that replay reports what was decided here; `off` is what every
    // group of a run without gate.optimise would store, so nothing is.
    if (actions.optimise && *actions.optimise != optimise_decision::off) {
      st.record.optimise = *actions.optimise;
    }
  }
  for (auto rollout : actions.request_turn) {
    // A rollout's first debug turn gets its actor; later turns are the actor's own (it learns to
    // go on from the answer to its report).
    if (st.flow->rollout_turns(rollout) == 2) {
      spawn_debug(self, rollout);
    }
  }
  tell_barrier(self, consumed - static_cast<int>(actions.request_turn.size()));
  if (actions.finished) {
    finish_group(self);
  }
}

void first_turn_done(group_pointer self, std::uint32_t rollout, turn_record turn) {
  auto& st = self->state;
  if (!resumed_turn(st, rollout, 0)) {
    store_turn(self, rollout, 0, turn);
  }
  const turn_result result = flow_result(turn);
  st.record.rollouts[rollout].turns.push_back(std::move(turn));
  if (++st.first_results < st.settings.group_size) {
    apply(self, st.flow->on_result(rollout, result), 0);
    return;
  }
  // The G-th first turn: the flow decides now, with the ruling fetched first.
  const int n_fail = st.flow->n_fail() + (result.passed ? 0 : 1);
  const int group_size = st.settings.group_size;
  if (st.settings.local_gate) {
    st.ruling = gate_ruling{decide(*st.settings.local_gate, n_fail, group_size),
                            resolve_thresholds(*st.settings.local_gate, group_size)};
    apply(self, st.flow->on_result(rollout, result), group_size);
    return;
  }
  self->request(st.services.parent, caf::infinite, decide_atom_v, st.settings.key, n_fail,
                group_size)
      .then(
          [=](const gate_ruling& ruling) {
            self->state.ruling = ruling;
            apply(self, self->state.flow->on_result(rollout, result), group_size);
          },
          [=](caf::error& e) { fail_group(self, "gate decision: " + self->system().render(e)); });
}

void start_first_turn(group_pointer self, std::uint32_t rollout) {
  auto& st = self->state;
  generation_request request;
  request.request_id = turn_request_id(st.settings.run_id, st.settings.key, rollout, 0);
  request.append = {{"user", st.settings.task.prompt}};
  request.sampling = st.settings.sampling;
  request.seed = turn_seed(st.settings, rollout, 0);
  self->request(st.services.generator, caf::infinite, generate_atom_v, std::move(request))
      .then(
          [=](generation_result& generated) {
            auto& st = self->state;
            if (generated.finish == finish_reason::error) {
              // No answer after the client's retries: a fault of the servers, never a verdict on
              // the model. Scoring it would train the group's other rollouts on it.
              fail_group(self, "generator: " + generated.error);
              return;
            }
            if (auto wrong = version_mismatch(st.settings, generated); !wrong.empty()) {
              fail_group(self, "generator: " + wrong);
              return;
            }
            if (!needs_verification(generated)) {
              add_turn_activities(st.activities, generated, nullptr);
              observe_turn(st.settings, 0, generated, nullptr);
              first_turn_done(self, rollout, make_turn_record(std::move(generated), nullptr));
              return;
            }
            verification_request check{
                turn_request_id(st.settings.run_id, st.settings.key, rollout, 0),
                st.settings.task.id, generated.text};
            st.first_answers[rollout] = std::move(generated);
            self->request(st.services.verifier, caf::infinite, verify_atom_v, std::move(check))
                .then(
                    [=](verification_result& verified) {
                      auto& st = self->state;
                      if (!verified.infrastructure_error.empty()) {
                        fail_group(self, "verifier: " + verified.infrastructure_error);
                        return;
                      }
                      auto answer = std::move(*st.first_answers[rollout]);
                      st.first_answers[rollout].reset();
                      add_turn_activities(st.activities, answer, &verified);
                      observe_turn(st.settings, 0, answer, &verified);
                      first_turn_done(self, rollout,
                                      make_turn_record(std::move(answer), &verified));
                    },
                    [=](caf::error& e) {
                      fail_group(self, "verifier: " + self->system().render(e));
                    });
          },
          [=](caf::error& e) { fail_group(self, "generator: " + self->system().render(e)); });
}

group_actor::behavior_type group_behavior(group_pointer self, group_settings settings,
                                          group_services services) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.services = std::move(services);
  const auto* state = &self->state;
  st.flow = std::make_unique<group_flow>(
      st.settings.group_size, st.settings.max_turns,
      [state](int, int) {
        return state->ruling ? state->ruling->decision : gate_decision::closed_no_debug;
      },
      st.settings.probe_if_closed, st.settings.optimise);
  st.record.run_id = st.settings.run_id;
  st.record.step = st.settings.key.step;
  st.record.split = st.settings.key.split;
  st.record.group_index = st.settings.key.group;
  st.record.task_id = st.settings.task.id;
  st.record.max_turns = st.settings.max_turns;
  st.record.started_unix_ms = unix_ms();
  st.record.weight_version = st.settings.weight_version;
  st.record.rollouts.resize(static_cast<std::size_t>(st.settings.group_size));
  for (std::size_t i = 0; i < st.record.rollouts.size(); ++i) {
    st.record.rollouts[i].index = static_cast<std::uint32_t>(i);
  }
  st.first_answers.resize(st.record.rollouts.size());
  // Turns of an earlier process are results at once; the others are requested first, so that
  // the G-th first-turn result cannot come before every request is out.
  std::vector<std::uint32_t> resumed;
  for (auto rollout : st.flow->start().request_turn) {
    if (resumed_turn(st, rollout, 0)) {
      resumed.push_back(rollout);
    } else {
      start_first_turn(self, rollout);
    }
  }
  for (auto rollout : resumed) {
    first_turn_done(self, rollout, st.settings.resumed_turns[rollout][0]);
  }
  return {
      [=](turn_atom, std::uint32_t rollout, turn_record& turn,
          std::vector<activity>& activities) -> bool {
        auto& st = self->state;
        if (st.failed || rollout >= st.record.rollouts.size()) {
          return false;
        }
        const std::size_t index = st.record.rollouts[rollout].turns.size();
        if (!resumed_turn(st, rollout, index)) {
          store_turn(self, rollout, index, turn);
        }
        const turn_result result = flow_result(turn);
        st.record.rollouts[rollout].turns.push_back(std::move(turn));
        st.activities.insert(st.activities.end(), activities.begin(), activities.end());
        const flow_actions actions = st.flow->on_result(rollout, result);
        const bool go_on = std::find(actions.request_turn.begin(), actions.request_turn.end(),
                                     rollout) != actions.request_turn.end();
        apply(self, actions, 1);
        return go_on;
      },
      [=](group_failed_atom, const std::string& message) { fail_group(self, message); },
  };
}

}  // namespace

group_actor spawn_group(caf::actor_system& system, group_settings settings,
                        group_services services) {
  return system.spawn(group_behavior, std::move(settings), std::move(services));
}

}  // namespace leap::actors
