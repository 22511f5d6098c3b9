// The data-parallel trainer's process group (learner/distributed.cpp): c10d's TCPStore plus
// ProcessGroupNCCL (cuda devices, when the build has it) or ProcessGroupGloo (host memory), behind
// a few blocking or asynchronous collectives. Only distributed.cpp includes c10d's headers, so
// trainer.cpp does not pay their compile time.
//
// Every collective throws std::runtime_error naming itself ("data-parallel all-reduce of gradient
// bucket 3 (rank 0 of 2): ...") when it fails or passes the timeout, and marks the group failed:
// a later collective fails at once (the ranks' sequences of collectives no longer match).
#pragma once

#include "common/result.hpp"
#include "learner/trainer.hpp"

#include <ATen/ATen.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace leap::learner::detail {

class dp_group {
 public:
  // Forms the group: rank 0 hosts the store at options.master, every rank connects to it. Errors:
  // invalid options, no c10d backend for `device` in this build, the group not forming in time.
  [[nodiscard]] static result<std::unique_ptr<dp_group>> connect(const distributed_options& options,
                                                                 at::Device device);

  dp_group(const dp_group&) = delete;
  dp_group& operator=(const dp_group&) = delete;
  ~dp_group();

  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  // The device collective tensors live on: the model's cuda device under NCCL, else the host.
  [[nodiscard]] at::Device wire_device() const;
  [[nodiscard]] bool failed() const;
  [[nodiscard]] const std::string& failure() const;

  // Rank 0's `t` into every rank's `t` (same shape and dtype everywhere; any dtype: gloo gets a
  // byte view).
  void broadcast(at::Tensor& t, const std::string& what, bool wait_forever = false);
  // Rank 0's bytes into every rank's `bytes` (resized). `wait_forever`: no timeout (a rank waiting
  // for rank 0's next command; rank 0 going away still ends it, as a closed connection).
  void broadcast_bytes(std::string& bytes, const std::string& what, bool wait_forever = false);
  // Sums `t` (float32 / float64, on wire_device()) over the ranks in place, asynchronously: the
  // returned function waits for it (and throws on failure). `t` must not be touched before.
  [[nodiscard]] std::function<void()> all_reduce_async(at::Tensor t, const std::string& what);
  void all_reduce(at::Tensor& t, const std::string& what);
  // `full` (contiguous, numel divisible by size()) is rank-major: rank r's piece is its r-th
  // 1 / size() slice. Every rank's own piece is copied into every rank's `full`.
  void all_gather_pieces(at::Tensor& full, const std::string& what);

 private:
  struct impl;
  explicit dp_group(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

// Calls `ready` each time autograd has accumulated a gradient into the leaf `param` (a post hook of
// its AccumulateGrad node, which DDP uses too). The returned handle keeps the node, and with it the
// hook, alive; the parameter must not be replaced (set_data keeps it).
[[nodiscard]] std::shared_ptr<void> on_gradient_accumulated(const at::Tensor& param,
                                                            std::function<void()> ready);

}  // namespace leap::learner::detail
