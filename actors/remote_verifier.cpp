#include "actors/remote_verifier.hpp"

#include "actors/dispatch_table.hpp"
#include "actors/node_guard.hpp"
#include "actors/node_protocol.hpp"
#include "common/node_auth.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

namespace leap::actors {

void configure_node_transport(caf::actor_system_config& config, const node_transport& transport) {
  config.load<caf::io::middleman>();
  if (transport.tls()) {
    config.openssl_certificate = transport.certificate;
    config.openssl_key = transport.key;
    config.openssl_cafile = transport.ca;
    config.load<caf::openssl::manager>();
  }
  // Heartbeats make a silent peer (a cut cable, a stopped host) detectable: without traffic for
  // the timeout, the connection is dropped and the peer's actors go down. Each side heartbeats at
  // its own interval but judges the peer by its own timeout, so the interval is capped: a node
  // with the default 10 s must not look cut off to an orchestrator that waits only 2 s.
  const auto timeout = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(std::max(0.1, transport.timeout_s)));
  const caf::timespan max_heartbeat_interval = std::chrono::milliseconds(500);
  config.set("middleman.heartbeat-interval", std::min(timeout / 4, max_heartbeat_interval));
  config.set("middleman.connection-timeout", timeout);
  register_node_message_types(config);
}

status check_node_transport(const node_transport& transport, const std::string& what) {
  auto exists = [&](const std::string& path, const char* name) -> status {
    std::error_code ec;
    if (!path.empty() && !std::filesystem::is_regular_file(path, ec)) {
      return error{what + name + ": " + path + ": no such file"};
    }
    return ok_status();
  };
  for (auto [path, name] : {std::pair{&transport.certificate, "certificate"},
                            std::pair{&transport.key, "key"}, std::pair{&transport.ca, "ca"}}) {
    if (auto s = exists(*path, name); !s) {
      return s;
    }
  }
  if (transport.certificate.empty() != transport.key.empty()) {
    return error{what + "certificate and " + what +
                 "key: give both (the key belongs to the certificate) or neither"};
  }
  return ok_status();
}

result<dispatcher_settings> dispatcher_settings_of(const verifier_section& v) {
  dispatcher_settings s;
  s.nodes = v.nodes;
  s.local_jobs = static_cast<std::size_t>(std::max(0, v.local_jobs));
  s.retry_max_s = v.node_retry_max_s;
  s.transport.certificate = v.tls_certificate;
  s.transport.key = v.tls_key;
  s.transport.ca = v.tls_ca;
  s.transport.timeout_s = v.node_timeout_s;
  if (!v.node_secret_file.empty()) {
    auto secret = node_auth::read_secret_file(v.node_secret_file);
    if (!secret) {
      return secret.err().wrap("verifier.node_secret_file");
    }
    s.secret = std::move(*secret);
  }
  if (auto checked = check_node_transport(s.transport, "verifier.tls."); !checked) {
    return checked.err();
  }
  return s;
}

namespace {

using dispatcher_actor = verifier_actor::extend<caf::reacts_to<node_retry_atom, std::uint32_t>,
                                                caf::reacts_to<node_profile_atom, node_profile>>;

constexpr double first_retry_s = 0.25;

struct node_link {
  std::string address;
  std::string host;
  std::uint16_t port = 0;
  dispatch_table::target_id target = 0;
  verifier_node_actor handle;  // valid while up
  // The node during its handshake, monitored: a connection closed before the welcome fails the
  // handshake at once instead of after its timeout.
  verifier_node_actor pending;
  bool speaks_profiles = false;  // its interface has profiles (a node older than them does not)
  bool sends_profiles = false;   // it agreed to send them on this connection
  bool connecting = false;
  std::uint64_t attempt = 0;  // bumped per connection attempt: answers of older ones are stale
  double backoff_s = first_retry_s;
  std::string last_error;  // the last reported failure, so a node that stays down logs once
};

struct pending_job {
  verification_request request;
  caf::typed_response_promise<verification_result> promise;
};

// A delivered verdict whose profile its node will send.
struct due_profile {
  dispatch_table::target_id target = 0;
  std::string request_id;
};

struct dispatcher_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  dispatcher_state() = default;
  dispatcher_state(const dispatcher_state&) = delete;
  dispatcher_state& operator=(const dispatcher_state&) = delete;
  ~dispatcher_state() { emit(settings.log, log::level::info, summary()); }

