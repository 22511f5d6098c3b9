#include "learner/weight_ipc.hpp"

#include "learner/detail/cuda_driver.hpp"
#include "learner/detail/transformer.hpp"
#include "learner/detail/weight_staging.hpp"
#include "learner/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <unistd.h>

namespace leap::learner {

namespace {

using nlohmann::json;

const char* const what = "ipc weight transfer";

constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::uint64_t element_bytes(const std::string& dtype) {
  if (dtype == "float64") {
    return 8;
  }
  if (dtype == "float32") {
    return 4;
  }
  return 2;  // bfloat16, float16 (parse_torch_dtype refused the rest)
}

std::uint64_t align_up(std::uint64_t n) {
  return (n + ipc_alignment - 1) / ipc_alignment * ipc_alignment;
}

// A non-negative integer of a JSON value, or nothing.
std::optional<std::uint64_t> unsigned_of(const json& v) {
  if (v.is_number_unsigned()) {
    return v.get<std::uint64_t>();
  }
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  }
  return std::nullopt;
}

const json* array_of(const json& info, const char* key) {
  const auto it = info.find(key);
  return it != info.end() && it->is_array() ? &*it : nullptr;
}

int device_index_of(const at::Tensor& t) { return t.device().index() < 0 ? 0 : t.device().index(); }

// A tensor over `bytes` of device memory that LibTorch neither owns nor frees. The device is named
// (target_device), so LibTorch does not ask the runtime which device the pointer is on: for a
// mapped IPC buffer that would be the exporter's device, not the one it is read from.
at::Tensor device_view(std::uint64_t address, const std::vector<std::int64_t>& shape,
                       at::ScalarType type, int ordinal) {
  const at::Device device(at::kCUDA, static_cast<at::DeviceIndex>(ordinal));
  // The driver API hands device addresses out as integers (CUdeviceptr) and LibTorch takes them as
  // pointers: no pointer exists that the cast could come from instead.
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  void* data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
  return at::for_blob(data, shape)
      .options(at::TensorOptions().dtype(type).device(device))
      .target_device(device)
      .make_tensor();
}

}  // namespace

std::string base64_encode(const unsigned char* data, std::size_t size) {
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (std::size_t i = 0; i < size; i += 3) {
    const std::uint32_t n = (std::uint32_t{data[i]} << 16) |
                            (i + 1 < size ? std::uint32_t{data[i + 1]} << 8 : 0U) |
                            (i + 2 < size ? std::uint32_t{data[i + 2]} : 0U);
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < size ? alphabet[(n >> 6) & 63] : '=';
    out += i + 2 < size ? alphabet[n & 63] : '=';
  }
  return out;
}

result<std::vector<unsigned char>> base64_decode(const std::string& text) {
  if (text.size() % 4 != 0) {
    return error{"base64 of " + std::to_string(text.size()) +
                 " characters: the length must be a multiple of 4"};
  }
  std::vector<unsigned char> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    std::uint32_t n = 0;
    int pad = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      std::uint32_t v = 0;
      if (c == '=' && i + 4 == text.size() && j >= 2 && (j == 3 || text[i + 3] == '=')) {
        ++pad;
      } else if (const char* at = std::strchr(alphabet, c);
                 c != '\0' && at != nullptr && pad == 0) {
        v = static_cast<std::uint32_t>(at - alphabet);
      } else {
        return error{"base64: bad character at " + std::to_string(i + j)};
      }
      n = (n << 6) | v;
    }
    out.push_back(static_cast<unsigned char>(n >> 16));
    if (pad < 2) {
      out.push_back(static_cast<unsigned char>((n >> 8) & 0xff));
    }
    if (pad < 1) {
      out.push_back(static_cast<unsigned char>(n & 0xff));
    }
  }
  return out;
}

json render_ipc_update_info(const ipc_update_info& info) {
  json names = json::array(), dtypes = json::array(), shapes = json::array(),
       offsets = json::array();
  for (const auto& t : info.tensors) {
    names.push_back(t.name);
    dtypes.push_back(t.dtype);
    shapes.push_back(t.shape);
    offsets.push_back(t.offset);
  }
  return json{{"names", std::move(names)},
              {"dtype_names", std::move(dtypes)},
              {"shapes", std::move(shapes)},
              {"offsets", std::move(offsets)},
              {"buffer_bytes", info.buffer_bytes},
              {"ipc_handle", base64_encode(info.handle.data(), info.handle.size())},
              {"pid", info.pid},
              {"device_index", info.device_index}};
}

