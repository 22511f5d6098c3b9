#include "learner/weight_delta.hpp"

#include "learner/detail/transformer.hpp"
#include "learner/detail/weight_delta_state.hpp"
#include "learner/detail/weight_staging.hpp"
#include "learner/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

namespace leap::learner {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* format_name = "leap.weight_delta";
constexpr int format_version = 1;
// Chunks bound the int64 temporaries of a checksum (32 MiB each) for the largest tensors.
constexpr std::int64_t checksum_chunk = std::int64_t{1} << 22;
// Odd multipliers (Fibonacci hashing's and splitmix64's constants) as two's-complement int64.
constexpr std::uint64_t position_multiplier = 0x9E3779B97F4A7C15ULL;
constexpr std::uint64_t length_multiplier = 0xBF58476D1CE4E5B9ULL;
// vLLM's sparse patches index with int32 (sparse_nccl_engine.py): larger tensors go whole.
constexpr std::int64_t max_sparse_numel = std::int64_t{1} << 31;

at::ScalarType word_type(std::int64_t element_size) {
  switch (element_size) {
    case 1:
      return at::kByte;
    case 2:
      return at::kShort;
    case 4:
      return at::kInt;
    default:
      return at::kLong;
  }
}

// The tensor's elements as integers of the same width, so that comparisons are bitwise (a NaN
// equals itself, -0 differs from +0).
at::Tensor words_of(const at::Tensor& t) {
  return t.contiguous().view(-1).view(word_type(t.element_size()));
}

// sum_i word_i * (((i + 1) * M) | 1) mod 2^64, then the length mixed in. Integer tensor ops wrap,
// and a modular sum does not depend on the order of the reduction, so every device agrees.
std::uint64_t checksum_of(const at::Tensor& t) {
  const at::Tensor words = words_of(t);
  const std::int64_t n = words.numel();
  std::uint64_t sum = 0;
  for (std::int64_t begin = 0; begin < n; begin += checksum_chunk) {
    const std::int64_t end = std::min(n, begin + checksum_chunk);
    at::Tensor part = words.slice(0, begin, end).to(at::kLong);
    at::Tensor weights = at::arange(begin + 1, end + 1, part.options())
                             .mul_(static_cast<std::int64_t>(position_multiplier))
                             .bitwise_or_(1);
    sum += static_cast<std::uint64_t>(part.mul_(weights).sum().item<std::int64_t>());
  }
  return sum ^ (static_cast<std::uint64_t>(n) * length_multiplier);
}

std::string hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::map<std::string, at::Tensor*> parameters_of(const policy& p) {
  std::map<std::string, at::Tensor*> out;
  for (const auto& [name, tensor] : detail::transfer_parameters(p)) {
    out[name] = tensor;
  }
  return out;
}

result<at::ScalarType> served_type(const std::string& dtype, const policy& p) {
  return detail::parse_compute_dtype(dtype.empty() ? p.dtype() : dtype, p.dtype());
}

result<json> read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / weight_delta_manifest;
  std::ifstream in(path);
  if (!in) {
    return error{"weight delta: cannot read " + path.string()};
  }
  std::stringstream text;
  text << in.rdbuf();
  json manifest = json::parse(text.str(), nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    return error{"weight delta: " + path.string() + " is not a JSON object"};
  }
  if (manifest.value("format", "") != format_name ||
      manifest.value("format_version", 0) != format_version) {
    return error{"weight delta: " + path.string() + " is not a " + format_name + " version " +
                 std::to_string(format_version) + " manifest"};
  }
  for (const char* key : {"base_version", "version"}) {
    if (!manifest.contains(key) || !manifest[key].is_number_integer()) {
      return error{"weight delta: " + path.string() + " lacks the integer '" + key + "'"};
    }
  }
  if (!manifest.contains("dtype") || !manifest["dtype"].is_string() ||
      !manifest.contains("tensors") || !manifest["tensors"].is_object()) {
    return error{"weight delta: " + path.string() + " lacks 'dtype' or 'tensors'"};
  }
  return manifest;
}

}  // namespace

