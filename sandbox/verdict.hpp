// What verification says about one candidate: pass or fail, why, and the text the model reads.
#pragma once

#include "common/enums/verdict_category.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace leap::sandbox {

// verdict_category and its names (to_string, parse_verdict_category) come from the shared
// vocabulary.

struct timing_stats {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double q1_ms = 0;  // the quartiles (linear interpolation between the sorted times, as numpy's)
  double q3_ms = 0;
  int reps = 0;
};

// The statistics of one program's timed repetitions (milliseconds each). Pure function.
timing_stats timing_stats_of(std::vector<double> ms);

// The relative noise of a speedup (reference median / candidate median): half of each side's
// interquartile range over its median, summed; a robust and conservative margin (two speedups
// closer than it are not told apart). nullopt when either side has fewer than 5 repetitions or a
// median that is not positive. Pure function.
std::optional<double> speedup_noise(const timing_stats& candidate, const timing_stats& reference);

// One kernel of a profiled candidate, the compact part kept with the turn (issue 34).
struct kernel_summary {
  std::string name;        // the function name ("copy_strided")
  double duration_ns = 0;  // of its longest profiled launch; 0 when ncu did not report it
  std::string bottleneck;  // memory-bound, compute-bound, latency-bound, launch-bound or unknown
  std::vector<std::string> findings;  // the analysers that fired ("uncoalesced_global"), in order
};

// The profile of a verdict that verifier.profile selected; absent when profiling was off or the
// verdict was not selected.
struct profile_summary {
  std::vector<kernel_summary> kernels;  // empty when profiling failed: `note` says why
  // Why there is no profile (no ncu, counters not permitted and what would permit them, the time
  // limit, no kernel of the candidate's own), or empty.
  std::string note;
  double seconds = 0;  // wall time of the profiling run
  // What measured the kernels: "ncu" (hardware counters, read by Nsight Compute outside the
  // candidate's process) or "events" (CUPTI activity records written from inside the candidate's
  // own process: duration, launch configuration, theoretical occupancy; never paid as a reward).
  // Default: ncu
  std::string source = "ncu";
};

struct verdict {
  bool passed = false;
  verdict_category category = verdict_category::runtime;
  // For the model: deterministic, free of host paths and harness internals, within the budget.
  std::string feedback;
  double compile_ms = 0;  // 0 when nothing was compiled (python) or on a cache hit's lookup only
  double run_ms = 0;      // wall time of the candidate's run
  // Compiled and waiting for a run slot (a GPU for cuda work); set by the verifier's pipeline.
  double run_queue_ms = 0;
  bool cache_hit = false;
  std::optional<timing_stats> candidate_time;  // only when timing is on and the candidate passed
  std::optional<timing_stats> reference_time;
  std::optional<double> speedup;        // reference median / candidate median
  std::optional<double> speedup_noise;  // its relative noise (speedup_noise above), when known
  // kernelbench: the second baseline, the reference under torch.compile, and the speedup over it;
  // when it is missing, timing_note says why
  std::optional<timing_stats> compiled_reference_time;
  std::optional<double> compiled_speedup;
  std::optional<double> compiled_speedup_noise;
  std::string timing_note;
  // A timed run on a GPU: its clocks, temperature and slowdowns, read through NVML by the engine
  // before and after (gpu_clocks.hpp). Throttled: a speedup measured then is withheld (the pass
  // counts as an untimed one) and timing_note says so.
  std::string clock_note;
  bool timing_throttled = false;
  // For logs, not for the model: isolation applied, raw stderr tail, etc.
  std::string diagnostics;
  // kernelbench: where the candidate's extensions were built ("compile pool", or what its run built
  // itself and why); empty when it built none
  std::string build_note;
  // The run failed for device memory: torch's out-of-memory error in a KernelBench candidate's
  // run, CUDA's cudaErrorMemoryAllocation in a cuda candidate's. Set by the engine; the verifier
  // runs such a run again alone on its GPU when it shared the GPU (verifier.hpp).
  bool device_memory_failure = false;
  // KernelBench on a shared GPU: the device memory its torch allocations were capped at (bytes;
  // 0 when the run had the GPU alone or the device was not CUDA).
  std::uint64_t device_memory_share_bytes = 0;
  // Set by the verifier: why this verdict is from a second run made alone on the GPU (its first,
  // which shared the GPU, failed for device memory); empty for a verdict of a run's only attempt.
  std::string rerun_note;
  // Where the run's wall time went, in order: each step's name and milliseconds (KernelBench: the
  // judge's steps, from the sandbox's start to the record; kernelbench_run_phases). For logs and
  // `leap verify`, not for the model; empty where not measured.
  std::vector<std::pair<std::string, double>> run_phases_ms;
  // KernelBench: how the reference's cases (every trial's and timing set's inputs and outputs)
  // were obtained, their size, and how long this run waited for them ("16.5 GiB of cases, the
  // problem run in the sandbox in 83.2 s (95.1 s with the compile cache's write); this run waited
  // 0.0 s"). For logs and `leap verify`, not for the model; empty for other kinds.
  std::string reference_note;
  // Nsight Compute's view of the candidate's own kernels (engine_config::profile); its diagnosis is
  // also appended to `feedback`, after the verdict's own text.
  std::optional<profile_summary> profile;
};

}  // namespace leap::sandbox
