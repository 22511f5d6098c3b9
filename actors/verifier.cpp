#include "actors/verifier.hpp"

#include "common/crypto.hpp"
#include "sandbox/extract.hpp"
#include "sandbox/verifier.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <unordered_map>

namespace leap::actors {
namespace {

using pool_actor =
    verifier_actor::extend<caf::reacts_to<completed_atom, std::uint64_t, verification_result>>;

struct pending_job {
  caf::typed_response_promise<verification_result> promise;
  std::shared_ptr<const sandbox::task> task;
  std::string answer;
  std::optional<std::string> code_hash;
  double submitted_ms = 0.0;
};

struct pool_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  pool_state() = default;
  sandbox::verifier* verifier = nullptr;
  task_table tasks;
  verifier_pool_config config;
  std::uint64_t next_serial = 0;
  std::unordered_map<std::uint64_t, pending_job> jobs;
  std::deque<std::uint64_t> waiting;
  std::size_t in_flight = 0;
  static inline const char* name = "leap.verifier_pool";
};

// Runs on a sandbox worker thread: moves the verdict into a message, nothing more.
verification_result from_sandbox(result<sandbox::verdict> r) {
  verification_result v;
  if (!r) {
    v.infrastructure_error = r.err().message;
    return v;
  }
  v.passed = r->passed;
  v.verdict = r->category;
  v.feedback = std::move(r->feedback);
  v.compile_ms = r->compile_ms;
  v.run_ms = r->run_ms;
  v.run_queue_ms = r->run_queue_ms;
  v.cache_hit = r->cache_hit;
  if (r->passed && r->speedup && std::isfinite(*r->speedup) && *r->speedup > 0) {
    v.speedup = *r->speedup;
    if (r->speedup_noise && std::isfinite(*r->speedup_noise) && *r->speedup_noise >= 0) {
      v.speedup_noise = *r->speedup_noise;
    }
  }
  if (r->passed && r->compiled_speedup && std::isfinite(*r->compiled_speedup) &&
      *r->compiled_speedup > 0) {
    v.compiled_speedup = *r->compiled_speedup;
    if (r->compiled_speedup_noise && std::isfinite(*r->compiled_speedup_noise) &&
        *r->compiled_speedup_noise >= 0) {
      v.compiled_speedup_noise = *r->compiled_speedup_noise;
    }
  }
  return v;
}

void pump(pool_actor::stateful_pointer<pool_state> self) {
  auto& st = self->state;
  while (st.in_flight < st.config.max_in_flight && !st.waiting.empty()) {
    const std::uint64_t serial = st.waiting.front();
    st.waiting.pop_front();
    auto it = st.jobs.find(serial);
    if (it == st.jobs.end()) {
      continue;
    }
    ++st.in_flight;
    it->second.submitted_ms = clock_ms();
    pool_actor handle = self;
    // Never blocks: at most max_in_flight (<= the compile queue's capacity) jobs are outstanding.
    st.verifier->submit(it->second.task, std::move(it->second.answer),
                        [handle, serial](result<sandbox::verdict> r) {
                          caf::anon_send(handle, completed_atom_v, serial,
                                         from_sandbox(std::move(r)));
                        });
  }
}

pool_actor::behavior_type pool_behavior(pool_actor::stateful_pointer<pool_state> self,
                                        sandbox::verifier* verifier, task_table tasks,
                                        verifier_pool_config config) {
  self->state.verifier = verifier;
  self->state.tasks = std::move(tasks);
  self->state.config = config;
  if (self->state.config.max_in_flight == 0) {
    self->state.config.max_in_flight = 1;
  }
  return {
      [=](verify_atom, verification_request& request) -> caf::result<verification_result> {
        auto& st = self->state;
        auto task = st.tasks->find(request.task_id);
        if (task == st.tasks->end()) {
          verification_result v;
          v.infrastructure_error = "unknown task '" + request.task_id + "'";
          return v;
        }
        pending_job job;
        job.promise = self->make_response_promise<verification_result>();
        job.task = task->second;
        if (auto code = sandbox::extract_code(request.answer, task->second->kind)) {
          job.code_hash = crypto::sha256_hex(code->code);
        }
        job.answer = std::move(request.answer);
        auto promise = job.promise;
        const std::uint64_t serial = st.next_serial++;
        st.jobs.emplace(serial, std::move(job));
        st.waiting.push_back(serial);
        pump(self);
        return promise;
      },
      [=](completed_atom, std::uint64_t serial, verification_result& result) {
        auto& st = self->state;
        auto it = st.jobs.find(serial);
        if (it == st.jobs.end()) {
          return;
        }
        --st.in_flight;
        result.finished_ms = clock_ms();
        const double wall = result.finished_ms - it->second.submitted_ms;
        result.queue_ms =
            std::max(0.0, wall - result.compile_ms - result.run_ms - result.run_queue_ms);
        result.code_hash = std::move(it->second.code_hash);
        it->second.promise.deliver(std::move(result));
        st.jobs.erase(it);
        pump(self);
      },
  };
}

}  // namespace

verifier_actor spawn_verifier_pool(caf::actor_system& system, sandbox::verifier& verifier,
                                   task_table tasks, verifier_pool_config config) {
  return system.spawn(pool_behavior, &verifier, std::move(tasks), config);
}

}  // namespace leap::actors