bool is_weight_delta_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / weight_delta_manifest, ec);
}

result<weight_delta_header> read_weight_delta_header(const std::string& dir) {
  auto manifest = read_manifest(dir);
  if (!manifest) {
    return manifest.err();
  }
  weight_delta_header h;
  h.base_version = (*manifest)["base_version"].get<std::int64_t>();
  h.version = (*manifest)["version"].get<std::int64_t>();
  h.dtype = (*manifest)["dtype"].get<std::string>();
  return h;
}

// ---- the sender ----

weight_delta_sender::weight_delta_sender(std::string dtype) : impl_(std::make_unique<impl>()) {
  impl_->dtype = std::move(dtype);
}
weight_delta_sender::~weight_delta_sender() = default;
weight_delta_sender::weight_delta_sender(weight_delta_sender&&) noexcept = default;
weight_delta_sender& weight_delta_sender::operator=(weight_delta_sender&&) noexcept = default;

bool weight_delta_sender::has_base() const { return impl_->base_version.has_value(); }

std::optional<std::int64_t> weight_delta_sender::base_version() const {
  return impl_->base_version;
}

status weight_delta_sender::reset(const policy& p, std::int64_t version) {
  forget();
  return detail::guarded("weight delta: taking the base", [&]() -> status {
    auto type = served_type(impl_->dtype, p);
    if (!type) {
      return type.err().wrap("weight delta");
    }
    at::NoGradGuard no_grad;
    std::map<std::string, at::Tensor> base;
    for (const auto& [name, tensor] : parameters_of(p)) {
      base[name] = tensor->detach().to(*type, false, /*copy=*/true).contiguous();
    }
    impl_->base = std::move(base);
    impl_->base_version = version;
    return ok_status();
  });
}

namespace {

// One changed tensor: its new value in the served dtype, the changed flat indices (int64), the
// encoding and the checksum after applying.
struct changed_tensor {
  std::string name;
  at::Tensor now;
  at::Tensor changed;
  bool sparse = false;
};

// Compares `p`'s weights with the base bitwise (integer views: NaN equals itself, -0 differs
// from +0). Throws nothing the caller's guard would not catch.
result<std::vector<changed_tensor>> compare_with_base(const weight_delta_sender::impl& state,
                                                      const policy& p, at::ScalarType type,
                                                      weight_delta_stats& stats) {
  const auto params = parameters_of(p);
  if (params.size() != state.base.size()) {
    return error{"weight delta: the model has " + std::to_string(params.size()) +
                 " parameters, the base " + std::to_string(state.base.size())};
  }
  std::vector<changed_tensor> out;
  for (const auto& [name, tensor] : params) {
    const auto b = state.base.find(name);
    if (b == state.base.end() || !b->second.sizes().equals(tensor->sizes())) {
      return error{"weight delta: parameter '" + name +
                   "' is not in the base, or has another shape"};
    }
    at::Tensor now = tensor->detach().to(type, false, /*copy=*/true).contiguous();
    const std::int64_t numel = now.numel();
    const std::int64_t element = now.element_size();
    stats.tensors += 1;
    stats.total_elements += numel;
    stats.full_bytes += numel * element;
    at::Tensor changed = words_of(now).ne(words_of(b->second)).nonzero().view(-1);
    const std::int64_t count = changed.numel();
    if (count == 0) {
      continue;
    }
    const bool sparse = numel < max_sparse_numel && count * (4 + element) < numel * element;
    stats.changed_tensors += 1;
    stats.changed_elements += count;
    stats.sparse_tensors += sparse ? 1 : 0;
    stats.bytes += sparse ? count * (4 + element) : numel * element;
    out.push_back({name, std::move(now), std::move(changed), sparse});
  }
  return out;
}

}  // namespace

