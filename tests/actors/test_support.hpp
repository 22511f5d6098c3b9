// Shared fixtures of the actor tests: an actor system on CAF's deterministic test coordinator, a
// private RocksDB store, and test doubles of the services behind the real typed interfaces that
// log what they see and can hold answers back until the test releases them.
//
// Everything runs on the test thread: the coordinator runs actors only inside run(), so the test
// reads the shared hub between runs without locks.
#pragma once

#include "actors/experiment.hpp"
#include "actors/generator.hpp"
#include "actors/group.hpp"
#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/scorer.hpp"
#include "actors/store.hpp"
#include "actors/verifier.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/doubles/instant_services.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace leap::actors::testing {

// A folder of its own per test, removed at the end.
class temp_dir {
 public:
  temp_dir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("leap-actors-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// What the test doubles saw, and what they should hold back.
struct hub {
  std::vector<std::string> events;  // "gen <request id>", "ver <request id>", "train <step>"
  // Request ids whose generation answers wait for a release message.
  std::function<bool(const std::string&)> hold;
  bool hold_train = false;                  // the learner answers train only on release
  std::shared_ptr<trajectory_store> store;  // the learner checks it: stored before learned
  std::vector<std::string> learned_unstored;
  std::vector<group_key> learned;
  std::vector<group_report> reports;  // test_parent's group_done
  std::vector<std::string> failures;  // test_parent's group_failed
  std::vector<group_key> decided;     // test_parent's decide, in order
  std::map<std::uint64_t, std::size_t> trained_sequences;
  double pass_speedup = 0.0;  // the speedup test_verifier gives every pass; 0: not timed

  [[nodiscard]] std::size_t count_events(const std::string& prefix) const {
    std::size_t n = 0;
    for (const auto& e : events) {
      n += e.rfind(prefix, 0) == 0 ? 1 : 0;
    }
    return n;
  }
  [[nodiscard]] std::ptrdiff_t first_event(const std::string& prefix) const {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i].rfind(prefix, 0) == 0) {
        return static_cast<std::ptrdiff_t>(i);
      }
    }
    return -1;
  }
};

// ---- generator ---------------------------------------------------------------------------------

using test_generator_actor = generator_actor::extend<caf::reacts_to<release_atom, std::string>>;

struct test_generator_state {
  test_generator_state() = default;
  instant_policy policy;
  std::shared_ptr<hub> shared;
  std::uint64_t version = 0;
  std::vector<
      std::tuple<std::string, caf::typed_response_promise<generation_result>, generation_result>>
      held;
  static inline const char* name = "test.generator";
};

inline generation_result test_answer(const instant_policy& policy, const generation_request& r,
                                     std::uint64_t version) {
  generation_result g;
  const bool correct = instant_correct(policy, r);
  for (const auto& m : r.append) {
    g.input_tokens.push_back(static_cast<token_id>(m.content.size()));
  }
  g.text = correct ? "PASS" : "FAIL";
  g.output_tokens = {10, 11, 12};
  g.output_logprobs = {-0.1f, -0.2f, -0.3f};
  g.endpoint = "test";
  g.endpoint_index = 0;
  g.weight_version = version;
  g.finished_ms = clock_ms();
  return g;
}

inline test_generator_actor::behavior_type test_generator(
    test_generator_actor::stateful_pointer<test_generator_state> self, instant_policy policy,
    std::shared_ptr<hub> shared) {
  self->state.policy = std::move(policy);
  self->state.shared = std::move(shared);
  return {
      [=](generate_atom, const generation_request& r) -> caf::result<generation_result> {
        auto& st = self->state;
        st.shared->events.push_back("gen " + r.request_id);
        auto answer = test_answer(st.policy, r, st.version);
        if (st.shared->hold && st.shared->hold(r.request_id)) {
          auto promise = self->make_response_promise<generation_result>();
          st.held.emplace_back(r.request_id, promise, std::move(answer));
          return promise;
        }
        return answer;
      },
      [=](release_atom, const std::string& prefix) {
        auto& held = self->state.held;
        for (auto it = held.begin(); it != held.end();) {
          if (std::get<0>(*it).rfind(prefix, 0) == 0) {
            std::get<1>(*it).deliver(std::move(std::get<2>(*it)));
            it = held.erase(it);
          } else {
            ++it;
          }
        }
      },
      [=](weights_atom, const weight_update& u) -> ack {
        self->state.version = u.version;
        return {};
      },
  };
}

// ---- verifier ----------------------------------------------------------------------------------

struct test_verifier_state {
  test_verifier_state() = default;
  std::shared_ptr<hub> shared;
  static inline const char* name = "test.verifier";
};

inline verifier_actor::behavior_type test_verifier(
    verifier_actor::stateful_pointer<test_verifier_state> self, std::shared_ptr<hub> shared) {
  self->state.shared = std::move(shared);
  return {
      [=](verify_atom, const verification_request& r) -> verification_result {
        self->state.shared->events.push_back("ver " + r.request_id);
        verification_result v;
        v.passed = r.answer == "PASS";
        v.verdict = v.passed ? verdict_category::pass : verdict_category::wrong_answer;
        v.feedback = v.passed ? "" : "wrong answer";
        v.speedup = v.passed ? self->state.shared->pass_speedup : 0.0;
        v.finished_ms = clock_ms();
        return v;
      },
  };
}

// ---- learner -----------------------------------------------------------------------------------

using test_learner_actor = learner_actor::extend<caf::reacts_to<release_atom>>;

