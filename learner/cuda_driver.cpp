#include "learner/detail/cuda_driver.hpp"

#include <dlfcn.h>
#include <mutex>
#include <type_traits>

namespace leap::learner::detail {

namespace {

const char* const needs_driver = "CUDA IPC needs the NVIDIA driver (libcuda.so.1): ";

result<cuda_driver> open_driver() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return error{std::string(needs_driver) + (why ? why : "it cannot be loaded")};
  }
  // Never dlclose'd: the driver stays for the process's life, as the CUDA runtime keeps it.
  cuda_driver d{};
  std::string missing;
  auto bind = [&](auto& fn, const char* symbol) {
    void* found = ::dlsym(lib, symbol);
    if (found == nullptr) {
      missing += missing.empty() ? symbol : std::string(", ") + symbol;
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(found);
  };
  bind(d.init, "cuInit");
  bind(d.device_get, "cuDeviceGet");
  bind(d.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
  bind(d.primary_ctx_release, "cuDevicePrimaryCtxRelease_v2");
  bind(d.ctx_push, "cuCtxPushCurrent_v2");
  bind(d.ctx_pop, "cuCtxPopCurrent_v2");
  bind(d.ctx_synchronize, "cuCtxSynchronize");
  bind(d.mem_alloc, "cuMemAlloc_v2");
  bind(d.mem_free, "cuMemFree_v2");
  bind(d.ipc_get_mem_handle, "cuIpcGetMemHandle");
  bind(d.ipc_open_mem_handle, "cuIpcOpenMemHandle_v2");
  bind(d.ipc_close_mem_handle, "cuIpcCloseMemHandle");
  bind(d.get_error_string, "cuGetErrorString");
  if (!missing.empty()) {
    return error{std::string(needs_driver) + "this driver lacks " + missing + " (too old?)"};
  }
  if (const cu_result rc = d.init(0); rc != 0) {
    return error{std::string(needs_driver) + d.fail("cuInit", rc).message};
  }
  return d;
}

}  // namespace

error cuda_driver::fail(const std::string& what, cu_result rc) const {
  const char* text = nullptr;
  if (get_error_string == nullptr || get_error_string(rc, &text) != 0 || text == nullptr) {
    text = "unknown error";
  }
  return error{what + " failed: " + text + " (CUresult " + std::to_string(rc) + ")"};
}

result<const cuda_driver*> load_cuda_driver() {
  static std::once_flag once;
  static result<cuda_driver> loaded = error{"not loaded"};
  std::call_once(once, [] { loaded = open_driver(); });
  if (!loaded) {
    return loaded.err();
  }
  return &*loaded;
}

cuda_context_scope::cuda_context_scope(const cuda_driver& driver, int ordinal) : driver_(driver) {
  if (cu_result rc = driver_.device_get(&device_, ordinal); rc != 0) {
    status_ = driver_.fail("cuDeviceGet(" + std::to_string(ordinal) + ")", rc);
    return;
  }
  cu_context ctx = nullptr;
  if (cu_result rc = driver_.primary_ctx_retain(&ctx, device_); rc != 0) {
    status_ = driver_.fail("cuDevicePrimaryCtxRetain", rc);
    return;
  }
  retained_ = true;
  if (cu_result rc = driver_.ctx_push(ctx); rc != 0) {
    status_ = driver_.fail("cuCtxPushCurrent", rc);
    return;
  }
  pushed_ = true;
}

cuda_context_scope::~cuda_context_scope() {
  cu_context popped = nullptr;
  if (pushed_) {
    (void)driver_.ctx_pop(&popped);
  }
  if (retained_) {
    (void)driver_.primary_ctx_release(device_);
  }
}

}  // namespace leap::learner::detail
