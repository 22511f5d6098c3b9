// The profiler's fall-back from kernel activity records (issue 34), on the CPU from recorded lines:
// the strict parser and its line numbers, the files of several processes and their cap, the
// kernel names' demangling and filter, the occupancy calculator against hand-computed cases, and
// the classifier and analysers on a profile without counters.
#include "sandbox/profile_events.hpp"

#include "sandbox/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;

// An H200 (sm_90) as CUPTI describes it; the limits are those of the CUDA C++ Programming Guide's
// table for compute capability 9.0 (64 warps, 32 blocks, 64K registers, 228 KiB shared memory per
// SM; 1024 threads and 48 KiB of shared memory per block without opt-in).
constexpr std::string_view k_h200_line =
    R"({"kind":"device","id":0,"name":"NVIDIA H200","cc":[9,0],"sm_count":132,)"
    R"("max_threads_per_block":1024,"max_warps_per_sm":64,"max_blocks_per_sm":32,)"
    R"("registers_per_sm":65536,"registers_per_block":65536,"shared_per_sm":233472,)"
    R"("shared_per_block":49152})";

gpu_device_limits h200() {
  kernel_events e;
  EXPECT_TRUE(parse_kernel_events(k_h200_line, e).ok());
  return e.devices.at(0);
}

kernel_launch_event launch(std::uint32_t threads, std::uint32_t registers,
                           std::uint64_t shared = 0) {
  kernel_launch_event k;
  k.name = "_Z4copyPKfPfi";
  k.block[0] = threads;
  k.block[1] = 1;
  k.block[2] = 1;
  k.grid[0] = 1000;
  k.grid[1] = 1;
  k.grid[2] = 1;
  k.registers_per_thread = registers;
  k.static_shared = shared;
  k.end_ns = 100000;
  return k;
}

TEST(KernelEvents, GoodLinesParse) {
  const std::string text =
      std::string(k_h200_line) + "\n\n" +
      R"({"kind":"kernel","name":"_Z4copyPKfPfi","device":0,"start":100,"end":5100,)"
      R"("grid":[40,2,1],"block":[256,1,1],"registers":32,"static_shared":1024,)"
      R"("dynamic_shared":512,"shared_executed":102400})"
      "\n";
  kernel_events e;
  auto s = parse_kernel_events(text, e);
  ASSERT_TRUE(s.ok()) << s.err().message;
  ASSERT_EQ(e.devices.size(), 1U);
  EXPECT_EQ(e.devices[0].name, "NVIDIA H200");
  EXPECT_EQ(e.devices[0].cc_major, 9);
  EXPECT_EQ(e.devices[0].sm_count, 132U);
  EXPECT_EQ(e.devices[0].shared_per_sm, 233472U);
  ASSERT_EQ(e.launches.size(), 1U);
  const auto& k = e.launches[0];
  EXPECT_EQ(k.name, "_Z4copyPKfPfi");
  EXPECT_EQ(k.end_ns - k.start_ns, 5000U);
  EXPECT_EQ(k.grid[1], 2U);
  EXPECT_EQ(k.block[0], 256U);
  EXPECT_EQ(k.registers_per_thread, 32U);
  EXPECT_EQ(k.static_shared, 1024U);
  EXPECT_EQ(k.dynamic_shared, 512U);
  EXPECT_EQ(k.shared_executed, 102400U);
}