  dispatcher_settings settings;
  caf::io::middleman_actor middleman;
  std::optional<verifier_actor> local;
  dispatch_table::target_id local_target = 0;
  dispatch_table table;
  std::vector<node_link> nodes;
  std::unordered_map<dispatch_table::job_id, pending_job> jobs;
  std::unordered_map<dispatch_table::job_id, due_profile> profiles_due;
  // Set when a node refuses our secret: a configuration error, so every job fails with it.
  std::string refused;
  static inline const char* name = "leap.verifier_dispatcher";

  void log(log::level severity, std::string line, log::ids ids = {}) const {
    emit(settings.log, severity, std::move(line), std::move(ids));
  }

  [[nodiscard]] std::string summary() const {
    const auto& c = table.counts();
    std::string out = "verifier nodes: " + std::to_string(c.jobs) + " jobs, " +
                      std::to_string(c.judged) + " verdicts, " + std::to_string(c.resent) +
                      " re-sent, " + std::to_string(c.duplicates) + " duplicates dropped";
    for (std::size_t i = 0; i < table.targets(); ++i) {
      const auto& t = table.target(i);
      out += " | " + t.name + ": " + std::to_string(t.judged) + " verdicts, " +
             std::to_string(t.lost) + " lost, joined " + std::to_string(t.joins) + "x";
    }
    return out;
  }
};

using self_ptr = dispatcher_actor::stateful_pointer<dispatcher_state>;

void pump(self_ptr self);

// A node refused the secret: no retry helps, so the run stops with the message (every open and
// every later job answers with it as an infrastructure error) instead of waiting forever.
void refuse_all(self_ptr self, std::uint32_t index, const std::string& why) {
  auto& st = self->state;
  auto& n = st.nodes[index];
  n.connecting = false;
  st.refused = "verifier node " + n.address + " refused this orchestrator: " + why;
  st.log(log::level::error, st.refused);
  for (auto& [id, job] : st.jobs) {
    verification_result r;
    r.infrastructure_error = st.refused;
    job.promise.deliver(std::move(r));
  }
  st.jobs.clear();
}

void retry_later(self_ptr self, std::uint32_t index, const std::string& why) {
  auto& n = self->state.nodes[index];
  n.connecting = false;
  if (why != n.last_error) {
    self->state.log(log::level::warn,
                    "verifier node " + n.address + ": " + why + " (retrying, at most every " +
                        std::to_string(static_cast<int>(self->state.settings.retry_max_s)) + " s)");
    n.last_error = why;
  }
  const auto delay =
      std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(n.backoff_s));
  n.backoff_s =
      std::min(n.backoff_s * 2, std::max(first_retry_s, self->state.settings.retry_max_s));
  self->delayed_send(self, delay, node_retry_atom_v, index);
}

// The handshake is done: the node takes jobs.
void node_ready(self_ptr self, std::uint32_t index, const verifier_node_actor& node,
                std::uint32_t slots, bool sends_profiles) {
  auto& s = self->state;
  auto& n = s.nodes[index];
  n.connecting = false;
  n.handle = node;  // monitored since connect()
  n.pending = nullptr;
  n.sends_profiles = sends_profiles;
  n.backoff_s = first_retry_s;
  n.last_error.clear();
  const bool rejoin = s.table.target(n.target).joins > 0;
  s.table.set_up(n.target, std::max<std::uint32_t>(1, slots));
  s.log(log::level::info, "verifier node " + n.address +
                              (rejoin ? ": rejoined, " : ": connected, ") + std::to_string(slots) +
                              " slots" + (s.settings.secret.empty() ? "" : ", secret verified") +
                              (s.settings.transport.tls() ? ", TLS" : "") +
                              (sends_profiles ? ", profiles" : ""));
  pump(self);
}