result<ipc_update_info> parse_ipc_update_info(const json& update_info) {
  auto fail = [](const std::string& m) { return error{"ipc update_info: " + m}; };
  if (!update_info.is_object()) {
    return fail("must be a JSON object");
  }
  const json* names = array_of(update_info, "names");
  const json* dtypes = array_of(update_info, "dtype_names");
  const json* shapes = array_of(update_info, "shapes");
  const json* offsets = array_of(update_info, "offsets");
  if (!names || !dtypes || !shapes || !offsets) {
    return fail("needs the arrays names, dtype_names, shapes and offsets");
  }
  if (dtypes->size() != names->size() || shapes->size() != names->size() ||
      offsets->size() != names->size()) {
    return fail("names, dtype_names, shapes and offsets must be of one length: got " +
                std::to_string(names->size()) + ", " + std::to_string(dtypes->size()) + ", " +
                std::to_string(shapes->size()) + " and " + std::to_string(offsets->size()));
  }
  ipc_update_info info;
  const auto bytes = update_info.contains("buffer_bytes") ? unsigned_of(update_info["buffer_bytes"])
                                                          : std::nullopt;
  if (!bytes || *bytes == 0) {
    return fail("'buffer_bytes' must be a positive integer");
  }
  info.buffer_bytes = *bytes;
  const auto pid = update_info.contains("pid") ? unsigned_of(update_info["pid"]) : std::nullopt;
  if (!pid || *pid == 0 ||
      *pid > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return fail("'pid' must be the exporting process's id (a positive integer)");
  }
  info.pid = static_cast<std::int64_t>(*pid);
  const auto device = update_info.contains("device_index")
                          ? unsigned_of(update_info["device_index"])
                          : std::nullopt;
  if (!device || *device > 1024) {
    return fail("'device_index' must be a device ordinal");
  }
  info.device_index = static_cast<int>(*device);
  const auto handle = update_info.find("ipc_handle");
  if (handle == update_info.end() || !handle->is_string()) {
    return fail("'ipc_handle' must be a string (base64 of the 64-byte CUipcMemHandle)");
  }
  auto decoded = base64_decode(handle->get<std::string>());
  if (!decoded) {
    return decoded.err().wrap("ipc update_info: 'ipc_handle'");
  }
  if (decoded->size() != ipc_handle_bytes) {
    return fail("'ipc_handle' holds " + std::to_string(decoded->size()) +
                " bytes, a CUipcMemHandle " + std::to_string(ipc_handle_bytes));
  }
  std::copy(decoded->begin(), decoded->end(), info.handle.begin());

  // [offset, end) of each non-empty tensor, to find overlaps.
  std::vector<std::pair<std::uint64_t, std::pair<std::uint64_t, std::size_t>>> spans;
  for (std::size_t i = 0; i < names->size(); ++i) {
    if (!(*names)[i].is_string() || !(*dtypes)[i].is_string() || !(*shapes)[i].is_array()) {
      return fail("entry " + std::to_string(i) +
                  ": a name and dtype name (strings) and a shape "
                  "(an array)");
    }
    ipc_tensor t;
    t.name = (*names)[i].get<std::string>();
    t.dtype = (*dtypes)[i].get<std::string>();
    if (auto type = parse_torch_dtype(t.dtype); !type) {
      return type.err().wrap("ipc update_info: tensor '" + t.name + "'");
    }
    std::uint64_t elements = 1;
    for (const auto& d : (*shapes)[i]) {
      const auto n = unsigned_of(d);
      if (!n) {
        return fail("the shape of '" + t.name + "' must hold non-negative integers");
      }
      t.shape.push_back(static_cast<std::int64_t>(*n));
      if (*n != 0 && elements > info.buffer_bytes / *n) {
        return fail("tensor '" + t.name + "' does not fit in buffer_bytes " +
                    std::to_string(info.buffer_bytes));
      }
      elements *= *n;
    }
    const auto offset = unsigned_of((*offsets)[i]);
    if (!offset) {
      return fail("the offset of '" + t.name + "' must be a non-negative integer");
    }
    t.offset = *offset;
    if (t.offset % ipc_alignment != 0) {
      return fail("the offset " + std::to_string(t.offset) + " of '" + t.name +
                  "' is not a multiple of " + std::to_string(ipc_alignment));
    }
    const std::uint64_t size = elements * element_bytes(t.dtype);
    if (size / element_bytes(t.dtype) != elements || t.offset > info.buffer_bytes ||
        size > info.buffer_bytes - t.offset) {
      return fail("tensor '" + t.name + "' (" + std::to_string(size) + " bytes at offset " +
                  std::to_string(t.offset) + ") is out of the buffer's " +
                  std::to_string(info.buffer_bytes) + " bytes");
    }
    if (size > 0) {
      spans.push_back({t.offset, {t.offset + size, i}});
    }
    info.tensors.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second.first) {
      return fail("tensors '" + info.tensors[spans[i - 1].second.second].name + "' and '" +
                  info.tensors[spans[i].second.second].name + "' overlap in the buffer");
    }
  }
  return info;
}

