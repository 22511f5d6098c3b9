// Internal to the sandbox: small pieces the engine's pipelines (engine.cpp and
// engine_kernelbench.cpp) share. Not part of the module's public header.
#pragma once

#include "sandbox/engine.hpp"
#include "sandbox/gpu_clocks.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

namespace leap::sandbox::detail {

// The most a judge or harness may print as its result record.
inline constexpr std::size_t k_max_result_json_bytes = 1 << 20;

// The PATH a sandboxed tool gets: the system's directories, after extra_dir when one is given.
std::string base_path(const std::string& extra_dir);
// The directory of a program's path; empty for a bare name.
std::string dir_of(const std::string& program);
std::string memory_feedback(const resource_limits& l);
verdict make_verdict(verdict_category c, std::string feedback);

// The GPU's clocks around one timed run (gpu_clocks.hpp); an empty note where there is no GPU or
// no NVML (said, not an error: the timing stands, unmarked).
class clock_watch {
 public:
  // gpu < 0: a GPU slot without a device of its own sees the driver's default device, the first.
  explicit clock_watch(int gpu, bool on) : gpu_(std::max(gpu, 0)), on_(on) {
    if (on_) {
      before_ = sample_gpu_clocks(gpu_);
    }
  }
  [[nodiscard]] clock_window finish() const {
    if (!on_) {
      return {};
    }
    if (!before_) {
      return {.note = "clocks not read: " + before_.err().message};
    }
    auto after = sample_gpu_clocks(gpu_);
    if (!after) {
      return {.note = "clocks not read: " + after.err().message};
    }
    return compare_clock_samples(*before_, *after);
  }

 private:
  int gpu_;
  bool on_;
  result<gpu_clock_sample> before_ = error{"not sampled"};
};

}  // namespace leap::sandbox::detail
