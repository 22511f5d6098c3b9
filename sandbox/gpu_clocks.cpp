#include "sandbox/gpu_clocks.hpp"

#include <dlfcn.h>
#include <mutex>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

namespace leap::sandbox {
namespace {

// NVML's ABI as nvml.h declares it: nvmlReturn_t is an int, a device an opaque pointer.
using nvml_return = int;
using nvml_device = struct nvml_device_opaque*;
struct nvml_violation_time {
  unsigned long long reference_time;
  unsigned long long violation_time;
};
constexpr int k_nvml_clock_sm = 1;
constexpr int k_nvml_clock_mem = 2;
constexpr int k_nvml_temperature_gpu = 0;
constexpr int k_nvml_perf_policy_power = 0;
constexpr int k_nvml_perf_policy_thermal = 1;

struct nvml {
  nvml_return (*init)();
  nvml_return (*device_by_index)(unsigned index, nvml_device* device);
  nvml_return (*clock_info)(nvml_device device, int type, unsigned* mhz);
  nvml_return (*max_clock_info)(nvml_device device, int type, unsigned* mhz);
  nvml_return (*temperature)(nvml_device device, int sensor, unsigned* celsius);
  nvml_return (*event_reasons)(nvml_device device, unsigned long long* reasons);
  nvml_return (*violation)(nvml_device device, int policy, nvml_violation_time* time);
  const char* (*error_string)(nvml_return rc);
};

result<const nvml*> load_nvml() {
  static std::once_flag once;
  static nvml api{};
  static std::string failure;
  std::call_once(once, [] {
    void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      failure = std::string("no NVML (libnvidia-ml.so.1): ") + (why ? why : "not found");
      return;
    }
    auto bind = [&](auto& fn, std::initializer_list<const char*> names) {
      for (const char* name : names) {
        if (void* found = ::dlsym(lib, name)) {
          fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(found);
          return true;
        }
      }
      failure = std::string("NVML lacks ") + *names.begin();
      return false;
    };
    // The "event reasons" call is the newer name of the "throttle reasons" one (same ABI).
    if (!bind(api.init, {"nvmlInit_v2"}) ||
        !bind(api.device_by_index, {"nvmlDeviceGetHandleByIndex_v2"}) ||
        !bind(api.clock_info, {"nvmlDeviceGetClockInfo"}) ||
        !bind(api.max_clock_info, {"nvmlDeviceGetMaxClockInfo"}) ||
        !bind(api.temperature, {"nvmlDeviceGetTemperature"}) ||
        !bind(api.event_reasons, {"nvmlDeviceGetCurrentClocksEventReasons",
                                  "nvmlDeviceGetCurrentClocksThrottleReasons"}) ||
        !bind(api.violation, {"nvmlDeviceGetViolationStatus"}) ||
        !bind(api.error_string, {"nvmlErrorString"})) {
      return;
    }
    if (const nvml_return rc = api.init(); rc != 0) {
      failure = std::string("nvmlInit failed: ") + api.error_string(rc);
    }
  });
  if (!failure.empty()) {
    return error{failure};
  }
  return &api;
}

// The slowdown reasons (nvml.h's nvmlClocksEventReason* bits) with the names people know them by.
constexpr std::uint64_t k_power_cap = 0x4;
constexpr std::pair<std::uint64_t, std::string_view> k_slowdowns[] = {
    {0x8, "hardware slowdown"},
    {0x20, "thermal (software)"},
    {0x40, "thermal (hardware)"},
    {0x80, "power brake"},
};

}  // namespace

result<gpu_clock_sample> sample_gpu_clocks(int index) {
  auto api = load_nvml();
  if (!api) {
    return api.err();
  }
  const nvml& n = **api;
  nvml_device device = nullptr;
  auto check = [&](nvml_return rc, const char* what) -> status {
    if (rc != 0) {
      return error{std::string("NVML ") + what + " of GPU " + std::to_string(index) + ": " +
                   n.error_string(rc)};
    }
    return ok_status();
  };
  if (index < 0) {
    return error{"NVML: no GPU for a slot without one"};
  }
  if (auto s = check(n.device_by_index(static_cast<unsigned>(index), &device), "device"); !s) {
    return s.err();
  }
  gpu_clock_sample sample;
  unsigned long long reasons = 0;
  nvml_violation_time power{}, thermal{};
  for (const auto& s :
       {check(n.clock_info(device, k_nvml_clock_sm, &sample.sm_mhz), "SM clock"),
        check(n.max_clock_info(device, k_nvml_clock_sm, &sample.max_sm_mhz), "max clock"),
        check(n.clock_info(device, k_nvml_clock_mem, &sample.mem_mhz), "memory clock"),
        check(n.temperature(device, k_nvml_temperature_gpu, &sample.temperature_c), "temperature"),
        check(n.event_reasons(device, &reasons), "clock event reasons"),
        check(n.violation(device, k_nvml_perf_policy_power, &power), "power violations"),
        check(n.violation(device, k_nvml_perf_policy_thermal, &thermal), "thermal violations")}) {
    if (!s) {
      return s.err();
    }
  }
  sample.reasons = reasons;
  sample.power_violation_ns = power.violation_time;
  sample.thermal_violation_ns = thermal.violation_time;
  return sample;
}

clock_window compare_clock_samples(const gpu_clock_sample& before, const gpu_clock_sample& after) {
  auto in_window = [](std::uint64_t a, std::uint64_t b) { return b > a ? b - a : 0; };
  clock_window w;
  std::vector<std::string> slowed;
  if (const auto ns = in_window(before.thermal_violation_ns, after.thermal_violation_ns); ns > 0) {
    slowed.push_back("thermally limited for " + std::to_string(ns / 1000000) + " ms");
  }
  for (const auto& [bit, name] : k_slowdowns) {
    if (((before.reasons | after.reasons) & bit) != 0) {
      slowed.emplace_back(name);
    }
  }
  w.throttled = !slowed.empty();
  const auto power_ns = in_window(before.power_violation_ns, after.power_violation_ns);
  w.power_limited = power_ns > 0 || ((before.reasons | after.reasons) & k_power_cap) != 0;
  std::ostringstream out;
  out << "SM clock " << before.sm_mhz << " -> " << after.sm_mhz << " MHz (max " << after.max_sm_mhz
      << "), memory " << after.mem_mhz << " MHz, " << after.temperature_c << " C";
  if (w.power_limited) {
    out << "; at its power cap";
    if (power_ns > 0) {
      out << " for " << power_ns / 1000000 << " ms";
    }
  }
  if (w.throttled) {
    out << "; THROTTLED: ";
    for (std::size_t i = 0; i < slowed.size(); ++i) {
      out << (i ? ", " : "") << slowed[i];
    }
  } else {
    out << "; not throttled";
  }
  w.note = out.str();
  return w;
}

}  // namespace leap::sandbox