struct test_learner_state {
  test_learner_state() = default;
  std::shared_ptr<hub> shared;
  std::map<std::uint64_t, std::size_t> sequences;
  std::vector<std::pair<std::uint64_t, caf::typed_response_promise<learner_step_result>>> held;
  static inline const char* name = "test.learner";
};

inline test_learner_actor::behavior_type test_learner(
    test_learner_actor::stateful_pointer<test_learner_state> self, std::shared_ptr<hub> shared) {
  self->state.shared = std::move(shared);
  auto answer = [](std::uint64_t step, std::size_t sequences) {
    learner_step_result r;
    r.step = step;
    r.weight_version = step + 1;
    r.sequences = static_cast<std::uint32_t>(sequences);
    return r;
  };
  return {
      [=](add_group_atom, const group_record& g) -> ack {
        auto& st = self->state;
        const group_key key{g.step, g.split, g.group_index};
        st.shared->learned.push_back(key);
        if (st.shared->store) {
          auto stored = st.shared->store->get_group({g.run_id, g.step, g.split, g.group_index});
          if (!stored || !*stored) {
            st.shared->learned_unstored.push_back(to_string(key));
          }
        }
        st.sequences[g.step] += g.rollouts.size();
        return {};
      },
      [=](train_atom, std::uint64_t step) -> caf::result<learner_step_result> {
        auto& st = self->state;
        st.shared->events.push_back("train " + std::to_string(step));
        const std::size_t n = st.sequences[step];
        st.shared->trained_sequences[step] = n;
        if (st.shared->hold_train) {
          auto promise = self->make_response_promise<learner_step_result>();
          st.held.emplace_back(step, promise);
          return promise;
        }
        return answer(step, n);
      },
      [=](release_atom) {
        auto held = std::move(self->state.held);
        self->state.held.clear();
        for (auto& [step, promise] : held) {
          self->state.shared->events.push_back("trained " + std::to_string(step));
          promise.deliver(answer(step, self->state.sequences[step]));
        }
      },
  };
}

// ---- parent of gates ---------------------------------------------------------------------------

struct test_parent_state {
  test_parent_state() = default;
  std::shared_ptr<hub> shared;
  gate_config gate;
  static inline const char* name = "test.parent";
};

inline group_parent_actor::behavior_type test_parent(
    group_parent_actor::stateful_pointer<test_parent_state> self, gate_config gate,
    std::shared_ptr<hub> shared) {
  self->state.shared = std::move(shared);
  self->state.gate = gate;
  return {
      [=](decide_atom, const group_key& key, std::int32_t n_fail, std::int32_t size) {
        self->state.shared->decided.push_back(key);
        return gate_ruling{decide(self->state.gate, n_fail, size),
                           resolve_thresholds(self->state.gate, size)};
      },
      [=](group_done_atom, const group_report& report) {
        self->state.shared->reports.push_back(report);
      },
      [=](group_failed_atom, const group_key& key, const std::string& message) {
        self->state.shared->failures.push_back(to_string(key) + ": " + message);
      },
  };
}

// ---- the coordinator ---------------------------------------------------------------------------

class coordinator {
 public:
  coordinator() {
    config_.set("scheduler.policy", caf::atom("testing"));
    config_.set("logger.verbosity", caf::atom("quiet"));
    register_message_types(config_);
    system_ = std::make_unique<caf::actor_system>(config_);
    scheduler_ = &dynamic_cast<caf::scheduler::test_coordinator&>(system_->scheduler());
  }
  ~coordinator() {
    for (auto& a : actors_) {
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
    run();
    actors_.clear();
  }
  coordinator(const coordinator&) = delete;
  coordinator& operator=(const coordinator&) = delete;

  caf::actor_system& system() { return *system_; }

  // Runs every actor until no message is left. Returns the number of messages processed.
  std::size_t run() { return scheduler_->run(); }

  // Fires every pending request timeout at once (the test clock does not advance by itself).
  std::size_t trigger_timeouts() { return scheduler_->trigger_timeouts(); }

  // Keeps a handle alive for the test and ends the actor at teardown.
  template <class Handle>
  Handle keep(Handle handle) {
    actors_.push_back(caf::actor_cast<caf::actor>(handle));
    return handle;
  }

 private:
  caf::actor_system_config config_;
  std::unique_ptr<caf::actor_system> system_;
  caf::scheduler::test_coordinator* scheduler_ = nullptr;
  std::vector<caf::actor> actors_;
};

inline std::shared_ptr<trajectory_store> open_store(const std::filesystem::path& dir) {
  store_options options;
  options.sync = false;  // a test process that dies loses nothing it needs
  auto store = trajectory_store::open(dir / "trajectories", options);
  EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.err().message);
  return std::shared_ptr<trajectory_store>(std::move(*store));
}

// Asks the driver to run and keeps its answer.
struct run_waiter_state {
  run_waiter_state() = default;
  static inline const char* name = "test.run_waiter";
};

inline void request_run(coordinator& c, const experiment_actor& driver,
                        const std::shared_ptr<std::optional<run_summary>>& out) {
  c.keep(c.system().spawn([driver, out](caf::event_based_actor* self) {
    self->request(driver, caf::infinite, run_atom_v)
        .then(
            [out](const run_summary& s) { *out = s; },
            [out](caf::error&) { *out = run_summary{run_status::failed, 0, 0, 0, 0, 0, "error"}; });
  }));
}

}  // namespace leap::actors::testing