// Each malformed line is refused with its line number and what is wrong with it.
TEST(KernelEvents, MalformedLinesNameTheirLine) {
  const std::string kernel =
      R"("name":"k","device":0,"start":1,"end":2,"grid":[1,1,1],"block":[32,1,1],)"
      R"("registers":8,"static_shared":0,"dynamic_shared":0)";
  struct row {
    std::string line;
    std::string says;
  };
  const std::vector<row> rows = {
      {"not json", "not a JSON object"},
      {"[1,2]", "not a JSON object"},
      {R"({"name":"k"})", "\"kind\" is not a string"},
      {R"({"kind":"range"})", "unknown \"kind\" \"range\""},
      {R"({"kind":"kernel",)" + kernel.substr(0, kernel.find(",\"device\"")) + "}",
       "no \"device\""},
      {R"({"kind":"kernel","name":"k","device":-1,"start":1,"end":2,"grid":[1,1,1],)"
       R"("block":[32,1,1],"registers":8,"static_shared":0,"dynamic_shared":0})",
       "\"device\" is not an unsigned integer"},
      {R"({"kind":"kernel","name":"k","device":0,"start":3,"end":2,"grid":[1,1,1],)"
       R"("block":[32,1,1],"registers":8,"static_shared":0,"dynamic_shared":0})",
       "\"start\" is after \"end\""},
      {R"({"kind":"kernel","name":"k","device":0,"start":1,"end":2,"grid":[1,1],)"
       R"("block":[32,1,1],"registers":8,"static_shared":0,"dynamic_shared":0})",
       "\"grid\" is not an array of 3"},
      {R"({"kind":"kernel","name":"k","device":0,"start":1,"end":2,"grid":[1,1,1],)"
       R"("block":[32,1,"x"],"registers":8,"static_shared":0,"dynamic_shared":0})",
       "\"block\" is not an array of 3"},
      {R"({"kind":"kernel","name":"k","device":0,"start":1,"end":2,"grid":[1,1,1],)"
       R"("block":[32,1,1],"registers":8.5,"static_shared":0,"dynamic_shared":0})",
       "\"registers\" is not an unsigned integer"},
      {R"({"kind":"kernel","name":"k","device":0,"start":1,"end":2,"grid":[1,1,1],)"
       R"("block":[32,1,1],"registers":8,"static_shared":99999999999,"dynamic_shared":0})",
       "\"static_shared\" is too large"},
      {R"({"kind":"kernel","name":"","device":0,"start":1,"end":2,"grid":[1,1,1],)"
       R"("block":[32,1,1],"registers":8,"static_shared":0,"dynamic_shared":0})",
       "\"name\" is empty"},
      {R"({"kind":"device","id":0,"name":"X","cc":[9],"sm_count":1})", "\"cc\" is not"},
  };
  for (const auto& r : rows) {
    // The bad line is the third: a good kernel line and an empty one before it.
    const std::string text = R"({"kind":"kernel",)" + kernel + "}\n\n" + r.line + "\n";
    kernel_events e;
    auto s = parse_kernel_events(text, e);
    ASSERT_FALSE(s.ok()) << r.line;
    EXPECT_EQ(s.err().message.rfind("line 3: ", 0), 0U) << s.err().message;
    EXPECT_NE(s.err().message.find(r.says), std::string::npos) << s.err().message;
  }
}

struct events_dir {
  fs::path path;
  events_dir() {
    path = fs::temp_directory_path() /
           ("leap-events-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~events_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  events_dir(const events_dir&) = delete;
  events_dir& operator=(const events_dir&) = delete;
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
  }
};

// Every process with CUDA (a judge and its candidate) writes a file of its own; each is read
// within the cap, and one over it, or a bad line in one, fails with the file's name.
TEST(KernelEvents, FilesOfEveryProcessAreReadWithinTheirCap) {
  events_dir dir;
  const std::string kernel =
      R"({"kind":"kernel","name":"_Z4copyPKfPfi","device":0,"start":1,"end":9000,)"
      R"("grid":[40,1,1],"block":[256,1,1],"registers":64,"static_shared":0,"dynamic_shared":0})";
  dir.write("events.101.jsonl", std::string(k_h200_line) + "\n");
  dir.write("events.202.jsonl", std::string(k_h200_line) + "\n" + kernel + "\n" + kernel + "\n");
  dir.write("other.txt", "not ours\n");
  auto e = read_kernel_event_files(dir.path, "events.", 4096);
  ASSERT_TRUE(e.ok()) << e.err().message;
  EXPECT_EQ(e->devices.size(), 2U);
  EXPECT_EQ(e->launches.size(), 2U);

  // A cap one byte under the larger file's size, above the smaller's.
  const auto larger = fs::file_size(dir.path / "events.202.jsonl");
  ASSERT_LT(fs::file_size(dir.path / "events.101.jsonl"), larger - 1);
  auto capped = read_kernel_event_files(dir.path, "events.", larger - 1);
  ASSERT_FALSE(capped.ok());
  EXPECT_NE(capped.err().message.find("events.202.jsonl"), std::string::npos)
      << capped.err().message;

  dir.write("events.303.jsonl", kernel + "\n{\n");
  auto bad = read_kernel_event_files(dir.path, "events.", 4096);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("events.303.jsonl: line 2: "), std::string::npos)
      << bad.err().message;

  // No process wrote anything: no launches, no error.
  events_dir empty;
  auto none = read_kernel_event_files(empty.path, "events.", 4096);
  ASSERT_TRUE(none.ok()) << none.err().message;
  EXPECT_TRUE(none->launches.empty());
}