// Hello, then the proof, then (when we take profiles and the node speaks them) profiles; the node
// is used once it welcomes us.
void handshake(self_ptr self, std::uint32_t index, std::uint64_t attempt,
               const verifier_node_actor& node) {
  const auto timeout = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(self->state.settings.transport.timeout_s));
  auto stale = [=] { return self->state.nodes[index].attempt != attempt; };
  auto failed = [=](caf::error& e) {
    if (!stale()) {
      retry_later(self, index, "handshake failed: " + self->system().render(e));
    }
  };
  self->request(node, timeout, node_hello_atom_v)
      .then(
          [=](node_challenge& challenge) {
            if (stale()) {
              return;
            }
            auto& st = self->state;
            if (challenge.secret_required && st.settings.secret.empty()) {
              refuse_all(self, index,
                         "the node requires a shared secret; set verifier.node_secret_file");
              return;
            }
            const std::string proof =
                st.settings.secret.empty()
                    ? std::string{}
                    : node_auth::node_proof(st.settings.secret, challenge.nonce);
            self->request(node, timeout, node_auth_atom_v, proof)
                .then(
                    [=](node_welcome& welcome) {
                      if (stale()) {
                        return;
                      }
                      auto& s = self->state;
                      auto& n = s.nodes[index];
                      if (!welcome.error.empty()) {
                        refuse_all(self, index, welcome.error);
                        return;
                      }
                      if (!s.settings.profiles || !n.speaks_profiles) {
                        node_ready(self, index, node, welcome.slots, false);
                        return;
                      }
                      self->request(node, timeout, node_profiles_atom_v, node_profile_version)
                          .then(
                              [=](std::uint32_t version) {
                                if (!stale()) {
                                  node_ready(self, index, node, welcome.slots,
                                             version == node_profile_version);
                                }
                              },
                              failed);
                    },
                    failed);
          },
          failed);
}

void connect(self_ptr self, std::uint32_t index) {
  auto& n = self->state.nodes[index];
  if (n.connecting || n.handle) {
    return;
  }
  n.connecting = true;
  const std::uint64_t attempt = ++n.attempt;
  if (n.pending) {
    self->demonitor(n.pending.address());  // an earlier attempt's
    n.pending = nullptr;
  }
  const auto timeout = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(self->state.settings.transport.timeout_s));
  self->request(self->state.middleman, timeout, caf::connect_atom_v, n.host, n.port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr,
              const std::set<std::string>& interface) {
            if (self->state.nodes[index].attempt != attempt) {
              return;
            }
            if (!ptr) {
              retry_later(self, index, "no actor is published on that port");
              return;
            }
            if (!self->system().assignable<basic_verifier_node_actor>(interface)) {
              retry_later(self, index,
                          "the actor on that port is no leap verifier node of this version");
              return;
            }
            // A node older than profiles publishes the basic interface: it is asked for none.
            self->state.nodes[index].speaks_profiles =
                self->system().assignable<verifier_node_actor>(interface);
            auto node = caf::actor_cast<verifier_node_actor>(ptr);
            self->monitor(node);
            self->state.nodes[index].pending = node;
            handshake(self, index, attempt, node);
          },
          [=](caf::error& e) {
            if (self->state.nodes[index].attempt == attempt) {
              retry_later(self, index, "cannot connect: " + self->system().render(e));
            }
          });
}

void on_verdict(self_ptr self, dispatch_table::job_id job, dispatch_table::target_id target,
                verification_result result) {
  auto& st = self->state;
  if (st.table.complete(job, target) == dispatch_table::verdict_kind::accepted) {
    auto it = st.jobs.find(job);
    if (it != st.jobs.end()) {
      const auto node = std::find_if(st.nodes.begin(), st.nodes.end(),
                                     [&](const node_link& n) { return n.target == target; });
      if (node != st.nodes.end() && node->sends_profiles) {
        // Announced before the verdict goes out: the turn after it finds the profile due.
        const auto& id = it->second.request.request_id;
        self->send(st.settings.profiles, profile_due_atom_v, id);
        st.profiles_due[job] = due_profile{target, id};
      }
      it->second.promise.deliver(std::move(result));
      st.jobs.erase(it);
    }
  } else {
    // The job's first verdict was delivered and its request forgotten: no turn ids are left.
    st.log(log::level::info, "dropped a second verdict of job " + std::to_string(job) + " from " +
                                 st.table.target(target).name + " (the first one counted)");
  }
  pump(self);
}

