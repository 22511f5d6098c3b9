#include "learner/safetensors.hpp"

#include "common/durable_file.hpp"
#include "learner/detail/checkpoint_view.hpp"
#include "learner/detail/files.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

namespace leap::learner {
namespace {

using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host needs byte swapping");

// A header larger than this is corrupt rather than big: the reference implementation's limit.
constexpr std::uint64_t max_header_bytes = 100'000'000;

struct dtype_name {
  dtype type;
  const char* name;
  std::size_t size;
};

constexpr dtype_name dtype_names[] = {
    {dtype::f64, "F64", 8},      {dtype::f32, "F32", 4}, {dtype::f16, "F16", 2},
    {dtype::bf16, "BF16", 2},    {dtype::i64, "I64", 8}, {dtype::i32, "I32", 4},
    {dtype::i16, "I16", 2},      {dtype::i8, "I8", 1},   {dtype::u8, "U8", 1},
    {dtype::boolean, "BOOL", 1},
};

const dtype_name& entry(dtype d) {
  for (const auto& e : dtype_names) {
    if (e.type == d) {
      return e;
    }
  }
  return dtype_names[1];
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto s : shape) {
    n *= s;
  }
  return n;
}

using tensor_entry = const tensor_map::value_type*;

// The header's length (8 bytes, little-endian), the header, then each tensor's bytes, written as
// parts of one durable file: a checkpoint of gigabytes is never joined in memory.
status write_safetensors_file(const std::string& path, const std::string& header,
                              const std::vector<tensor_entry>& tensors, durability sync) {
  const std::uint64_t n = header.size();
  std::array<char, 8> length{};
  for (std::size_t i = 0; i < length.size(); ++i) {
    length[i] = static_cast<char>(static_cast<std::uint8_t>(n >> (8 * i)));
  }
  std::vector<std::string_view> parts;
  parts.reserve(2 + tensors.size());
  parts.emplace_back(length.data(), length.size());
  parts.emplace_back(header);
  for (const auto* e : tensors) {
    parts.emplace_back(reinterpret_cast<const char*>(e->second.data.data()), e->second.data.size());
  }
  return write_file_durably(path, parts, 0644, sync);
}

std::string shard_name(const std::string& base, std::size_t index, std::size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", index, count);
  return base + buf;
}

bool is_shard_of(const std::string& file, const std::string& base) {
  return file.size() > base.size() + 1 && file.compare(0, base.size() + 1, base + "-") == 0 &&
         file.find("-of-") != std::string::npos && file.ends_with(".safetensors");
}

}  // namespace

std::size_t dtype_size(dtype d) { return entry(d).size; }

std::string to_string(dtype d) { return entry(d).name; }

result<dtype> parse_dtype(const std::string& name) {
  for (const auto& e : dtype_names) {
    if (name == e.name) {
      return e.type;
    }
  }
  return error{"unsupported safetensors dtype '" + name +
               "' (expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL)"};
}

result<dtype> parse_torch_dtype(const std::string& name) {
  if (name == "float32" || name == "float") {
    return dtype::f32;
  }
  if (name == "bfloat16") {
    return dtype::bf16;
  }
  if (name == "float16" || name == "half") {
    return dtype::f16;
  }
  if (name == "float64" || name == "double") {
    return dtype::f64;
  }
  return error{"unsupported dtype '" + name + "' (expected float32, bfloat16, float16 or float64)"};
}

std::string to_torch_dtype(dtype d) {
  switch (d) {
    case dtype::f64:
      return "float64";
    case dtype::f32:
      return "float32";
    case dtype::f16:
      return "float16";
    case dtype::bf16:
      return "bfloat16";
    default:
      return "";
  }
}

std::int64_t host_tensor::numel() const { return product(shape); }

std::uint16_t float_to_bf16(float f) {
  auto bits = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // keep it a (quiet) NaN
  }
  const std::uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t{h} << 16); }