TEST(KernelEvents, RecordNamesDemangleToTheFunctionName) {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"_Z4copyPKfPfi", "copy"},                             // copy(float const*, float*, int)
      {"_ZN2ns5scaleIfEEvPT_i", "scale"},                    // void ns::scale<float>(float*, int)
      {"_ZN12_GLOBAL__N_16kernelEv", "kernel"},              // (anonymous namespace)::kernel()
      {"triton_poi_fused_add_0", "triton_poi_fused_add_0"},  // Triton's names are plain
      {"_Znot_a_name", "_Znot_a_name"},                      // does not demangle: itself
  };
  for (const auto& [mangled, name] : rows) {
    EXPECT_EQ(kernel_function_name(mangled), name) << mangled;
  }
}

// Hand-computed by the occupancy calculator's formula on sm_90 (h200() above; sm_70's shared
// memory per SM is 96 KiB):
//   registers per warp = roundup(registers * 32, 256); warps by registers = 4 sub-partitions x
//   floor(65536 / 4 / registers per warp); shared per block = roundup(static + dynamic + 1024,
//   128) from sm_80 (roundup(static + dynamic, 256) before); blocks = the smallest limit;
//   occupancy = blocks x warps per block / 64.
TEST(KernelEvents, TheoreticalOccupancyAsTheCalculatorComputesIt) {
  struct row {
    std::string what;
    kernel_launch_event k;
    int cc_major = 9;
    std::uint64_t shared_per_sm = 233472;
    std::uint32_t blocks;
    double pct;
    std::string limiter;
  };
  auto carveout = launch(128, 32, 49152);
  carveout.shared_executed = 102400;
  const std::vector<row> rows = {
      // 64 x 32 = 2048 registers a warp: 8 warps per sub-partition, 32 in all: 4 blocks of 8.
      {"256 threads, 64 registers", launch(256, 64), 9, 233472, 4, 50.0, "registers"},
      // 37 x 32 = 1184 -> 1280: 12 warps per sub-partition, 48: 12 blocks of 4 (13 without the
      // allocation unit).
      {"allocation unit of 256", launch(128, 37), 9, 233472, 12, 75.0, "registers"},
      // 49152 + 1024 = 50176 bytes a block: 233472 / 50176 = 4 blocks of 4 warps.
      {"48 KiB of shared memory", launch(128, 32, 49152), 9, 233472, 4, 25.0, "shared memory"},
      // The driver's carveout of 100 KiB for that launch: 2 blocks.
      {"configured carveout", carveout, 9, 233472, 2, 12.5, "shared memory"},
      // One warp a block: the 32-block limit leaves half the warps.
      {"32 threads", launch(32, 16), 9, 233472, 32, 50.0, "blocks per SM"},
      // 32 warps a block: 2 by warps and 2 by registers (1024 a warp); warps come first.
      {"1024 threads", launch(1024, 32), 9, 233472, 2, 100.0, "warps"},
      {"over the block limit", launch(2048, 16), 9, 233472, 0, 0.0, "warps"},
      {"over 255 registers", launch(128, 256), 9, 233472, 0, 0.0, "registers"},
      // sm_70: 10000 -> 10240 bytes (unit 256, no reserve): 98304 / 10240 = 9 blocks of 4 warps.
      {"sm_70 shared memory", launch(128, 32, 10000), 7, 98304, 9, 56.25, "shared memory"},
  };
  for (const auto& r : rows) {
    auto device = h200();
    device.cc_major = r.cc_major;
    device.shared_per_sm = r.shared_per_sm;
    auto o = theoretical_occupancy(device, r.k);
    ASSERT_TRUE(o) << r.what;
    EXPECT_EQ(o->blocks, r.blocks) << r.what;
    EXPECT_NEAR(o->pct, r.pct, 1e-9) << r.what;
    EXPECT_EQ(o->limiter, r.limiter) << r.what;
  }
  EXPECT_FALSE(theoretical_occupancy(h200(), launch(0, 32)));
}

kernel_events recorded(std::uint64_t duration_ns, std::uint32_t grid) {
  kernel_events e;
  EXPECT_TRUE(parse_kernel_events(k_h200_line, e).ok());
  auto own = launch(256, 64);
  own.grid[0] = grid;
  own.end_ns = duration_ns;
  e.launches.push_back(own);
  auto other = own;
  other.name = "_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_";  // PyTorch's
  e.launches.push_back(other);
  return e;
}

