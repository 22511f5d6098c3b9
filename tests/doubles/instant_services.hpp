// In-process stand-ins for the policy, the verifier and the learner, behind the same typed
// interfaces as the real ones: the actor tests and the pipeline benchmark run the whole graph with
// them. Answers are instant, or follow a latency model on the actor clock (scaled down for
// benchmarks); every choice is a pure function of the request id and a seed, so a run can be
// replayed and its ideal schedule recomputed (sample_latency).
//
// The protocol between them: the generator answers a correct turn with a text containing "PASS"
// and a wrong one with "FAIL"; the verifier passes exactly the texts containing "PASS".
#pragma once

#include "actors/generator.hpp"
#include "actors/learner.hpp"
#include "actors/verifier.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace leap::actors {

// Latencies of one turn, in seconds before scaling.
struct turn_latency {
  double generation_s = 0.0;
  double compile_s = 0.0;
  double run_s = 0.0;
};

// The workload: generation log-normal between 5 and 60 s, compile uniform in [1, 3] s, run
// uniform in [0.2, 1] s. time_scale multiplies every latency (0: instant).
struct latency_profile {
  double time_scale = 0.0;            // Default: 0 (instant)
  double generation_median_s = 15.0;  // Default: 15 s
  double generation_sigma = 0.6;      // Default: 0.6 (log-space standard deviation)
  double generation_min_s = 5.0;      // Default: 5 s
  double generation_max_s = 60.0;     // Default: 60 s
  double compile_min_s = 1.0;         // Default: 1 s
  double compile_max_s = 3.0;         // Default: 3 s
  double run_min_s = 0.2;             // Default: 0.2 s
  double run_max_s = 1.0;             // Default: 1 s
};

// The latencies of the turn with this request id (unscaled). Pure.
[[nodiscard]] turn_latency sample_latency(const latency_profile& profile, std::uint64_t seed,
                                          std::string_view request_id);

// The 0-based turn index at the end of a request id ("run/3/train/1/5/2" -> 2); 0 if none.
[[nodiscard]] int turn_of_request(std::string_view request_id);

struct instant_policy {
  std::uint64_t seed = 0;
  // First-turn pass probability of a task, keyed by the prompt text; others get default_pass.
  std::map<std::string, double> first_turn_pass;
  double default_pass = 0.5;     // Default: 0.5
  double fix_probability = 0.3;  // Default: 0.3 (a debug turn passes)
  // Overrides the coins: whether the turn (0-based) of a request with this id and prompt passes.
  // The prompt is the first turn's user message ("" for debug turns).
  std::function<bool(const std::string& request_id, const std::string& prompt, int turn)> correct;
  int output_tokens = 8;  // Default: 8 sampled tokens per turn
  latency_profile latency;
};

// Whether the policy answers this turn correctly (the coins or `correct`). Pure.
[[nodiscard]] bool instant_correct(const instant_policy& policy, const generation_request& request);

[[nodiscard]] generator_actor spawn_instant_generator(caf::actor_system& system,
                                                      instant_policy policy);

// `latency` and `seed` as the generator's, so compile and run times come from the same samples.
[[nodiscard]] verifier_actor spawn_instant_verifier(caf::actor_system& system,
                                                    latency_profile latency = {},
                                                    std::uint64_t seed = 0);

// A learner backend that trains nothing: version + 1 per step, after `step_seconds` of sleep (the
// learner actor runs detached, so the sleep blocks no scheduler thread). Counts the sequences.
class null_learner final : public learner_backend {
 public:
  explicit null_learner(double step_seconds = 0.0, std::uint64_t initial_version = 0)
      : step_seconds_(step_seconds), version_(initial_version) {}
  result<backend_step> train(std::uint64_t step, std::vector<training_sequence> batch) override;

  // Sequences seen per step, in the order trained. Read only after the actor system is done.
  [[nodiscard]] const std::map<std::uint64_t, std::size_t>& sequences() const { return sequences_; }

 private:
  double step_seconds_;
  std::uint64_t version_;
  std::map<std::uint64_t, std::size_t> sequences_;
};

}  // namespace leap::actors