status check_ipc_update(const ipc_update_info& info, const policy& target) {
  std::vector<detail::announced_tensor> announced;
  announced.reserve(info.tensors.size());
  for (const auto& t : info.tensors) {
    announced.push_back({t.name, t.dtype, t.shape});
  }
  auto checked = detail::check_announced(announced, target, what);
  if (!checked) {
    return checked.err();
  }
  if (info.pid == static_cast<std::int64_t>(::getpid())) {
    return error{std::string(what) + ": the buffer was exported by this process (pid " +
                 std::to_string(info.pid) +
                 "), and CUDA opens no handle in its own process: the learner and the server "
                 "must be two processes (the embedded server takes the weights in memory)"};
  }
  return ok_status();
}

status cuda_ipc_available() {
  auto driver = detail::load_cuda_driver();
  if (!driver) {
    return driver.err();
  }
  return ok_status();
}

// ---- exporter ----

struct ipc_exporter::state {
  const detail::cuda_driver* driver = nullptr;
  int ordinal = 0;
  detail::cu_deviceptr base = 0;
  ipc_update_info info;
};

ipc_exporter::ipc_exporter(std::unique_ptr<state> s) : state_(std::move(s)) {}

ipc_exporter::~ipc_exporter() {
  if (!state_ || state_->base == 0) {
    return;
  }
  detail::cuda_context_scope scope(*state_->driver, state_->ordinal);
  if (scope.ok()) {
    (void)state_->driver->mem_free(state_->base);
  }
}

result<std::unique_ptr<ipc_exporter>> ipc_exporter::create(const policy& p) {
  return detail::guarded(
      std::string(what) + ": exporting the learner's buffer",
      [&]() -> result<std::unique_ptr<ipc_exporter>> {
        auto s = std::make_unique<state>();
        const auto params = detail::transfer_parameters(p);
        if (params.empty()) {
          return error{"the model has no parameters"};
        }
        const at::Device device = params.front().tensor->device();
        if (!device.is_cuda()) {
          return error{"the learner's model is on " + detail::device_name(device) +
                       ": CUDA IPC needs it on a cuda device (learner.device: cuda)"};
        }
        s->ordinal = device_index_of(*params.front().tensor);
        std::uint64_t offset = 0;
        for (const auto& [name, tensor] : params) {
          ipc_tensor t;
          t.name = name;
          t.dtype = detail::dtype_name(tensor->scalar_type());
          t.shape = tensor->sizes().vec();
          t.offset = offset;
          offset = align_up(offset + static_cast<std::uint64_t>(tensor->numel()) *
                                         static_cast<std::uint64_t>(tensor->element_size()));
          s->info.tensors.push_back(std::move(t));
        }
        s->info.buffer_bytes = std::max<std::uint64_t>(offset, ipc_alignment);
        s->info.pid = static_cast<std::int64_t>(::getpid());
        s->info.device_index = s->ordinal;
        auto driver = detail::load_cuda_driver();
        if (!driver) {
          return driver.err();
        }
        s->driver = *driver;
        detail::cuda_context_scope scope(*s->driver, s->ordinal);
        if (!scope.ok()) {
          return scope.ok().err();
        }
        if (auto rc = s->driver->mem_alloc(&s->base, s->info.buffer_bytes); rc != 0) {
          s->base = 0;
          return s->driver->fail("cuMemAlloc of " + std::to_string(s->info.buffer_bytes) + " bytes",
                                 rc);
        }
        auto exporter = std::unique_ptr<ipc_exporter>(new ipc_exporter(std::move(s)));
        detail::cu_ipc_mem_handle handle{};
        if (auto rc = exporter->state_->driver->ipc_get_mem_handle(&handle, exporter->state_->base);
            rc != 0) {
          return exporter->state_->driver->fail("cuIpcGetMemHandle", rc);
        }
        std::copy(handle.reserved.begin(), handle.reserved.end(),
                  exporter->state_->info.handle.begin());
        return exporter;
      });
}

