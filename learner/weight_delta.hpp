// Delta weight sync: between RL steps most elements of bf16 weights are bit-identical (an Adam step
// at a small learning rate moves most of them by less than half a bf16 ulp), so a sync can carry
// only the elements that changed since the version the server holds.
//
// The sender (weight_delta_sender) keeps a copy of what the server holds, in the served dtype, and
// writes a delta folder: `weight_delta.json` (the base version it applies to, the new version, and
// per changed tensor its encoding and the checksum of the whole tensor after applying) and
// `weight_delta.safetensors` (per changed tensor either `<name>:indices` (int32 flat indices) and
// `<name>:values` (the new values at them), vLLM's sparse_nccl patch layout, or `<name>` whole,
// whichever is smaller). Unchanged tensors are not in the folder.
//
// The same delta travels over the broadcast path (learner/weight_broadcast.hpp): prepare_delta()
// keeps it in memory and describes it as a weight_delta_layout (vLLM's sparse_nccl update_info:
// names, dtype_names, shapes, num_updates_list; plus ours: the encoding and checksum per tensor and
// the base version), broadcast_sender::send_delta() broadcasts it and
// broadcast_receiver::receive_delta() rebuilds and checks it as apply_weight_delta does.
//
// The receiver (apply_weight_delta) rebuilds each changed tensor aside, checks its checksum, and
// only when every one matches copies them into the served model: a delta applied to other weights
// than its base (a server that missed one) is refused and the served weights stay. The base
// version is the server's to check (it knows its version; policy/server/detail/server_state.hpp).
//
// The checksum is a position-weighted sum (mod 2^64) of the tensor's words, computed with tensor
// ops on the tensor's device, so the learner's and the server's copies agree across devices. It
// detects any single changed word and almost any other difference; it is no defence against a
// crafted collision (the weights come from our own learner).
//
// No LibTorch in this header. Not thread-safe: one sender per learner, used from one thread.
#pragma once

#include "common/durable_file.hpp"
#include "common/result.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace leap::learner {

class policy;

// The delta folder's file names.
inline constexpr const char* weight_delta_manifest = "weight_delta.json";
inline constexpr const char* weight_delta_tensors = "weight_delta.safetensors";

// What one delta carries, against a full sync in the same dtype.
struct weight_delta_stats {
  std::int64_t tensors = 0;           // parameters in the model
  std::int64_t changed_tensors = 0;   // parameters with at least one changed element
  std::int64_t sparse_tensors = 0;    // of those, sent as (index, value) pairs
  std::int64_t total_elements = 0;    // elements in the model
  std::int64_t changed_elements = 0;  // elements whose bits changed
  std::int64_t bytes = 0;       // tensor payload of the delta (indices, values, whole tensors)
  std::int64_t full_bytes = 0;  // tensor payload of a full sync in the served dtype
};

// The delta folder's header (weight_delta.json), readable without LibTorch.
struct weight_delta_header {
  std::int64_t base_version = 0;
  std::int64_t version = 0;
  std::string dtype;  // the served dtype the delta was computed in ("bfloat16", ...)
};

// True when `dir` holds a delta (its manifest), not a model folder.
[[nodiscard]] bool is_weight_delta_dir(const std::string& dir);
// Reads `dir`'s manifest. Errors: missing or unreadable file, not JSON, fields missing.
[[nodiscard]] result<weight_delta_header> read_weight_delta_header(const std::string& dir);

// One changed tensor of a delta sent by broadcast, in the order it is broadcast.
struct delta_tensor {
  std::string name;
  std::string dtype;  // the served dtype ("bfloat16", ...)
  std::vector<std::int64_t> shape;
  // Elements broadcast: the changed ones (sparse: int32 flat indices, then their values) or all of
  // them (whole: the tensor in its shape).
  std::int64_t count = 0;
  bool sparse = false;
  std::string checksum;  // of the whole tensor after applying (16 hex digits)

  friend bool operator==(const delta_tensor&, const delta_tensor&) = default;
};

// What a broadcast delta carries (the update_info of the delta; policy::nccl_update_info on the
// wire). Unchanged tensors are not in it.
struct weight_delta_layout {
  std::int64_t base_version = 0;
  std::int64_t version = 0;
  std::vector<delta_tensor> tensors;
};

// The tensors a prepared delta broadcasts (LibTorch's, on the policy's device; opaque here).
struct weight_delta_payload;

// A delta computed in memory for the broadcast path: what it carries and the tensors to send
// (broadcast_sender::send_delta). Copies share the tensors.
struct prepared_weight_delta {
  weight_delta_layout layout;
  weight_delta_stats stats;
  std::shared_ptr<const weight_delta_payload> payload;
};

class weight_delta_sender {
 public:
  // `dtype`: the dtype the server holds its weights in ("bfloat16", "float32", "float16",
  // "float64"); deltas are computed and checksummed in it. Default: "" (the policy's own dtype).
  explicit weight_delta_sender(std::string dtype = "");
  ~weight_delta_sender();
  weight_delta_sender(weight_delta_sender&&) noexcept;
  weight_delta_sender& operator=(weight_delta_sender&&) noexcept;

  // Whether a base is held (after reset, until forget).
  [[nodiscard]] bool has_base() const;
  // The version the base holds; nullopt without a base.
  [[nodiscard]] std::optional<std::int64_t> base_version() const;

  // Takes `p`'s weights, converted to the served dtype, as what the server holds at `version`:
  // call after a full sync. Copies every parameter (on `p`'s device). Errors: an unknown dtype.
  [[nodiscard]] status reset(const policy& p, std::int64_t version);

  // Writes the delta from the base to `p`'s weights as `version` into `dir` (created if missing;
  // the manifest is written last, so a reader that finds it finds the tensors). The base does not
  // move until commit. An unchanged model writes a manifest and an empty tensor file. Errors: no
  // base, a parameter set that differs from the base's, I/O.
  [[nodiscard]] result<weight_delta_stats> write_delta(const policy& p, std::int64_t version,
                                                       const std::string& dir,
                                                       durability sync = durability::unsynced);

  // Computes the delta from the base to `p`'s weights as `version`, in memory (on `p`'s device),
  // for broadcast_sender::send_delta. The base does not move until commit. Errors: as
  // write_delta's, without the I/O.
  [[nodiscard]] result<prepared_weight_delta> prepare_delta(const policy& p, std::int64_t version);

  // The server accepted the last written delta: the base becomes its weights and version.
  // Errors: no delta written since the last reset or commit.
  [[nodiscard]] status commit();
  // The server refused a delta, or its state is unknown: no base until the next reset (a full
  // sync).
  void forget();

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

// Applies the delta in `dir` to `target` all or nothing: each changed tensor is rebuilt aside from
// target's current one, its checksum compared with the manifest's, and only when all match are
// they copied in. The caller checks the base version (the manifest's base_version against what it
// serves) and holds `target` exclusively. Errors (target unchanged): no manifest, a dtype other
// than target's, an unknown parameter or another shape, indices out of range, a checksum that does
// not match ("... the weights are unchanged").
[[nodiscard]] status apply_weight_delta(policy& target, const std::string& dir);

}  // namespace leap::learner
