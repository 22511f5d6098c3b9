// The store actor: the run's RocksDB trajectory store behind a mailbox. It runs detached (RocksDB
// writes block on the log's fsync) and commits in batches: a put is added to the pending batch and
// answered only once the batch that holds it is committed, so an answered put is durable. The batch
// commits when it holds `max_batch_groups` groups, or when the mailbox holds no more puts that
// arrived before it (a commit message queued behind them): under load many groups share one fsync,
// when idle a put commits at once.
#pragma once

#include "actors/messages.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace leap {
class trajectory_store;
}

namespace leap::actors {

// put_group / put_step / put_run: answered once durable; the ack's error names the record and
//   RocksDB's reason (an invalid record, an I/O error), and nothing of the failed batch is stored.
// put_turn(run_id, key, rollout, turn, record): one finished turn of a group in flight (per-turn
//   resume), answered once durable; the group's put_group deletes its turns.
// load_groups(run_id, step, split): the stored groups of one step and split, in index order, with
//   tokens (what a resumed run hands the learner again).
// put_retry(run_id, record): the retry buffer after a step (issue 35), answered once durable; it
//   is committed in order with the step's other puts.
// get_retry(run_id, step): the retry buffer stored after `step`, if any.
// put_step(step, carry): the step with its carry decision (schedule.partial, issue 33), in one
//   commit: the step is stored with the decision or not at all.
// get_carry(run_id, step): the carry decision stored with `step`, if any, and what the store holds
//   of each carried group (loaded_carry).
// put_profile(record): a turn's profile, made after its verdict (verifier.profile, issue 34),
//   stored under its turn's ids whenever it arrives, answered once durable. The actor counts the
//   profiles it stored per step, and a step record it stores later gets their step metrics
//   (add_profile_metrics: profile.turns, profile.seconds, one per bottleneck class); profiles that
//   arrive after their step's record are in the store for replay, not in that record.
using store_actor = caf::typed_actor<
    caf::replies_to<put_group_atom, group_record>::with<ack>,
    caf::replies_to<put_step_atom, step_record>::with<ack>,
    caf::replies_to<put_step_atom, step_record, partial_carry_record>::with<ack>,
    caf::replies_to<put_run_atom, run_record>::with<ack>,
    caf::replies_to<put_turn_atom, std::string, group_key, std::uint32_t, std::uint32_t,
                    turn_record>::with<ack>,
    caf::replies_to<load_atom, std::string, std::uint64_t, split_kind>::with<loaded_groups>,
    caf::replies_to<put_retry_atom, std::string, retry_step_record>::with<ack>,
    caf::replies_to<get_retry_atom, std::string, std::uint64_t>::with<loaded_retry>,
    caf::replies_to<get_carry_atom, std::string, std::uint64_t>::with<loaded_carry>,
    caf::replies_to<put_profile_atom, turn_profile_record>::with<ack>>;

struct store_actor_config {
  // Most groups in one commit. Default: 64
  std::size_t max_batch_groups = 64;
  // Run on a thread of its own. Tests on the deterministic coordinator turn this off. Default: true
  bool detached = true;
};

// The actor shares ownership of the store; it closes nothing (the last owner's destructor does).
[[nodiscard]] store_actor spawn_store(caf::actor_system& system,
                                      std::shared_ptr<trajectory_store> store,
                                      store_actor_config config = {});

}  // namespace leap::actors
