#include "learner/detail/checkpoint_view.hpp"

#include "learner/detail/files.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace leap::learner::detail {

struct mapped_checkpoint::mapping {
  const std::uint8_t* bytes = nullptr;
  std::size_t size = 0;

  mapping() = default;
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (bytes != nullptr) {
      ::munmap(const_cast<std::uint8_t*>(bytes), size);  // NOLINT: the mapping was never written
    }
  }
};

namespace {

using json = nlohmann::json;

// A header larger than this is corrupt rather than big: the reference implementation's limit.
constexpr std::uint64_t max_header_bytes = 100'000'000;

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto s : shape) {
    n *= s;
  }
  return n;
}

result<std::shared_ptr<const mapped_checkpoint::mapping>> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return error{"cannot open safetensors file '" + path + "'"};
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return error{"cannot stat '" + path + "': " + why};
  }
  auto m = std::make_shared<mapped_checkpoint::mapping>();
  m->size = static_cast<std::size_t>(info.st_size);
  if (m->size > 0) {
    // Populated up front: the whole file is about to be read in order.
    void* p = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return error{"cannot map '" + path + "': " + why};
    }
    m->bytes = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file
  return std::shared_ptr<const mapped_checkpoint::mapping>(std::move(m));
}

// The views of one mapped file, every header entry checked against the file.
result<view_map> parse(const std::string& path, const mapped_checkpoint::mapping& file,
                       std::map<std::string, std::string>* metadata) {
  const std::uint64_t file_size = file.size;
  if (file_size < 8) {
    return error{"'" + path + "': truncated file (no 8-byte header length)"};
  }
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) {
    header_size |= std::uint64_t{file.bytes[i]} << (8 * i);
  }
  if (header_size > max_header_bytes || header_size > file_size - 8) {
    return error{"'" + path + "': header length " + std::to_string(header_size) +
                 " exceeds the file size " + std::to_string(file_size) +
                 " (corrupt or not safetensors)"};
  }
  json doc;
  try {
    doc = json::parse(file.bytes + 8, file.bytes + 8 + header_size);
  } catch (const json::exception& e) {
    return error{"'" + path + "': header is not valid JSON: " + e.what()};
  }
  if (!doc.is_object()) {
    return error{"'" + path + "': header is not a JSON object"};
  }
  const std::uint64_t data_size = file_size - 8 - header_size;
  const std::uint8_t* data = file.bytes + 8 + header_size;

  view_map views;
  for (const auto& [name, info] : doc.items()) {
    if (name == "__metadata__") {
      if (metadata != nullptr && info.is_object()) {
        for (const auto& [k, v] : info.items()) {
          if (v.is_string()) {
            (*metadata)[k] = v.get<std::string>();
          }
        }
      }
      continue;
    }
    const std::string where = "'" + path + "': tensor '" + name + "'";
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets")) {
      return error{where + ": expected an object with 'dtype', 'shape' and 'data_offsets'"};
    }
    tensor_view t;
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    try {
      auto d = parse_dtype(info.at("dtype").get<std::string>());
      if (!d) {
        return d.err().wrap(where);
      }
      t.type = *d;
      t.shape = info.at("shape").get<std::vector<std::int64_t>>();
      const auto offsets = info.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (offsets.size() != 2) {
        return error{where + ": 'data_offsets' must hold two numbers"};
      }
      begin = offsets[0];
      end = offsets[1];
    } catch (const json::exception& e) {
      return error{where + ": " + e.what()};
    }
    for (auto s : t.shape) {
      if (s < 0) {
        return error{where + ": negative dimension in shape"};
      }
    }
    const auto expected = static_cast<std::uint64_t>(product(t.shape)) * dtype_size(t.type);
    if (end < begin || end - begin != expected) {
      return error{where + ": byte range [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") does not match shape and dtype (" + std::to_string(expected) + " bytes)"};
    }
    if (end > data_size) {
      return error{where + ": byte range ends at " + std::to_string(end) +
                   " beyond the data section (" + std::to_string(data_size) +
                   " bytes); file truncated?"};
    }
    t.data = data + begin;
    t.bytes = expected;
    views.emplace(name, std::move(t));
  }
  return views;
}

}  // namespace

view_map views_of(const tensor_map& tensors) {
  view_map views;
  for (const auto& [name, t] : tensors) {
    views.emplace(name, tensor_view{t.type, t.shape, t.data.data(), t.data.size()});
  }
  return views;
}

result<mapped_checkpoint> mapped_checkpoint::open_file(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  auto file = map_file(path);
  if (!file) {
    return file.err();
  }
  auto views = parse(path, **file, metadata);
  if (!views) {
    return views.err();
  }
  mapped_checkpoint out;
  out.files_.push_back(std::move(*file));
  out.views_ = std::move(*views);
  return out;
}

result<mapped_checkpoint> mapped_checkpoint::open_dir(const std::string& dir,
                                                      const std::string& base) {
  const auto single = join(dir, base + ".safetensors");
  const auto index = join(dir, base + ".safetensors.index.json");
  if (path_exists(single)) {
    return open_file(single);
  }
  if (!path_exists(index)) {
    return error{"'" + dir + "': neither " + base + ".safetensors nor " + base +
                 ".safetensors.index.json exists"};
  }
  std::ifstream in(index);
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    return error{"'" + index + "': not valid JSON: " + e.what()};
  }
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) {
    return error{"'" + index + "': expected an object with a 'weight_map' object"};
  }
  std::map<std::string, std::set<std::string>> by_shard;
  for (const auto& [name, file] : doc["weight_map"].items()) {
    if (!file.is_string()) {
      return error{"'" + index + "': weight_map['" + name + "'] is not a file name"};
    }
    by_shard[file.get<std::string>()].insert(name);
  }
  mapped_checkpoint out;
  for (const auto& [file, names] : by_shard) {
    auto shard = open_file(join(dir, file));
    if (!shard) {
      return shard.err().wrap("'" + index + "'");
    }
    // Only what the index names: a shard's other tensors are not part of the checkpoint.
    for (const auto& name : names) {
      auto it = shard->views_.find(name);
      if (it == shard->views_.end()) {
        return error{"'" + index + "': tensor '" + name + "' is listed in shard '" + file +
                     "' but absent from it"};
      }
      out.views_.insert(shard->views_.extract(it));
    }
    out.files_.push_back(std::move(shard->files_.front()));
  }
  return out;
}

tensor_map mapped_checkpoint::copy() const {
  tensor_map out;
  for (const auto& [name, v] : views_) {
    host_tensor t;
    t.type = v.type;
    t.shape = v.shape;
    t.data.assign(v.data, v.data + v.bytes);
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace leap::learner::detail
