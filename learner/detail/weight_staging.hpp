// The staging that the weight-transfer receivers (weight_broadcast.cpp's nccl, weight_ipc.cpp's
// ipc) share: tensors received apart from the served model, checked against it before anything is
// received, and swapped in all or nothing. Internal to learner/ (includes LibTorch).
#pragma once

#include "common/result.hpp"
#include "learner/detail/transformer.hpp"
#include "learner/policy.hpp"

#include <ATen/ATen.h>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace leap::learner {

// policy's friend: the transfer code reads and writes its tensors.
struct weight_broadcast_access {
  static detail::transformer& of(policy& p) { return *p.impl_; }
  static const detail::transformer& of(const policy& p) { return *p.impl_; }
};

namespace detail {

// `p`'s base parameters (LoRA adapters are not transferred: merge them first). Through a const
// policy they are only read.
[[nodiscard]] std::vector<named_tensor> transfer_parameters(const policy& p);

// One tensor an update announces.
struct announced_tensor {
  const std::string& name;
  const std::string& dtype;
  const std::vector<std::int64_t>& shape;
};

// Checks every announced tensor against `target` (a name it lacks, another shape, a dtype name
// that is no float type) and returns their scalar types, in order. `what` prefixes the messages
// ("weight broadcast"). Pure: nothing is received yet.
[[nodiscard]] result<std::vector<at::ScalarType>> check_announced(
    const std::vector<announced_tensor>& tensors, const policy& target, const std::string& what);

struct weight_staging {
  std::map<std::string, at::Tensor> staged;
  // A delta's tensors (weight_delta.hpp): only they are replaced, and none may be.
  bool delta = false;

  // Copies the staging into `target` (held exclusively by the caller) and empties it. Errors:
  // nothing staged, a staging that lacks some of target's parameters (target unchanged).
  [[nodiscard]] status commit(policy& target, const std::string& what);
  void discard() {
    staged.clear();
    delta = false;
  }
};

}  // namespace detail
}  // namespace leap::learner
