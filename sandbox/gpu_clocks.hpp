// Internal to the sandbox: a GPU's clocks and throttling, read through NVML from the engine's
// own process (never the candidate's) before and after a timed run, so that a measurement taken
// while the GPU slowed itself down is marked as such. NVML is loaded at run time
// (libnvidia-ml.so.1): the code builds and runs on machines without a driver, where a sample is an
// error that says so.
#pragma once

#include "common/result.hpp"

#include <cstdint>
#include <string>

namespace leap::sandbox {

struct gpu_clock_sample {
  unsigned sm_mhz = 0;
  unsigned max_sm_mhz = 0;
  unsigned mem_mhz = 0;
  unsigned temperature_c = 0;
  // NVML's clock event ("throttle") reasons at the moment of the sample (nvmlClocksEventReasons).
  std::uint64_t reasons = 0;
  // NVML's cumulative time spent below the requested clocks for power and for thermal reasons
  // (nvmlDeviceGetViolationStatus): the difference between two samples covers the whole window.
  std::uint64_t power_violation_ns = 0;
  std::uint64_t thermal_violation_ns = 0;
};

// One sample of NVML's device `index` (NVML numbers GPUs in PCI bus order, as CUDA does with
// CUDA_DEVICE_ORDER=PCI_BUS_ID). Errors: no NVML on this machine, no such device, a call refused.
result<gpu_clock_sample> sample_gpu_clocks(int index);

struct clock_window {
  // Slowed down by heat or a hardware slowdown (thermal, hardware slowdown, power brake): the
  // timings taken in the window do not describe the kernels.
  bool throttled = false;
  // Held at its power cap: normal for a GPU under heavy work (the reference and the candidate both
  // meet it), said in the note, not a reason to distrust the timing.
  bool power_limited = false;
  // One line for people: the SM clock before and after, the memory clock, the temperature, and
  // what slowed the GPU down, if anything did.
  std::string note;
};

// What happened between two samples of one GPU: time below the requested clocks for thermal or
// power reasons in between (NVML's violation counters), and the slowdown reasons active at either
// end. Idle and application-clock settings are neither. Pure function.
clock_window compare_clock_samples(const gpu_clock_sample& before, const gpu_clock_sample& after);

}  // namespace leap::sandbox