std::uint16_t float_to_f16(float f) {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (bits >> 16) & 0x8000;
  const std::uint32_t abs = bits & 0x7FFFFFFF;
  if (abs > 0x7F800000) {
    return static_cast<std::uint16_t>(sign | 0x7E00);  // NaN
  }
  if (abs >= 0x477FF000) {
    // At or above 65520 (halfway past the largest half) rounds to infinity.
    return static_cast<std::uint16_t>(sign | 0x7C00);
  }
  if (abs < 0x38800000) {
    // Subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
    const float v = std::bit_cast<float>(abs) * 16777216.0F;  // * 2^24
    const auto q = static_cast<std::uint32_t>(std::nearbyint(v));
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t r = abs - 0x38000000;
  r += 0x0FFF + ((r >> 13) & 1);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (std::uint32_t{h} & 0x8000) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1F;
  const std::uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    const float v = static_cast<float>(mant) / 16777216.0F;  // mant * 2^-24
    return sign != 0 ? -v : v;
  }
  if (exp == 0x1F) {
    return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

host_tensor make_float_tensor(dtype type, std::vector<std::int64_t> shape,
                              const std::vector<double>& values) {
  host_tensor t;
  t.type = type;
  t.shape = std::move(shape);
  t.data.resize(values.size() * dtype_size(type));
  auto* out = t.data.data();
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (type) {
      case dtype::f64: {
        std::memcpy(out + 8 * i, &values[i], 8);
        break;
      }
      case dtype::f32: {
        const auto f = static_cast<float>(values[i]);
        std::memcpy(out + 4 * i, &f, 4);
        break;
      }
      case dtype::f16: {
        const auto h = float_to_f16(static_cast<float>(values[i]));
        std::memcpy(out + 2 * i, &h, 2);
        break;
      }
      case dtype::bf16: {
        const auto h = float_to_bf16(static_cast<float>(values[i]));
        std::memcpy(out + 2 * i, &h, 2);
        break;
      }
      default:
        break;  // integer tensors are not built from doubles
    }
  }
  return t;
}

std::vector<double> to_doubles(const host_tensor& t) {
  const std::size_t n = t.data.size() / dtype_size(t.type);
  std::vector<double> v(n);
  const auto* p = t.data.data();
  for (std::size_t i = 0; i < n; ++i) {
    switch (t.type) {
      case dtype::f64: {
        std::memcpy(&v[i], p + 8 * i, 8);
        break;
      }
      case dtype::f32: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        v[i] = f;
        break;
      }
      case dtype::f16:
      case dtype::bf16: {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        v[i] = t.type == dtype::f16 ? f16_to_float(h) : bf16_to_float(h);
        break;
      }
      case dtype::i64: {
        std::int64_t x;
        std::memcpy(&x, p + 8 * i, 8);
        v[i] = static_cast<double>(x);
        break;
      }
      case dtype::i32: {
        std::int32_t x;
        std::memcpy(&x, p + 4 * i, 4);
        v[i] = x;
        break;
      }
      case dtype::i16: {
        std::int16_t x;
        std::memcpy(&x, p + 2 * i, 2);
        v[i] = x;
        break;
      }
      case dtype::i8:
        v[i] = static_cast<std::int8_t>(p[i]);
        break;
      case dtype::u8:
      case dtype::boolean:
        v[i] = p[i];
        break;
    }
  }
  return v;
}

result<tensor_map> read_safetensors(const std::string& path,
                                    std::map<std::string, std::string>* metadata) {
  auto mapped = detail::mapped_checkpoint::open_file(path, metadata);
  if (!mapped) {
    return mapped.err();
  }
  return mapped->copy();
}

namespace {

// One file of `tensors` (in the given order, which must be name order for a stable layout).
status write_entries(const std::string& path, const std::vector<tensor_entry>& tensors,
                     const std::map<std::string, std::string>& metadata, durability sync) {
  json header = json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  std::uint64_t offset = 0;
  for (const auto* e : tensors) {
    const auto& [name, t] = *e;
    for (auto s : t.shape) {
      if (s < 0) {
        return error{"'" + path + "': tensor '" + name + "' has a negative dimension"};
      }
    }
    const auto expected = static_cast<std::uint64_t>(product(t.shape)) * dtype_size(t.type);
    if (t.data.size() != expected) {
      return error{"'" + path + "': tensor '" + name + "' holds " + std::to_string(t.data.size()) +
                   " bytes but its shape and dtype need " + std::to_string(expected)};
    }
    header[name] = {{"dtype", to_string(t.type)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text = header.dump();
  // Pad with spaces so that the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  return write_safetensors_file(path, text, tensors, sync);
}

}  // namespace

status write_safetensors(const std::string& path, const tensor_map& tensors,
                         const std::map<std::string, std::string>& metadata, durability sync) {
  std::vector<tensor_entry> entries;
  entries.reserve(tensors.size());
  for (const auto& e : tensors) {
    entries.push_back(&e);
  }
  return write_entries(path, entries, metadata, sync);
}

result<tensor_map> read_safetensors_dir(const std::string& dir, const std::string& base) {
  auto mapped = detail::mapped_checkpoint::open_dir(dir, base);
  if (!mapped) {
    return mapped.err();
  }
  return mapped->copy();
}

status write_safetensors_dir(const std::string& dir, const tensor_map& tensors,
                             const std::string& base, std::int64_t max_shard_bytes,
                             durability sync) {
  // Shards point into `tensors`: a checkpoint is written without a second copy in memory.
  std::vector<std::vector<tensor_entry>> shards(1);
  std::int64_t in_shard = 0;
  std::int64_t total = 0;
  for (const auto& e : tensors) {
    const auto bytes = static_cast<std::int64_t>(e.second.data.size());
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&e);
    in_shard += bytes;
    total += bytes;
  }
  const auto single_name = base + ".safetensors";
  const auto index_name = base + ".safetensors.index.json";
  // Remove the other layout's files first: a reader prefers the single file, and stale shards
  // would otherwise outlive the index that named them.
  auto files = detail::list_directory(dir);
  if (!files) {
    return files.err();
  }
  for (const auto& file : *files) {
    if ((shards.size() > 1 && file == single_name) ||
        (shards.size() == 1 && (file == index_name || is_shard_of(file, base)))) {
      detail::remove_file(detail::join(dir, file));
    }
  }
  if (shards.size() == 1) {
    return write_entries(detail::join(dir, single_name), shards.front(), {{"format", "pt"}}, sync);
  }
  json weight_map = json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto file = shard_name(base, i + 1, shards.size());
    if (auto s = write_entries(detail::join(dir, file), shards[i], {{"format", "pt"}}, sync); !s) {
      return s;
    }
    for (const auto* e : shards[i]) {
      weight_map[e->first] = file;
    }
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return write_file_durably(detail::join(dir, index_name), index.dump(2) + "\n", 0644, sync);
}

}  // namespace leap::learner
