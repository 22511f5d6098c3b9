#include "learner/detail/checkpoint_view.hpp"

#include "learner/detail/files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace leap::learner::detail {

struct mapped_checkpoint::mapping {
  std::string path;
  const std::uint8_t* bytes = nullptr;
  std::size_t size = 0;
  int fd = -1;  // kept open for copy()

  mapping() = default;
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (bytes != nullptr) {
      ::munmap(const_cast<std::uint8_t*>(bytes), size);  // NOLINT: the mapping was never written
    }
    if (fd >= 0) {
      ::close(fd);
    }
  }
};

namespace {

using json = nlohmann::json;

// A header larger than this is corrupt rather than big: the reference implementation's limit.
constexpr std::uint64_t max_header_bytes = 100'000'000;

// The bytes a tensor of `shape` and `type` holds, or nothing when that overflows 64 bits: a shape
// whose product wraps around would otherwise match a small byte range.
std::optional<std::uint64_t> byte_size(const std::vector<std::int64_t>& shape, dtype type) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    return 0;
  }
  std::uint64_t n = dtype_size(type);
  for (auto s : shape) {
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(s), &n)) {
      return std::nullopt;
    }
  }
  return n;
}

result<std::shared_ptr<const mapped_checkpoint::mapping>> map_file(const std::string& path) {
  auto m = std::make_shared<mapped_checkpoint::mapping>();
  m->path = path;
  m->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (m->fd < 0) {
    return error{"cannot open safetensors file '" + path + "'"};
  }
  struct stat info {};
  if (::fstat(m->fd, &info) != 0) {
    return error{"cannot stat '" + path + "': " + std::strerror(errno)};
  }
  m->size = static_cast<std::size_t>(info.st_size);
  if (m->size > 0) {
    // Populated up front: the whole file is about to be read in order.
    void* p = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, m->fd, 0);
    if (p == MAP_FAILED) {
      return error{"cannot map '" + path + "': " + std::strerror(errno)};
    }
    m->bytes = static_cast<const std::uint8_t*>(p);
  }
  return std::shared_ptr<const mapped_checkpoint::mapping>(std::move(m));
}

// Reads `bytes` bytes at `offset` of the file into `out`; a short read is the file having shrunk.
status read_at(const mapped_checkpoint::mapping& file, const std::string& name,
               std::uint64_t offset, std::uint8_t* out, std::size_t bytes) {
  std::size_t done = 0;
  while (done < bytes) {
    const auto n = ::pread(file.fd, out + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return error{"'" + file.path + "': reading tensor '" + name +
                   "' failed: " + std::strerror(errno)};
    }
    if (n == 0) {
      struct stat info {};
      const auto now = ::fstat(file.fd, &info) == 0 ? std::to_string(info.st_size) : "unknown";
      return error{"'" + file.path + "': tensor '" + name + "' needs bytes [" +
                   std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                   ") of the file, which was " + std::to_string(file.size) +
                   " bytes when opened and is now " + now + " bytes (truncated while being read?)"};
    }
    done += static_cast<std::size_t>(n);
  }
  return ok_status();
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
    const auto bytes = byte_size(t.shape, t.type);
    if (!bytes) {
      return error{where + ": shape holds more than 2^64 bytes"};
    }
    const auto expected = *bytes;
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
  for (const auto& [name, view] : *views) {
    out.file_of_.emplace(name, file->get());
  }
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
      out.file_of_.emplace(name, shard->file_of_.at(name));
      out.views_.insert(shard->views_.extract(it));
    }
    out.files_.push_back(std::move(shard->files_.front()));
  }
  return out;
}

result<tensor_map> mapped_checkpoint::copy() const {
  tensor_map out;
  for (const auto& [name, v] : views_) {
    host_tensor t;
    t.type = v.type;
    t.shape = v.shape;
    t.data.resize(v.bytes);
    const auto& file = *file_of_.at(name);
    if (auto s = read_at(file, name, static_cast<std::uint64_t>(v.data - file.bytes), t.data.data(),
                         v.bytes);
        !s) {
      return s.err();
    }
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace leap::learner::detail
