#include "tests/doubles/instant_services.hpp"

#include "common/splitmix.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <unordered_map>

namespace leap::actors {
namespace {

std::uint64_t hash_text(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

double unit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// A standard normal from two uniforms (Box-Muller).
double normal(std::uint64_t a, std::uint64_t b) {
  const double u1 = std::max(unit(a), 1e-12);
  const double u2 = unit(b);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

std::chrono::microseconds scaled(double seconds, double scale) {
  return std::chrono::microseconds(static_cast<std::int64_t>(seconds * scale * 1e6));
}

}  // namespace

turn_latency sample_latency(const latency_profile& p, std::uint64_t seed,
                            std::string_view request_id) {
  const std::uint64_t base = splitmix64(seed ^ hash_text(request_id));
  turn_latency t;
  const double z = normal(splitmix64(base + 1), splitmix64(base + 2));
  t.generation_s = std::clamp(p.generation_median_s * std::exp(p.generation_sigma * z),
                              p.generation_min_s, p.generation_max_s);
  t.compile_s = p.compile_min_s + (p.compile_max_s - p.compile_min_s) * unit(splitmix64(base + 3));
  t.run_s = p.run_min_s + (p.run_max_s - p.run_min_s) * unit(splitmix64(base + 4));
  return t;
}

int turn_of_request(std::string_view request_id) {
  const auto slash = request_id.rfind('/');
  const auto digits = slash == std::string_view::npos ? request_id : request_id.substr(slash + 1);
  int turn = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') {
      return 0;
    }
    turn = turn * 10 + (c - '0');
  }
  return turn;
}

bool instant_correct(const instant_policy& policy, const generation_request& request) {
  const int turn = turn_of_request(request.request_id);
  const std::string prompt =
      turn == 0 && !request.append.empty() ? request.append.front().content : std::string{};
  if (policy.correct) {
    return policy.correct(request.request_id, prompt, turn);
  }
  double p = policy.fix_probability;
  if (turn == 0) {
    auto it = policy.first_turn_pass.find(prompt);
    p = it != policy.first_turn_pass.end() ? it->second : policy.default_pass;
  }
  return unit(splitmix64(splitmix64(policy.seed ^ 0xc0ffee) ^ hash_text(request.request_id))) < p;
}

namespace {

using instant_generator_actor =
    generator_actor::extend<caf::reacts_to<release_atom, std::uint64_t>>;

struct generator_state {
  generator_state() = default;
  instant_policy policy;
  std::uint64_t weight_version = 0;
  std::uint64_t next = 0;
  std::unordered_map<std::uint64_t,
                     std::pair<caf::typed_response_promise<generation_result>, generation_result>>
      delayed;
  static inline const char* name = "leap.instant_generator";
};

instant_generator_actor::behavior_type instant_generator(
    instant_generator_actor::stateful_pointer<generator_state> self, instant_policy policy) {
  self->state.policy = std::move(policy);
  return {
      [=](generate_atom, const generation_request& request) -> caf::result<generation_result> {
        auto& st = self->state;
        generation_result g;
        const bool correct = instant_correct(st.policy, request);
        // A few input ids stand for the rendered messages; the count is what matters downstream.
        for (const auto& m : request.append) {
          for (std::size_t i = 0; i < std::min<std::size_t>(m.content.size(), 16); ++i) {
            g.input_tokens.push_back(static_cast<unsigned char>(m.content[i]));
          }
        }
        g.text = correct ? "```cpp\n// PASS\n```" : "```cpp\n// FAIL\n```";
        g.output_tokens.assign(static_cast<std::size_t>(st.policy.output_tokens), 65);
        g.output_logprobs.assign(g.output_tokens.size(), -0.25f);
        g.finish = finish_reason::stop;
        g.endpoint_index = 0;
        g.endpoint = "instant";
        g.weight_version = st.weight_version;
        const auto& latency = st.policy.latency;
        if (latency.time_scale <= 0.0) {
          g.finished_ms = clock_ms();
          return g;
        }
        const double seconds =
            sample_latency(latency, st.policy.seed, request.request_id).generation_s;
        g.generation_ms = seconds * latency.time_scale * 1e3;
        auto promise = self->make_response_promise<generation_result>();
        const std::uint64_t id = st.next++;
        st.delayed.emplace(id, std::make_pair(promise, std::move(g)));
        self->delayed_send(self, scaled(seconds, latency.time_scale), release_atom_v, id);
        return promise;
      },
      [=](release_atom, std::uint64_t id) {
        auto it = self->state.delayed.find(id);
        if (it == self->state.delayed.end()) {
          return;
        }
        it->second.second.finished_ms = clock_ms();
        it->second.first.deliver(std::move(it->second.second));
        self->state.delayed.erase(it);
      },
      [=](weights_atom, const weight_update& update) -> ack {
        self->state.weight_version = update.version;
        return {};
      },
  };
}

using instant_verifier_actor = verifier_actor::extend<caf::reacts_to<release_atom, std::uint64_t>>;

struct verifier_state {
  verifier_state() = default;
  latency_profile latency;
  std::uint64_t seed = 0;
  std::uint64_t next = 0;
  std::unordered_map<std::uint64_t, std::pair<caf::typed_response_promise<verification_result>,
                                              verification_result>>
      delayed;
  static inline const char* name = "leap.instant_verifier";
};

instant_verifier_actor::behavior_type instant_verifier(
    instant_verifier_actor::stateful_pointer<verifier_state> self, latency_profile latency,
    std::uint64_t seed) {
  self->state.latency = latency;
  self->state.seed = seed;
  return {
      [=](verify_atom, const verification_request& request) -> caf::result<verification_result> {
        auto& st = self->state;
        verification_result v;
        v.passed = request.answer.find("PASS") != std::string::npos;
        v.verdict = v.passed ? verdict_category::pass : verdict_category::wrong_answer;
        if (!v.passed) {
          v.feedback = "wrong answer: output differs from the reference";
        }
        v.code_hash = v.passed ? "pass" : "fail";
        if (st.latency.time_scale <= 0.0) {
          v.finished_ms = clock_ms();
          return v;
        }
        const auto t = sample_latency(st.latency, st.seed, request.request_id);
        v.compile_ms = t.compile_s * st.latency.time_scale * 1e3;
        v.run_ms = t.run_s * st.latency.time_scale * 1e3;
        auto promise = self->make_response_promise<verification_result>();
        const std::uint64_t id = st.next++;
        st.delayed.emplace(id, std::make_pair(promise, std::move(v)));
        self->delayed_send(self, scaled(t.compile_s + t.run_s, st.latency.time_scale),
                           release_atom_v, id);
        return promise;
      },
      [=](release_atom, std::uint64_t id) {
        auto it = self->state.delayed.find(id);
        if (it == self->state.delayed.end()) {
          return;
        }
        it->second.second.finished_ms = clock_ms();
        it->second.first.deliver(std::move(it->second.second));
        self->state.delayed.erase(it);
      },
  };
}

}  // namespace

generator_actor spawn_instant_generator(caf::actor_system& system, instant_policy policy) {
  return system.spawn(instant_generator, std::move(policy));
}

verifier_actor spawn_instant_verifier(caf::actor_system& system, latency_profile latency,
                                      std::uint64_t seed) {
  return system.spawn(instant_verifier, latency, seed);
}

result<backend_step> null_learner::train(std::uint64_t step, std::vector<training_sequence> batch) {
  if (step_seconds_ > 0.0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(step_seconds_));
  }
  sequences_[step] = batch.size();
  backend_step out;
  out.weight_version = ++version_;
  out.metrics["sequences"] = static_cast<double>(batch.size());
  return out;
}

}  // namespace leap::actors
