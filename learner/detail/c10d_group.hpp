// The one former of the learner's c10d groups: the data-parallel trainer's (distributed.cpp) and
// the NCCL weight broadcast's (weight_broadcast.cpp). A TCPStore that rank 0 hosts, then
// ProcessGroupNCCL for cuda devices (LEAP_C10D_NCCL) or ProcessGroupGloo on host memory
// (LEAP_C10D_GLOO). Only those two files and c10d_group.cpp include it: c10d's headers stay out of
// every other translation unit.
#pragma once

#include "common/result.hpp"

#include <ATen/ATen.h>
#include <chrono>
#include <functional>
#include <string>

#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#endif

namespace leap::learner::detail {

#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
// The common base of ProcessGroupGloo and ProcessGroupNCCL: ProcessGroup up to LibTorch 1.x
// (Debian's 1.13), c10d::Backend from 2.0 on (pip's), with the same collective calls.
#if TORCH_VERSION_MAJOR >= 2
using c10d_backend = c10d::Backend;
#else
using c10d_backend = c10d::ProcessGroup;
#endif
#endif

// Whether this build has a c10d backend at all.
[[nodiscard]] constexpr bool has_c10d() {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  return true;
#else
  return false;
#endif
}

struct c10d_group {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d_backend> backend;
#endif
  std::string host;             // the store's host (open_c10d_store)
  at::Device device{at::kCPU};  // the model's device
  bool nccl = false;            // the backend is NCCL (else gloo)
  std::chrono::milliseconds timeout{300'000};

  [[nodiscard]] bool connected() const;
  // The port the store listens on (rank 0) or connects to; 0 once closed.
  [[nodiscard]] int port() const;
  // The device tensors travel on: the model's cuda device under NCCL, else host memory.
  [[nodiscard]] at::Device wire_device() const;
  // Gloo copies bytes for broadcasts and gathers, and Debian's refuses bfloat16 ("Invalid scalar
  // type"): under gloo a tensor of wider elements travels as a byte view of its storage.
  [[nodiscard]] at::Tensor on_wire(const at::Tensor& t) const;
  void close();
};

// Opens rank 0's store on host:port (`server`; port 0: the kernel picks a free port, read back
// with port()) or connects to it, within g.timeout. Throws c10::Error as c10d does.
void open_c10d_store(c10d_group& g, const std::string& host, int port, bool server, int world_size);

// Rank 0 of a group whose other ranks call join_c10d_group(): waits until ranks 1..size-1 have
// joined the store, calling `check_peers` about every 50 ms, whose error ends the wait at once
// (a rank that exited). Errors: that error, or "K of N ranks joined within T s".
[[nodiscard]] status await_c10d_joins(c10d_group& g, int size,
                                      const std::function<status()>& check_peers);
// The counterpart on ranks 1..size-1: tells rank 0's await_c10d_joins that this rank is there.
void join_c10d_group(c10d_group& g);

// Forms the process group over g.store (every rank; blocks until all have formed it, or the
// timeout): NCCL when `device` is cuda and the build has it, else gloo on the store host's address
// (where the peers reach this rank: loopback or the host's). Errors: no c10d backend in this
// build; c10d's own are thrown as c10::Error.
[[nodiscard]] status form_c10d_group(c10d_group& g, int rank, int size, at::Device device);

// Rank 0's `t` into every rank's `t`, within g.timeout (`timeout` when given). Throws c10::Error.
void c10d_broadcast(c10d_group& g, at::Tensor& t,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds::zero());

}  // namespace leap::learner::detail
