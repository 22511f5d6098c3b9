// safetensors files without LibTorch: an 8-byte little-endian header length, a JSON header
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the raw
// little-endian tensor bytes. Also Hugging Face's sharded layout (model.safetensors.index.json
// naming one shard per tensor) and conversions between floats and the half-precision formats.
//
// Host tensors are plain byte buffers so that the policy server, tools and tests can read and write
// checkpoints without pulling LibTorch headers into their translation units.
// All functions are thread-safe (they share no state); writes are atomic and durable
// (written aside, synced, renamed).
#pragma once

#include "common/durable_file.hpp"
#include "common/result.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace leap::learner {

// The dtypes of the safetensors format this project reads and writes.
enum class dtype : std::uint8_t { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean };

// Bytes per element: 8, 4, 2, 2, 8, 4, 2, 1, 1, 1.
[[nodiscard]] std::size_t dtype_size(dtype d);
// The format's spelling: "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL".
[[nodiscard]] std::string to_string(dtype d);
// Parses the format's spelling; an unknown name is an error naming it.
[[nodiscard]] result<dtype> parse_dtype(const std::string& name);
// Parses a Hugging Face `torch_dtype` ("float32", "bfloat16", "float16", "float64"); other names
// are an error naming them.
[[nodiscard]] result<dtype> parse_torch_dtype(const std::string& name);
// The Hugging Face spelling of a floating dtype ("float32", ...); "" for integer dtypes.
[[nodiscard]] std::string to_torch_dtype(dtype d);

// A dense, row-major tensor in host memory. `data` holds exactly numel(shape) * dtype_size bytes.
struct host_tensor {
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;

  [[nodiscard]] std::int64_t numel() const;
};

// Name to tensor; std::map so that files are written in a stable (sorted) order.
using tensor_map = std::map<std::string, host_tensor>;

// Builds a tensor of `type` (f64, f32, f16 or bf16) from values, rounding to nearest even.
// Precondition: values.size() == product of shape.
[[nodiscard]] host_tensor make_float_tensor(dtype type, std::vector<std::int64_t> shape,
                                            const std::vector<double>& values);
// The values of a floating tensor (f64, f32, f16, bf16) as doubles; integer tensors are converted
// too. Exact for every supported dtype except i64 beyond 2^53.
[[nodiscard]] std::vector<double> to_doubles(const host_tensor& t);

// IEEE half and bfloat16 conversions, round to nearest even; NaN stays NaN.
[[nodiscard]] std::uint16_t float_to_bf16(float f);
[[nodiscard]] float bf16_to_float(std::uint16_t h);
[[nodiscard]] std::uint16_t float_to_f16(float f);
[[nodiscard]] float f16_to_float(std::uint16_t h);

// Reads a whole .safetensors file. Errors (naming the file and the tensor): missing or unreadable
// file, truncated header, header not JSON, unknown dtype, shape and byte range disagreeing, byte
// range outside the file. `metadata`, when given, receives the "__metadata__" strings.
[[nodiscard]] result<tensor_map> read_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// Writes `tensors` as one .safetensors file (header padded to 8 bytes, tensors in name order).
// The file is written to a temporary name beside `path`, synced and renamed, and the folder synced
// (common/durable_file.hpp), so readers never see half a file, nor a power loss an empty one;
// durability::unsynced skips the syncs (readers still never see half a file).
// Errors: a tensor whose byte count disagrees with its shape, I/O failures (naming the path, the
// step, the reason and, on a full disk, the free space).
[[nodiscard]] status write_safetensors(const std::string& path, const tensor_map& tensors,
                                       const std::map<std::string, std::string>& metadata = {},
                                       durability sync = durability::synced);

// Reads every tensor of a Hugging Face model folder: `<dir>/<base>.safetensors`, or else the shards
// listed by `<dir>/<base>.safetensors.index.json`. Errors: neither file exists, an index naming a
// missing shard, a tensor listed in the index but absent from its shard, any read error above.
[[nodiscard]] result<tensor_map> read_safetensors_dir(const std::string& dir,
                                                      const std::string& base = "model");

// Writes `tensors` into `dir` (which must exist) as `<base>.safetensors` when they fit in
// `max_shard_bytes`, else as shards `<base>-00001-of-0000N.safetensors` plus
// `<base>.safetensors.index.json` (Hugging Face's names). A tensor larger than the limit gets a
// shard of its own. Stale files of the other layout are removed so that a reader cannot pick them
// up. `max_shard_bytes` Default: 5 GiB (Hugging Face's default shard size). Each file is written
// as write_safetensors writes, with `sync`.
[[nodiscard]] status write_safetensors_dir(const std::string& dir, const tensor_map& tensors,
                                           const std::string& base = "model",
                                           std::int64_t max_shard_bytes = std::int64_t{5} << 30,
                                           durability sync = durability::synced);

}  // namespace leap::learner
