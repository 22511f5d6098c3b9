#include "actors/verifier.hpp"

#include "common/crypto.hpp"
#include "sandbox/engine.hpp"
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
#include <memory>
#include <unordered_map>
#include <vector>

namespace leap::actors {
namespace {

// completed: a verdict, and whether its profile is being made. The inbox's profiled (a profile's
// text for the request id, and its summary to store, none when the sandbox gave none) is also how
// the pool's own profiles come back from the sandbox's thread.
using pool_actor = verifier_actor::extend_with<profile_actor>::extend_with<profile_summary_actor>::
    extend_with<profile_inbox_actor>::extend<
        caf::reacts_to<completed_atom, std::uint64_t, verification_result, bool>>;

struct pending_job {
  caf::typed_response_promise<verification_result> promise;
  std::shared_ptr<const sandbox::task> task;
  std::string answer;
  std::optional<std::string> code_hash;
  std::string request_id;
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
  profile_mode profiling = profile_mode::off;
  profile_shelf profiles{0};
  // Turns that asked for a profile still being made.
  std::unordered_map<std::string, std::vector<caf::typed_response_promise<std::string>>>
      profile_waiters;
  // The same profiles' summaries, for the gates that score with them; taken on their own.
  profile_summary_shelf summaries{0};
  std::unordered_map<std::string,
                     std::vector<caf::typed_response_promise<std::vector<turn_profile_record>>>>
      summary_waiters;
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

// The summary of a profile to store with its turn: none without a profile or a turn id.
std::vector<turn_profile_record> stored_profile(const std::string& request_id,
                                                const result<sandbox::verdict>& r) {
  if (!r.ok() || !r->profile) {
    return {};
  }
  auto turn = turn_of_request(request_id);
  if (!turn) {
    return {};
  }
  turn_profile_record rec;
  rec.turn = std::move(*turn);
  for (const auto& k : r->profile->kernels) {
    rec.kernels.push_back({k.name, k.duration_ns, k.bottleneck, k.findings});
  }
  rec.note = r->profile->note;
  rec.seconds = r->profile->seconds;
  rec.source = r->profile->source;
  return {std::move(rec)};
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
    if (st.profiling == profile_mode::off) {
      st.verifier->submit(it->second.task, std::move(it->second.answer),
                          [handle, serial](result<sandbox::verdict> r) {
                            caf::anon_send(handle, completed_atom_v, serial,
                                           from_sandbox(std::move(r)), false);
                          });
      continue;
    }
    // The verdict goes on at once; its profile follows from the sandbox's profiling pool. The
    // judged callback runs before the profile is queued, so `judged_text` is written before the
    // profiled callback reads it.
    auto judged_text = std::make_shared<std::string>();
    st.verifier->submit(
        it->second.task, std::move(it->second.answer),
        [handle, serial, judged_text, mode = st.profiling,
         kind = it->second.task->kind](result<sandbox::verdict> r) {
          const bool profiled = r.ok() && sandbox::profile_selects(mode, kind, *r);
          if (r.ok()) {
            *judged_text = r->feedback;
          }
          caf::anon_send(handle, completed_atom_v, serial, from_sandbox(std::move(r)), profiled);
        },
        [handle, judged_text, id = it->second.request_id](result<sandbox::verdict> r) {
          auto stored = stored_profile(id, r);
          // Only what the profile added is worth a turn's reading: a note alone changes nothing.
          std::string text = r.ok() && r->feedback != *judged_text ? std::move(r->feedback) : "";
          caf::anon_send(handle, profiled_atom_v, id, std::move(text), std::move(stored));
        });
  }
}

pool_actor::behavior_type pool_behavior(pool_actor::stateful_pointer<pool_state> self,
                                        sandbox::verifier* verifier, task_table tasks,
                                        verifier_pool_config config) {
  self->state.verifier = verifier;
  self->state.tasks = std::move(tasks);
  self->state.config = std::move(config);
  if (self->state.config.max_in_flight == 0) {
    self->state.config.max_in_flight = 1;
  }
  self->state.profiling = verifier->verification_engine().config().profile;
  self->state.profiles = profile_shelf(self->state.config.profiles_kept);
  self->state.summaries = profile_summary_shelf(self->state.config.profiles_kept);
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
        job.request_id = std::move(request.request_id);
        auto promise = job.promise;
        const std::uint64_t serial = st.next_serial++;
        st.jobs.emplace(serial, std::move(job));
        st.waiting.push_back(serial);
        pump(self);
        return promise;
      },
      [=](completed_atom, std::uint64_t serial, verification_result& result, bool profiling) {
        auto& st = self->state;
        auto it = st.jobs.find(serial);
        if (it == st.jobs.end()) {
          return;
        }
        --st.in_flight;
        if (profiling) {
          st.profiles.expect(it->second.request_id);
          st.summaries.expect(it->second.request_id);
        }
        result.finished_ms = clock_ms();
        const double wall = result.finished_ms - it->second.submitted_ms;
        result.queue_ms =
            std::max(0.0, wall - result.compile_ms - result.run_ms - result.run_queue_ms);
        result.code_hash = std::move(it->second.code_hash);
        it->second.promise.deliver(std::move(result));
        st.jobs.erase(it);
        pump(self);
      },
      [=](profile_due_atom, const std::string& id) {
        self->state.profiles.expect(id);
        self->state.summaries.expect(id);
      },
      [=](profiled_atom, std::string& id, std::string& text,
          std::vector<turn_profile_record>& stored) {
        auto& st = self->state;
        if (auto w = st.summary_waiters.find(id); w != st.summary_waiters.end()) {
          st.summaries.drop(id);
          for (auto& promise : w->second) {
            promise.deliver(stored);
          }
          st.summary_waiters.erase(w);
        } else if (stored.empty()) {
          // Nothing to keep: a later ask gets the same empty answer, and the shelf's room stays
          // for profiles (a node reports every verdict's, most of them none).
          st.summaries.drop(id);
        } else {
          st.summaries.arrive(id, stored);
        }
        if (st.config.profile_store) {
          for (auto& rec : stored) {
            self->request(st.config.profile_store, caf::infinite, put_profile_atom_v,
                          std::move(rec))
                .then(
                    [self, id](const ack& a) {
                      if (!a.error.empty()) {
                        emit(self->state.config.log, log::level::warn,
                             "verifier pool: the profile of " + id + " was not stored: " + a.error,
                             log_ids_of_request(id));
                      }
                    },
                    // The store is gone: the run ended before the profile came.
                    [self, id](const caf::error& e) {
                      emit(self->state.config.log, log::level::info,
                           "verifier pool: the profile of " + id +
                               " came after the store closed (" + caf::to_string(e) + ")",
                           log_ids_of_request(id));
                    });
          }
        }
        if (auto w = st.profile_waiters.find(id); w != st.profile_waiters.end()) {
          // Taken at once: nothing is kept, and a later ask for the id gets "".
          st.profiles.drop(id);
          for (auto& promise : w->second) {
            promise.deliver(text);
          }
          st.profile_waiters.erase(w);
          return;
        }
        if (text.empty()) {
          st.profiles.drop(id);
          return;
        }
        st.profiles.arrive(id, std::move(text));
      },
      [=](profile_atom, std::string& id) -> caf::result<std::string> {
        auto& st = self->state;
        if (auto ready = st.profiles.take(id)) {
          return std::move(*ready);
        }
        if (!st.profiles.pending(id)) {
          return std::string{};
        }
        auto promise = self->make_response_promise<std::string>();
        st.profile_waiters[id].push_back(promise);
        return promise;
      },
      [=](profiled_atom, std::string& id) -> caf::result<std::vector<turn_profile_record>> {
        auto& st = self->state;
        if (auto ready = st.summaries.take(id)) {
          return std::move(*ready);
        }
        if (!st.summaries.pending(id)) {
          return std::vector<turn_profile_record>{};
        }
        auto promise = self->make_response_promise<std::vector<turn_profile_record>>();
        st.summary_waiters[id].push_back(promise);
        return promise;
      },
  };
}

}  // namespace

