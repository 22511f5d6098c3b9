// The trainer's state, shared by its two halves: learner/trainer.cpp (the update step on this
// rank: micro-batches, the flat buffers, AdamW on this rank's shard, checkpoints) and
// learner/trainer_parallel.cpp (what only data parallelism needs: gradient buckets reduced while
// the backward pass runs, rank 0's commands and their wire format, the other ranks' loop).
// Internal to learner/; includes ATen.
#pragma once

#include "common/result.hpp"
#include "learner/detail/distributed.hpp"
#include "learner/detail/transformer.hpp"
#include "learner/trainer.hpp"

#include <ATen/ATen.h>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace leap::learner::detail {

// One trainable tensor: its slice [offset, offset + numel) of every flat buffer.
struct param_state {
  std::string name;
  at::Tensor* param;  // the model's tensor (stable address inside the transformer)
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  std::size_t forward_index = 0;  // position in the model's parameter order
};

// A contiguous range of the flat gradient whose sum over the ranks is one collective.
struct grad_bucket {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::size_t params = 0;
  std::size_t first_forward = 0;  // the earliest forward_index in it: its gradient comes last
};

// The flat buffers, ordered so that the tensors with weight decay (matrices, not norms and biases)
// come first: decay is then one slice.
struct flat_buffers {
  // weights and grads are padded with zeros to shard_size x ranks elements; with one rank they
  // are exactly the trainable elements.
  at::Tensor weights;  // the model's dtype; the trainable tensors are views of it
  at::Tensor grads;    // the model's dtype; their .grad, which autograd adds into in place
  // This rank's shard [shard_begin, shard_begin + shard_size) only, like the moments.
  at::Tensor master;  // float32 (lower precision only)
  // float32 sum of the micro-batches' gradients, only while a lower-precision mini-batch takes
  // more than one: a single micro-batch's gradient is used as autograd wrote it.
  at::Tensor grad_accum;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
  std::int64_t decayed = 0;  // elements [0, decayed) take weight decay
};

inline at::Tensor slice_view(const at::Tensor& flat, const param_state& p) {
  return flat.narrow(0, p.offset, p.numel).view(p.param->sizes());
}

// Sums over the trained tokens of one optimiser step, turned into step_metrics at the end.
struct metric_sums {
  double loss = 0;
  double pg_loss = 0;
  double kl = 0;
  double behaviour_kl = 0;
  double clipped = 0;
  double entropy = 0;
  std::int64_t tokens = 0;
  std::int64_t trained = 0;
  std::int64_t sequences = 0;
  // Off-policy filter: sequences dropped, tokens masked, sequences with trained tokens kept and
  // their trained tokens (the normaliser after a drop), tokens left trained, sequence ratios.
  std::int64_t dropped = 0;
  std::int64_t masked = 0;
  std::int64_t kept_sequences = 0;
  std::int64_t kept_sequence_tokens = 0;
  std::int64_t kept_tokens = 0;
  std::vector<double> ratios;
};

// Rank 0's commands to the other ranks: the first byte of each message.
constexpr char command_update = 'U';
constexpr char command_gradients = 'G';
constexpr char command_checkpoint = 'C';
constexpr char command_stop = 'S';

}  // namespace leap::learner::detail

namespace leap::learner {

struct trainer::state {
  trainer_options options;
  std::string model_dir;
  learner::policy model;
  std::unique_ptr<detail::transformer>
      reference_model;  // a full copy; unset under LoRA or without KL
  std::vector<detail::param_state> params;
  detail::flat_buffers flat;
  at::TensorOptions accumulate_options;
  std::int64_t step = 0;
  std::int64_t optimizer_step = 0;

  // Data parallelism (world_size > 1; with one rank: no group, one shard of everything).
  std::unique_ptr<detail::dp_group> dp;
  std::int64_t shard_size = 0;   // elements of the flat buffers per rank
  std::int64_t shard_begin = 0;  // this rank's first element
  std::vector<detail::grad_bucket> buckets;
  std::vector<std::size_t> launch_order;     // bucket indices, in the order they are reduced
  std::vector<std::size_t> bucket_of_param;  // by index in params
  std::vector<std::size_t> pending;          // per bucket: parameters still without a gradient
  std::size_t launched = 0;                  // launch_order[0, launched) are in flight
  bool armed = false;                        // the rank's last backward pass of the mini-batch
  std::int64_t overlapped = 0;               // buckets launched from a hook (in backward)
  std::vector<std::function<void()>> in_flight;
  std::vector<std::shared_ptr<void>> hooks;
  // Rank 0 after resuming: the whole optimiser buffers, until every rank took its shard.
  std::map<std::string, at::Tensor> resumed_full;

  explicit state(learner::policy p) : model(std::move(p)) {}
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  // Rank 0 releases the other ranks (their run_rank_worker returns).
  ~state();

  detail::transformer& net() { return *model.impl_; }

  status init(const std::string& dir, const trainer_options& o);
  void allocate_flat();
  void bind_model_to_flat();
  void zero_grads();
  void spill_gradients();
  [[nodiscard]] const at::Tensor& gradient() const;
  // The optimiser buffers a checkpoint holds, by the name prefix of their tensors there.
  [[nodiscard]] std::vector<std::pair<std::string, const at::Tensor*>> saved_buffers() const;
  result<detail::metric_sums> accumulate(const update_batch& batch,
                                         const std::vector<std::size_t>& indices,
                                         bool use_given_reference);
  result<double> gradient_norm();
  void adamw_step(double grad_norm);
  [[nodiscard]] double learning_rate() const;
  result<std::string> write_checkpoint();
  status read_checkpoint(const std::string& dir);

  result<update_report> run_update(const update_batch& batch, bool given_reference);
  result<gradient_report> run_compute_gradients(const update_batch& batch, bool given_reference);
  // Data parallelism.
  void send_command(char command, const update_batch* batch);
  void send_model(const trainer_options& o);
  void receive_model();
  void make_buckets();
  void arm_buckets();
  void gradient_ready(std::size_t param);
  void launch_bucket(std::size_t b);
  void finish_buckets();
  void share_initial_state();
  // The optimiser buffers of a checkpoint, whole (gathered from the ranks: a collective).
  [[nodiscard]] std::vector<std::pair<std::string, at::Tensor>> whole_optimizer_buffers();
  status serve();
};

}  // namespace leap::learner
