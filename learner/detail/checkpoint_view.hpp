// A checkpoint's tensors as views into its files, mapped read-only. Loading a model from views
// copies each tensor once, from the page cache to its device, where reading the files into host
// buffers first costs an allocation, a zero fill and a second copy of every byte (the disk weight
// sync of a 7B model moves 15 GB). Internal to learner/; no LibTorch here.
#pragma once

#include "common/result.hpp"
#include "learner/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace leap::learner::detail {

struct tensor_view {
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;  // numel(shape) * dtype_size(type) bytes
  std::size_t bytes = 0;
};

using view_map = std::map<std::string, tensor_view>;

// Views into host tensors: valid while `tensors` lives and is not modified.
[[nodiscard]] view_map views_of(const tensor_map& tensors);

class mapped_checkpoint {
 public:
  // One .safetensors file. Errors: those of read_safetensors (which is this plus a copy).
  [[nodiscard]] static result<mapped_checkpoint> open_file(
      const std::string& path, std::map<std::string, std::string>* metadata = nullptr);
  // A model folder: `<dir>/<base>.safetensors` or the shards of its index. Errors: those of
  // read_safetensors_dir.
  [[nodiscard]] static result<mapped_checkpoint> open_dir(const std::string& dir,
                                                          const std::string& base = "model");

  // Valid while this object lives.
  [[nodiscard]] const view_map& tensors() const { return views_; }

  // Copies every tensor into host buffers, read from the files rather than the mappings: a file
  // that shrank since it was opened (truncated in place by another writer) is then an error naming
  // the file, the tensor and the sizes, where a read of the mapping past the new end is a SIGBUS.
  // The views above carry that risk: a file must not shrink while a model loads from them (the
  // project's writers replace files by renaming, so a mapped file never changes).
  [[nodiscard]] result<tensor_map> copy() const;

  struct mapping;

 private:
  std::vector<std::shared_ptr<const mapping>> files_;
  view_map views_;
  // Each view's file, for copy().
  std::map<std::string, const mapping*> file_of_;
};

}  // namespace leap::learner::detail
