#include "learner/weight_broadcast.hpp"

#include "learner/detail/c10d_group.hpp"
#include "learner/detail/transformer.hpp"
#include "learner/detail/weight_staging.hpp"

#include <ATen/ATen.h>

namespace leap::learner {

namespace {

const char* const no_c10d =
    "this LibTorch build has no c10d backend the learner can use (gloo's headers, Debian's "
    "libgloo-dev, or a CUDA LibTorch with NCCL): the nccl weight sync is not available";

std::vector<detail::named_tensor> parameters_of(const policy& p) {
  return detail::transfer_parameters(p);
}

// Forms the group over g's store (detail/c10d_group.hpp): NCCL for cuda devices when the build has
// it, else gloo on host memory (the tensors go through the host).
status form(detail::c10d_group& g, int rank, int size, const std::string& device_name) {
  auto parsed = detail::parse_device(device_name);
  if (!parsed) {
    return parsed.err();
  }
  if (!detail::has_c10d()) {
    return error{no_c10d};
  }
  return detail::form_c10d_group(g, rank, size, *parsed);
}

}  // namespace

std::vector<broadcast_tensor> broadcast_layout(const policy& p) {
  std::vector<broadcast_tensor> out;
  for (const auto& [name, tensor] : parameters_of(p)) {
    broadcast_tensor t;
    t.name = name;
    t.dtype = detail::dtype_name(tensor->scalar_type());
    t.shape = tensor->sizes().vec();
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> broadcast_backends() {
  std::vector<std::string> out;
#ifdef LEAP_C10D_GLOO
  out.emplace_back("gloo");
#endif
#ifdef LEAP_C10D_NCCL
  out.emplace_back("nccl");
#endif
  return out;
}

// ---- sender ----

struct broadcast_sender::state {
  detail::c10d_group g;
  int world_size = 2;
};

broadcast_sender::broadcast_sender(std::unique_ptr<state> s) : state_(std::move(s)) {}
broadcast_sender::~broadcast_sender() { close(); }

result<std::unique_ptr<broadcast_sender>> broadcast_sender::listen(
    const std::string& host, int port, int world_size, std::chrono::milliseconds timeout) {
  if (!detail::has_c10d()) {
    return error{no_c10d};
  }
  if (world_size < 2) {
    return error{"weight broadcast: world_size must be at least 2 (got " +
                 std::to_string(world_size) + ")"};
  }
  if (port < 0 || port > 65535) {
    return error{"weight broadcast: port " + std::to_string(port) + " is not in [0, 65535]"};
  }
  return detail::guarded(
      "weight broadcast: opening the store on " + host + ":" + std::to_string(port),
      [&]() -> result<std::unique_ptr<broadcast_sender>> {
        auto s = std::make_unique<state>();
        s->world_size = world_size;
        s->g.timeout = timeout;
        detail::open_c10d_store(s->g, host, port, true, world_size);
        return std::unique_ptr<broadcast_sender>(new broadcast_sender(std::move(s)));
      });
}

int broadcast_sender::port() const { return state_->g.port(); }

status broadcast_sender::connect(const std::string& device) {
  return detail::guarded(
      "weight broadcast: forming the group (rank 0 of " + std::to_string(state_->world_size) + ")",
      [&]() -> status {
        if (!port()) {
          return error{"the store is closed"};
        }
        return form(state_->g, 0, state_->world_size, device);
      });
}

status broadcast_sender::send(const policy& p, std::size_t limit) {
  return detail::guarded("weight broadcast: sending", [&]() -> status {
    if (!state_->g.connected()) {
      return error{"not connected: connect() first"};
    }
    at::NoGradGuard no_grad;
    const at::Device wire = state_->g.wire_device();
    std::size_t sent = 0;
    for (const auto& [name, tensor] : parameters_of(p)) {
      if (sent == limit) {
        break;
      }
      at::Tensor t = tensor->detach().to(wire).contiguous();
      detail::c10d_broadcast(state_->g, t);
      ++sent;
    }
    return ok_status();
  });
}

void broadcast_sender::close() {
  if (state_) {
    state_->g.close();
  }
}

// ---- receiver ----

struct broadcast_receiver::state {
  detail::c10d_group g;
  detail::weight_staging staging;
};

broadcast_receiver::broadcast_receiver(std::unique_ptr<state> s) : state_(std::move(s)) {}
broadcast_receiver::~broadcast_receiver() {
  if (state_) {
    state_->g.close();
  }
}

result<std::unique_ptr<broadcast_receiver>> broadcast_receiver::join(
    const broadcast_rendezvous& r, const std::string& device, std::chrono::milliseconds timeout) {
  if (!detail::has_c10d()) {
    return error{no_c10d};
  }
  if (r.world_size < 2 || r.rank_offset < 1 || r.rank_offset >= r.world_size) {
    return error{"weight broadcast: rank_offset " + std::to_string(r.rank_offset) +
                 " and world_size " + std::to_string(r.world_size) +
                 " leave no rank for this server (need 1 <= rank_offset < world_size)"};
  }
  if (r.master_port < 1 || r.master_port > 65535) {
    return error{"weight broadcast: master_port " + std::to_string(r.master_port) +
                 " is not in [1, 65535]"};
  }
  const std::string where = r.master_address + ":" + std::to_string(r.master_port);
  return detail::guarded(
      "weight broadcast: joining the group at " + where + " as rank " +
          std::to_string(r.rank_offset),
      [&]() -> result<std::unique_ptr<broadcast_receiver>> {
        auto s = std::make_unique<state>();
        s->g.timeout = timeout;
        detail::open_c10d_store(s->g, r.master_address, r.master_port, false, r.world_size);
        if (auto formed = form(s->g, r.rank_offset, r.world_size, device); !formed) {
          return formed.err();
        }
        return std::unique_ptr<broadcast_receiver>(new broadcast_receiver(std::move(s)));
      });
}

status broadcast_receiver::receive(const std::vector<broadcast_tensor>& layout,
                                   const policy& target) {
  // Everything is checked before the first tensor is received: a refused update leaves the
  // sender's broadcasts unanswered, and the sender's own timeout ends them.
  std::vector<detail::announced_tensor> announced;
  for (const auto& t : layout) {
    announced.push_back({t.name, t.dtype, t.shape});
  }
  auto checked = detail::check_announced(announced, target, "weight broadcast");
  if (!checked) {
    discard();
    return checked.err();
  }
  const std::vector<at::ScalarType>& types = *checked;
  auto received = detail::guarded("weight broadcast: receiving", [&]() -> status {
    if (!state_->g.connected()) {
      return error{"not connected"};
    }
    at::NoGradGuard no_grad;
    const at::Device wire = state_->g.wire_device();
    for (std::size_t i = 0; i < layout.size(); ++i) {
      at::Tensor t = at::empty(layout[i].shape, at::TensorOptions().dtype(types[i]).device(wire));
      detail::c10d_broadcast(state_->g, t);
      state_->staging.staged[layout[i].name] = std::move(t);
    }
    return ok_status();
  });
  if (!received) {
    discard();
  }
  return received;
}

status broadcast_receiver::commit(policy& target) {
  return state_->staging.commit(target, "weight broadcast");
}

void broadcast_receiver::discard() { state_->staging.discard(); }

}  // namespace leap::learner
