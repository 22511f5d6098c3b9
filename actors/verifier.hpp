// The verifier pool: the actor face of the sandbox verifier (compile pool and run slots). A remote
// pool (`leap verifier-node`) will publish the same interface through CAF's middleman.
//
// The sandbox's callback runs on its worker thread and only anon_sends the verdict to the pool.
// sandbox::verifier::submit blocks while its compile queue is full, so the pool never hands it more
// than `max_in_flight` jobs (at most the compile queue's capacity): submit then never blocks the
// scheduler. Further jobs wait in the pool in FIFO order.
#pragma once

#include "actors/messages.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

namespace leap::sandbox {
class verifier;
struct task;
}  // namespace leap::sandbox

namespace leap::actors {

// verify: compiles and runs the answer against the task; the result's infrastructure_error is set
// when the verifier could not judge (an unknown task id, no compiler, a broken reference).
using verifier_actor =
    caf::typed_actor<caf::replies_to<verify_atom, verification_request>::with<verification_result>>;

// Task id -> task, shared read-only by the pool.
using task_table =
    std::shared_ptr<const std::unordered_map<std::string, std::shared_ptr<const sandbox::task>>>;

struct verifier_pool_config {
  // Jobs handed to the sandbox at once; must not exceed its compile queue's capacity, or submit
  // could block a scheduler thread. Default: 64 (sandbox::verifier_config::queue_capacity's
  // default)
  std::size_t max_in_flight = 64;
};

// Spawns the pool around `verifier`, which must outlive the actor (stop the actor first).
// Thread-safe.
[[nodiscard]] verifier_actor spawn_verifier_pool(caf::actor_system& system,
                                                 sandbox::verifier& verifier, task_table tasks,
                                                 verifier_pool_config config = {});

}  // namespace leap::actors
