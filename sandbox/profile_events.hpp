// The profiler's fall-back where GPU counters are not permitted (issue 34): kernel activity records
// that CUPTI's Activity API gives without counter permission, written as JSON lines by the events
// library (sandbox/cupti/) from inside each profiled process, read here into the same
// kernel_profile that ncu's CSV gives, filled only with the ncu metrics the records can give: the
// duration, the launch configuration, registers, shared memory, the SM count and the theoretical
// occupancy with its limiter (computed as CUDA's occupancy calculator does). The analysers that
// need only those fire; the others find their metrics absent and stay silent. An internal header
// of the sandbox module: nothing outside sandbox/ includes it. Every function is pure and
// thread-safe except read_kernel_event_files, which reads files.
#pragma once

#include "common/result.hpp"
#include "sandbox/profile.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

// The environment variable that names the events library's output: each process writes
// "<value>.<pid>.jsonl".
inline constexpr std::string_view k_kernel_events_env = "LEAP_KERNEL_EVENTS";

// One GPU as CUPTI's device record describes it (CUpti_ActivityDevice5).
struct gpu_device_limits {
  std::uint32_t id = 0;
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;
  int cc_minor = 0;
  std::uint32_t sm_count = 0;
  std::uint32_t max_threads_per_block = 0;
  std::uint32_t max_warps_per_sm = 0;
  std::uint32_t max_blocks_per_sm = 0;
  std::uint32_t registers_per_sm = 0;
  std::uint32_t registers_per_block = 0;
  std::uint64_t shared_per_sm = 0;     // bytes, the largest carveout
  std::uint64_t shared_per_block = 0;  // bytes, without opt-in
};

// One kernel launch as CUPTI's kernel record describes it (CUpti_ActivityKernel*).
struct kernel_launch_event {
  std::string name;  // as the record has it: mangled for C++ kernels, plain for Triton's
  std::uint32_t device = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t grid[3] = {0, 0, 0};
  std::uint32_t block[3] = {0, 0, 0};
  std::uint32_t registers_per_thread = 0;
  std::uint64_t static_shared = 0;   // bytes per block
  std::uint64_t dynamic_shared = 0;  // bytes per block
  // The shared memory the driver configured per SM for this launch (sharedMemoryExecuted), 0
  // when the record does not say: the device's largest carveout is used then.
  std::uint64_t shared_executed = 0;
};

struct kernel_events {
  std::vector<gpu_device_limits> devices;
  std::vector<kernel_launch_event> launches;
};

// Parses the events library's JSON lines, one record per line:
//   {"kind":"device","id":0,"name":"NVIDIA H200","cc":[9,0],"sm_count":132,
//    "max_threads_per_block":1024,"max_warps_per_sm":64,"max_blocks_per_sm":32,
//    "registers_per_sm":65536,"registers_per_block":65536,"shared_per_sm":233472,
//    "shared_per_block":49152}
//   {"kind":"kernel","name":"_Z4copyPKfPfi","device":0,"start":100,"end":5100,"grid":[40,1,1],
//    "block":[256,1,1],"registers":32,"static_shared":0,"dynamic_shared":0,"shared_executed":0}
// The text comes from inside the candidate's process, so it is read strictly: every line (empty
// ones aside) must be one of these objects with every field of its kind, unsigned integers where
// numbers are due, a start not after the end; anything else is an error naming its line (1-based)
// and the field. shared_executed may be absent (0). Appends to `into`.
status parse_kernel_events(std::string_view text, kernel_events& into);

// Reads and parses every regular file in `dir` whose name starts with `prefix` (the events of each
// process that ran CUDA), each read with read_untrusted_file at most `max_bytes` (more is an
// error), in name order. Errors name the file (and the line). No file at all is no error: empty
// events.
result<kernel_events> read_kernel_event_files(const std::filesystem::path& dir,
                                              std::string_view prefix, std::size_t max_bytes);

// The function name of a kernel record's name, as ncu's --kernel-name-base function gives it:
// "_Z4copyPKfPfi" -> "copy", "_ZN2ns5scaleIfEEvPT_i" -> "scale"; a name that is not mangled
// (Triton's) is itself. A mangled name that does not demangle is itself too.
std::string kernel_function_name(std::string_view record_name);

// The theoretical occupancy of one launch, as CUDA's occupancy calculator computes it.
struct occupancy {
  // Resident blocks per SM that each resource allows; the smallest is the occupancy's.
  std::uint32_t by_warps = 0;
  std::uint32_t by_registers = 0;
  std::uint32_t by_shared_memory = 0;
  std::uint32_t by_blocks = 0;
  std::uint32_t blocks = 0;  // resident blocks per SM: the smallest of the four
  double pct = 0;            // resident warps over the SM's maximum, in %
  std::string_view limiter;  // "warps", "registers", "shared memory" or "blocks per SM"
};

// Per architecture (compute capability), from the CUDA occupancy calculator's GPU data (the
// CUDA_Occupancy_Calculator.xls sheet and the CUDA C++ Programming Guide's "Technical
// Specifications per Compute Capability"): registers are allocated per warp in units of 256, warps
// in groups of 4 (sm_50 to sm_90 and later); shared memory in units of 128 bytes from sm_80 (256
// before), and from sm_80 the system reserves 1 KiB of shared memory per block. A launch the SM
// cannot hold (a block over the thread limit, more than 255 registers, shared memory over the
// carveout) has 0 blocks. nullopt for an empty block or a device record without limits.
std::optional<occupancy> theoretical_occupancy(const gpu_device_limits& device,
                                               const kernel_launch_event& launch);

// Each launch of a kernel named in `kernel_names` (the candidate's own: global_kernel_names,
// kernelbench_kernel_names; by kernel_function_name) as a kernel_profile with only the metrics the
// records give: gpu__time_duration.sum, launch__grid_size, launch__block_size,
// launch__registers_per_thread, launch__shared_mem_per_block_static and _dynamic,
// device__attribute_multiprocessor_count, the display name (text), and where the device is known
// the occupancy metrics (launch__occupancy_limit_warps, _registers, _shared_mem, _blocks,
// sm__maximum_warps_per_active_cycle_pct, launch__waves_per_multiprocessor). In launch order; ids
// from 0.
std::vector<kernel_profile> event_profiles(const kernel_events& events,
                                           const std::vector<std::string>& kernel_names);

// The note of an events profile: why (the counters' note, when ncu said so) and what it holds.
inline constexpr std::string_view k_events_profile_note =
    "profiled from kernel events: duration, launch configuration and theoretical occupancy only";

}  // namespace leap::sandbox
