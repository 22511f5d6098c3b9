#include "actors/torch/torch_weight_transfer.hpp"

#include "actors/torch/torch_learner.hpp"
#include "learner/weight_broadcast.hpp"
#include "learner/weight_ipc.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <netdb.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace leap::actors {

namespace {

// "http://host:port/..." -> host ("[::1]" -> "::1").
std::string host_of(const std::string& url) {
  std::string rest = url;
  if (auto scheme = rest.find("://"); scheme != std::string::npos) {
    rest = rest.substr(scheme + 3);
  }
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    return close == std::string::npos ? rest : rest.substr(1, close - 1);
  }
  return rest.substr(0, rest.find_first_of(":/"));
}

// The local address the kernel routes to `host` from (a UDP connect sends nothing): the address
// the server can reach this process at.
result<std::string> local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    return error{"cannot resolve '" + host + "': " + ::gai_strerror(rc)};
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> hold(found, &::freeaddrinfo);
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd < 0) {
    return error{"no socket to find the route to '" + host + "'"};
  }
  sockaddr_storage local{};
  socklen_t size = sizeof local;
  const bool routed = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0;
  ::close(fd);
  if (!routed) {
    return error{"no route to '" + host + "'"};
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* where =
      local.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  if (::inet_ntop(local.ss_family, where, text, sizeof text) == nullptr) {
    return error{"cannot print the local address towards '" + host + "'"};
  }
  return std::string(text);
}

}  // namespace

struct torch_weight_transfer::state {
  std::weak_ptr<torch_learner> learner;
  std::string device;
  std::string address;
  std::unique_ptr<learner::broadcast_sender> sender;  // nccl
  // ipc: the exported buffer, made from the learner's weights on first use. The mutex keeps
  // update_info (the caller's thread) and a snapshot (the worker) apart.
  bool ipc = false;
  std::mutex buffer_mutex;
  std::unique_ptr<learner::ipc_exporter> exporter;

  // Runs `work` with the exporter, made for `p` if there is none yet.
  status with_exporter(const learner::policy& p,
                       const std::function<status(learner::ipc_exporter&)>& work) {
    std::lock_guard lock(buffer_mutex);
    if (!exporter) {
      auto made = learner::ipc_exporter::create(p);
      if (!made) {
        return made.err();
      }
      exporter = std::move(*made);
    }
    return work(*exporter);
  }

  // One worker runs the jobs in order: forming the group, then one broadcast per sync.
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;
  std::thread worker;

  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || !jobs.empty(); });
        if (jobs.empty()) {
          return;
        }
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }

  // Runs `work` on the worker and hands its outcome to `done`; after the stop, `done` gets an
  // error at once.
  void enqueue(std::function<status()> work, std::function<void(status)> done) {
    {
      std::lock_guard lock(mutex);
      if (!stopping) {
        jobs.push_back([work = std::move(work), done = std::move(done)]() { done(work()); });
        wake.notify_one();
        return;
      }
    }
    done(error{"the trainer's end of the weight transfer is closed"});
  }
};

result<std::unique_ptr<torch_weight_transfer>> torch_weight_transfer::open(
    std::weak_ptr<torch_learner> learner, const std::string& endpoint_url, std::string device,
    std::chrono::milliseconds timeout) {
  auto address = local_address_towards(host_of(endpoint_url));
  if (!address) {
    return address.err().wrap("policy.weight_sync nccl: " + endpoint_url);
  }
  auto sender = learner::broadcast_sender::listen(*address, 0, 2, timeout);
  if (!sender) {
    return sender.err().wrap("policy.weight_sync nccl");
  }
  auto s = std::make_shared<state>();
  s->learner = std::move(learner);
  s->device = std::move(device);
  s->address = std::move(*address);
  s->sender = std::move(*sender);
  s->worker = std::thread([raw = s.get()] { raw->run(); });
  return std::unique_ptr<torch_weight_transfer>(new torch_weight_transfer(std::move(s)));
}

result<std::unique_ptr<torch_weight_transfer>> torch_weight_transfer::open_ipc(
    std::weak_ptr<torch_learner> learner) {
  if (auto available = learner::cuda_ipc_available(); !available) {
    return available.err().wrap("policy.weight_sync ipc");
  }
  auto s = std::make_shared<state>();
  s->learner = std::move(learner);
  s->ipc = true;
  s->worker = std::thread([raw = s.get()] { raw->run(); });
  return std::unique_ptr<torch_weight_transfer>(new torch_weight_transfer(std::move(s)));
}

torch_weight_transfer::torch_weight_transfer(std::shared_ptr<state> s) : state_(std::move(s)) {}