status ipc_exporter::snapshot(const policy& p) {
  return detail::guarded(
      std::string(what) + ": copying the weights into the buffer", [&]() -> status {
        const auto params = detail::transfer_parameters(p);
        const auto& tensors = state_->info.tensors;
        if (params.size() != tensors.size()) {
          return error{"the model has " + std::to_string(params.size()) +
                       " parameters, the buffer " + std::to_string(tensors.size())};
        }
        at::NoGradGuard no_grad;
        for (std::size_t i = 0; i < params.size(); ++i) {
          const at::Tensor& from = *params[i].tensor;
          const ipc_tensor& to = tensors[i];
          if (params[i].name != to.name || !from.sizes().equals(to.shape) ||
              detail::dtype_name(from.scalar_type()) != to.dtype || !from.device().is_cuda() ||
              device_index_of(from) != state_->ordinal) {
            return error{"parameter '" + params[i].name + "' is not laid out as the buffer's '" +
                         to.name + "'"};
          }
          at::Tensor view =
              device_view(state_->base + to.offset, to.shape, from.scalar_type(), state_->ordinal);
          view.copy_(from.detach());
        }
        // The copies run on LibTorch's stream in the device's primary context: wait for all of
        // them, so the buffer is whole before the server is told to read it.
        detail::cuda_context_scope scope(*state_->driver, state_->ordinal);
        if (!scope.ok()) {
          return scope.ok().err();
        }
        if (auto rc = state_->driver->ctx_synchronize(); rc != 0) {
          return state_->driver->fail("cuCtxSynchronize", rc);
        }
        return ok_status();
      });
}

const ipc_update_info& ipc_exporter::info() const { return state_->info; }

// ---- receiver ----

struct ipc_receiver::state {
  detail::weight_staging staging;
};

ipc_receiver::ipc_receiver() : state_(std::make_unique<state>()) {}
ipc_receiver::~ipc_receiver() = default;

namespace {

// The learner's buffer mapped into this process for one update; the destructor waits for the
// copies out of it and unmaps it.
struct opened_buffer {
  const detail::cuda_driver& driver;
  detail::cu_deviceptr base = 0;
  ~opened_buffer() {
    if (base == 0) {
      return;
    }
    (void)driver.ctx_synchronize();
    (void)driver.ipc_close_mem_handle(base);
  }
};

}  // namespace

status ipc_receiver::receive(const ipc_update_info& info, const policy& target) {
  auto received = [&]() -> status {
    if (auto checked = check_ipc_update(info, target); !checked) {
      return checked;
    }
    auto driver = detail::load_cuda_driver();
    if (!driver) {
      return driver.err();
    }
    return detail::guarded(std::string(what) + ": receiving", [&]() -> status {
      std::map<std::string, const at::Tensor*> served;
      for (const auto& [name, tensor] : detail::transfer_parameters(target)) {
        served[name] = tensor;
      }
      if (served.empty()) {
        return error{"the served model has no parameters"};
      }
      const at::Device device = served.begin()->second->device();
      if (!device.is_cuda()) {
        return error{"the served model is on " + detail::device_name(device) +
                     ": CUDA IPC needs it on a cuda device (serve it with --device cuda)"};
      }
      const int ordinal = device_index_of(*served.begin()->second);
      detail::cuda_context_scope scope(**driver, ordinal);
      if (!scope.ok()) {
        return scope.ok().err();
      }
      detail::cu_ipc_mem_handle handle{};
      std::copy(info.handle.begin(), info.handle.end(), handle.reserved.begin());
      opened_buffer buffer{**driver};
      if (auto rc = (*driver)->ipc_open_mem_handle(&buffer.base, handle,
                                                   detail::cu_ipc_lazy_enable_peer_access);
          rc != 0) {
        buffer.base = 0;
        return (*driver)
            ->fail("opening the learner's buffer (process " + std::to_string(info.pid) +
                       ", its device " + std::to_string(info.device_index) +
                       ") with cuIpcOpenMemHandle",
                   rc)
            .wrap("the learner's buffer is gone (its process ended?) or not on this host");
      }
      at::NoGradGuard no_grad;
      for (const auto& t : info.tensors) {
        const at::Tensor& into = *served.at(t.name);
        auto type = parse_torch_dtype(t.dtype);
        if (!type) {
          return type.err();
        }
        at::Tensor view =
            device_view(buffer.base + t.offset, t.shape, detail::scalar_type(*type), ordinal);
        state_->staging.staged[t.name] =
            view.to(into.device(), into.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
      }
      return ok_status();  // `buffer` synchronizes and unmaps on the way out
    });
  }();
  if (!received) {
    discard();
  }
  return received;
}

status ipc_receiver::commit(policy& target) { return state_->staging.commit(target, what); }

void ipc_receiver::discard() { state_->staging.discard(); }

}  // namespace leap::learner
