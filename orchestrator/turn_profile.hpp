// A turn's profile as the run keeps it: what Nsight Compute said of the candidate's own kernels
// (the sandbox's profile_summary, issue 34), under the identity of the turn it profiled. The
// profile is made after the verdict, in the verifier's own pool, so it reaches the store on its own
// and is kept under a key of its own (storage/), never inside the turn's record.
//
// All functions here are pure and thread-safe.
#pragma once

#include "common/enums/split_kind.hpp"
#include "common/field_list.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace leap {

// One kernel of a profiled candidate (sandbox/verdict.hpp: kernel_summary).
struct kernel_profile {
  std::string name;        // the function name ("copy_strided")
  double duration_ns = 0;  // of its longest profiled launch; 0 when ncu did not report it
  // memory-bound, compute-bound, latency-bound, launch-bound or unknown, as the sandbox names them
  std::string bottleneck;
  std::vector<std::string> findings;  // the analysers that fired ("uncoalesced_global"), in order

  friend bool operator==(const kernel_profile&, const kernel_profile&) = default;
};

// The turn a profile belongs to: the ids of its group, its rollout and its turn (0-based), as the
// store keys its turns.
struct turn_ref {
  std::string run_id;
  std::uint64_t step = 0;
  split_kind split = split_kind::train;
  std::uint32_t group = 0;
  std::uint32_t rollout = 0;
  std::uint32_t turn = 0;

  friend bool operator==(const turn_ref&, const turn_ref&) = default;
};

struct turn_profile_record {
  turn_ref turn;
  std::vector<kernel_profile> kernels;  // empty when profiling failed: `note` says why
  std::string note;                     // why there is no profile, or empty
  double seconds = 0;                   // wall time of the profiling run
  // What measured the kernels (sandbox/verdict.hpp: profile_summary::source): "ncu", or "events"
  // for the fall-back from kernel activity records, which the candidate's own process writes and
  // which no structural reward term is paid from (paid_structural_score). Records older than
  // format version 7 read "ncu", the only source there was. Default: ncu
  std::string source = "ncu";

  friend bool operator==(const turn_profile_record&, const turn_profile_record&) = default;
};

// The fields of a profile (common/field_list.hpp). Its turn is the store's key, not in
// its bytes.
template <maybe_const<kernel_profile> X>
constexpr auto fields(X& x) {
  return std::tuple{field("name", x.name), field("duration_ns", x.duration_ns),
                    field("bottleneck", x.bottleneck), field("findings", x.findings)};
}

template <maybe_const<turn_ref> X>
constexpr auto fields(X& x) {
  return std::tuple{field("run_id", x.run_id), field("step", x.step),       field("split", x.split),
                    field("group", x.group),   field("rollout", x.rollout), field("turn", x.turn)};
}

template <maybe_const<turn_profile_record> X>
constexpr auto fields(X& x) {
  return std::tuple{field("turn", x.turn, opt().beside_record()),
                    field("kernels", x.kernels, opt().element("kernel")), field("note", x.note),
                    field("seconds", x.seconds), field("source", x.source, opt().since(7))};
}

// The turn a generation request id names (orchestrator/group_report.hpp: turn_request_id's form
// "run/step/split/group/rollout/turn", the run id possibly holding '/'); nullopt when the id is not
// of that form (a client's own id).
[[nodiscard]] std::optional<turn_ref> turn_of_request(std::string_view request_id);

// The bottleneck classes counted per kernel, in this order (an unrecognised name counts as
// unknown).
inline constexpr std::array<std::string_view, 5> bottleneck_class_names = {
    "memory-bound", "compute-bound", "latency-bound", "launch-bound", "unknown"};
[[nodiscard]] std::size_t bottleneck_class_index(std::string_view name);

// What a set of profiles says, summed: the profiles, their kernels per bottleneck class, and the
// seconds spent profiling.
struct profile_counts {
  std::uint32_t profiles = 0;  // profiled turns (with or without kernels)
  std::array<std::uint32_t, bottleneck_class_names.size()> kernels{};
  double seconds = 0;

  void add(const turn_profile_record& profile);
  void add(const profile_counts& other);
  friend bool operator==(const profile_counts&, const profile_counts&) = default;
};

// The step metrics of a step's profiles: profile.turns (profiled turns), profile.seconds and
// profile.<class> per bottleneck class ("memory_bound", ..., "unknown": kernels of that class);
// nothing when `counts` holds no profile.
void add_profile_metrics(const profile_counts& counts, std::map<std::string, double>& metrics);
// "profile.memory_bound" for the class at `index` of bottleneck_class_names.
[[nodiscard]] std::string profile_metric_of_class(std::size_t index);

}  // namespace leap
