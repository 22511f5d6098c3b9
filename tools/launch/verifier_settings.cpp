#include "tools/launch/launch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

namespace leap::launch {

sandbox::verifier_config sandbox_settings(const verifier_section& s, const task_set_kinds& kinds,
                                          const std::string& cache_dir) {
  sandbox::verifier_config v;
  if (!cache_dir.empty()) {
    v.engine.cache_dir = cache_dir;
  } else if (!s.cache_dir.empty()) {
    v.engine.cache_dir = s.cache_dir;
  }
  v.engine.cache_max_bytes = static_cast<std::uint64_t>(s.cache_max_bytes);
  v.engine.cuda_arch = s.cuda_arch;
  v.engine.python = s.python;
  v.engine.feedback.char_budget = static_cast<std::size_t>(s.feedback_max_chars);
  v.engine.timing_reps = s.timing_reps;
  v.engine.compile_limits.wall =
      std::chrono::milliseconds(static_cast<std::int64_t>(s.compile_timeout_s * 1000));
  const auto run_wall =
      std::chrono::milliseconds(static_cast<std::int64_t>(s.run_timeout_s * 1000));
  v.engine.run_limits.wall = run_wall;
  v.engine.cuda_run_limits.wall = run_wall;
  v.engine.python_limits.wall = run_wall;
  v.engine.kernelbench_limits.wall = run_wall;
  v.engine.run_limits.output_cap_bytes = static_cast<std::uint64_t>(s.output_limit_bytes);
  v.engine.profile = s.profile;
  v.engine.profiler = s.profile_tool;
  v.engine.profile_max_kernels = static_cast<std::size_t>(s.profile_max_kernels);
  v.engine.profile_limits.wall =
      std::chrono::milliseconds(static_cast<std::int64_t>(s.profile_timeout_s * 1000));
  // ncu's replays keep the CPU busy: the default's CPU allowance per wall second (300 s for 120 s)
  // for longer limits.
  v.engine.profile_limits.cpu_seconds = std::max(
      v.engine.profile_limits.cpu_seconds, static_cast<int>(std::ceil(s.profile_timeout_s * 2.5)));
  v.engine.ncu = s.ncu;
  v.compile_workers = s.compile_workers;
  // KernelBench task sets: torch's precompiled header is built in the background from the start,
  // so the first candidates' extension builds (about 40 s of a core each without it) find it
  // ready or wait for that one build instead of each compiling torch's headers in full.
  v.engine.kernelbench_pch_ahead = kinds.kernelbench;
  // and each run slot starts its next judge ahead of the job (torch imported, CUDA started).
  v.engine.kernelbench_standby = kinds.kernelbench;
  v.engine.kernelbench_standby_depth = s.kernelbench_standby_depth;
  sandbox::set_kernelbench_scratch(v.engine,
                                   static_cast<std::uint64_t>(s.kernelbench_scratch_bytes));
  // gpu_slots GPUs with runs_per_gpu run slots each (the verifier's slot i runs on GPU i mod
  // gpu_slots); CPU-only task sets use the sandbox's default (one per core).
  if (kinds.cuda && s.gpu_slots > 0) {
    v.run_slots = s.gpu_slots * std::max(1, s.runs_per_gpu);
    for (int i = 0; i < s.gpu_slots; ++i) {
      v.gpus.push_back(i);
    }
  }
  return v;
}

}  // namespace leap::launch
