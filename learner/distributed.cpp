// The data-parallel trainer's c10d group (detail/distributed.hpp), formed by detail/c10d_group.hpp
// as the weight broadcast's is: ProcessGroupNCCL for cuda devices (LEAP_C10D_NCCL),
// ProcessGroupGloo on host memory (LEAP_C10D_GLOO).
#include "learner/detail/distributed.hpp"

#include "learner/detail/c10d_group.hpp"
#include "learner/detail/transformer.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace leap::learner {

status validate(const distributed_options& options) {
  if (options.world_size < 1) {
    return error{"distributed 'world_size' must be at least 1 (got " +
                 std::to_string(options.world_size) + ")"};
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return error{"distributed 'rank' " + std::to_string(options.rank) + " is not in [0, " +
                 std::to_string(options.world_size) + ")"};
  }
  if (!(options.timeout_seconds > 0) || !std::isfinite(options.timeout_seconds)) {
    return error{"distributed 'timeout_seconds' must be > 0"};
  }
  if (options.bucket_bytes < 1) {
    return error{"distributed 'bucket_bytes' must be at least 1"};
  }
  if (options.world_size > 1) {
    const auto colon = options.master.rfind(':');
    const std::string port =
        colon == std::string::npos ? std::string() : options.master.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 &&
                        port.find_first_not_of("0123456789") == std::string::npos;
    // Port 0 (rank 0 only): the kernel picks one when the store binds (on_listening).
    const long lowest = options.rank == 0 ? 0 : 1;
    if (colon == 0 || !digits || std::stol(port) < lowest || std::stol(port) > 65535) {
      return error{"distributed 'master' must be HOST:PORT with a port in [" +
                   std::to_string(lowest) + ", 65535] (got '" + options.master + "')"};
    }
  }
  return ok_status();
}

namespace detail {

struct dp_group::impl {
  int rank = 0;
  int size = 1;
  bool failed = false;
  std::string failure;
  c10d_group group;

  [[nodiscard]] std::string name(const std::string& what) const {
    return "data-parallel " + what + " (rank " + std::to_string(rank) + " of " +
           std::to_string(size) + ")";
  }

  // Runs one collective step; a failure marks the group failed and names the collective.
  template <class F>
  auto run(const std::string& what, F&& f) -> decltype(f()) {
    if (failed) {
      throw std::runtime_error(name(what) + ": the group failed earlier: " + failure);
    }
    try {
      return f();
    } catch (const c10::Error& e) {
      failed = true;
      failure = name(what) + ": " + e.what_without_backtrace();
    } catch (const std::exception& e) {
      failed = true;
      failure = name(what) + ": " + e.what();
    }
    throw std::runtime_error(failure);
  }
};

dp_group::dp_group(std::unique_ptr<impl> i) : impl_(std::move(i)) {}
dp_group::~dp_group() = default;

int dp_group::rank() const { return impl_->rank; }
int dp_group::size() const { return impl_->size; }
at::Device dp_group::wire_device() const { return impl_->group.wire_device(); }
bool dp_group::failed() const { return impl_->failed; }
const std::string& dp_group::failure() const { return impl_->failure; }

result<std::unique_ptr<dp_group>> dp_group::connect(const distributed_options& options,
                                                    at::Device device) {
  if (auto s = validate(options); !s) {
    return s.err();
  }
  auto i = std::make_unique<impl>();
  i->rank = options.rank;
  i->size = options.world_size;
  i->group.timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::ceil(options.timeout_seconds * 1000.0)));
  const auto colon = options.master.rfind(':');
  const auto host = options.master.substr(0, colon);
  const int port = static_cast<int>(std::stol(options.master.substr(colon + 1)));
  std::string what = "forming the data-parallel group of " + std::to_string(options.world_size) +
                     " ranks at " + options.master + " (rank " + std::to_string(options.rank) + ")";
  if (!has_c10d()) {
    return error{
        "this LibTorch build has no c10d backend (gloo's headers, Debian's libgloo-dev, or a "
        "CUDA LibTorch with NCCL): data-parallel training is not available"};
  }
#ifndef LEAP_C10D_NCCL
  if (device.is_cuda()) {
    return error{"device " + device_name(device) +
                 ": this build has no c10d NCCL, and the learner's gloo group works on cpu "
                 "devices only"};
  }
