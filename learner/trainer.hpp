// The learner's update: scored sequences in, a better policy out.
//
// One update() is one training step: the batch is split into `mini_batches` (in order), each
// mini-batch into micro-batches of at most `micro_batch_tokens` padded tokens; gradients of the
// micro-batches accumulate (in float32 whatever the model dtype), then gradient clipping and one
// AdamW step per mini-batch, for `epochs` passes. The loss is learner/loss.hpp's. After the step a
// checkpoint is written aside, synced and renamed into place (atomic, and whole after a power loss:
// common/durable_file.hpp), and a restarted trainer resumes from the newest one with its optimiser
// state, so the next step is the same as without the restart.
//
// Checkpoint folder (`<checkpoint.dir>/step-00000012/`): a loadable Hugging Face model folder
// (config.json + model.safetensors, or adapter_config.json + adapter_model.safetensors under LoRA),
// plus optimizer.safetensors (AdamW moments and float32 master weights) and trainer_state.json.
//
// No LibTorch in this header. A trainer is not thread-safe: one caller at a time.
#pragma once

#include "common/result.hpp"
#include "learner/loss.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace leap::learner {

struct optimizer_options {
  double lr = 1e-6;      // peak learning rate. Default: 1e-6
  double beta1 = 0.9;    // Default: 0.9
  double beta2 = 0.999;  // Default: 0.999
  double eps = 1e-8;     // Default: 1e-8
  // Decoupled weight decay (AdamW), not applied to norms and biases. Default: 0.01
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // clip the global gradient norm to this; 0 = off. Default: 1
  // The learning rate rises linearly from lr / warmup_steps to lr over the first warmup_steps
  // optimiser steps, then stays at lr. Default: 0 (no warm-up)
  std::int64_t warmup_steps = 0;
};

struct batching_options {
  // Padded tokens (sequences x longest length) per forward/backward pass; a longer sequence gets a
  // micro-batch of its own. Default: 8192
  std::int64_t micro_batch_tokens = 8192;
  // Optimiser steps per update(): the batch is split into this many mini-batches of consecutive
  // sequences. Default: 1
  std::int64_t mini_batches = 1;
  std::int64_t epochs = 1;  // passes over the batch per update(). Default: 1
};

struct checkpoint_options {
  std::string dir;             // where step-NNNNNNNN folders go; "" = no checkpoints. Default: ""
  std::int64_t every = 1;      // write one every this many steps. Default: 1
  std::int64_t keep_last = 2;  // delete older ones beyond this many; 0 keeps all. Default: 2
  // Continue from the newest complete checkpoint in `dir` when there is one. Default: true
  bool resume = true;
  std::int64_t max_shard_bytes = std::int64_t{5} << 30;  // Default: 5 GiB
};

// Data-parallel training over a c10d group (gloo on cpu, NCCL on cuda devices; see README.md).
// Rank 0 is the process that calls trainer::create; ranks 1..world_size-1 run run_rank_worker()
// and receive the options, the model and every command from rank 0. Results equal one process's
// within float rounding: every rank sees the whole batch, the micro-batches are dealt to the ranks,
// gradients are summed over the ranks, AdamW state and float32 masters are sharded (1 / world_size
// of them per rank).
struct distributed_options {
  int rank = 0;        // this process's rank in [0, world_size). Default: 0
  int world_size = 1;  // 1 = one process, no group (the code path of a plain trainer). Default: 1
  // "host:port" of the c10d TCPStore that rank 0 hosts and the others connect to. Required when
  // world_size > 1. Rank 0 may give port 0: the kernel picks a free port when the store binds, and
  // on_listening gets it (start the other ranks there: no other process can take the port between
  // its choice and its use). Default: ""
  std::string master;
  // Forming the group and every collective fail with an error naming the collective after this
  // long (a rank that died or hangs). Default: 300
  double timeout_seconds = 300;
  // Gradients are reduced in buckets of about this many bytes of the float32 gradient, each
  // launched from the backward pass as soon as all its parameters have their gradient.
  // Default: 25 MiB
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  // Rank 0: called once its store listens, with the "host:port" the other ranks connect to (the
  // bound port). Where ranks 1..world_size-1 are started (rank_workers:
  // start_ranks_when_listening). Its error ends the forming with that error. Default: unset
  std::function<status(const std::string& bound_master)> on_listening;
  // Rank 0: called about every 50 ms while it waits for ranks 1..world_size-1 to reach its store;
  // an error (a rank that exited) ends the forming at once with it, instead of at the timeout.
  // Default: unset
  std::function<status()> check_ranks;
};

