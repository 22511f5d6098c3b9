// Weight broadcast from the learner to a policy server over a c10d process group: the data plane
// of vLLM's "nccl" weight-transfer backend, in C++ and between our own learner and server.
//
// Protocol (vLLM's NCCLWeightTransferEngine, vllm/distributed/weight_transfer/nccl_engine.py at
// vllm-project/vllm commit 04b06efe2a8eca78e3ce13cd80992f7f440c928a): the trainer is rank 0 of a
// group of `world_size` ranks that meet at master_address:master_port (a TCPStore the trainer
// hosts); a server worker is rank rank_offset + its own rank. Per update the server is told the
// parameters' names, dtype names ("bfloat16", ...) and shapes (update_info), allocates each, and
// receives them by broadcast from rank 0 in that order, one tensor per broadcast (vLLM's
// `packed: false`).
//
// Deltas (learner/weight_delta.hpp): vLLM's sparse_nccl engine's wire order
// (vllm/distributed/weight_transfer/sparse_nccl_engine.py): per changed tensor its int32 flat
// indices, then its values, one broadcast each; a tensor sent whole (our extension: vLLM's sparse
// engine has no whole tensors) is one broadcast of the tensor. The receiver checks each rebuilt
// tensor's checksum before anything is staged.
//
// What does NOT match real vLLM: vLLM's rendezvous is vllm.distributed.utils.StatelessProcessGroup
// + PyNcclCommunicator, not c10d's ProcessGroupNCCL. Rank 0 calls ncclGetUniqueId() and publishes
// it with StatelessProcessGroup.broadcast_obj, i.e. TCPStore key "broadcast_from/0/0" holding
// pickle.dumps(<vllm.distributed.device_communicators.pynccl_wrapper.ncclUniqueId>), a ctypes
// Structure pickled through ctypes' __reduce__ (a Python pickle naming that class); the other
// ranks pickle.loads it and call ncclCommInitRank(world_size, id, rank). C++ could write those
// pickle bytes and call NCCL directly, but not through c10d (ProcessGroupNCCL exchanges its id
// under its own store keys), so a LibTorch learner cannot join a real vLLM server's group with
// this code. Our learner and our server (`leap serve-policy --model`, the embedded server) speak
// this file's c10d protocol to each other, over the same HTTP routes and bodies as vLLM.
//
// Backends: ProcessGroupNCCL when LibTorch was built with CUDA and NCCL (compiled in where the
// build finds c10d's NCCL header; LEAP_C10D_NCCL) and the device is cuda; else ProcessGroupGloo
// (CPU tensors; compiled in where gloo's headers are found: Debian's libgloo-dev, LEAP_C10D_GLOO).
// Without either, every call returns an error saying so.
//
// No LibTorch in this header. Neither class is thread-safe: one caller at a time.
#pragma once

#include "common/result.hpp"
#include "learner/policy.hpp"
#include "learner/weight_delta.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace leap::learner {

// vLLM's NCCLWeightTransferInitInfo (the init_info of /init_weight_transfer_engine).
struct broadcast_rendezvous {
  std::string master_address = "127.0.0.1";  // Default: 127.0.0.1
  int master_port = 0;
  int rank_offset = 1;  // the first server rank. Default: 1
  int world_size = 2;   // the trainer plus every server worker. Default: 2
};

// One tensor of an update (vLLM's NCCLWeightTransferUpdateInfo lists these as three arrays).
struct broadcast_tensor {
  std::string name;
  std::string dtype;  // "float32", "bfloat16", "float16", "float64"
  std::vector<std::int64_t> shape;

  friend bool operator==(const broadcast_tensor&, const broadcast_tensor&) = default;
};

// The update_info of `p`'s base parameters (LoRA adapters are not broadcast: merge them first), in
// the order send() broadcasts them.
[[nodiscard]] std::vector<broadcast_tensor> broadcast_layout(const policy& p);

// Which c10d backends this build has: "gloo", "nccl" (either may be missing).
[[nodiscard]] std::vector<std::string> broadcast_backends();

// The learner's end: rank 0, hosting the TCPStore.
class broadcast_sender {
 public:
  // Opens the store on host:port (0: a free port, see port()). Returns at once; receivers may
  // join from now on. Errors: the address cannot be bound.
  [[nodiscard]] static result<std::unique_ptr<broadcast_sender>> listen(
      const std::string& host, int port, int world_size, std::chrono::milliseconds timeout);
  ~broadcast_sender();
  broadcast_sender(const broadcast_sender&) = delete;
  broadcast_sender& operator=(const broadcast_sender&) = delete;

  [[nodiscard]] int port() const;

  // Forms the process group: blocks until every rank has joined, or the timeout. `device` ("cpu",
  // "cuda", "cuda:N") picks the backend (see the file comment).
  [[nodiscard]] status connect(const std::string& device);

  // Broadcasts `p`'s base parameters in broadcast_layout order; `limit` stops after that many
  // (tests cut a transfer with it). Errors: not connected, a peer gone, the timeout.
  [[nodiscard]] status send(const policy& p,
                            std::size_t limit = std::numeric_limits<std::size_t>::max());

  // Broadcasts a prepared delta (weight_delta_sender::prepare_delta) in its layout's order.
  // Errors: not connected, no payload, a peer gone, the timeout.
  [[nodiscard]] status send_delta(const prepared_weight_delta& d);

  // Ends the group: a receiver waiting for a tensor gets an error.
  void close();

  struct state;

 private:
  explicit broadcast_sender(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

// A server's end: joins the group and receives into a staging buffer, apart from the served model.
class broadcast_receiver {
 public:
  // Joins as rank `r.rank_offset` (one worker per server here): blocks until the group is
  // complete, or the timeout. Errors: no store at the address, the timeout, an unusable device.
  [[nodiscard]] static result<std::unique_ptr<broadcast_receiver>> join(
      const broadcast_rendezvous& r, const std::string& device, std::chrono::milliseconds timeout);
  ~broadcast_receiver();
  broadcast_receiver(const broadcast_receiver&) = delete;
  broadcast_receiver& operator=(const broadcast_receiver&) = delete;

  // Receives `layout`'s tensors into staging buffers, after checking every name, shape and dtype
  // against `target` (a name it lacks, another shape: an error before anything is received).
  // Several calls may add to one staging (vLLM sends an update in several /update_weights calls).
  // An error (a peer gone, the timeout) discards the whole staging. `target` is only read.
  [[nodiscard]] status receive(const std::vector<broadcast_tensor>& layout, const policy& target);

  // Receives a delta (weight_delta_layout: the changed tensors only) after checking each name,
  // shape and dtype against `target` and each count against its shape (an error before anything
  // is received, as receive's), then rebuilds every changed tensor aside from target's current
  // one and compares its checksum: only when all match are they staged (replacing any staging).
  // A checksum that does not match (target is not the delta's base) is an error after the whole
  // delta was received, so the group stays in step (in_step()); the staging is empty then.
  // `target` is only read.
  [[nodiscard]] status receive_delta(const weight_delta_layout& layout, const policy& target);

  // False once a receive failed mid-stream or was refused before receiving: the group is out of
  // step with the sender and must be formed again.
  [[nodiscard]] bool in_step() const;

  // Copies the staging into `target` (the caller holds it exclusively) and empties it. Errors:
  // nothing staged, a staging that lacks some of target's parameters (target unchanged); a staged
  // delta replaces only its tensors (an empty delta changes nothing).
  [[nodiscard]] status commit(policy& target);

  // Empties the staging.
  void discard();

  struct state;

 private:
  explicit broadcast_receiver(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

}  // namespace leap::learner
