// The learner actor and the interface its implementations share.
//
// Scored groups stream in as the store confirms them (add_group); `train` for a step hands the
// step's training sequences to the backend and answers with the new weight version. Groups are kept
// per step, so groups of the next step (allowed by schedule.max_staleness) may arrive while a step
// trains. The actor runs detached: a backend step blocks (file I/O, LibTorch).
//
// Backends: `record` (writes each step's batch for an external trainer; changes no weights) now;
// the LibTorch learner (learner/trainer.hpp) plugs in through learner_backend with an adapter that
// turns training_sequence into learner::sequence (the same four arrays).
#pragma once

#include "actors/messages.hpp"
#include "common/result.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace leap::telemetry {
struct run_telemetry;
}

namespace leap::actors {

// One rollout as the learner trains on it: learner::sequence's four arrays, all of one length, and
// where it came from.
struct training_sequence {
  std::uint64_t step = 0;
  std::uint32_t group = 0;
  std::uint32_t rollout = 0;
  std::string task_id;
  std::vector<token_id> tokens;
  std::vector<std::uint8_t> mask;           // 1: a sampled token, trained on
  std::vector<float> behaviour_logprobs;    // 0 where mask is 0
  std::vector<float> advantages;            // per token, discounted per turn; 0 where mask is 0
  std::uint64_t oldest_weight_version = 0;  // the oldest weights any of its tokens was sampled from
  // Per token: the weights that sampled it (turn_record::weight_segments; where mask is 0, the
  // version its turn started with), for the learner's staleness cap
  // (learner.offpolicy.max_staleness).
  std::vector<std::uint64_t> token_weight_versions;
};

// The training sequences of a scored group, one per rollout in order: flatten() and
// token_advantages() with the rollout's advantage and `gamma`. A probe group contributes its first
// turns only (its debug turns are measurement). Validation groups give none. Errors: flatten()'s.
// Optimisation turns (those after a first-turn pass) are cut off unless `train_optimisation`
// (gate.optimise.train; the group scored with score_group's same flag): then, outside probes, a
// rollout's sequence holds its turns up to its kept turn (orchestrator's kept_turn, discounted per
// turn like debug turns), and each broken optimisation turn after it follows its rollout as a
// sequence of its own (the conversation up to it, only its tokens trained, all with
// broken_turn_advantage(group); none when that is 0). Default: off.
[[nodiscard]] result<std::vector<training_sequence>> training_sequences(
    const group_record& group, double gamma, bool train_optimisation = false);

struct backend_step {
  std::uint64_t weight_version = 0;  // after the step
  std::string weights_path;          // new weights to sync to the policy servers; "" for none
  std::map<std::string, double> metrics;
};

// A learner implementation. Called from one thread at a time (the learner actor's); may block.
class learner_backend {
 public:
  virtual ~learner_backend() = default;
  // One training step on the step's batch (possibly empty: a step whose groups all carry no
  // signal). Errors end the run; their message names what failed.
  [[nodiscard]] virtual result<backend_step> train(std::uint64_t step,
                                                   std::vector<training_sequence> batch) = 0;
};

// The `record` learner: writes each step's batch to DIR/step_NNNNNNNN.jsonl (written aside and
// renamed into place, so a file is whole or absent), one JSON object per sequence:
//   {"step", "group", "rollout", "task_id", "oldest_weight_version",
//    "tokens": [...], "mask": [...], "logprobs": [...], "advantages": [...]}
// and changes no weights: version `initial_version + steps trained`, so that staleness bookkeeping
// still counts learner steps. Creates DIR when missing.
[[nodiscard]] std::unique_ptr<learner_backend> make_record_learner(
    std::filesystem::path dir, std::uint64_t initial_version = 0);

// The file the record learner writes for `step` in `dir`.
[[nodiscard]] std::filesystem::path record_batch_path(const std::filesystem::path& dir,
                                                      std::uint64_t step);

// add_group: keeps the group's training sequences for its step (validation groups are ignored).
// train(step): trains on the step's sequences, then forgets them; the result's error is set when
//   the backend failed.
using learner_actor =
    caf::typed_actor<caf::replies_to<add_group_atom, group_record>::with<ack>,
                     caf::replies_to<train_atom, std::uint64_t>::with<learner_step_result>>;

struct learner_actor_config {
  double gamma = 0.9;  // advantage.gamma of the run. Default: 0.9
  // gate.optimise.train of the run: train on optimisation turns (training_sequences). Default: off
  bool train_optimisation = false;
  bool detached = true;  // tests on the deterministic coordinator turn this off. Default: true
  // Live metrics: each trained sequence's staleness (the weights the step updated, i.e. the new
  // version - 1, minus its oldest_weight_version). Null: none. Default: null
  std::shared_ptr<telemetry::run_telemetry> telemetry;
};

[[nodiscard]] learner_actor spawn_learner(caf::actor_system& system,
                                          std::shared_ptr<learner_backend> backend,
                                          learner_actor_config config = {});

}  // namespace leap::actors
