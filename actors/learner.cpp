#include "actors/learner.hpp"

#include "common/durable_file.hpp"
#include "orchestrator/advantage.hpp"
#include "orchestrator/group_flow.hpp"
#include "orchestrator/run_telemetry.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <system_error>

namespace leap::actors {

namespace {

// The version of each token in flatten()'s order: a turn's input tokens (never trained on) take the
// version the turn started with, its output tokens the version that sampled each (its segments:
// a weight update in flight changes the version within the turn).
std::vector<std::uint64_t> token_versions(const rollout_record& rollout) {
  std::vector<std::uint64_t> out;
  for (const auto& t : rollout.turns) {
    out.insert(out.end(), t.input_tokens.size(), t.weight_version);
    const auto outputs = output_token_versions(t);
    out.insert(out.end(), outputs.begin(), outputs.end());
  }
  return out;
}

// A broken optimisation turn (orchestrator/group_flow.hpp) as a sequence of its own: the rollout's
// conversation up to that turn, of which only the turn's own tokens are trained on (mask 1), all
// with `advantage`. None when the turn sampled no token (nothing to train).
result<std::optional<training_sequence>> broken_turn_sequence(const group_record& group,
                                                              const rollout_record& rollout,
                                                              std::size_t turn, double advantage) {
  rollout_record context = rollout;
  context.turns.resize(turn + 1);
  auto flat = flatten(context);
  if (!flat) {
    return flat.err().wrap("group " + std::to_string(group.group_index) + " of step " +
                           std::to_string(group.step));
  }
  const int broken = static_cast<int>(turn);
  // Every trained token is the broken turn's, with the version that sampled it (its segments).
  const auto versions = token_versions(context);
  training_sequence s;
  s.step = group.step;
  s.group = group.group_index;
  s.rollout = rollout.index;
  s.task_id = group.task_id;
  s.oldest_weight_version = oldest_weight_version(rollout.turns[turn]);  // the only turn trained
  bool any = false;
  for (std::size_t k = 0; k < flat->tokens.size(); ++k) {
    const bool trained = flat->token_turn[k] == broken;
    any = any || trained;
    s.mask.push_back(trained ? 1 : 0);
    s.behaviour_logprobs.push_back(trained ? flat->behaviour_logprobs[k] : 0.0f);
    s.advantages.push_back(trained ? static_cast<float>(advantage) : 0.0f);
    s.token_weight_versions.push_back(trained ? versions[k] : 0);
  }
  if (!any) {
    return std::optional<training_sequence>{};
  }
  s.tokens = std::move(flat->tokens);
  return std::optional<training_sequence>{std::move(s)};
}

}  // namespace

result<std::vector<training_sequence>> training_sequences(const group_record& group, double gamma,
                                                          bool train_optimisation) {
  std::vector<training_sequence> out;
  if (group.split != split_kind::train) {
    return out;
  }
  out.reserve(group.rollouts.size());
  // With gate.optimise.train, probes still train on their first turns alone.
  const bool optimisation_trained = train_optimisation && !group.probe;
  const double broken_advantage = optimisation_trained ? broken_turn_advantage(group) : 0.0;
  for (const auto& rollout : group.rollouts) {
    const rollout_record* source = &rollout;
    rollout_record kept_turns;
    const std::size_t keep =
        optimisation_trained ? kept_turn(rollout).value_or(rollout.turns.size()) + 1 : 1;
    if (rollout.turns.size() > keep && (group.probe || rollout.turns.front().passed)) {
      // A probe's debug turns are measurement, and so are optimisation turns (the only turns that
      // follow a first-turn pass) unless gate.optimise.train: training then sees the turns up to
      // the kept one (its last pass); the broken turns after it train on their own, below.
      kept_turns = rollout;
      kept_turns.turns.resize(keep);
      source = &kept_turns;
    }
    auto flat = flatten(*source);
    if (!flat) {
      return flat.err().wrap("group " + std::to_string(group.group_index) + " of step " +
                             std::to_string(group.step));
    }
    training_sequence s;
    s.step = group.step;
    s.group = group.group_index;
    s.rollout = rollout.index;
    s.task_id = group.task_id;
    s.advantages = token_advantages(flat->token_turn, rollout.advantage, gamma);
    s.token_weight_versions = token_versions(*source);
    s.tokens = std::move(flat->tokens);
    s.mask = std::move(flat->mask);
    s.behaviour_logprobs = std::move(flat->behaviour_logprobs);
    s.oldest_weight_version = std::numeric_limits<std::uint64_t>::max();
    for (const auto& t : source->turns) {
      s.oldest_weight_version = std::min(s.oldest_weight_version, oldest_weight_version(t));
    }
    if (source->turns.empty()) {
      s.oldest_weight_version = 0;
    }
    out.push_back(std::move(s));
    if (!optimisation_trained || broken_advantage == 0.0) {
      continue;  // a zero advantage trains nothing, and would only dilute a sequence-mean loss
    }
    for (const std::size_t turn : broken_optimisation_turns(rollout)) {
      auto broken = broken_turn_sequence(group, rollout, turn, broken_advantage);
      if (!broken) {
        return broken.err();
      }
      if (*broken) {
        out.push_back(std::move(**broken));
      }
    }
  }
  return out;
}

std::filesystem::path record_batch_path(const std::filesystem::path& dir, std::uint64_t step) {
  char name[48];
  std::snprintf(name, sizeof name, "step_%08llu.jsonl", static_cast<unsigned long long>(step));
  return dir / name;
}

namespace {

class record_learner final : public learner_backend {
 public:
  record_learner(std::filesystem::path dir, std::uint64_t version)
      : dir_(std::move(dir)), version_(version) {}