result<weight_delta_stats> weight_delta_sender::write_delta(const policy& p, std::int64_t version,
                                                            const std::string& dir,
                                                            durability sync) {
  if (!impl_->base_version) {
    return error{"weight delta: no base (the server's weights are unknown): sync in full first"};
  }
  return detail::guarded("weight delta: writing " + dir, [&]() -> result<weight_delta_stats> {
    auto type = served_type(impl_->dtype, p);
    if (!type) {
      return type.err().wrap("weight delta");
    }
    at::NoGradGuard no_grad;
    weight_delta_stats stats;
    auto changes = compare_with_base(*impl_, p, *type, stats);
    if (!changes) {
      return changes.err();
    }
    tensor_map out;
    json tensors = json::object();
    std::map<std::string, at::Tensor> pending;
    for (auto& c : *changes) {
      json entry;
      if (c.sparse) {
        auto indices = detail::to_host(c.changed.to(at::kInt));
        auto values = detail::to_host(c.now.view(-1).index_select(0, c.changed));
        if (!indices) {
          return indices.err();
        }
        if (!values) {
          return values.err();
        }
        out[c.name + ":indices"] = std::move(*indices);
        out[c.name + ":values"] = std::move(*values);
        entry["encoding"] = "sparse";
      } else {
        auto whole = detail::to_host(c.now);
        if (!whole) {
          return whole.err();
        }
        out[c.name] = std::move(*whole);
        entry["encoding"] = "full";
      }
      entry["changed"] = c.changed.numel();
      entry["checksum"] = hex(checksum_of(c.now));
      tensors[c.name] = std::move(entry);
      pending[c.name] = std::move(c.now);
    }
    std::error_code ec;
    fs::create_directories(dir, ec);
    // The old manifest goes first: a reader never pairs it with the new tensors.
    fs::remove(fs::path(dir) / weight_delta_manifest, ec);
    if (auto w = write_safetensors((fs::path(dir) / weight_delta_tensors).string(), out, {}, sync);
        !w) {
      return w.err();
    }
    json manifest = {{"format", format_name},
                     {"format_version", format_version},
                     {"base_version", *impl_->base_version},
                     {"version", version},
                     {"dtype", detail::dtype_name(*type)},
                     {"tensors", std::move(tensors)}};
    if (auto w = write_file_durably((fs::path(dir) / weight_delta_manifest).string(),
                                    manifest.dump(), 0644, sync);
        !w) {
      return w.err();
    }
    impl_->pending = std::move(pending);
    impl_->pending_version = version;
    return stats;
  });
}

result<prepared_weight_delta> weight_delta_sender::prepare_delta(const policy& p,
                                                                 std::int64_t version) {
  if (!impl_->base_version) {
    return error{"weight delta: no base (the server's weights are unknown): sync in full first"};
  }
  return detail::guarded(
      "weight delta: preparing a broadcast", [&]() -> result<prepared_weight_delta> {
        auto type = served_type(impl_->dtype, p);
        if (!type) {
          return type.err().wrap("weight delta");
        }
        at::NoGradGuard no_grad;
        prepared_weight_delta out;
        auto changes = compare_with_base(*impl_, p, *type, out.stats);
        if (!changes) {
          return changes.err();
        }
        out.layout.base_version = *impl_->base_version;
        out.layout.version = version;
        auto payload = std::make_shared<weight_delta_payload>();
        std::map<std::string, at::Tensor> pending;
        for (auto& c : *changes) {
          delta_tensor t;
          t.name = c.name;
          t.dtype = detail::dtype_name(*type);
          t.shape = c.now.sizes().vec();
          t.sparse = c.sparse;
          t.count = c.sparse ? c.changed.numel() : c.now.numel();
          t.checksum = hex(checksum_of(c.now));
          out.layout.tensors.push_back(std::move(t));
          if (c.sparse) {
            payload->tensors.emplace_back(c.changed.to(at::kInt),
                                          c.now.view(-1).index_select(0, c.changed));
          } else {
            payload->tensors.emplace_back(at::Tensor(), c.now);
          }
          pending[c.name] = std::move(c.now);
        }
        out.payload = std::move(payload);
        impl_->pending = std::move(pending);
        impl_->pending_version = version;
        return out;
      });
}

