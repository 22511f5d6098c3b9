#include "actors/learner.hpp"

#include "orchestrator/advantage.hpp"
#include "orchestrator/run_telemetry.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
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

}  // namespace

result<std::vector<training_sequence>> training_sequences(const group_record& group, double gamma) {
  std::vector<training_sequence> out;
  if (group.split != split_kind::train) {
    return out;
  }
  out.reserve(group.rollouts.size());
  for (const auto& rollout : group.rollouts) {
    const rollout_record* source = &rollout;
    rollout_record first_turn_only;
    if (rollout.turns.size() > 1 && (group.probe || rollout.turns.front().passed)) {
      // A probe's debug turns are measurement, and so are optimisation turns (the only turns that
      // follow a first-turn pass): training sees the first turn alone.
      first_turn_only = rollout;
      first_turn_only.turns.resize(1);
      source = &first_turn_only;
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
    const auto path = record_batch_path(dir_, step);
    auto partial = path;
    partial += ".partial";
    {
      std::ofstream out(partial, std::ios::binary | std::ios::trunc);
      if (!out) {
        return error{partial.string() + ": cannot open for writing"};
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
        out << line.dump() << '\n';
        for (auto m : s.mask) {
          trained_tokens += m;
        }
      }
      out.flush();
      if (!out) {
        // The stream keeps no reason; errno still holds the failed write's (ENOSPC on a full disk).
        return error{partial.string() + ": write failed: " + std::strerror(errno)};
      }
      metrics_["trained_tokens"] = static_cast<double>(trained_tokens);
    }
    std::filesystem::rename(partial, path, ec);
    if (ec) {
      return error{path.string() + ": cannot rename the batch into place: " + ec.message()};
    }
    ++version_;
    backend_step out;
    out.weight_version = version_;
    out.metrics = metrics_;
    out.metrics["sequences"] = static_cast<double>(batch.size());
    return out;
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
        auto sequences = training_sequences(group, self->state.config.gamma);
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
