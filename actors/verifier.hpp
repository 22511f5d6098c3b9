// The verifier pool: the actor face of the sandbox verifier (compile pool and run slots). A remote
// pool (`leap verifier-node`) will publish the same interface through CAF's middleman.
//
// The sandbox's callback runs on its worker thread and only anon_sends the verdict to the pool.
// sandbox::verifier::submit blocks while its compile queue is full, so the pool never hands it more
// than `max_in_flight` jobs (at most the compile queue's capacity): submit then never blocks the
// scheduler. Further jobs wait in the pool in FIFO order.
#pragma once

#include "actors/log_sink.hpp"
#include "actors/messages.hpp"
#include "actors/store.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace leap::sandbox {
class verifier;
struct task;
}  // namespace leap::sandbox

namespace leap::actors {

// verify: compiles and runs the answer against the task; the result's infrastructure_error is set
// when the verifier could not judge (an unknown task id, no compiler, a broken reference).
using verifier_actor =
    caf::typed_actor<caf::replies_to<verify_atom, verification_request>::with<verification_result>>;

// profile: the feedback of a verdict profiled after it was delivered (the sandbox's profiling
// pool: verifier.profile), asked for by the verification request's id (the turn's request id).
// The reply waits while that profile is being made; it is "" when none is coming (the verdict was
// not selected for profiling, the id is unknown or was already asked for, or its profile was
// dropped from the shelf unclaimed). The text is the verdict's feedback with the diagnosis after
// it (a pass: the diagnosis alone).
using profile_actor =
    caf::typed_actor<caf::replies_to<profile_atom, std::string>::with<std::string>>;

// profiled: the summary of that profile (its kernels, their bottleneck classes and findings), for
// the gate's structural reward terms (reward.structural), asked for by the same id and taken once,
// independently of profile_atom's text. The reply waits as profile_atom's does; it is empty when
// no profile is coming or profiling failed.
using profile_summary_actor = caf::typed_actor<
    caf::replies_to<profiled_atom, std::string>::with<std::vector<turn_profile_record>>>;

// How profiles made elsewhere (a verifier node's, through the dispatcher) reach the shelves the
// turns and gates pull from, and the store, exactly as the pool's own do. profile_due: a verdict
// delivered for this request id has a profile coming (a turn that asks waits for it, at most its
// wait); profiled: it came, with the text a turn reads and the summary to store ("" and none:
// nothing is coming after all, and a waiting turn goes on at once).
using profile_inbox_actor = caf::typed_actor<
    caf::reacts_to<profile_due_atom, std::string>,
    caf::reacts_to<profiled_atom, std::string, std::string, std::vector<turn_profile_record>>>;

// Task id -> task, shared read-only by the pool.
using task_table =
    std::shared_ptr<const std::unordered_map<std::string, std::shared_ptr<const sandbox::task>>>;

// The profiles the pool holds for the turns that follow their verdicts (pure; the pool's state).
// A verdict selected for profiling is expected; its profile arrives later and is kept until taken
// or until `capacity` newer ones pushed it out (a rollout that ends after a profiled verdict never
// asks for its profile). `Profile`: the feedback text (profile_shelf) or the stored summary
// (profile_summary_shelf); both are instantiated in verifier.cpp.
template <class Profile>
class basic_profile_shelf {
 public:
  explicit basic_profile_shelf(std::size_t capacity) : capacity_(capacity) {}
  // A profile for `id` is being made.
  void expect(const std::string& id);
  // It arrived. Kept until taken (an arrival for an id never expected is kept too).
  void arrive(const std::string& id, Profile profile);
  // Forgets `id` (its profile went straight to the turn that was waiting for it).
  void drop(const std::string& id);
  // Whether `id`'s profile is being made and has not arrived.
  [[nodiscard]] bool pending(const std::string& id) const;
  // The profile of `id` when it has arrived, removed from the shelf.
  [[nodiscard]] std::optional<Profile> take(const std::string& id);
  [[nodiscard]] std::size_t held() const { return ready_.size(); }

 private:
  std::size_t capacity_;
  std::unordered_set<std::string> pending_;
  std::unordered_map<std::string, Profile> ready_;
  std::deque<std::string> arrival_order_;  // of ready_'s ids (some taken), oldest first
};
using profile_shelf = basic_profile_shelf<std::string>;
using profile_summary_shelf = basic_profile_shelf<std::vector<turn_profile_record>>;
extern template class basic_profile_shelf<std::string>;
extern template class basic_profile_shelf<std::vector<turn_profile_record>>;

struct verifier_pool_config {
  // Jobs handed to the sandbox at once; must not exceed its compile queue's capacity, or submit
  // could block a scheduler thread. Default: 64 (sandbox::verifier_config::queue_capacity's
  // default)
  std::size_t max_in_flight = 64;
  // Profiles kept for turns not yet asked for (profile_shelf's capacity). Default: 256
  std::size_t profiles_kept = 256;
  // Where each profile goes, as it arrives, to be stored with its turn (issue 34): the turn's ids
  // are those its request id names (turn_of_request); a request id of another form is not stored.
  // A store that refuses it is logged as a warning, one that is gone (the run ended first) as info;
  // neither is an error of the turn. Default: none (profiles are not stored)
  store_actor profile_store;
  // Where those lines go. Default: none (dropped)
  log_sink log;
};

// Spawns the pool around `verifier`, which must outlive the actor (stop the actor first). With the
// verifier's engine profiling (verifier.profile not off) the verdict is delivered as soon as it
// is judged and its profile made after it, for the turn that follows to ask for (profiles_of).
// Thread-safe.
[[nodiscard]] verifier_actor spawn_verifier_pool(caf::actor_system& system,
                                                 sandbox::verifier& verifier, task_table tasks,
                                                 verifier_pool_config config = {});

// The profile face of a pool spawn_verifier_pool made (and of nothing else).
[[nodiscard]] profile_actor profiles_of(const verifier_actor& pool);
// Its profile summaries' face (the gate's structural reward terms).
[[nodiscard]] profile_summary_actor profile_summaries_of(const verifier_actor& pool);
// Its face for profiles made elsewhere (verifier nodes).
[[nodiscard]] profile_inbox_actor profile_inbox_of(const verifier_actor& pool);

}  // namespace leap::actors