#endif
  auto opened = guarded(what, [&]() -> status {
    open_c10d_store(i->group, host, port, options.rank == 0, options.world_size);
    return ok_status();
  });
  if (!opened) {
    return opened.err();
  }
  if (options.rank == 0) {
    // The bound port (the kernel's when `master` asked for 0) is the one the others are given.
    const std::string bound = host + ":" + std::to_string(i->group.port());
    what = "forming the data-parallel group of " + std::to_string(options.world_size) +
           " ranks at " + bound + " (rank 0)";
    if (options.on_listening) {
      if (auto s = options.on_listening(bound); !s) {
        return s.err().wrap(what);
      }
    }
  }
  return guarded(what, [&]() -> result<std::unique_ptr<dp_group>> {
    if (options.rank == 0) {
      if (auto s = await_c10d_joins(i->group, options.world_size, options.check_ranks); !s) {
        return s.err().wrap(what);
      }
    } else {
      join_c10d_group(i->group);
    }
    if (auto s = form_c10d_group(i->group, options.rank, options.world_size, device); !s) {
      return s.err();
    }
    return std::unique_ptr<dp_group>(new dp_group(std::move(i)));
  });
}

void dp_group::broadcast(at::Tensor& t, const std::string& what, bool wait_forever) {
  impl_->run("broadcast of " + what, [&] {
    // A year stands for "no timeout": gloo adds it to the current time.
    const auto timeout = wait_forever
                             ? std::chrono::milliseconds(std::int64_t{365} * 24 * 3600 * 1000)
                             : impl_->group.timeout;
    c10d_broadcast(impl_->group, t, timeout);
  });
}

void dp_group::broadcast_bytes(std::string& bytes, const std::string& what, bool wait_forever) {
  const auto wire = wire_device();
  auto length = at::tensor({static_cast<std::int64_t>(bytes.size())}, at::kLong).to(wire);
  broadcast(length, "the length of " + what, wait_forever);
  const auto n = length.cpu().item<std::int64_t>();
  auto data = at::empty({n}, at::TensorOptions().dtype(at::kByte));
  if (impl_->rank == 0) {
    std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  }
  if (n > 0) {
    auto on_wire = data.to(wire);
    broadcast(on_wire, what);
    data = on_wire.cpu();
  }
  bytes.assign(static_cast<const char*>(data.data_ptr()), static_cast<std::size_t>(n));
}

std::function<void()> dp_group::all_reduce_async(at::Tensor t, const std::string& what) {
  const auto name = "all-reduce of " + what;
  return impl_->run(name, [&]() -> std::function<void()> {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
    std::vector<at::Tensor> tensors{std::move(t)};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = impl_->group.timeout;
    auto work = impl_->group.backend->allreduce(tensors, o);
    return [this, work, name] { impl_->run(name, [&] { work->wait(impl_->group.timeout); }); };
#else
    (void)t;
    return [] {};
#endif
  });
}

void dp_group::all_reduce(at::Tensor& t, const std::string& what) { all_reduce_async(t, what)(); }

void dp_group::all_gather_pieces(at::Tensor& full, const std::string& what) {
  impl_->run("all-gather of " + what, [&] {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
    auto flat = impl_->group.on_wire(full.view({-1}));
    auto pieces = flat.chunk(impl_->size);
    std::vector<std::vector<at::Tensor>> outputs(1);
    outputs[0].assign(pieces.begin(), pieces.end());
    // The input is a copy: gloo and NCCL both write every output, the own piece included.
    std::vector<at::Tensor> inputs{pieces[static_cast<std::size_t>(impl_->rank)].clone()};
    c10d::AllgatherOptions o;
    o.timeout = impl_->group.timeout;
    impl_->group.backend->allgather(outputs, inputs, o)->wait(impl_->group.timeout);
#else
    (void)full;
#endif
  });
}

std::shared_ptr<void> on_gradient_accumulated(const at::Tensor& param,
                                              std::function<void()> ready) {
  auto node = torch::autograd::impl::grad_accumulator(param);
  node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [ready = std::move(ready)](const torch::autograd::variable_list& outputs,
                                 const torch::autograd::variable_list& /*inputs*/) {
        ready();
        return outputs;
      }));
  return node;
}

}  // namespace detail
}  // namespace leap::learner