status weight_delta_sender::commit() {
  if (!impl_->pending_version || !impl_->base_version) {
    return error{"weight delta: no delta was written since the base was taken or last moved"};
  }
  for (auto& [name, tensor] : impl_->pending) {
    impl_->base[name] = std::move(tensor);
  }
  impl_->pending.clear();
  impl_->base_version = impl_->pending_version;
  impl_->pending_version.reset();
  return ok_status();
}

void weight_delta_sender::forget() {
  impl_->base.clear();
  impl_->pending.clear();
  impl_->base_version.reset();
  impl_->pending_version.reset();
}

std::string detail::tensor_checksum(const at::Tensor& t) { return hex(checksum_of(t)); }

// ---- the receiver ----

status apply_weight_delta(policy& target, const std::string& dir) {
  auto manifest = read_manifest(dir);
  if (!manifest) {
    return manifest.err();
  }
  return detail::guarded("weight delta: applying " + dir, [&]() -> status {
    const std::string dtype = (*manifest)["dtype"].get<std::string>();
    if (dtype != target.dtype()) {
      return error{"weight delta: computed in " + dtype + ", this model holds " + target.dtype() +
                   " (the sender's dtype must be the served one); the weights are unchanged"};
    }
    const json& entries = (*manifest)["tensors"];
    tensor_map received;
    if (!entries.empty()) {
      auto read = read_safetensors((fs::path(dir) / weight_delta_tensors).string());
      if (!read) {
        return read.err();
      }
      received = std::move(*read);
    }
    auto take = [&](const std::string& key) -> result<host_tensor> {
      auto it = received.find(key);
      if (it == received.end()) {
        return error{"weight delta: " + std::string(weight_delta_tensors) + " lacks '" + key + "'"};
      }
      return std::move(it->second);
    };
    const auto params = parameters_of(target);
    at::NoGradGuard no_grad;
    std::vector<std::pair<at::Tensor*, at::Tensor>> ready;
    for (const auto& [name, entry] : entries.items()) {
      const auto p = params.find(name);
      if (p == params.end()) {
        return error{"weight delta: the served model has no parameter '" + name +
                     "'; the weights are unchanged"};
      }
      const at::Tensor& served = *p->second;
      at::Tensor fresh;
      if (entry.value("encoding", "") == "sparse") {
        auto indices = take(name + ":indices");
        auto values = take(name + ":values");
        if (!indices) {
          return indices.err();
        }
        if (!values) {
          return values.err();
        }
        if (indices->numel() != values->numel()) {
          return error{"weight delta: '" + name + "' has " + std::to_string(indices->numel()) +
                       " indices and " + std::to_string(values->numel()) + " values"};
        }
        const at::Tensor idx = detail::to_tensor(*indices, served.device(), at::kLong);
        if (idx.numel() > 0 && (idx.min().item<std::int64_t>() < 0 ||
                                idx.max().item<std::int64_t>() >= served.numel())) {
          return error{"weight delta: an index of '" + name + "' is outside its " +
                       std::to_string(served.numel()) + " elements; the weights are unchanged"};
        }
        fresh = served.detach().clone().contiguous();
        fresh.view(-1).index_copy_(
            0, idx, detail::to_tensor(*values, served.device(), served.scalar_type()));
      } else {
        auto whole = take(name);
        if (!whole) {
          return whole.err();
        }
        if (!c10::IntArrayRef(whole->shape).equals(served.sizes())) {
          return error{"weight delta: '" + name +
                       "' has another shape here; the weights are unchanged"};
        }
        fresh = detail::to_tensor(*whole, served.device(), served.scalar_type());
      }
      const std::string want = entry.value("checksum", "");
      const std::string got = hex(checksum_of(fresh));
      if (got != want) {
        return error{"weight delta: '" + name + "' after applying has checksum " + got +
                     ", the sender's is " + want +
                     " (these weights are not the delta's base); the weights are unchanged"};
      }
      ready.emplace_back(p->second, std::move(fresh));
    }
    for (auto& [to, from] : ready) {
      to->copy_(from);
    }
    return ok_status();
  });
}

}  // namespace leap::learner