void on_failure(self_ptr self, dispatch_table::job_id job, dispatch_table::target_id target,
                const std::string& why) {
  auto& st = self->state;
  if (st.table.fail(job, target)) {
    const auto it = st.jobs.find(job);
    st.log(log::level::warn,
           "job " + std::to_string(job) + " on " + st.table.target(target).name + " failed (" +
               why + "); sent again",
           it == st.jobs.end() ? log::ids{} : log_ids_of_request(it->second.request.request_id));
  }
  pump(self);
}

// The node died, was cut off, or forgot us: its jobs in flight go elsewhere, and it is tried
// again until it answers.
void lose_node(self_ptr self, std::uint32_t index, const std::string& why) {
  auto& s = self->state;
  auto& n = s.nodes[index];
  if (!n.handle) {
    return;
  }
  self->demonitor(n.handle.address());
  n.handle = nullptr;
  n.sends_profiles = false;
  // Its profiles still due will not come: the turns waiting for them go on at once.
  for (auto it = s.profiles_due.begin(); it != s.profiles_due.end();) {
    if (it->second.target == n.target) {
      self->send(s.settings.profiles, profiled_atom_v, it->second.request_id, std::string{},
                 std::vector<turn_profile_record>{});
      it = s.profiles_due.erase(it);
    } else {
      ++it;
    }
  }
  const auto resent = s.table.set_down(n.target);
  s.log(log::level::warn, "verifier node " + n.address + ": lost (" + why + "); " +
                              std::to_string(resent.size()) + " jobs in flight sent elsewhere");
  n.last_error = "lost";
  n.backoff_s = first_retry_s;
  retry_later(self, index, "lost");
  if (!s.table.any_up()) {
    s.log(log::level::warn, "no verifier target is up: " + std::to_string(s.table.open_jobs()) +
                                " jobs wait for a node to come back");
  }
}

void send_job(self_ptr self, dispatch_table::assignment a) {
  auto& st = self->state;
  auto it = st.jobs.find(a.job);
  if (it == st.jobs.end()) {
    return;
  }
  auto request = it->second.request;
  const auto job = a.job;
  const auto target = a.target;
  if (st.local && target == st.local_target) {
    self->request(*st.local, caf::infinite, verify_atom_v, std::move(request))
        .then([=](verification_result& r) { on_verdict(self, job, target, std::move(r)); },
              [=](caf::error& e) { on_failure(self, job, target, self->system().render(e)); });
    return;
  }
  auto node = std::find_if(st.nodes.begin(), st.nodes.end(),
                           [&](const node_link& n) { return n.target == target; });
  // No deadline: the node's sandbox bounds every job; a node that dies or is cut off goes down
  // (heartbeats), and its jobs are re-sent from the down handler.
  self->request(node->handle, caf::infinite, node_job_atom_v, job, std::move(request))
      .then(
          [=](node_verdict& v) {
            self->state.table.set_capacity(target, std::max<std::uint32_t>(1, v.slots));
            if (!v.error.empty()) {
              // The node no longer knows us (it saw us cut off): handshake again.
              auto& nodes = self->state.nodes;
              for (std::uint32_t i = 0; i < nodes.size(); ++i) {
                if (nodes[i].target == target) {
                  lose_node(self, i, v.error);
                }
              }
              on_failure(self, job, target, v.error);
              return;
            }
            on_verdict(self, job, target, std::move(v.result));
          },
          [=](caf::error& e) { on_failure(self, job, target, self->system().render(e)); });
}

