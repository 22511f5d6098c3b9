#include "actors/barrier.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <deque>
#include <utility>
#include <vector>

namespace leap::actors {
namespace {

struct barrier_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  barrier_state() = default;
  generation_actor generator;
  verifier_actor verifier;
  // Rollout-turns of the last round that must still show up for the next one, as a generation
  // request or as ended (resolve).
  std::uint32_t expected = 0;
  std::uint32_t resolved = 0;
  std::vector<std::pair<caf::typed_response_promise<generation_result>, generation_request>> next;
  // The round being generated.
  std::vector<caf::typed_response_promise<generation_result>> generating;
  std::vector<generation_result> generated;
  std::uint32_t generation_pending = 0;
  // The round being verified.
  std::vector<std::pair<caf::typed_response_promise<verification_result>, verification_result>>
      verified;
  std::uint32_t verification_expected = 0;
  static inline const char* name = "leap.barrier";
};

using barrier_pointer = barrier_actor::stateful_pointer<barrier_state>;

void release_verdicts(barrier_pointer self) {
  auto verified = std::move(self->state.verified);
  self->state.verified.clear();
  for (auto& [promise, result] : verified) {
    promise.deliver(std::move(result));
  }
}

void release_answers(barrier_pointer self) {
  auto& st = self->state;
  st.verification_expected = 0;
  for (const auto& g : st.generated) {
    st.verification_expected += needs_verification(g) ? 1 : 0;
  }
  // Every rollout-turn of this round resolves into the next one.
  st.expected = static_cast<std::uint32_t>(st.generated.size());
  st.resolved = 0;
  auto promises = std::move(st.generating);
  auto results = std::move(st.generated);
  st.generating.clear();
  st.generated.clear();
  for (std::size_t i = 0; i < promises.size(); ++i) {
    promises[i].deliver(std::move(results[i]));
  }
}

void start_round_if_complete(barrier_pointer self) {
  auto& st = self->state;
  if (st.generation_pending > 0 || st.next.size() + st.resolved < st.expected) {
    return;
  }
  if (st.next.empty()) {
    // No rollout is left: the step's rounds are over.
    self->quit();
    return;
  }
  auto round = std::move(st.next);
  st.next.clear();
  st.expected = 0;
  st.resolved = 0;
  st.generation_pending = static_cast<std::uint32_t>(round.size());
  st.generated.assign(round.size(), generation_result{});
  st.generating.clear();
  for (std::size_t i = 0; i < round.size(); ++i) {
    st.generating.push_back(round[i].first);
    self->request(st.generator, caf::infinite, generate_atom_v, std::move(round[i].second))
        .then(
            [=](generation_result& result) {
              auto& st = self->state;
              st.generated[i] = std::move(result);
              if (--st.generation_pending == 0) {
                release_answers(self);
              }
            },
            [=](caf::error& e) {
              auto& st = self->state;
              st.generated[i].finish = finish_reason::error;
              st.generated[i].error = "generator: " + self->system().render(e);
              if (--st.generation_pending == 0) {
                release_answers(self);
              }
            });
  }
}

barrier_actor::behavior_type barrier(barrier_pointer self, generation_actor generator,
                                     verifier_actor verifier, std::uint32_t rollouts) {
  self->state.generator = std::move(generator);
  self->state.verifier = std::move(verifier);
  self->state.expected = rollouts;
  return {
      [=](generate_atom, generation_request& request) -> caf::result<generation_result> {
        auto promise = self->make_response_promise<generation_result>();
        self->state.next.emplace_back(promise, std::move(request));
        start_round_if_complete(self);
        return promise;
      },
      [=](verify_atom, verification_request& request) -> caf::result<verification_result> {
        auto promise = self->make_response_promise<verification_result>();
        self->request(self->state.verifier, caf::infinite, verify_atom_v, std::move(request))
            .then(
                [=](verification_result& result) mutable {
                  auto& st = self->state;
                  st.verified.emplace_back(promise, std::move(result));
                  if (st.verified.size() >= st.verification_expected) {
                    release_verdicts(self);
                  }
                },
                [=](caf::error& e) mutable {
                  verification_result failed;
                  failed.infrastructure_error = self->system().render(e);
                  auto& st = self->state;
                  st.verified.emplace_back(promise, std::move(failed));
                  if (st.verified.size() >= st.verification_expected) {
                    release_verdicts(self);
                  }
                });
        return promise;
      },
      [=](resolve_atom, std::uint32_t ended) {
        self->state.resolved += ended;
        start_round_if_complete(self);
      },
  };
}

}  // namespace

barrier_actor spawn_barrier(caf::actor_system& system, generation_actor generator,
                            verifier_actor verifier, std::uint32_t rollouts) {
  return system.spawn(barrier, std::move(generator), std::move(verifier), rollouts);
}

}  // namespace leap::actors