torch_weight_transfer::~torch_weight_transfer() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_one();
  // The jobs still queued run first: each one's `done` must be called (the client waits for it).
  state_->worker.join();
  if (state_->sender) {
    state_->sender->close();
  }
}

std::string torch_weight_transfer::init_info() const {
  if (!state_->sender) {
    return "";
  }
  return nlohmann::json{{"master_address", state_->address},
                        {"master_port", state_->sender->port()},
                        {"rank_offset", 1},
                        {"world_size", 2}}
      .dump();
}

result<std::string> torch_weight_transfer::update_info() const {
  auto held = state_->learner.lock();
  if (!held) {
    return error{"the learner has stopped"};
  }
  if (state_->ipc) {
    std::string rendered;
    auto exported = held->with_weights(0, [&](const learner::policy& p) -> status {
      return state_->with_exporter(p, [&](learner::ipc_exporter& e) -> status {
        rendered = learner::render_ipc_update_info(e.info()).dump();
        return ok_status();
      });
    });
    if (!exported) {
      return exported.err().wrap("policy.weight_sync ipc");
    }
    return rendered;
  }
  policy::nccl_update_info info;
  auto listed = held->with_weights(0, [&](const learner::policy& p) -> status {
    for (auto& t : learner::broadcast_layout(p)) {
      info.names.push_back(std::move(t.name));
      info.dtype_names.push_back(std::move(t.dtype));
      info.shapes.push_back(std::move(t.shape));
    }
    return ok_status();
  });
  if (!listed) {
    return listed.err();
  }
  return policy::render_nccl_update_info(info).dump();
}

policy::sync_companion torch_weight_transfer::companion() {
  // The state is shared, not owned by the function: the client may copy the companion around,
  // but it only calls it while this object lives (the run stops the client's syncs first).
  std::weak_ptr<state> weak = state_;
  return [weak](const policy::control_call& call, const policy::weight_sync_request& request,
                std::function<void(status)> done) {
    auto s = weak.lock();
    if (!s) {
      done(error{"the trainer's end of the weight transfer is closed"});
      return;
    }
    // nccl: "init" forms the group, "load" broadcasts. ipc: "start" copies the weights into the
    // exported buffer, so it is whole before /update_weights is sent.
    const bool sends = s->ipc ? call.name == "start" : call.name == "load";
    if (!s->ipc && call.name == "init") {
      s->enqueue([raw = s.get()] { return raw->sender->connect(raw->device); }, std::move(done));
    } else if (sends) {
      std::int64_t version = 0;
      try {
        version = std::stoll(request.version);
      } catch (const std::exception&) {
        done(error{"weight version '" + request.version + "' is not a number"});
        return;
      }
      const bool delta = !s->ipc && static_cast<bool>(request.delta_update_info);
      s->enqueue(
          [raw = s.get(), version, delta]() -> status {
            auto held = raw->learner.lock();
            if (!held) {
              return error{"the learner has stopped"};
            }
            if (delta) {
              // The delta the client announced (delta_info_source): its base is the version
              // before, which the server checks; the learner keeps the newest two.
              auto prepared = held->prepared_delta(version);
              if (!prepared) {
                return error{"the learner no longer holds the delta to weight version " +
                             std::to_string(version)};
              }
              return raw->sender->send_delta(*prepared);
            }
            return held->with_weights(version, [&](const learner::policy& p) -> status {
              if (raw->ipc) {
                return raw->with_exporter(p,
                                          [&](learner::ipc_exporter& e) { return e.snapshot(p); });
              }
              return raw->sender->send(p);
            });
          },
          std::move(done));
    } else {
      done(ok_status());
    }
  };
}

std::function<std::string(std::uint64_t)> torch_weight_transfer::delta_info_source() const {
  return [learner = state_->learner](std::uint64_t version) -> std::string {
    auto held = learner.lock();
    if (!held) {
      return "";
    }
    auto prepared = held->prepared_delta(static_cast<std::int64_t>(version));
    if (!prepared) {
      return "";
    }
    return policy::render_nccl_update_info(delta_update_info(prepared->layout)).dump();
  };
}

policy::nccl_update_info delta_update_info(const learner::weight_delta_layout& layout) {
  policy::nccl_update_info info;
  policy::nccl_delta_fields delta;
  delta.base_version = layout.base_version;
  for (const auto& t : layout.tensors) {
    info.names.push_back(t.name);
    info.dtype_names.push_back(t.dtype);
    info.shapes.push_back(t.shape);
    delta.num_updates_list.push_back(t.count);
    delta.encodings.emplace_back(t.sparse ? "sparse" : "full");
    delta.checksums.push_back(t.checksum);
  }
  info.delta = std::move(delta);
  return info;
}

}  // namespace leap::actors
