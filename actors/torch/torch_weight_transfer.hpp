// The trainer's end of vLLM's nccl weight-transfer engine for `leap run` (policy.weight_sync:
// nccl): the torch learner hosts a c10d group (learner::broadcast_sender: NCCL on cuda where built
// in, else gloo) that one policy server joins as rank 1, and the weight sync's control calls
// (policy::vllm_transfer_nccl_plan, driven by the client's state machine: drain, calls, version
// check) get this object's companion: at "init" it forms the group while the server joins it, at
// "load" it broadcasts the learner's weights while the server's /update_weights receives them into
// staging, or, when the call carries the delta (policy.weight_sync_delta; the request it is
// handed holds delta_update_info), the learner's prepared delta of that version.
// policy.weight_sync ipc (a server on the learner's GPU, another process): the learner exports one
// CUDA buffer (learner::ipc_exporter, made on first use) and the companion of
// policy::vllm_transfer_ipc_plan copies the request's version into it at "start", so it is whole
// before /update_weights names it; the server copies it out before answering, and the next sync's
// copy only starts after this sync has finished (the client runs one sync at a time).
// No LibTorch in this header. Thread-safe.
#pragma once

#include "common/result.hpp"
#include "learner/weight_delta.hpp"
#include "policy/client/client.hpp"
#include "policy/wire/wire.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace leap::actors {

class torch_learner;

// The nccl update_info of a broadcast delta: vLLM's sparse_nccl fields and the project's
// (policy/wire/wire.hpp's nccl_delta_fields), in the layout's order.
[[nodiscard]] policy::nccl_update_info delta_update_info(
    const learner::weight_delta_layout& layout);

class torch_weight_transfer {
 public:
  // Opens the group's store on a free port of the local address that routes to `endpoint_url`
  // (the address the server reaches the learner at; 127.0.0.1 for a loopback endpoint). `device`
  // is the learner's (cpu: gloo; cuda: NCCL). `timeout` bounds the rendezvous and each tensor's
  // broadcast. Errors: the endpoint's host does not resolve, no c10d in this build, the store
  // cannot be opened.
  [[nodiscard]] static result<std::unique_ptr<torch_weight_transfer>> open(
      std::weak_ptr<torch_learner> learner, const std::string& endpoint_url, std::string device,
      std::chrono::milliseconds timeout);
  // The ipc mode: no group, no port. Errors: no NVIDIA driver ("CUDA IPC needs the NVIDIA
  // driver (libcuda.so.1): ...").
  [[nodiscard]] static result<std::unique_ptr<torch_weight_transfer>> open_ipc(
      std::weak_ptr<torch_learner> learner);
  // Lets the queued jobs finish (each reports to its `done`; a rendezvous nobody joins ends after
  // the timeout) and closes the group.
  ~torch_weight_transfer();
  torch_weight_transfer(const torch_weight_transfer&) = delete;
  torch_weight_transfer& operator=(const torch_weight_transfer&) = delete;

  // vLLM's NCCLWeightTransferInitInfo for the server (rank_offset 1, world_size 2), as JSON text;
  // "" in the ipc mode (its init_info is empty).
  [[nodiscard]] std::string init_info() const;
  // vLLM's NCCLWeightTransferUpdateInfo of the learner's parameters (names, dtype_names, shapes;
  // packed false), as JSON text: the same every step. The ipc mode: learner/weight_ipc.hpp's
  // update_info of the exported buffer (allocated now; errors: the learner not on cuda, out of
  // device memory).
  [[nodiscard]] result<std::string> update_info() const;
  // The sync request's companion (policy::sync_companion): "init" forms the group, "load"
  // broadcasts the weights of the request's version (or newer), other calls need nothing; ipc:
  // "start" copies that version into the buffer, other calls need nothing. Calls
  // after this object is gone report an error.
  [[nodiscard]] policy::sync_companion companion();
  // policy.weight_sync_delta with nccl: the rendered update_info of the learner's delta to
  // `version` (torch_learner::prepared_delta), or "" when it has none (the sync sends the full
  // weights). For weight_sync_request::delta_update_info; cheap, never waits for a training step.
  [[nodiscard]] std::function<std::string(std::uint64_t version)> delta_info_source() const;

  struct state;

 private:
  explicit torch_weight_transfer(std::shared_ptr<state> s);
  std::shared_ptr<state> state_;
};

}  // namespace leap::actors