  result<backend_step> train(std::uint64_t step, std::vector<training_sequence> batch) override {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) {
      return error{dir_.string() + ": cannot create the batch folder: " + ec.message()};
    }
    // Through the durable writer: a batch file is whole or absent after a crash or a power loss
    // (the record learner's batches are what an offline trainer reads), and a full disk names
    // the file and its free space.
    const auto path = record_batch_path(dir_, step);
    auto out = durable_writer::open(path.string());
    if (!out) {
      return out.err();
    }
    std::uint64_t trained_tokens = 0;
    for (const auto& s : batch) {
      nlohmann::json line = {{"step", s.step},
                             {"group", s.group},
                             {"rollout", s.rollout},
                             {"task_id", s.task_id},
                             {"oldest_weight_version", s.oldest_weight_version},
                             {"tokens", s.tokens},
                             {"mask", s.mask},
                             {"logprobs", s.behaviour_logprobs},
                             {"advantages", s.advantages}};
      if (auto w = out->write(line.dump() + '\n'); !w) {
        return w.err();
      }
      for (auto m : s.mask) {
        trained_tokens += m;
      }
    }
    if (auto c = out->commit(); !c) {
      return c.err();
    }
    metrics_["trained_tokens"] = static_cast<double>(trained_tokens);
    ++version_;
    backend_step done;
    done.weight_version = version_;
    done.metrics = metrics_;
    done.metrics["sequences"] = static_cast<double>(batch.size());
    return done;
  }

 private:
  std::filesystem::path dir_;
  std::uint64_t version_;
  std::map<std::string, double> metrics_;
};

struct learner_state {
  // Not an aggregate: C++20 would let CAF construct it from the actor pointer.
  learner_state() = default;
  std::shared_ptr<learner_backend> backend;
  learner_actor_config config;
  std::map<std::uint64_t, std::vector<training_sequence>> pending;  // step -> its sequences
  static inline const char* name = "leap.learner";
};

learner_actor::behavior_type learner_behavior(learner_actor::stateful_pointer<learner_state> self,
                                              std::shared_ptr<learner_backend> backend,
                                              learner_actor_config config) {
  self->state.backend = std::move(backend);
  self->state.config = std::move(config);
  return {
      [=](add_group_atom, const group_record& group) -> ack {
        auto sequences = training_sequences(group, self->state.config.gamma,
                                            self->state.config.train_optimisation);
        if (!sequences) {
          return {sequences.err().message};
        }
        auto& pending = self->state.pending[group.step];
        for (auto& s : *sequences) {
          pending.push_back(std::move(s));
        }
        return {};
      },
      [=](train_atom, std::uint64_t step) -> learner_step_result {
        const auto start = std::chrono::steady_clock::now();
        std::vector<training_sequence> batch;
        if (auto it = self->state.pending.find(step); it != self->state.pending.end()) {
          batch = std::move(it->second);
          self->state.pending.erase(it);
        }
        learner_step_result r;
        r.step = step;
        r.sequences = static_cast<std::uint32_t>(batch.size());
        std::vector<std::uint64_t> sampled;  // each sequence's oldest weight version
        sampled.reserve(batch.size());
        for (const auto& s : batch) {
          sampled.push_back(s.oldest_weight_version);
        }
        auto trained = self->state.backend->train(step, std::move(batch));
        r.learner_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (!trained) {
          r.error = "learner: step " + std::to_string(step) + ": " + trained.err().message;
          return r;
        }
        r.weight_version = trained->weight_version;
        if (auto* t = self->state.config.telemetry.get()) {
          // One version per step: the step updated version weight_version - 1.
          const std::uint64_t updated =
              trained->weight_version - std::min<std::uint64_t>(1, trained->weight_version);
          for (auto v : sampled) {
            t->staleness.observe(static_cast<double>(updated - std::min(updated, v)));
          }
        }
        r.weights_path = std::move(trained->weights_path);
        r.metrics = std::move(trained->metrics);
        return r;
      },
  };
}

}  // namespace

std::unique_ptr<learner_backend> make_record_learner(std::filesystem::path dir,
                                                     std::uint64_t initial_version) {
  return std::make_unique<record_learner>(std::move(dir), initial_version);
}

learner_actor spawn_learner(caf::actor_system& system, std::shared_ptr<learner_backend> backend,
                            learner_actor_config config) {
  if (config.detached) {
    return system.spawn<caf::detached>(learner_behavior, std::move(backend), config);
  }
  return system.spawn(learner_behavior, std::move(backend), config);
}

}  // namespace leap::actors
