// Internal to the sandbox: small pieces the engine's pipelines (engine.cpp and
// engine_kernelbench.cpp) share. Not part of the module's public header.
#pragma once

#include "sandbox/engine.hpp"
#include "sandbox/gpu_clocks.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

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

// A GPU slot's keeper process (harness.hpp, keeper_source), started and owned by the engine.
class gpu_keeper {
 public:
  // Writes `binary` below `scratch_root`, starts it with exactly `env` and waits up to
  // `ready_within` for its CUDA to be up. Errors say what the keeper said, or that it did not
  // answer in time.
  static result<std::unique_ptr<gpu_keeper>> start(
      const std::filesystem::path& scratch_root, const std::string& binary,
      const std::vector<std::pair<std::string, std::string>>& env,
      std::chrono::milliseconds ready_within);
  gpu_keeper(const gpu_keeper&) = delete;
  gpu_keeper& operator=(const gpu_keeper&) = delete;
  // Closes the control socket, which ends the keeper; one that has not ended within 2 s is killed.
  ~gpu_keeper();

  // A new session for one judge: the judge's end of a socketpair whose other end the keeper now
  // serves (close-on-exec; the caller owns it). An error: the keeper is gone.
  result<int> session();
  // Whether the process is still running (reaps it when not).
  [[nodiscard]] bool alive();

 private:
  gpu_keeper(pid_t pid, int control) : pid_(pid), control_(control) {}
  pid_t pid_;
  int control_;
  bool exited_ = false;
};

}  // namespace leap::sandbox::detail