struct trainer_options {
  policy_options policy;
  loss_options loss;
  optimizer_options optimizer;
  batching_options batching;
  checkpoint_options checkpoint;
  // Set: train LoRA adapters only (the base stays frozen and is the KL reference). Default: unset
  std::optional<lora_options> lora;
  // The frozen KL reference when loss.kl_coef > 0 and a sequence brings no reference_logprobs:
  // "" = the initial model (its weights are copied at start, or reloaded from the model folder when
  // resuming). Default: ""
  std::string reference_model_dir;
  // world_size > 1 also needs no reference_model_dir and an update_batch given to rank 0 only.
  distributed_options distributed;
};

// One scored sequence: the conversation's token ids and, per token t (predicted from ids[0..t)),
// whether it is trained on, the sampler's log-prob and the advantage. Prompt and feedback tokens
// have mask 0; mask[0] must be 0 since nothing predicts the first token.
struct sequence {
  std::vector<std::int32_t> token_ids;
  std::vector<std::uint8_t> loss_mask;    // 1 = trained on
  std::vector<float> behaviour_logprobs;  // read where the mask is 1
  std::vector<float> advantages;          // read where the mask is 1
  // Optional: the reference's log-probs (read where the mask is 1); empty = computed by the
  // trainer.
  std::vector<float> reference_logprobs;
  // Optional: per token, how many weight versions the sampler was behind the learner (read where
  // the mask is 1; loss.offpolicy.max_staleness masks the ones too old); empty = all 0.
  std::vector<std::int32_t> staleness;
};

struct update_batch {
  std::vector<sequence> sequences;
};

struct step_metrics {
  std::int64_t optimizer_step = 0;  // optimiser steps taken so far, this one included
  double lr = 0;
  double loss = 0;
  double pg_loss = 0;
  double kl = 0;             // token mean of k3 KL(current || reference); 0 without a reference
  double behaviour_kl = 0;   // token mean of k3 KL(behaviour || current): the drift off-policy
  double clip_fraction = 0;  // trained tokens where the clipped term is active
  // Off-policy filter (loss.offpolicy): sequences dropped, tokens masked (by the ratio band or
  // staleness, outside dropped sequences), and quantiles of the sequences' geometric-mean ratios
  // exp(mean(logp - behaviour_logp)) (computed in every mode, off too).
  std::int64_t dropped_sequences = 0;
  std::int64_t masked_tokens = 0;
  double ratio_p5 = 0;
  double ratio_p50 = 0;
  double ratio_p95 = 0;
  double entropy = 0;       // token mean of the current policy's entropy, in nats
  double grad_norm = 0;     // before clipping
  std::int64_t tokens = 0;  // tokens passed forward (without padding)
  std::int64_t trained_tokens = 0;
  std::int64_t sequences = 0;
  double seconds = 0;
  double tokens_per_second = 0;
};

struct update_report {
  std::int64_t step = 0;                      // training steps done, this one included
  std::vector<step_metrics> optimizer_steps;  // one per mini-batch and epoch
  step_metrics summary;  // token-weighted means over the optimiser steps; counts and time summed
  std::string checkpoint_dir;  // "" when this step wrote none
  // Data parallel: this rank's gradient buckets whose reduction started inside the backward pass
  // (overlapping it) rather than after it, summed over the optimiser steps; 0 with one rank.
  std::int64_t buckets_overlapped = 0;
};

