#include "actors/store.hpp"

#include "storage/trajectory_store.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <map>
#include <optional>
#include <utility>

namespace leap::actors {
namespace {

using store_impl_actor = store_actor::extend<caf::reacts_to<commit_atom>>;

struct store_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  store_state() = default;
  std::shared_ptr<trajectory_store> store;
  store_actor_config config;
  std::optional<write_batch> batch;
  std::vector<caf::typed_response_promise<ack>> waiting;  // answered when the batch commits
  bool commit_queued = false;
  // The profiles put so far per (run, step), for the step records put after them.
  std::map<std::pair<std::string, std::uint64_t>, profile_counts> profiles;
  static inline const char* name = "leap.store";
};

void commit(store_impl_actor::stateful_pointer<store_state> self) {
  auto& st = self->state;
  st.commit_queued = false;
  if (st.waiting.empty()) {
    return;
  }
  const status written = st.store->write(*st.batch);
  ack answer;
  if (!written) {
    answer.error = written.err().message;
    // Nothing of a failed commit is stored; its records are reported, not retried.
    st.batch->clear();
  }
  for (auto& promise : st.waiting) {
    promise.deliver(answer);
  }
  st.waiting.clear();
}

// The carry decision stored with `step` and what the store holds of each carried group: the
// group itself once stored whole, else its in-progress turns, per rollout from turn 0 up to the
// first one missing (a later turn's input was rendered after the missing one).
loaded_carry load_carry(const trajectory_store& store, const std::string& run_id,
                        std::uint64_t step) {
  loaded_carry out;
  auto found = store.get_carry(run_id, step);
  if (!found) {
    out.error = found.err().message;
    return out;
  }
  if (!*found) {
    return out;
  }
  out.found = true;
  out.record = std::move(**found);
  out.turns.resize(out.record.groups.size());
  std::vector<std::size_t> unfinished;
  for (std::size_t i = 0; i < out.record.groups.size(); ++i) {
    const auto& g = out.record.groups[i];
    auto group = store.get_group({run_id, g.origin_step, split_kind::train, g.group});
    if (!group) {
      out.error = group.err().message;
      return out;
    }
    if (*group) {
      out.stored.push_back(std::move(**group));
    } else {
      unfinished.push_back(i);
    }
  }
  if (unfinished.empty()) {
    return out;
  }
  auto turns = store.partial_turns(run_id);
  if (!turns) {
    out.error = turns.err().message;
    return out;
  }
  // partial_turns is ordered by group, rollout, turn.
  for (auto& t : *turns) {
    for (auto i : unfinished) {
      const auto& g = out.record.groups[i];
      if (t.group.step != g.origin_step || t.group.split != split_kind::train ||
          t.group.group_index != g.group) {
        continue;
      }
      auto& rollouts = out.turns[i];
      if (rollouts.size() <= t.rollout) {
        rollouts.resize(t.rollout + 1);
      }
      if (rollouts[t.rollout].size() == t.turn) {
        rollouts[t.rollout].push_back(std::move(t.record));
      }
      break;
    }
  }
  return out;
}

// Adds one record through `put` and answers once it is committed.
template <class Put>
caf::result<ack> enqueue(store_impl_actor::stateful_pointer<store_state> self, Put put) {
  auto& st = self->state;
  if (!st.batch) {
    st.batch.emplace(st.store->batch());
  }
  if (const status added = put(*st.batch); !added) {
    return ack{added.err().message};
  }
  auto promise = self->make_response_promise<ack>();
  st.waiting.push_back(promise);
  if (st.batch->groups() >= st.config.max_batch_groups) {
    commit(self);
  } else if (!st.commit_queued) {
    // Queued behind the puts already in the mailbox: they join this commit.
    st.commit_queued = true;
    self->send(self, commit_atom_v);
  }
  return promise;
}

// The step with the metrics of the profiles put for it so far.
step_record with_profile_metrics(const store_state& st, const step_record& step) {
  auto counts = st.profiles.find({step.run_id, step.step});
  if (counts == st.profiles.end()) {
    return step;
  }
  step_record out = step;
  add_profile_metrics(counts->second, out.metrics);
  return out;
}

store_impl_actor::behavior_type store_behavior(store_impl_actor::stateful_pointer<store_state> self,
                                               std::shared_ptr<trajectory_store> store,
                                               store_actor_config config) {
  self->state.store = std::move(store);
  self->state.config = config;
  if (self->state.config.max_batch_groups == 0) {
    self->state.config.max_batch_groups = 1;
  }
  return {
      [=](put_group_atom, const group_record& group) -> caf::result<ack> {
        return enqueue(self, [&](write_batch& b) { return b.put_group(group); });
      },
      [=](put_step_atom, const step_record& step) -> caf::result<ack> {
        const auto record = with_profile_metrics(self->state, step);
        return enqueue(self, [&](write_batch& b) { return b.put_step(record); });
      },
      [=](put_step_atom, const step_record& step,
          const partial_carry_record& carry) -> caf::result<ack> {
        // Both join the pending batch in this one call, so no commit falls between them.
        return enqueue(self, [&](write_batch& b) -> status {
          if (carry.step != step.step) {
            return error{"step " + std::to_string(step.step) +
                         " stored with the carry decision of step " + std::to_string(carry.step)};
          }
          if (auto s = b.put_step(with_profile_metrics(self->state, step)); !s) {
            return s;
          }
          return b.put_carry(step.run_id, carry);
        });
      },
      [=](put_run_atom, const run_record& run) -> caf::result<ack> {
        return enqueue(self, [&](write_batch& b) { return b.put_run(run); });
      },
      [=](put_turn_atom, const std::string& run_id, const group_key& key, std::uint32_t rollout,
          std::uint32_t turn, const turn_record& record) -> caf::result<ack> {
        const group_ref ref{run_id, key.step, key.split, key.group};
        return enqueue(self,
                       [&](write_batch& b) { return b.put_turn(ref, rollout, turn, record); });
      },
      [=](load_atom, const std::string& run_id, std::uint64_t step,
          split_kind split) -> loaded_groups {
        commit(self);  // read what was put before
        group_query query;
        query.run_id = run_id;
        query.first_step = step;
        query.last_step = step;
        query.split = split;
        auto groups = self->state.store->groups(query);
        if (!groups) {
          return {{}, groups.err().message};
        }
        return {std::move(*groups), {}};
      },
      [=](put_retry_atom, const std::string& run_id,
          const retry_step_record& record) -> caf::result<ack> {
        return enqueue(self, [&](write_batch& b) { return b.put_retry(run_id, record); });
      },
      [=](get_retry_atom, const std::string& run_id, std::uint64_t step) -> loaded_retry {
        commit(self);  // read what was put before
        auto found = self->state.store->get_retry(run_id, step);
        loaded_retry out;
        if (!found) {
          out.error = found.err().message;
        } else if (*found) {
          out.found = true;
          out.record = std::move(**found);
        }
        return out;
      },
      [=](get_carry_atom, const std::string& run_id, std::uint64_t step) -> loaded_carry {
        commit(self);  // read what was put before
        return load_carry(*self->state.store, run_id, step);
      },
      [=](put_profile_atom, const turn_profile_record& profile) -> caf::result<ack> {
        return enqueue(self, [&](write_batch& b) -> status {
          auto s = b.put_profile(profile);
          if (s) {
            self->state.profiles[{profile.turn.run_id, profile.turn.step}].add(profile);
          }
          return s;
        });
      },
      [=](commit_atom) { commit(self); },
  };
}

}  // namespace

store_actor spawn_store(caf::actor_system& system, std::shared_ptr<trajectory_store> store,
                        store_actor_config config) {
  if (config.detached) {
    return system.spawn<caf::detached>(store_behavior, std::move(store), config);
  }
  return system.spawn(store_behavior, std::move(store), config);
}

}  // namespace leap::actors
