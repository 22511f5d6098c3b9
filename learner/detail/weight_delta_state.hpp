// The delta sender's state and the checksum, shared by weight_delta.cpp (the disk folder, the
// prepared delta) and weight_broadcast.cpp (which broadcasts the prepared delta and checks a
// received one). Internal to learner/ (includes LibTorch).
#pragma once

#include "learner/weight_delta.hpp"

#include <ATen/ATen.h>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace leap::learner {

struct weight_delta_sender::impl {
  std::string dtype;
  std::optional<std::int64_t> base_version;
  std::map<std::string, at::Tensor> base;  // what the server holds, in the served dtype
  // The last written or prepared delta's new tensors and version, for commit.
  std::map<std::string, at::Tensor> pending;
  std::optional<std::int64_t> pending_version;
};

// A prepared delta's tensors in broadcast order: per changed tensor its int32 flat indices
// (undefined for a whole tensor) and its values (the changed ones, or the whole tensor).
struct weight_delta_payload {
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors;
};

namespace detail {

// The position-weighted checksum of `t`'s words (weight_delta.hpp), as 16 hex digits.
[[nodiscard]] std::string tensor_checksum(const at::Tensor& t);

}  // namespace detail
}  // namespace leap::learner
