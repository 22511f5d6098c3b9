// CUDA IPC weight transfer from the learner to a policy server on the same GPU (another GPU of the
// same host: peer access is asked for, untested), in another process: the data plane of the
// project's "ipc" weight-transfer backend, under vLLM's routes (/start_weight_update,
// /update_weights, /finish_weight_update).
//
// Why not vLLM's own encoding: vLLM's IPC engine (vllm/distributed/weight_transfer/ipc_engine.py
// at vllm-project/vllm commit 406784bdea7f095012a1a038b5ca87403b5b15d4) sends, per tensor, the
// pickled result of torch.multiprocessing.reductions.reduce_tensor (a Python pickle naming
// rebuild_cuda_tensor, with the caching allocator's storage handle, PyTorch's shared-memory
// ref-counter file and a CUDA event), base64 under "ipc_handles_pickled": C++ can neither write the
// ref-counter nor read the pickle. So the learner and the project's server speak this file's
// encoding under the same routes and body keys (policy/README.md, "vLLM's ipc backend"); a real
// vLLM would not accept it, as with the nccl rendezvous.
//
// Protocol: the learner allocates ONE device buffer with cuMemAlloc (not LibTorch's caching
// allocator: one handle covers every tensor, and expandable segments do not matter), sized to its
// base parameters at 256-byte aligned offsets, and exports it once (cuIpcGetMemHandle). Per update
// it copies the parameters into the buffer (snapshot) and the server's /update_weights carries
// update_info:
//   {"names": [...], "dtype_names": [...], "shapes": [[...]...]   (as vLLM's nccl update_info)
//    "offsets": [...]         byte offset of each tensor in the buffer
//    "buffer_bytes": N        the buffer's size
//    "ipc_handle": "<base64>" the 64 bytes of the CUipcMemHandle
//    "pid": P, "device_index": D   the exporting process and its device ordinal (for messages
//                                   and to refuse opening in the exporting process itself)}
// The server checks it against its model before any driver call, opens the handle, copies every
// tensor into a staging buffer of its own (device, dtype), synchronizes and closes the handle: the
// learner may overwrite the buffer for the next update as soon as /update_weights has answered.
// /finish_weight_update swaps the staging in, all or nothing (as the nccl receiver does).
//
// The driver is loaded at run time (learner/detail/cuda_driver.hpp): without an NVIDIA driver
// every call that needs it says "CUDA IPC needs the NVIDIA driver (libcuda.so.1): ...".
// No LibTorch in this header. Neither class is thread-safe: one caller at a time.
#pragma once

#include "common/result.hpp"
#include "learner/policy.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace leap::learner {

inline constexpr std::size_t ipc_handle_bytes = 64;  // sizeof(CUipcMemHandle)
inline constexpr std::uint64_t ipc_alignment = 256;  // of every tensor's offset

struct ipc_tensor {
  std::string name;
  std::string dtype;  // "float32", "bfloat16", "float16", "float64"
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // bytes from the buffer's start

  friend bool operator==(const ipc_tensor&, const ipc_tensor&) = default;
};

struct ipc_update_info {
  std::vector<ipc_tensor> tensors;
  std::uint64_t buffer_bytes = 0;
  std::array<unsigned char, ipc_handle_bytes> handle{};
  std::int64_t pid = 0;
  int device_index = 0;
};

// The update_info JSON (see the file comment). Pure.
[[nodiscard]] nlohmann::json render_ipc_update_info(const ipc_update_info& info);
// Parses and checks the update_info on its own: the keys and their types, the arrays of one
// length, ipc_handle valid base64 of exactly 64 bytes, every dtype a float type, every tensor's
// bytes (elements x dtype size) inside buffer_bytes at an aligned offset, no two overlapping.
// Pure: no driver call. Errors name the key or the tensor.
[[nodiscard]] result<ipc_update_info> parse_ipc_update_info(const nlohmann::json& update_info);
// Checks a parsed update against the model it will be copied into: every name one of `target`'s
// base parameters with the same shape, the exporter another process than this one. Pure.
[[nodiscard]] status check_ipc_update(const ipc_update_info& info, const policy& target);

// RFC 4648 base64 with padding. decode: errors name the first bad character or a bad length.
[[nodiscard]] std::string base64_encode(const unsigned char* data, std::size_t size);
[[nodiscard]] result<std::vector<unsigned char>> base64_decode(const std::string& text);

// Whether this process can use CUDA IPC: the NVIDIA driver loads and initialises. Errors: "CUDA
// IPC needs the NVIDIA driver (libcuda.so.1): ...".
[[nodiscard]] status cuda_ipc_available();

// The learner's end: the exported buffer.
class ipc_exporter {
 public:
  // Allocates and exports a buffer for `p`'s base parameters. Errors: p not on a cuda device, no
  // driver, the allocation fails (out of memory).
  [[nodiscard]] static result<std::unique_ptr<ipc_exporter>> create(const policy& p);
  // Frees the buffer: a server opening the handle afterwards gets an error.
  ~ipc_exporter();
  ipc_exporter(const ipc_exporter&) = delete;
  ipc_exporter& operator=(const ipc_exporter&) = delete;

  // Copies `p`'s base parameters into the buffer and waits until they are there. Errors: p's
  // parameters are not those the buffer was laid out for (names, shapes, dtypes, device).
  [[nodiscard]] status snapshot(const policy& p);

  // The update_info of the buffer (the same for every snapshot).
  [[nodiscard]] const ipc_update_info& info() const;

  struct state;

 private:
  explicit ipc_exporter(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

// A server's end: opens the learner's buffer per update and stages a copy.
class ipc_receiver {
 public:
  ipc_receiver();
  ~ipc_receiver();
  ipc_receiver(const ipc_receiver&) = delete;
  ipc_receiver& operator=(const ipc_receiver&) = delete;

  // Checks `info` (check_ipc_update) before opening anything, then opens the handle on target's
  // device, copies every tensor into staging on target's device and dtype, synchronizes and closes
  // the handle. Several calls may add to one staging. An error discards the whole staging.
  // `target` is only read. Errors: the checks', target not on a cuda device, no driver, the handle
  // does not open (the learner's buffer is gone: its process ended).
  [[nodiscard]] status receive(const ipc_update_info& info, const policy& target);
  // As broadcast_receiver::commit.
  [[nodiscard]] status commit(policy& target);
  void discard();

  struct state;

 private:
  std::unique_ptr<state> state_;
};

}  // namespace leap::learner
