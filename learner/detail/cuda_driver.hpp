// The few CUDA driver-API calls the ipc weight transfer needs, loaded at run time with
// dlopen("libcuda.so.1"): the code compiles and links on every machine (no CUDA toolkit, a CPU
// LibTorch) and fails with a clear error where no NVIDIA driver is installed. The types and
// signatures are declared here from cuda.h's ABI (CUresult is an int, CUdevice an int,
// CUdeviceptr 64 bits, CUcontext a pointer, CUipcMemHandle 64 opaque bytes passed by value).
// Internal to learner/; no LibTorch.
#pragma once

#include "common/result.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace leap::learner::detail {

using cu_result = int;
using cu_device = int;
using cu_deviceptr = std::uint64_t;
using cu_context = struct cu_context_opaque*;
inline constexpr std::size_t cu_ipc_handle_bytes = 64;
struct cu_ipc_mem_handle {
  std::array<unsigned char, cu_ipc_handle_bytes> reserved;
};
static_assert(sizeof(cu_ipc_mem_handle) == cu_ipc_handle_bytes);
// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: a buffer on another GPU of the host is reached by peer
// access.
inline constexpr unsigned cu_ipc_lazy_enable_peer_access = 0x1;

struct cuda_driver {
  cu_result (*init)(unsigned flags);
  cu_result (*device_get)(cu_device* device, int ordinal);
  cu_result (*primary_ctx_retain)(cu_context* ctx, cu_device device);
  cu_result (*primary_ctx_release)(cu_device device);
  cu_result (*ctx_push)(cu_context ctx);
  cu_result (*ctx_pop)(cu_context* ctx);
  cu_result (*ctx_synchronize)();
  cu_result (*mem_alloc)(cu_deviceptr* ptr, std::size_t bytes);
  cu_result (*mem_free)(cu_deviceptr ptr);
  cu_result (*ipc_get_mem_handle)(cu_ipc_mem_handle* handle, cu_deviceptr ptr);
  cu_result (*ipc_open_mem_handle)(cu_deviceptr* ptr, cu_ipc_mem_handle handle, unsigned flags);
  cu_result (*ipc_close_mem_handle)(cu_deviceptr ptr);
  cu_result (*get_error_string)(cu_result rc, const char** text);

  // `what` failed with `rc`, as an error naming the call and the driver's text.
  [[nodiscard]] error fail(const std::string& what, cu_result rc) const;
};

// The driver, loaded and cuInit'ed once per process (thread-safe). Errors: "CUDA IPC needs the
// NVIDIA driver (libcuda.so.1): <why>" where the library or one of the symbols is missing, or
// cuInit fails (no device).
[[nodiscard]] result<const cuda_driver*> load_cuda_driver();

// The device's primary context (the one LibTorch's runtime uses) made current on this thread for
// the scope's lifetime. Check ok() after constructing.
class cuda_context_scope {
 public:
  cuda_context_scope(const cuda_driver& driver, int ordinal);
  ~cuda_context_scope();
  cuda_context_scope(const cuda_context_scope&) = delete;
  cuda_context_scope& operator=(const cuda_context_scope&) = delete;
  [[nodiscard]] const status& ok() const { return status_; }

 private:
  const cuda_driver& driver_;
  cu_device device_ = 0;
  bool retained_ = false;
  bool pushed_ = false;
  status status_ = ok_status();
};

}  // namespace leap::learner::detail
