// The learner's one c10d group former (detail/c10d_group.hpp).
#include "learner/detail/c10d_group.hpp"

#include "learner/detail/transformer.hpp"

#ifdef LEAP_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef LEAP_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <csignal>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace leap::learner::detail {

namespace {

// The store key ranks 1..size-1 add 1 to once connected (await_c10d_joins). Apart from the keys
// c10d's process groups use, which carry no "leap/" prefix.
constexpr const char* joined_key = "leap/ranks_joined";

}  // namespace

bool c10d_group::connected() const {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  return static_cast<bool>(backend);
#else
  return false;
#endif
}

int c10d_group::port() const {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  return store ? store->getPort() : 0;
#else
  return 0;
#endif
}

at::Device c10d_group::wire_device() const { return nccl ? device : at::Device(at::kCPU); }

at::Tensor c10d_group::on_wire(const at::Tensor& t) const {
  if (!nccl && t.dim() > 0 && t.element_size() > 1) {
    return t.view(at::kByte);
  }
  return t;
}

void c10d_group::close() {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  backend.reset();
  store.reset();
#endif
  nccl = false;
}

void open_c10d_store(c10d_group& g, const std::string& host, int port, bool server,
                     int world_size) {
  g.host = host;
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  // Gloo's TCP pairs write without MSG_NOSIGNAL: a peer that died (a killed rank) would end this
  // process by SIGPIPE instead of failing the collective with an error the trainer names. Python
  // ignores SIGPIPE for torch.distributed; a C++ process must do it itself. Every child spawned
  // after this inherits the ignored signal; the sandbox's and the daemon's restore the default.
  ::signal(SIGPIPE, SIG_IGN);
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = server;
  options.numWorkers = world_size;
  options.waitWorkers = false;  // the process group's rendezvous (or await_c10d_joins) waits
  options.timeout = g.timeout;
  g.store = c10::make_intrusive<c10d::TCPStore>(host, options);
#else
  (void)port;
  (void)server;
  (void)world_size;
#endif
}

status await_c10d_joins(c10d_group& g, int size, const std::function<status()>& check_peers) {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  // Polled rather than blocking in the process group's rendezvous, which only ends at the timeout
  // when a rank never comes (a worker that exited at start would cost the whole timeout).
  const auto deadline = std::chrono::steady_clock::now() + g.timeout;
  std::int64_t joined = 0;
  while (true) {
    if (check_peers) {
      if (auto s = check_peers(); !s) {
        return s;
      }
    }
    joined = g.store->add(joined_key, 0);
    if (joined >= size - 1) {
      return ok_status();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ostringstream seconds;
  seconds << static_cast<double>(g.timeout.count()) / 1000.0;
  return error{std::to_string(joined + 1) + " of " + std::to_string(size) +
               " ranks joined within " + seconds.str() + " s"};
#else
  (void)g;
  (void)size;
  (void)check_peers;
  return ok_status();
#endif
}

void join_c10d_group(c10d_group& g) {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  g.store->add(joined_key, 1);
#else
  (void)g;
#endif
}

status form_c10d_group(c10d_group& g, int rank, int size, at::Device device) {
  g.device = device;
#ifdef LEAP_C10D_NCCL
  if (device.is_cuda()) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = g.timeout;
    g.backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(g.store, rank, size, options);
    g.nccl = true;
    return ok_status();
  }
#endif
#ifdef LEAP_C10D_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create(g.timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(g.host));
  g.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(g.store, rank, size, options);
  g.nccl = false;
  return ok_status();
#else
  (void)rank;
  (void)size;
  if (has_c10d()) {
    return error{"device " + device_name(device) +
                 ": this build has c10d's NCCL only, for cuda devices"};
  }
  return error{"this LibTorch build has no c10d backend"};
#endif
}

void c10d_broadcast(c10d_group& g, at::Tensor& t, std::chrono::milliseconds timeout) {
#if defined(LEAP_C10D_GLOO) || defined(LEAP_C10D_NCCL)
  if (timeout == std::chrono::milliseconds::zero()) {
    timeout = g.timeout;
  }
  if (!g.backend) {
    throw std::runtime_error("not connected");
  }
  std::vector<at::Tensor> tensors{g.on_wire(t)};
  c10d::BroadcastOptions options;
  options.rootRank = 0;
  options.timeout = timeout;
  g.backend->broadcast(tensors, options)->wait(timeout);
#else
  (void)g;
  (void)t;
  (void)timeout;
#endif
}

}  // namespace leap::learner::detail