template <class Profile>
void basic_profile_shelf<Profile>::expect(const std::string& id) {
  if (ready_.count(id) == 0) {
    pending_.insert(id);
  }
}

template <class Profile>
void basic_profile_shelf<Profile>::arrive(const std::string& id, Profile profile) {
  pending_.erase(id);
  if (capacity_ == 0) {
    return;
  }
  if (ready_.insert_or_assign(id, std::move(profile)).second) {
    arrival_order_.push_back(id);
  }
  while (ready_.size() > capacity_ && !arrival_order_.empty()) {
    ready_.erase(arrival_order_.front());
    arrival_order_.pop_front();
  }
  // Ids already taken stay in the order until they reach its front; keep it bounded too.
  while (arrival_order_.size() > 2 * capacity_ && ready_.count(arrival_order_.front()) == 0) {
    arrival_order_.pop_front();
  }
}

template <class Profile>
void basic_profile_shelf<Profile>::drop(const std::string& id) {
  pending_.erase(id);
  ready_.erase(id);
}

template <class Profile>
bool basic_profile_shelf<Profile>::pending(const std::string& id) const {
  return pending_.count(id) != 0;
}

template <class Profile>
std::optional<Profile> basic_profile_shelf<Profile>::take(const std::string& id) {
  auto it = ready_.find(id);
  if (it == ready_.end()) {
    return std::nullopt;
  }
  Profile profile = std::move(it->second);
  ready_.erase(it);
  return profile;
}

template class basic_profile_shelf<std::string>;
template class basic_profile_shelf<std::vector<turn_profile_record>>;

verifier_actor spawn_verifier_pool(caf::actor_system& system, sandbox::verifier& verifier,
                                   task_table tasks, verifier_pool_config config) {
  return system.spawn(pool_behavior, &verifier, std::move(tasks), std::move(config));
}

profile_actor profiles_of(const verifier_actor& pool) {
  return caf::actor_cast<profile_actor>(pool);
}

profile_summary_actor profile_summaries_of(const verifier_actor& pool) {
  return caf::actor_cast<profile_summary_actor>(pool);
}

profile_inbox_actor profile_inbox_of(const verifier_actor& pool) {
  return caf::actor_cast<profile_inbox_actor>(pool);
}

}  // namespace leap::actors
