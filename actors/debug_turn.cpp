// The debug-turn actor: one rollout's turns after the first, each reported to its gate, whose
// group_flow decides whether another follows.
#include "actors/debug_turn.hpp"

#include "orchestrator/run_telemetry.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <optional>

namespace leap::actors {

std::string version_mismatch(const group_settings& group, const generation_result& generated) {
  if (!group.weight_version || generated.weight_version == *group.weight_version) {
    return {};
  }
  return "the turn was sampled with weight version " + std::to_string(generated.weight_version) +
         ", but the group is measured with version " + std::to_string(*group.weight_version);
}

std::vector<chat_text> feedback_messages(const std::string& feedback) {
  return {{"user", feedback}};
}

std::string turn_feedback(const group_settings& group, const turn_record& last,
                          const std::string& profiled) {
  const std::string& verdict_text = profiled.empty() ? last.feedback : profiled;
  if (!last.passed) {
    return verdict_text;
  }
  // The flow only sends a passing rollout on in optimisation turns. A pass's verdict says nothing
  // but what its profile added (the diagnosis, after a blank line): why the kernel is slow.
  std::string out = optimise_feedback(last.speedup, group.optimise.speedup);
  const auto start = verdict_text.find_first_not_of(" \n");
  if (start != std::string::npos) {
    out += "\n\n";
    out += verdict_text.substr(start);
  }
  return out;
}

turn_record make_turn_record(generation_result generated, const verification_result* verified) {
  turn_record t;
  t.input_tokens = std::move(generated.input_tokens);
  t.output_tokens = std::move(generated.output_tokens);
  t.output_logprobs = std::move(generated.output_logprobs);
  t.text = std::move(generated.text);
  t.finish = generated.finish;
  t.endpoint = std::move(generated.endpoint);
  t.weight_version = generated.weight_version;
  t.weight_segments = std::move(generated.weight_segments);
  t.timings.generation_ms = generated.generation_ms;
  t.timings.generation_queue_ms = generated.queue_ms;
  if (verified != nullptr) {
    t.verdict = verified->verdict;
    t.passed = verified->passed;
    t.feedback = verified->feedback;
    t.code_hash = verified->code_hash;
    t.timings.compile_ms = verified->compile_ms;
    t.timings.run_ms = verified->run_ms;
    t.timings.compile_queue_ms = verified->queue_ms;
    t.timings.run_queue_ms = verified->run_queue_ms;
    t.speedup = verified->speedup;
    t.speedup_noise = verified->speedup_noise;
    t.compiled_speedup = verified->compiled_speedup;
    t.compiled_speedup_noise = verified->compiled_speedup_noise;
  } else {
    t.verdict = verdict_category::format;
    t.passed = false;
    t.feedback = generated.error.empty() ? "the answer was empty" : std::move(generated.error);
  }
  return t;
}

turn_result flow_result(const turn_record& t) {
  return {t.passed,
          t.finish == finish_reason::length || t.finish == finish_reason::error ||
              t.finish == finish_reason::abort,
          t.speedup};
}

void add_turn_activities(std::vector<activity>& out, const generation_result& g,
                         const verification_result* v) {
  out.push_back({activity_kind::generation, g.finished_ms - g.generation_ms, g.finished_ms});
  if (v == nullptr) {
    return;
  }
  // Waiting counts as the stage waited for: the compile queue as compile, the wait for a run slot
  // (one GPU shared by every cuda run) as run.
  const double run_start = v->finished_ms - v->run_ms - v->run_queue_ms;
  out.push_back({activity_kind::compile, run_start - v->compile_ms - v->queue_ms, run_start});
  out.push_back({activity_kind::run, run_start, v->finished_ms});
}

void observe_turn(const group_settings& settings, int turn, const generation_result& generated,
                  const verification_result* verified) {
  auto* t = settings.telemetry.get();
  if (t == nullptr) {
    return;
  }
  const bool passed = verified != nullptr && verified->passed;
  (turn == 0 ? t->first_turns : t->debug_turns).inc();
  if (passed) {
    (turn == 0 ? t->first_turns_passed : t->debug_turns_passed).inc();
  }
  t->generated_tokens.inc(static_cast<double>(generated.output_tokens.size()));
  t->generation_seconds.observe(generated.generation_ms / 1000.0);
  t->generation_wait.observe(generated.queue_ms / 1000.0);
  if (verified == nullptr) {
    return;
  }
  t->compile_seconds.observe(verified->compile_ms / 1000.0);
  t->run_seconds.observe(verified->run_ms / 1000.0);
  t->compile_wait.observe(verified->queue_ms / 1000.0);
}

namespace {

struct debug_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  debug_state() = default;
  debug_turn_settings settings;
  group_services services;
  group_actor gate;
  std::optional<generation_result> generated;  // the turn's answer while it is being verified
  std::vector<activity> activities;
  static inline const char* name = "leap.debug_turn";
};

using debug_pointer = debug_turn_actor::stateful_pointer<debug_state>;

void next_turn(debug_pointer self);

void fail_turn(debug_pointer self, const std::string& message) {
  self->send(self->state.gate, group_failed_atom_v, message);
  self->quit();
}

void report_turn(debug_pointer self, turn_record turn) {
  auto& st = self->state;
  st.settings.history.insert(st.settings.history.end(), turn.input_tokens.begin(),
                             turn.input_tokens.end());
  st.settings.history.insert(st.settings.history.end(), turn.output_tokens.begin(),
                             turn.output_tokens.end());
  st.settings.last = turn;
  auto activities = std::move(st.activities);
  st.activities.clear();
  self->request(st.gate, caf::infinite, turn_atom_v, st.settings.rollout, std::move(turn),
                std::move(activities))
      .then(
          [=](bool go_on) {
            if (!go_on) {
              self->quit();
              return;
            }
            ++self->state.settings.turn;
            next_turn(self);
          },
          [=](caf::error&) { self->quit(); });  // the gate is gone: so is the group
}

void generate_turn(debug_pointer self, const std::string& profiled);

void next_turn(debug_pointer self) {
  auto& st = self->state;
  const auto& s = st.settings;
  if (static_cast<std::size_t>(s.turn) < s.resumed.size()) {
    report_turn(self, s.resumed[static_cast<std::size_t>(s.turn)]);
    return;
  }
  // The last turn's profile, when the pool is making one, completes its feedback: only this
  // rollout's next turn waits for it, never the gate or the group's other rollouts. A turn read
  // back from an earlier process has no profile coming (the id is unknown to this pool: "").
  if (!st.services.profiles || s.turn == 0) {
    generate_turn(self, {});
    return;
  }
  // Bounded: a profile queued behind many others must not hold the rollout (and its group) up.
  self->request(st.services.profiles, st.services.profile_wait, profile_atom_v,
                turn_request_id(s.group.run_id, s.group.key, s.rollout, s.turn - 1))
      .then([=](std::string& profiled) { generate_turn(self, profiled); },
            // Too late, or the pool is gone: the verdict alone.
            [=](caf::error&) { generate_turn(self, {}); });
}

void generate_turn(debug_pointer self, const std::string& profiled) {
  auto& st = self->state;
  const auto& s = st.settings;
  generation_request request;
  request.request_id = turn_request_id(s.group.run_id, s.group.key, s.rollout, s.turn);
  request.history = s.history;
  request.append = feedback_messages(turn_feedback(s.group, s.last, profiled));
  request.sampling = s.group.sampling;
  request.seed = turn_seed(s.group, s.rollout, s.turn);
  request.pinned_endpoint = s.pinned_endpoint;
  self->request(st.services.generator, caf::infinite, generate_atom_v, std::move(request))
      .then(
          [=](generation_result& generated) {
            auto& st = self->state;
            if (generated.finish == finish_reason::error) {
              // No answer: an infrastructure fault, never scored (see the gate's first turns).
              fail_turn(self, "generator: " + generated.error);
              return;
            }
            if (auto wrong = version_mismatch(st.settings.group, generated); !wrong.empty()) {
              fail_turn(self, "generator: " + wrong);
              return;
            }
            if (generated.endpoint_index >= 0) {
              st.settings.pinned_endpoint = generated.endpoint_index;
            }
            if (!needs_verification(generated)) {
              add_turn_activities(st.activities, generated, nullptr);
              observe_turn(st.settings.group, st.settings.turn, generated, nullptr);
              report_turn(self, make_turn_record(std::move(generated), nullptr));
              return;
            }
            verification_request check{
                turn_request_id(st.settings.group.run_id, st.settings.group.key,
                                st.settings.rollout, st.settings.turn),
                st.settings.group.task.id, generated.text};
            st.generated = std::move(generated);
            self->request(st.services.verifier, caf::infinite, verify_atom_v, std::move(check))
                .then(
                    [=](verification_result& verified) {
                      auto& st = self->state;
                      if (!verified.infrastructure_error.empty()) {
                        fail_turn(self, "verifier: " + verified.infrastructure_error);
                        return;
                      }
                      add_turn_activities(st.activities, *st.generated, &verified);
                      observe_turn(st.settings.group, st.settings.turn, *st.generated, &verified);
                      auto generated = std::move(*st.generated);
                      st.generated.reset();
                      report_turn(self, make_turn_record(std::move(generated), &verified));
                    },
                    [=](caf::error& e) {
                      fail_turn(self, "verifier: " + self->system().render(e));
                    });
          },
          [=](caf::error& e) { fail_turn(self, "generator: " + self->system().render(e)); });
}

debug_turn_actor::behavior_type debug_turn(debug_pointer self, debug_turn_settings settings,
                                           group_services services, group_actor gate) {
  self->state.settings = std::move(settings);
  self->state.services = std::move(services);
  self->state.gate = std::move(gate);
  next_turn(self);
  return {
      [=](stop_atom) { self->quit(); },
  };
}

}  // namespace

debug_turn_actor spawn_debug_turn(caf::actor_system& system, debug_turn_settings settings,
                                  group_services services, group_actor gate_handle) {
  return system.spawn(debug_turn, std::move(settings), std::move(services), std::move(gate_handle));
}

}  // namespace leap::actors