// Only the candidate's own kernels, with the metrics the records give and no counter.
TEST(KernelEvents, ProfilesHoldTheCandidatesKernelsOnly) {
  const auto profiles = event_profiles(recorded(80000, 40), {"copy"});
  ASSERT_EQ(profiles.size(), 1U);
  const auto& k = profiles[0];
  EXPECT_EQ(k.name, "copy");
  EXPECT_EQ(k.grid_size, "(40, 1, 1)");
  EXPECT_EQ(k.block_size, "(256, 1, 1)");
  EXPECT_NEAR(k.metric_or("gpu__time_duration.sum", 0), 80000, 1e-9);
  EXPECT_NEAR(k.metric_or("launch__registers_per_thread", 0), 64, 1e-9);
  EXPECT_NEAR(k.metric_or("launch__grid_size", 0), 40, 1e-9);
  EXPECT_NEAR(k.metric_or("device__attribute_multiprocessor_count", 0), 132, 1e-9);
  EXPECT_NEAR(k.metric_or("sm__maximum_warps_per_active_cycle_pct", 0), 50, 1e-9);
  EXPECT_NEAR(k.metric_or("launch__occupancy_limit_registers", 0), 4, 1e-9);
  EXPECT_EQ(k.text.at("device__attribute_display_name"), "NVIDIA H200");
  EXPECT_FALSE(k.metric("sm__throughput.avg.pct_of_peak_sustained_elapsed"));
  EXPECT_FALSE(k.metric("sm__warps_active.avg.pct_of_peak_sustained_active"));
  EXPECT_TRUE(event_profiles(recorded(80000, 40), {"other"}).empty());
}

// Without counters the class is unknown (not latency-bound); launch-bound still applies on the
// duration; the analysers that read launch metrics fire and the others stay silent.
TEST(KernelEvents, DiagnosisWithoutCountersIsUnknownAndSaysOnlyWhatTheLaunchShows) {
  const auto peaks = peaks_for("NVIDIA H200");
  const auto k = event_profiles(recorded(80000, 40), {"copy"}).at(0);
  const auto d = diagnose(k, &*peaks, roofline_options{});
  EXPECT_EQ(d.roof.kind, bottleneck::unknown);
  EXPECT_FALSE(d.roof.counters);
  EXPECT_EQ(d.fired, (std::vector<std::string>{"register_pressure", "small_grid"}));
  const std::string text = profile_feedback({d}, 4);
  EXPECT_NE(text.find("unknown (no hardware counters; theoretical occupancy 50%)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("compute 0%"), std::string::npos) << text;

  const auto tiny =
      diagnose(event_profiles(recorded(3000, 40), {"copy"}).at(0), &*peaks, roofline_options{});
  EXPECT_EQ(tiny.roof.kind, bottleneck::launch_bound);
  EXPECT_EQ(tiny.fired, (std::vector<std::string>{"launch_overhead"}));

  // Every analyser on the events profile, whatever class it were given: only those reading launch
  // metrics may say anything.
  const std::set<std::string_view> may = {"register_pressure", "low_occupancy", "small_grid",
                                          "launch_overhead"};
  for (const auto& a : analysers()) {
    for (const auto kind :
         {bottleneck::memory_bound, bottleneck::compute_bound, bottleneck::latency_bound,
          bottleneck::launch_bound, bottleneck::unknown}) {
      roofline r = d.roof;
      r.kind = kind;
      if (!may.contains(a.name)) {
        EXPECT_FALSE(a.run(k, r)) << a.name;
      }
    }
  }
}

// A shared-memory limit without achieved occupancy: low_occupancy says the theoretical figure.
TEST(KernelEvents, SharedMemoryLimitIsToldFromTheTheoreticalOccupancy) {
  kernel_events e;
  ASSERT_TRUE(parse_kernel_events(k_h200_line, e).ok());
  e.launches.push_back(launch(128, 32, 49152));
  const auto d = diagnose(event_profiles(e, {"copy"}).at(0), nullptr, roofline_options{});
  EXPECT_EQ(d.fired, (std::vector<std::string>{"low_occupancy"}));
  ASSERT_EQ(d.guidance.size(), 1U);
  EXPECT_NE(d.guidance[0].find("at most 25%"), std::string::npos) << d.guidance[0];
  EXPECT_NE(d.guidance[0].find("49152 bytes of shared memory"), std::string::npos) << d.guidance[0];
}

}  // namespace
}  // namespace leap::sandbox
