#include "actors/verifier_node.hpp"

#include "common/crypto.hpp"
#include "common/node_auth.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/result.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <cstdio>
#include <map>
#include <set>

namespace leap::actors {
namespace {

struct node_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  node_state() = default;
  verifier_actor pool;
  verifier_node_config config;
  std::map<caf::actor_addr, std::string> nonces;  // sender -> the nonce of its last hello
  std::set<caf::actor_addr> admitted;
  // Admitted orchestrators that asked for profiles: where each of their jobs' profile goes.
  std::map<caf::actor_addr, node_profile_reader> profile_readers;
  std::uint32_t busy = 0;
  std::uint64_t served = 0;
  static inline const char* name = "leap.verifier_node";

  void log(log::level severity, std::string line, log::ids ids = {}) const {
    emit(config.log, severity, std::move(line), std::move(ids));
  }
  [[nodiscard]] std::uint32_t free() const { return config.slots > busy ? config.slots - busy : 0; }
  [[nodiscard]] bool profiling() const {
    return static_cast<bool>(config.profiles) && static_cast<bool>(config.profile_summaries);
  }
};

using node_pointer = verifier_node_actor::stateful_pointer<node_state>;

// After a job's verdict went out: takes its profile's text and summary from the pool (each waits
// while the profile is being made; both empty when none is coming) and sends them to the
// orchestrator, if it still reads profiles.
void send_profile(node_pointer self, const caf::actor_addr& reader, std::uint64_t job,
                  const std::string& request_id) {
  auto out = std::make_shared<node_profile>();
  out->job = job;
  auto left = std::make_shared<int>(2);
  auto part_done = [self, reader, out, left] {
    if (--*left > 0) {
      return;
    }
    const auto& readers = self->state.profile_readers;
    if (auto it = readers.find(reader); it != readers.end()) {
      self->send(it->second, node_profile_atom_v, std::move(*out));
    }
  };
  // A failed ask is a profile that did not come: the orchestrator still hears of it, so no turn
  // there waits longer than it must.
  auto failed = [self, request_id, part_done](const caf::error& e) {
    self->state.log(log::level::warn,
                    "the profile of " + request_id +
                        " could not be taken from the pool: " + self->system().render(e),
                    log_ids_of_request(request_id));
    part_done();
  };
  const auto& st = self->state;
  self->request(st.config.profiles, caf::infinite, profile_atom_v, request_id)
      .then(
          [out, part_done](std::string& text) {
            out->text = std::move(text);
            part_done();
          },
          failed);
  self->request(st.config.profile_summaries, caf::infinite, profiled_atom_v, request_id)
      .then(
          [out, part_done](std::vector<turn_profile_record>& summary) {
            out->summary = std::move(summary);
            part_done();
          },
          failed);
}

const char* verdict_name(const verification_result& r) {
  if (!r.infrastructure_error.empty()) {
    return "infrastructure error";
  }
  return r.passed ? "pass" : "fail";
}

verifier_node_actor::behavior_type node_behavior(node_pointer self, verifier_actor pool,
                                                 verifier_node_config config) {
  self->state.pool = std::move(pool);
  self->state.config = std::move(config);
  if (self->state.config.slots == 0) {
    self->state.config.slots = 1;
  }
  // An orchestrator that goes away (or is cut off) must prove the secret again.
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    if (st.admitted.erase(down.source) > 0) {
      if (st.config.admitted) {
        st.config.admitted->remove(down.source.node());
      }
      st.log(log::level::info, "orchestrator " + caf::to_string(down.source) + " disconnected");
    }
    st.nonces.erase(down.source);
    st.profile_readers.erase(down.source);
  });
  return {
      [=](node_hello_atom) -> caf::result<node_challenge> {
        auto& st = self->state;
        const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto nonce = node_auth::make_nonce();
        if (!nonce) {
          // No challenge without a fresh nonce: the orchestrator sees a failed handshake and
          // retries later.
          st.log(log::level::error, nonce.err().message);
          return caf::make_error(caf::sec::runtime_error, nonce.err().message);
        }
        node_challenge c;
        c.nonce = std::move(*nonce);
        c.name = st.config.name;
        c.slots = st.config.slots;
        c.secret_required = !st.config.secret.empty();
        st.nonces[sender] = c.nonce;
        return c;
      },
      [=](node_auth_atom, const std::string& proof) -> node_welcome {
        auto& st = self->state;
        const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        node_welcome w;
        w.slots = st.config.slots;
        if (!st.config.secret.empty()) {
          auto nonce = st.nonces.find(sender);
          if (nonce == st.nonces.end()) {
            w.error = "no challenge to answer: send hello first";
          } else if (!crypto::constant_time_equal(
                         proof, node_auth::node_proof(st.config.secret, nonce->second))) {
            w.error =
                "wrong secret: the node rejected the proof (verifier.node_secret_file must hold "
                "the secret of the node's --secret-file)";
          }
          if (nonce != st.nonces.end()) {
            st.nonces.erase(nonce);  // a nonce answers one proof
          }
        }
        if (!w.error.empty()) {
          st.log(log::level::warn,
                 "rejected orchestrator " + caf::to_string(sender) + ": " + w.error);
          return w;
        }
        if (st.admitted.insert(sender).second) {
          if (st.config.admitted) {
            st.config.admitted->add(sender.node());
          }
          self->monitor(self->current_sender());
          st.log(log::level::info,
                 "orchestrator " + caf::to_string(sender) + " admitted" +
                     (st.config.secret.empty() ? " (no secret configured)" : " (secret verified)"));
        }
        return w;
      },
      [=](node_job_atom, std::uint64_t job,
          verification_request& request) -> caf::result<node_verdict> {
        auto& st = self->state;
        const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (st.admitted.count(sender) == 0) {
          node_verdict refused;
          refused.job = job;
          refused.slots = st.config.slots;
          refused.free = st.free();
          refused.error = "not admitted: complete the hello/auth handshake first";
          st.log(log::level::warn,
                 "refused job " + std::to_string(job) + " of " + caf::to_string(sender) +
                     ": not admitted",
                 log_ids_of_request(request.request_id));
          return refused;
        }
        ++st.busy;
        auto promise = self->make_response_promise<node_verdict>();
        const std::string request_id = request.request_id;
        const std::string task_id = request.task_id;
        const bool reads_profiles = st.profile_readers.count(sender) > 0;
        auto answer = [=](verification_result result) mutable {
          auto& s = self->state;
          --s.busy;
          ++s.served;
          if (s.config.log_jobs) {
            char line[64];
            std::snprintf(line, sizeof line, " | %.0f ms | served %llu",
                          result.compile_ms + result.run_ms,
                          static_cast<unsigned long long>(s.served));
            s.log(log::level::info,
                  "job " + std::to_string(job) + " | " + request_id + " | " + task_id + " | " +
                      verdict_name(result) + line,
                  log_ids_of_request(request_id));
          }
          node_verdict v;
          v.job = job;
          v.result = std::move(result);
          v.slots = s.config.slots;
          v.free = s.free();
          promise.deliver(std::move(v));
          if (reads_profiles) {
            send_profile(self, sender, job, request_id);
          }
        };
        self->request(st.pool, caf::infinite, verify_atom_v, std::move(request))
            .then([=](verification_result& result) mutable { answer(std::move(result)); },
                  [=](caf::error& e) mutable {
                    verification_result r;
                    r.infrastructure_error = "verifier node " + self->state.config.name + ": " +
                                             self->system().render(e);
                    answer(std::move(r));
                  });
        return promise;
      },
      [=](node_profiles_atom, std::uint32_t version) -> std::uint32_t {
        auto& st = self->state;
        const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (st.admitted.count(sender) == 0 || !st.profiling() || version < node_profile_version) {
          return 0;
        }
        st.profile_readers[sender] = caf::actor_cast<node_profile_reader>(self->current_sender());
        return node_profile_version;
      },
  };
}

}  // namespace

verifier_node_actor spawn_verifier_node(caf::actor_system& system, verifier_actor pool,
                                        verifier_node_config config) {
  return system.spawn(node_behavior, std::move(pool), std::move(config));
}

}  // namespace leap::actors
