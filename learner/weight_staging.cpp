#include "learner/detail/weight_staging.hpp"

#include "learner/safetensors.hpp"

namespace leap::learner::detail {

std::vector<named_tensor> transfer_parameters(const policy& p) {
  // base_parameters() only hands out pointers; through a const policy they are only read.
  return const_cast<transformer&>(weight_broadcast_access::of(p)).base_parameters();
}

result<std::vector<at::ScalarType>> check_announced(const std::vector<announced_tensor>& tensors,
                                                    const policy& target, const std::string& what) {
  std::map<std::string, const at::Tensor*> served;
  for (const auto& [name, tensor] : transfer_parameters(target)) {
    served[name] = tensor;
  }
  std::vector<at::ScalarType> types;
  types.reserve(tensors.size());
  for (const auto& t : tensors) {
    const auto it = served.find(t.name);
    if (it == served.end()) {
      return error{what + ": the served model has no parameter '" + t.name + "'"};
    }
    if (!it->second->sizes().equals(t.shape)) {
      return error{what + ": parameter '" + t.name + "' has another shape here"};
    }
    auto type = parse_torch_dtype(t.dtype);
    if (!type) {
      return type.err().wrap(what + ": parameter '" + t.name + "'");
    }
    types.push_back(scalar_type(*type));
  }
  return types;
}

status weight_staging::commit(policy& target, const std::string& what) {
  return guarded(what + ": committing", [&]() -> status {
    auto to = weight_broadcast_access::of(target).base_parameters();
    if (delta) {
      // Checked when received: every staged name is a parameter of `target` in its shape.
      std::erase_if(to, [&](const named_tensor& t) { return staged.count(t.name) == 0; });
    } else if (staged.empty()) {
      return error{"nothing was received"};
    }
    for (const auto& [name, tensor] : to) {
      if (staged.count(name) == 0) {
        const auto have = staged.size();
        discard();
        return error{"the update lacks parameter '" + name + "' (" + std::to_string(have) + " of " +
                     std::to_string(to.size()) + " received); the weights are unchanged"};
      }
    }
    at::NoGradGuard no_grad;
    // Conversions first (the step that can fail), then same-device same-dtype copies.
    std::vector<at::Tensor> ready;
    ready.reserve(to.size());
    for (const auto& [name, tensor] : to) {
      const at::Tensor& s = staged.at(name);
      ready.push_back(s.device() == tensor->device() && s.scalar_type() == tensor->scalar_type()
                          ? s
                          : s.to(tensor->device(), tensor->scalar_type()));
    }
    for (std::size_t i = 0; i < to.size(); ++i) {
      to[i].tensor->copy_(ready[i]);
    }
    discard();
    return ok_status();
  });
}

}  // namespace leap::learner::detail
