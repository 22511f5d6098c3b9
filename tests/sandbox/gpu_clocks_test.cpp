// The GPU clock reader: what two samples say about the window between them (pure), and a real
// sample where the machine has NVML.
#include "sandbox/gpu_clocks.hpp"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <string>

namespace leap::sandbox {
namespace {

gpu_clock_sample steady() {
  gpu_clock_sample s;
  s.sm_mhz = 1980;
  s.max_sm_mhz = 1980;
  s.mem_mhz = 3201;
  s.temperature_c = 41;
  s.reasons = 0x1;  // idle: not a slowdown
  s.power_violation_ns = 5'000'000'000;
  s.thermal_violation_ns = 7'000'000'000;
  return s;
}

TEST(GpuClocks, AnIdleOrSteadyWindowIsNotThrottled) {
  const auto w = compare_clock_samples(steady(), steady());
  EXPECT_FALSE(w.throttled);
  EXPECT_FALSE(w.power_limited);
  EXPECT_EQ(w.note, "SM clock 1980 -> 1980 MHz (max 1980), memory 3201 MHz, 41 C; not throttled");
}

TEST(GpuClocks, ThermalTimeInTheWindowOrASlowdownReasonIsThrottling) {
  auto after = steady();
  after.thermal_violation_ns += 12'000'000;
  auto w = compare_clock_samples(steady(), after);
  EXPECT_TRUE(w.throttled);
  EXPECT_NE(w.note.find("THROTTLED: thermally limited for 12 ms"), std::string::npos) << w.note;

  // Each slowdown reason alone, at either end of the window.
  for (const auto& [bit, name] :
       {std::pair{0x8ULL, "hardware slowdown"}, std::pair{0x20ULL, "thermal (software)"},
        std::pair{0x40ULL, "thermal (hardware)"}, std::pair{0x80ULL, "power brake"}}) {
    auto before = steady();
    before.reasons |= bit;
    w = compare_clock_samples(before, steady());
    EXPECT_TRUE(w.throttled) << name;
    EXPECT_NE(w.note.find(name), std::string::npos) << w.note;
  }
  // Counters that went backwards (a driver reload between the samples) say nothing.
  auto reset = steady();
  reset.thermal_violation_ns = 0;
  EXPECT_FALSE(compare_clock_samples(steady(), reset).throttled);
}

TEST(GpuClocks, APowerCapIsSaidButIsNotThrottling) {
  auto after = steady();
  after.power_violation_ns += 30'000'000;
  auto w = compare_clock_samples(steady(), after);
  EXPECT_FALSE(w.throttled);
  EXPECT_TRUE(w.power_limited);
  EXPECT_NE(w.note.find("at its power cap for 30 ms"), std::string::npos) << w.note;
  after = steady();
  after.reasons |= 0x4;
  w = compare_clock_samples(steady(), after);
  EXPECT_FALSE(w.throttled);
  EXPECT_TRUE(w.power_limited);
}

// Where the machine has NVML and a GPU, a sample is real; elsewhere the error says what is missing.
TEST(GpuClocks, ASampleIsRealWhereThereIsAGpuAndAClearErrorElsewhere) {
  auto sample = sample_gpu_clocks(0);
  void* nvml = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    ASSERT_FALSE(sample.ok());
    EXPECT_NE(sample.err().message.find("no NVML"), std::string::npos) << sample.err().message;
    return;
  }
  ::dlclose(nvml);
  if (!sample.ok()) {
    // A driver without a device (a container with the library only) is said so.
    EXPECT_NE(sample.err().message.find("NVML"), std::string::npos) << sample.err().message;
    GTEST_SKIP() << sample.err().message;
  }
  EXPECT_GT(sample->sm_mhz, 0U);
  EXPECT_GE(sample->max_sm_mhz, sample->sm_mhz);
  EXPECT_GT(sample->mem_mhz, 0U);
  EXPECT_FALSE(sample_gpu_clocks(-1).ok());
  auto again = sample_gpu_clocks(0);
  ASSERT_TRUE(again.ok()) << again.err().message;
  EXPECT_GE(again->thermal_violation_ns, sample->thermal_violation_ns);
}

}  // namespace
}  // namespace leap::sandbox
