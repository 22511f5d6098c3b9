#include "actors/store.hpp"

#include "storage/trajectory_store.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <optional>

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
        return enqueue(self, [&](write_batch& b) { return b.put_step(step); });
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