void pump(self_ptr self) {
  for (const auto& a : self->state.table.assign()) {
    send_job(self, a);
  }
}

dispatcher_actor::behavior_type dispatcher_behavior(self_ptr self,
                                                    std::optional<verifier_actor> local,
                                                    dispatcher_settings settings) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.local = std::move(local);
  // Our own middleman actor: its connections bound every frame a node sends (node_guard.hpp);
  // it lives on a thread of its own, so it goes when the dispatcher goes.
  guard_settings guard;
  guard.tls = st.settings.transport.tls();
  guard.log = st.settings.log;
  st.middleman = spawn_guarded_middleman(self->system(), guard);
  self->attach_functor([middleman = st.middleman](const caf::error&) {
    caf::anon_send_exit(middleman, caf::exit_reason::kill);
  });
  for (const auto& address : st.settings.nodes) {
    node_link n;
    n.address = address;
    const auto colon = address.rfind(':');
    n.host = address.substr(0, colon);
    if (n.host.size() > 2 && n.host.front() == '[' && n.host.back() == ']') {
      n.host = n.host.substr(1, n.host.size() - 2);  // [::1]:4100
    }
    n.port = static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)));
    n.target = st.table.add_target(address);
    st.nodes.push_back(std::move(n));
  }
  if (st.local && st.settings.local_jobs > 0) {
    st.local_target = st.table.add_target("local");
    st.table.set_up(st.local_target, st.settings.local_jobs);
  } else {
    st.local.reset();
  }
  self->set_down_handler([=](caf::down_msg& down) {
    auto& s = self->state;
    for (std::uint32_t i = 0; i < s.nodes.size(); ++i) {
      auto& n = s.nodes[i];
      if (n.handle && n.handle.address() == down.source) {
        lose_node(self, i, self->system().render(down.reason));
      } else if (n.pending && n.pending.address() == down.source) {
        // The connection closed during the handshake: its answers will never come.
        n.pending = nullptr;
        ++n.attempt;
        if (n.connecting) {
          retry_later(self, i,
                      "connection closed during the handshake (" +
                          self->system().render(down.reason) + ")");
        }
      }
    }
    pump(self);
  });
  for (std::uint32_t i = 0; i < st.nodes.size(); ++i) {
    connect(self, i);
  }
  return {
      [=](verify_atom, verification_request& request) -> caf::result<verification_result> {
        auto& s = self->state;
        if (!s.refused.empty()) {
          verification_result r;
          r.infrastructure_error = s.refused;
          return r;
        }
        const auto job = s.table.add_job();
        auto promise = self->make_response_promise<verification_result>();
        s.jobs.emplace(job, pending_job{std::move(request), promise});
        pump(self);
        return promise;
      },
      [=](node_retry_atom, std::uint32_t index) {
        if (index < self->state.nodes.size()) {
          connect(self, index);
        }
      },
      [=](node_profile_atom, node_profile& p) {
        auto& s = self->state;
        const auto due = s.profiles_due.find(p.job);
        const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        const auto node =
            due == s.profiles_due.end()
                ? s.nodes.end()
                : std::find_if(s.nodes.begin(), s.nodes.end(), [&](const node_link& n) {
                    return n.target == due->second.target && n.handle &&
                           sender == n.handle.address();
                  });
        if (node == s.nodes.end()) {
          // Not the node whose verdict counted (or not due any more): its profile does not count
          // either.
          s.log(log::level::info, "dropped a profile of job " + std::to_string(p.job) +
                                      " that was not due from its sender");
          return;
        }
        self->send(s.settings.profiles, profiled_atom_v, std::move(due->second.request_id),
                   std::move(p.text), std::move(p.summary));
        s.profiles_due.erase(due);
      },
  };
}

}  // namespace

verifier_actor spawn_verifier_dispatcher(caf::actor_system& system,
                                         std::optional<verifier_actor> local,
                                         dispatcher_settings settings) {
  return caf::actor_cast<verifier_actor>(
      system.spawn(dispatcher_behavior, std::move(local), std::move(settings)));
}

}  // namespace leap::actors
