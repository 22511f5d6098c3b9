// The LibTorch learner behind the learner actor (learner.kind: torch): learner::trainer's update
// on the step's training sequences, one update per step. No LibTorch header here.
//
// Weights the policy servers reload: every step leaves a loadable Hugging Face folder and returns
// its path as backend_step::weights_path (the generator's weight sync hands it to the servers'
// weight-update route). A step that writes a checkpoint (every `checkpoint_every` steps and after
// the last) returns the checkpoint folder (`<checkpoint_dir>/step-NNNNNNNN`, resumable: optimiser
// state included); any other step writes the weights alone to `<weights_dir>/step-NNNNNNNN` (the
// newest two are kept). A step without any trained token (an empty batch) updates nothing and
// returns the current weights' folder again, so that the version still counts learner steps.
//
// In memory (the embedded server in this process, options.in_memory): no weights are written for
// the servers at all; every step returns actors::in_memory_weights as its path, and the server's
// backend copies the weights from copy_weights_to() under its exclusive lock. Checkpoints are
// still written (they are for resume).
//
// Resume: a new learner with checkpoints in checkpoint_dir continues from the newest one (its
// weights and optimiser state; learner::trainer does this). current_weights() says which folder
// holds the weights it starts from, so that the policy server can start serving the same ones.
#pragma once

#include "actors/learner.hpp"
#include "common/result.hpp"
#include "learner/trainer.hpp"
#include "learner/weight_delta.hpp"
#include "orchestrator/config.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace leap::actors {

struct torch_learner_options {
  std::string model_dir;             // the initial weights (config.json + safetensors)
  std::string checkpoint_dir;        // resumable checkpoints
  std::string weights_dir;           // weights-only folders of steps without a checkpoint
  learner::trainer_options trainer;  // its checkpoint.dir is set from checkpoint_dir
  // A checkpoint every this many steps; 0: only after the last. Default: 1
  int checkpoint_every = 1;
  // The run's steps (experiment.steps); the last one (step number total_steps - 1, counted from
  // 0) always gets a checkpoint. Default: 0 (no last step known)
  std::uint64_t total_steps = 0;
  // The weight version before this process's first step (the resumed run's). Default: 0
  std::uint64_t initial_version = 0;
  // No folder per step for the servers (see the file comment): the embedded server copies the
  // weights in memory, or a transfer engine (policy.weight_sync nccl) sends them. Default: false
  bool in_memory = false;
  // policy.weight_sync_delta: besides each step's folder, a delta (learner/weight_delta.hpp) from
  // the previous version's weights to the step's, computed in this dtype (the servers'), in
  // policy::weight_delta_folder(delta_dir, version) (the newest two kept). Its base is always the
  // previous version: a server that holds another one refuses it and takes the full folder (the
  // generator's sync). With in_memory (the broadcast path, policy.weight_sync nccl) the delta is
  // prepared in memory instead (prepared_delta; the newest two kept) and delta_dir stays empty.
  // Default: "" (no deltas)
  std::string delta_dtype;
  std::string delta_dir;
  // Deltas the servers refused, counted by the generator's sync; each step reports the ones
  // counted since the previous step as sync.delta_fallbacks. Null: not reported. Default: null
  std::shared_ptr<std::atomic<std::int64_t>> delta_refusals;
};

// The trainer settings of a run's learner section: AdamW (lr, betas, weight decay, grad clip,
// warm-up), the loss (clips, KL, aggregation) and batching (micro-batch tokens, mini-batches).
// Pure.
[[nodiscard]] learner::trainer_options trainer_options_of(const learner_section& learner);

// One training sequence as the trainer takes it: the same four arrays. Pure.
[[nodiscard]] learner::sequence to_learner_sequence(const training_sequence& s);
// The same, with each trained token's staleness: how many versions its weights are behind
// `learner_version` (0 for a newer or unknown version).
[[nodiscard]] learner::sequence to_learner_sequence(const training_sequence& s,
                                                    std::uint64_t learner_version);

class torch_learner final : public learner_backend {
 public:
  // Loads the model (or resumes from the newest checkpoint). Errors: learner::trainer::create's
  // (named), folders that cannot be created.
  [[nodiscard]] static result<std::unique_ptr<torch_learner>> create(torch_learner_options options);
  ~torch_learner() override;

  // One update on `batch`; see the file comment for what it writes. Metrics: loss, pg_loss, kl,
  // behaviour_kl, clip_fraction, entropy, grad_norm, lr, tokens, trained_tokens, sequences,
  // tokens_per_second, update_seconds (token-weighted means over the step's optimiser steps), and
  // skipped = 1 for a step without trained tokens.
  [[nodiscard]] result<backend_step> train(std::uint64_t step,
                                           std::vector<training_sequence> batch) override;

  // The folder of the weights the learner holds now: the newest checkpoint or weights folder it
  // wrote or resumed from, else model_dir. With in_memory, steps without a checkpoint write no
  // folder: then it is the newest checkpoint (older than the weights held).
  [[nodiscard]] const std::string& current_weights() const { return current_weights_; }
  // Where the deltas go (absolute; empty without policy.weight_sync_delta).
  [[nodiscard]] const std::string& delta_dir() const { return options_.delta_dir; }
  // Training steps done by the trainer (resumed ones included).
  [[nodiscard]] std::int64_t trainer_step() const;

  // Copies the weights the learner holds now into `target` (learner::policy::copy_weights_from:
  // all or nothing), waiting for a running train() to finish first. `version` is the version the
  // sync asked for; with bounded staleness the learner may already hold a newer one, which is
  // copied then (the server never gets older weights than the version it reports). Thread-safe.
  // Errors: `version` newer than any the learner made, copy_weights_from's.
  [[nodiscard]] status copy_weights_to(learner::policy& target, std::int64_t version);

  // Runs `work` on the weights the learner holds now, under the same lock and version rule as
  // copy_weights_to (a transfer engine's trainer side reads them: learner::broadcast_sender::send).
  // `work` must not keep a reference past its return. Thread-safe.
  [[nodiscard]] status with_weights(std::int64_t version,
                                    const std::function<status(const learner::policy&)>& work);

  // The delta prepared in memory that brings a server from version - 1 to `version` (in_memory
  // with delta_dtype), while it is one of the newest two; nullopt otherwise. Does not wait for a
  // running train(). Thread-safe.
  [[nodiscard]] std::optional<learner::prepared_weight_delta> prepared_delta(
      std::int64_t version) const;

 private:
  torch_learner(torch_learner_options options, learner::trainer trainer, std::string weights);
  // Writes the delta to the weights held now as `version` (options_.delta_dtype set) and adds its
  // metrics to `metrics`.
  [[nodiscard]] status write_delta(std::uint64_t version, std::map<std::string, double>& metrics);

  torch_learner_options options_;
  std::unique_ptr<learner::trainer> trainer_;
  // Held by train() and copy_weights_to(): a copy never reads weights an update is writing.
  std::mutex mutex_;
  std::string current_weights_;
  std::uint64_t version_ = 0;
  std::unique_ptr<learner::weight_delta_sender> delta_;  // with options_.delta_dtype
  std::int64_t refusals_seen_ = 0;                       // of *options_.delta_refusals
  mutable std::mutex prepared_mutex_;                    // apart from mutex_: never held long
  std::map<std::int64_t, learner::prepared_weight_delta> prepared_;  // in_memory deltas
};

}  // namespace leap::actors