// The loss and gradient of a batch without an optimiser step (for checks and tools).
struct gradient_report {
  double loss = 0;
  step_metrics metrics;
  tensor_map
      gradients;  // trainable parameter name -> gradient, float32 (float64 for a float64 model)
};

class trainer {
 public:
  // Trains the model in `model_dir` (see policy::load). With checkpoint.resume and a checkpoint in
  // checkpoint.dir, continues from the newest one. Errors: invalid options (named), load errors,
  // an unreadable or mismatching checkpoint.
  [[nodiscard]] static result<trainer> create(const std::string& model_dir,
                                              const trainer_options& options);
  // Trains `initial` (e.g. a random model for a toy task); `options.policy` is ignored, `initial`'s
  // device and dtype are kept. Resumes like the other overload; the KL reference is `initial`.
  [[nodiscard]] static result<trainer> create(policy initial, const trainer_options& options);

  trainer(trainer&&) noexcept;
  trainer& operator=(trainer&&) noexcept;
  ~trainer();

  // One training step on `batch` (see the file comment). Errors: an empty batch, sequences whose
  // vectors differ in length (staleness may be empty; negative entries are errors), mask[0] != 0,
  // ids outside the vocabulary, no trained token at all, reference_logprobs given for some
  // sequences but not others (all checked before any work), a non-finite gradient (that optimiser
  // step is skipped; earlier mini-batches of the same update keep theirs, and the step counter does
  // not advance), checkpoint I/O failures.
  [[nodiscard]] result<update_report> update(const update_batch& batch);

  // The loss and gradient of the whole batch as one mini-batch; weights and optimiser unchanged.
  [[nodiscard]] result<gradient_report> compute_gradients(const update_batch& batch);

  // Writes a checkpoint of the current state now and returns its folder. Errors: no checkpoint.dir,
  // I/O failures.
  [[nodiscard]] result<std::string> save_checkpoint();

  // The policy being trained. Not to be used from another thread while update() or
  // compute_gradients() runs (under LoRA they switch the adapters off to score the reference).
  [[nodiscard]] const policy& current_policy() const;
  [[nodiscard]] std::int64_t step() const;            // training steps done
  [[nodiscard]] std::int64_t optimizer_step() const;  // AdamW steps done

 private:
  struct state;
  explicit trainer(std::unique_ptr<state> s);
  [[nodiscard]] static result<trainer> create_from(std::unique_ptr<state> s,
                                                   const std::string& model_dir,
                                                   const trainer_options& options);
  friend status run_rank_worker(const distributed_options& options, const std::string& device);
  std::unique_ptr<state> state_;
};

// A rank 1..world_size-1 of a data-parallel trainer: joins the group at `options.master`, receives
// the trainer options and the model from rank 0, then runs every update / compute_gradients /
// checkpoint that rank 0's trainer runs, on its own share of the micro-batches, until rank 0's
// trainer is destroyed (returns ok) or a collective fails (the error names it). `device`: this
// rank's device ("cpu", "cuda:N"); the model's dtype is rank 0's. Errors: invalid options, the
// group not forming within the timeout, a failed collective.
[[nodiscard]] status run_rank_worker(const distributed_options& options, const std::string& device);

// Checks a distributed_options (world_size >= 1, rank in range, master "host:port" when
// world_size > 1, timeout and bucket size > 0).
[[nodiscard]] status validate(const distributed_options& options);

// The newest complete checkpoint folder in `dir` (step-NNNNNNNN with a trainer_state.json), or ""
// when there is none. Errors: `dir` exists but cannot be listed.
[[nodiscard]] result<std::string> latest_checkpoint(const std::string& dir);

}  // namespace leap::learner
