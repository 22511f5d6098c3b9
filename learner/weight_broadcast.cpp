#include "learner/weight_broadcast.hpp"

#include "learner/detail/c10d_group.hpp"
#include "learner/detail/transformer.hpp"
#include "learner/detail/weight_delta_state.hpp"
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

status broadcast_sender::send_delta(const prepared_weight_delta& d) {
  return detail::guarded("weight broadcast: sending a delta", [&]() -> status {
    if (!state_->g.connected()) {
      return error{"not connected: connect() first"};
    }
    if (!d.payload) {
      return error{"the delta has no tensors to send (not prepared here)"};
    }
    at::NoGradGuard no_grad;
    const at::Device wire = state_->g.wire_device();
    for (const auto& [indices, values] : d.payload->tensors) {
      if (indices.defined()) {
        at::Tensor i = indices.to(wire).contiguous();
        detail::c10d_broadcast(state_->g, i);
      }
      at::Tensor v = values.to(wire).contiguous();
      detail::c10d_broadcast(state_->g, v);
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
  bool in_step = true;
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
    state_->in_step = false;
    return checked.err();
  }
  const std::vector<at::ScalarType>& types = *checked;
  if (state_->staging.delta) {
    discard();  // a full update after a delta in one session: the delta's tensors go
  }
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
    state_->in_step = false;
  }
  return received;
}

namespace {

// The delta's announced tensors against the served model: names, shapes, the served dtype, and
// counts that fit the shapes. Pure.
status check_delta_layout(const weight_delta_layout& layout, const policy& target) {
  std::vector<detail::announced_tensor> announced;
  for (const auto& t : layout.tensors) {
    announced.push_back({t.name, t.dtype, t.shape});
  }
  auto checked = detail::check_announced(announced, target, "weight broadcast delta");
  if (!checked) {
    return checked.err();
  }
  for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
    const delta_tensor& t = layout.tensors[i];
    if (detail::dtype_name((*checked)[i]) != target.dtype()) {
      return error{"weight broadcast delta: '" + t.name + "' was computed in " + t.dtype +
                   ", this model holds " + target.dtype() +
                   " (the sender's dtype must be the served one)"};
    }
    std::int64_t numel = 1;
    for (const auto d : t.shape) {
      numel *= d;
    }
    if (t.sparse ? (t.count < 0 || t.count > numel) : t.count != numel) {
      return error{"weight broadcast delta: '" + t.name + "' announces " + std::to_string(t.count) +
                   " elements for a tensor of " + std::to_string(numel) +
                   (t.sparse ? "" : " sent whole")};
    }
  }
  return ok_status();
}

}  // namespace

status broadcast_receiver::receive_delta(const weight_delta_layout& layout, const policy& target) {
  discard();
  if (auto checked = check_delta_layout(layout, target); !checked) {
    state_->in_step = false;  // the sender's broadcasts go unanswered, as receive()'s
    return checked;
  }
  std::map<std::string, at::Tensor*> served;
  for (const auto& [name, tensor] : detail::transfer_parameters(target)) {
    served[name] = tensor;
  }
  std::vector<std::pair<at::Tensor, at::Tensor>> received;  // (indices or undefined, values)
  auto streamed = detail::guarded("weight broadcast: receiving a delta", [&]() -> status {
    if (!state_->g.connected()) {
      return error{"not connected"};
    }
    at::NoGradGuard no_grad;
    const at::Device wire = state_->g.wire_device();
    for (const delta_tensor& t : layout.tensors) {
      const at::ScalarType type = served.at(t.name)->scalar_type();
      at::Tensor indices;
      at::Tensor values;
      if (t.sparse) {
        indices = at::empty({t.count}, at::TensorOptions().dtype(at::kInt).device(wire));
        detail::c10d_broadcast(state_->g, indices);
        values = at::empty({t.count}, at::TensorOptions().dtype(type).device(wire));
      } else {
        values = at::empty(t.shape, at::TensorOptions().dtype(type).device(wire));
      }
      detail::c10d_broadcast(state_->g, values);
      received.emplace_back(std::move(indices), std::move(values));
    }
    return ok_status();
  });
  if (!streamed) {
    state_->in_step = false;
    return streamed;
  }
  // Everything was received: from here on a refusal leaves the group in step.
  return detail::guarded("weight broadcast: applying a delta", [&]() -> status {
    at::NoGradGuard no_grad;
    std::map<std::string, at::Tensor> rebuilt;
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
      const delta_tensor& t = layout.tensors[i];
      const at::Tensor& now = *served.at(t.name);
      const auto& [indices, values] = received[i];
      at::Tensor fresh;
      if (t.sparse) {
        const at::Tensor idx = indices.to(now.device(), at::kLong);
        if (idx.numel() > 0 &&
            (idx.min().item<std::int64_t>() < 0 || idx.max().item<std::int64_t>() >= now.numel())) {
          return error{"an index of '" + t.name + "' is outside its " +
                       std::to_string(now.numel()) + " elements; the weights are unchanged"};
        }
        fresh = now.detach().clone().contiguous();
        fresh.view(-1).index_copy_(0, idx, values.to(now.device()));
      } else {
        fresh = values.to(now.device()).contiguous();
      }
      const std::string got = detail::tensor_checksum(fresh);
      if (got != t.checksum) {
        return error{"'" + t.name + "' after applying has checksum " + got + ", the sender's is " +
                     t.checksum +
                     " (these weights are not the delta's base); the weights are unchanged"};
      }
      rebuilt[t.name] = std::move(fresh);
    }
    state_->staging.staged = std::move(rebuilt);
    state_->staging.delta = true;
    return ok_status();
  });
}

bool broadcast_receiver::in_step() const { return state_->in_step; }

status broadcast_receiver::commit(policy& target) {
  return state_->staging.commit(target, "weight broadcast");
}

void broadcast_receiver::discard() { state_->staging.discard(); }

}  // namespace leap::learner
