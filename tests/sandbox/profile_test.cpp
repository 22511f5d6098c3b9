// The profiler's pure parts (sandbox/profile.hpp): the ncu command line, the CSV parser on text
// written here and on a real capture, the roofline classifier in closed form, the analysers and
// their class gating, and (on a GPU with ncu) a real profile of known kernels.
#include "sandbox/profile.hpp"

#include "sandbox/engine.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const fs::path k_data = fs::path(LEAP_SOURCE_DIR) / "tests" / "sandbox" / "profile";

bool contains(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

TEST(NcuCommandTest, FiltersTheNamedKernelsAndProfilesTheFixedMetricSet) {
  ncu_options o;
  o.ncu = "/usr/local/cuda/bin/ncu";
  o.log_file = "profile.csv";
  o.kernel_names = {"copy_strided", "tile_loop"};
  auto cmd = ncu_command(o, {"./judge", "--trials", "3"});
  ASSERT_TRUE(cmd.ok()) << cmd.err().message;
  const auto& c = *cmd;
  auto after = [&](std::string_view flag) -> std::string {
    auto it = std::find(c.begin(), c.end(), flag);
    return it == c.end() || it + 1 == c.end() ? "<absent>" : *(it + 1);
  };
  EXPECT_EQ(c.front(), "/usr/local/cuda/bin/ncu");
  EXPECT_EQ(after("--kernel-name"), "regex:^(copy_strided|tile_loop)$");
  EXPECT_EQ(after("--kernel-name-base"), "function");
  EXPECT_EQ(after("--page"), "raw");
  EXPECT_EQ(after("--print-units"), "base");
  EXPECT_EQ(after("--target-processes"), "all");
  EXPECT_EQ(after("--log-file"), "profile.csv");
  EXPECT_EQ(after("--launch-count"), "8");
  EXPECT_NE(std::find(c.begin(), c.end(), "--csv"), c.end());
  const std::string metrics = after("--metrics");
  for (auto m : ncu_metric_names()) {
    EXPECT_TRUE(contains(metrics, m)) << m;
  }
  // The program's argv comes last, after "--", unchanged.
  ASSERT_GE(c.size(), 4U);
  EXPECT_EQ(std::vector<std::string>(c.end() - 4, c.end()),
            (std::vector<std::string>{"--", "./judge", "--trials", "3"}));
}

TEST(NcuCommandTest, RefusesToProfileEveryKernelOrAnOddName) {
  ncu_options o;
  auto none = ncu_command(o, {"./judge"});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(contains(none.err().message, "no kernel filter")) << none.err().message;
  o.kernel_names = {"k)|.*"};
  auto odd = ncu_command(o, {"./judge"});
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(contains(odd.err().message, "'k)|.*' is not a C++ identifier")) << odd.err().message;
  o.kernel_names.clear();
  o.kernel_regex = "^solve_.*";
  auto regex = ncu_command(o, {"./judge"});
  ASSERT_TRUE(regex.ok()) << regex.err().message;
  EXPECT_NE(std::find(regex->begin(), regex->end(), "regex:^solve_.*"), regex->end());
  EXPECT_FALSE(ncu_command(o, {}).ok());
}

// Written by hand in the layout ncu documents for `--csv --page raw` and that the capture in
// tests/sandbox/profile/ncu_raw_h200.csv shows: ==PROF== lines, a header of identification
// columns then metric names, a units row with an empty ID, one row per launch, every field quoted,
// numbers with thousands separators. (Replaceable by any captured file of the same layout.)
const std::string k_written_csv =
    "==PROF== Connected to process 4242 (/tmp/run/solution)\n"
    "==PROF== Disconnected from process 4242\n"
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
    "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"device__attribute_display_name\","
    "\"dram__bytes_read.sum\",\"gpu__time_duration.sum\",\"launch__grid_size\","
    "\"sm__throughput.avg.pct_of_peak_sustained_elapsed\"\n"
    "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"Mbyte\",\"usecond\",\"\",\"%\"\n"
    "\"0\",\"4242\",\"solution\",\"127.0.0.1\",\"void ns::scale<float>(const float *, float *, "
    "int)\",\"1\",\"7\",\"(256, 1, 1)\",\"(40, 1, 1)\",\"0\",\"9.0\",\"NVIDIA H200\",\"1.5\","
    "\"2.25\",\"40\",\"12.50\"\n"
    "\"1\",\"4242\",\"solution\",\"127.0.0.1\",\"reduce(const float *, float *)\",\"1\",\"7\","
    "\"(1024, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"NVIDIA H200\",\"n/a\",\"1,234.5\",\"1\","
    "\"0.40\"\n";

TEST(NcuCsvTest, ReadsTheRawPageIntoPerKernelRecordsInBaseUnits) {
  auto parsed = parse_ncu_csv(k_written_csv);
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  ASSERT_EQ(parsed->size(), 2U);
  const auto& a = (*parsed)[0];
  EXPECT_EQ(a.id, 0);
  EXPECT_EQ(a.name, "scale");
  EXPECT_EQ(a.signature, "void ns::scale<float>(const float *, float *, int)");
  EXPECT_EQ(a.block_size, "(256, 1, 1)");
  EXPECT_EQ(a.grid_size, "(40, 1, 1)");
  EXPECT_DOUBLE_EQ(a.metric_or("dram__bytes_read.sum", -1), 1.5e6);
  EXPECT_DOUBLE_EQ(a.metric_or("gpu__time_duration.sum", -1), 2250.0);
  EXPECT_DOUBLE_EQ(a.metric_or("launch__grid_size", -1), 40.0);
  EXPECT_EQ(a.text.at("device__attribute_display_name"), "NVIDIA H200");
  EXPECT_FALSE(a.metric("Block Size").has_value());  // identification columns are not metrics
  const auto& b = (*parsed)[1];
  EXPECT_EQ(b.name, "reduce");
  EXPECT_FALSE(b.metric("dram__bytes_read.sum").has_value());  // n/a
  EXPECT_DOUBLE_EQ(b.metric_or("gpu__time_duration.sum", -1), 1234.5e3);
}

TEST(NcuCsvTest, ErrorsNameTheLine) {
  const std::string header =
      "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"ns\"\n";
  struct bad_case {
    std::string text;
    std::string expected;
  };
  const std::vector<bad_case> cases = {
      {header + "\"0\",\"k(int)\"\n", "ncu CSV line 3: 2 fields, the header has 3"},
      {header + "\"0\",\"k(int,\"5\"\n", "ncu CSV line 3: unterminated quote"},
      {header + "\"x\",\"k(int)\",\"5\"\n", "ncu CSV line 3: ID 'x' is not a number"},
      {"==PROF== Disconnected\n\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Value\"\n",
       "ncu CSV line 2: this is ncu's details page"},
      {"\"ID\",\"Name\",\"gpu__time_duration.sum\"\n",
       "ncu CSV line 1: the header has no \"Kernel Name\""},
      {"==PROF== Connected\nsome program output\n", "ncu CSV: no header row"},
  };
  for (const auto& c : cases) {
    auto parsed = parse_ncu_csv(c.text);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_TRUE(contains(parsed.err().message, c.expected))
        << parsed.err().message << "\nexpected: " << c.expected;
  }
}

TEST(NcuLogTest, PermissionErrorSaysWhatIsNeeded) {
  // The message ncu prints without counter access (NVIDIA's ERR_NVGPUCTRPERM page).
  const std::string log =
      "==PROF== Connected to process 77 (/tmp/run/judge)\n"
      "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
      "Performance Counters on the target device 0. For instructions on enabling permissions and "
      "to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
      "==PROF== Disconnected from process 77\n"
      "==WARNING== No kernels were profiled.\n";
  auto out = read_ncu_log(log);
  ASSERT_TRUE(out.problem.has_value());
  EXPECT_EQ(out.problem->kind, ncu_problem_kind::counters_not_permitted);
  EXPECT_TRUE(contains(out.problem->message, "NVreg_RestrictProfilingToAdminUsers=0"));
  EXPECT_TRUE(contains(out.problem->message, "CAP_SYS_ADMIN"));
  EXPECT_TRUE(contains(out.problem->message, "CAP_PERFMON"));
  EXPECT_TRUE(out.kernels.empty());
}

TEST(NcuLogTest, NoKernelsUnknownMetricAndGarbageAreProblemsNotErrors) {
  // Captured on the H200: a filter that matched nothing.
  auto none = read_ncu_log(read_text(k_data / "ncu_no_kernels.log"));
  ASSERT_TRUE(none.problem.has_value());
  EXPECT_EQ(none.problem->kind, ncu_problem_kind::no_kernels_profiled);

  auto metric = read_ncu_log("==ERROR== Failed to find metric foo__bar.sum\n");
  ASSERT_TRUE(metric.problem.has_value());
  EXPECT_EQ(metric.problem->kind, ncu_problem_kind::unknown_metric);
  EXPECT_TRUE(contains(metric.problem->message, "foo__bar.sum"));

  auto garbage = read_ncu_log("\"ID\",\"Kernel Name\"\n\"0\"\n");
  ASSERT_TRUE(garbage.problem.has_value());
  EXPECT_EQ(garbage.problem->kind, ncu_problem_kind::unreadable_output);
  EXPECT_TRUE(contains(garbage.problem->message, "line 2"));

  // The program exiting non-zero (a failing candidate) does not void the launches ncu profiled;
  // with none profiled, that error is the problem.
  auto exited =
      read_ncu_log(k_written_csv + "==ERROR== The application returned an error code (1).\n");
  EXPECT_FALSE(exited.problem.has_value()) << exited.problem->message;
  EXPECT_EQ(exited.kernels.size(), 2U);
  auto exited_early = read_ncu_log(
      "==PROF== Connected to process 9 (/tmp/run/solution)\n"
      "==ERROR== The application returned an error code (11).\n");
  ASSERT_TRUE(exited_early.problem.has_value());
  EXPECT_EQ(exited_early.problem->kind, ncu_problem_kind::failed);
  EXPECT_TRUE(contains(exited_early.problem->message, "error code (11)"));

  auto fine = read_ncu_log(k_written_csv);
  EXPECT_FALSE(fine.problem.has_value()) << fine.problem->message;
  EXPECT_EQ(fine.kernels.size(), 2U);
}

TEST(NcuLogTest, TheTargetsOwnMessagesAreSearchedForErrorsButNeverReadAsCsv) {
  // Seen on an H100: the KernelBench judge's Python warned on stderr, with a comma in the line;
  // read after the log as one text, that line was taken for a CSV row of 2 fields.
  const std::string warning =
      "/tmp/judge.py:55: DeprecationWarning: This process (pid=26) is multi-threaded, use of "
      "fork() may lead to deadlocks in the child.\n  child = os.fork()\n";
  auto out = read_ncu_log(k_written_csv, warning);
  EXPECT_FALSE(out.problem.has_value()) << out.problem->message;
  EXPECT_EQ(out.kernels.size(), 2U);
  // Errors ncu printed on stderr still count.
  auto denied = read_ncu_log("", "==ERROR== ERR_NVGPUCTRPERM - no permission\n");
  ASSERT_TRUE(denied.problem.has_value());
  EXPECT_EQ(denied.problem->kind, ncu_problem_kind::counters_not_permitted);
  auto metric = read_ncu_log(k_written_csv, "==ERROR== Failed to find metric foo__bar.sum\n");
  ASSERT_TRUE(metric.problem.has_value());
  EXPECT_EQ(metric.problem->kind, ncu_problem_kind::unknown_metric);
  auto failed = read_ncu_log("", "==ERROR== The application returned an error code (11).\n");
  ASSERT_TRUE(failed.problem.has_value());
  EXPECT_EQ(failed.problem->kind, ncu_problem_kind::failed);
}

TEST(GpuPeaksTest, DatasheetTableByDisplayName) {
  struct row {
    std::string display;
    std::string model;
    double bandwidth;
  };
  const std::vector<row> rows = {
      {"NVIDIA H200", "H200", 4.8e12},
      {"NVIDIA H200 NVL", "H200 NVL", 4.8e12},
      {"NVIDIA H100 80GB HBM3", "H100 SXM", 3.35e12},
      {"NVIDIA H100 PCIe", "H100 PCIe", 2.0e12},
      {"NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2.039e12},
      {"NVIDIA A100-SXM4-40GB", "A100 40GB", 1.555e12},
      {"NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1.935e12},
      {"NVIDIA L40S", "L40S", 864e9},
      {"NVIDIA GeForce RTX 4090", "RTX 4090", 1008e9},
  };
  for (const auto& r : rows) {
    auto p = peaks_for(r.display);
    ASSERT_TRUE(p.has_value()) << r.display;
    EXPECT_EQ(p->model, r.model) << r.display;
    EXPECT_DOUBLE_EQ(p->dram_bytes_per_s, r.bandwidth) << r.display;
    EXPECT_GT(p->fp16_tensor_flops, p->fp32_flops) << r.display;
  }
  EXPECT_FALSE(peaks_for("NVIDIA L40").has_value());
  EXPECT_FALSE(peaks_for("NVIDIA GeForce RTX 3090").has_value());
}

kernel_profile make_kernel(std::string name, std::map<std::string, double, std::less<>> m) {
  kernel_profile k;
  k.name = std::move(name);
  k.metrics = std::move(m);
  return k;
}

constexpr const char* k_dur = "gpu__time_duration.sum";
constexpr const char* k_sm = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* k_mem = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* k_dram = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* k_rd = "dram__bytes_read.sum";
constexpr const char* k_ffma = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum";

TEST(ClassifierTest, ClosedFormCases) {
  const gpu_peaks h200 = *peaks_for("NVIDIA H200");  // ridge 67e12 / 4.8e12 = 13.96 FLOP/byte
  struct row {
    std::string what;
    std::map<std::string, double, std::less<>> metrics;
    bool with_peaks;
    bottleneck expected;
  };
  const std::vector<row> rows = {
      {"short kernel", {{k_dur, 1800}, {k_sm, 90}, {k_mem, 90}}, true, bottleneck::launch_bound},
      {"neither busy", {{k_dur, 50000}, {k_sm, 49}, {k_mem, 44}}, true, bottleneck::latency_bound},
      {"memory busy only",
       {{k_dur, 50000}, {k_sm, 10}, {k_dram, 80}},
       true,
       bottleneck::memory_bound},
      {"compute busy only",
       {{k_dur, 50000}, {k_sm, 92}, {k_mem, 1}},
       true,
       bottleneck::compute_bound},
      // Both busy: 2 * 6e9 FLOPs over 1e9 bytes = 12 FLOP/byte, under the ridge of 13.96.
      {"both busy, below ridge",
       {{k_dur, 1e6}, {k_sm, 80}, {k_mem, 85}, {k_ffma, 6e9}, {k_rd, 1e9}},
       true,
       bottleneck::memory_bound},
      // 2 * 8e9 / 1e9 = 16 FLOP/byte, over the ridge, though memory throughput is the higher.
      {"both busy, above ridge",
       {{k_dur, 1e6}, {k_sm, 80}, {k_mem, 85}, {k_ffma, 8e9}, {k_rd, 1e9}},
       true,
       bottleneck::compute_bound},
      // No model: the higher throughput decides.
      {"both busy, no peaks",
       {{k_dur, 1e6}, {k_sm, 80}, {k_mem, 85}, {k_ffma, 8e9}, {k_rd, 1e9}},
       false,
       bottleneck::memory_bound},
      {"no metrics", {{"launch__grid_size", 4}}, true, bottleneck::unknown},
  };
  for (const auto& r : rows) {
    auto k = make_kernel("k", r.metrics);
    auto roof = classify(k, r.with_peaks ? &h200 : nullptr, roofline_options{});
    EXPECT_EQ(roof.kind, r.expected) << r.what << ": got " << to_string(roof.kind);
  }
  auto k = make_kernel("k", {{k_dur, 1e6}, {k_sm, 80}, {k_mem, 85}, {k_ffma, 6e9}, {k_rd, 1e9}});
  auto roof = classify(k, &h200, roofline_options{});
  EXPECT_NEAR(roof.flops, 12e9, 1);
  ASSERT_TRUE(roof.intensity && roof.ridge);
  EXPECT_NEAR(*roof.intensity, 12.0, 1e-9);
  EXPECT_NEAR(*roof.ridge, 67e12 / 4.8e12, 1e-9);
  // Tensor instructions move the ridge to the tensor peak.
  k.metrics["sm__inst_executed_pipe_tensor.sum"] = 1000;  // 512 * 1000 FLOPs, far under 12e9
  roof = classify(k, &h200, roofline_options{});
  EXPECT_FALSE(roof.tensor);
  k.metrics["sm__inst_executed_pipe_tensor.sum"] = 1e8;
  roof = classify(k, &h200, roofline_options{});
  EXPECT_TRUE(roof.tensor);
  EXPECT_NEAR(*roof.ridge, 989.5e12 / 4.8e12, 1e-9);
}

// Metrics that trigger each analyser (and only it, within its classes); `kind` is what the
// classifier makes of them.
struct analyser_case {
  std::string analyser;
  std::map<std::string, double, std::less<>> metrics;
  bottleneck kind;
  std::string says;
};

std::vector<analyser_case> analyser_cases() {
  return {
      {"uncoalesced_global",
       {{k_dur, 290000},
        {k_sm, 10},
        {k_dram, 80},
        {k_rd, 1e9},
        {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 16777216},
        {"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 524288}},
       bottleneck::memory_bound,
       "touch 32.0 sectors of 32 bytes per warp request (4 when 32 threads access consecutive "
       "4-byte words): with 4-byte elements only 4 of each sector's 32 bytes are used"},
      {"bank_conflicts",
       {{k_dur, 57000},
        {k_sm, 6.5},
        {k_mem, 96},
        {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 8382915},
        {"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 8653251}},
       bottleneck::memory_bound,
       "97% of the shared-memory wavefronts in `k` are bank-conflict"},
      {"register_pressure",
       {{k_dur, 90000},
        {k_sm, 30},
        {k_mem, 20},
        {"launch__registers_per_thread", 168},
        {"launch__block_size", 256},
        {"launch__occupancy_limit_registers", 1},
        {"launch__occupancy_limit_warps", 8},
        {"launch__occupancy_limit_shared_mem", 32},
        {"launch__occupancy_limit_blocks", 32},
        {"sm__maximum_warps_per_active_cycle_pct", 12.5},
        {"sm__warps_active.avg.pct_of_peak_sustained_active", 12}},
       bottleneck::latency_bound,
       "`k` uses 168 registers per thread, which lets only 1 block of 256 threads share an SM"},
      {"low_occupancy",
       {{k_dur, 90000},
        {k_sm, 30},
        {k_mem, 20},
        {"launch__shared_mem_per_block_static", 98304},
        {"launch__occupancy_limit_registers", 8},
        {"launch__occupancy_limit_warps", 8},
        {"launch__occupancy_limit_shared_mem", 2},
        {"launch__occupancy_limit_blocks", 32},
        {"sm__maximum_warps_per_active_cycle_pct", 25},
        {"sm__warps_active.avg.pct_of_peak_sustained_active", 24}},
       bottleneck::latency_bound,
       "98304 bytes of shared memory per block let only 2 blocks share an SM"},
      {"small_grid",
       {{k_dur, 90000},
        {k_sm, 3},
        {k_mem, 2},
        {"launch__grid_size", 8},
        {"device__attribute_multiprocessor_count", 132}},
       bottleneck::latency_bound,
       "`k` launches 8 blocks for 132 SMs, so 124 SMs stay idle"},
      {"launch_overhead",
       {{k_dur, 1760}, {k_sm, 0}, {k_mem, 0.76}},
       bottleneck::launch_bound,
       "`k` runs for 1.8 us"},
      {"dram_traffic",
       {{k_dur, 54000}, {k_sm, 49}, {k_dram, 88}, {k_rd, 1e8}},
       bottleneck::memory_bound,
       "keeps DRAM 88% busy at 0.00 FLOP per byte, below the GPU's ridge point of 14.0"},
      {"fp32_pipes",
       {{k_dur, 104000}, {k_sm, 92}, {k_mem, 0.24}, {k_ffma, 2.2e9}, {k_rd, 4352}},
       bottleneck::compute_bound,
       "none on tensor cores"},
      {"warp_stalls",
       {{k_dur, 90000},
        {k_sm, 30},
        {k_mem, 40},
        {"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", 22.5},
        {"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", 3}},
       bottleneck::latency_bound,
       "wait 22.5 cycles per issued instruction on __syncthreads()"},
  };
}

TEST(AnalyserTest, EachFiresOnItsProblemWithTheNumbers) {
  const gpu_peaks h200 = *peaks_for("NVIDIA H200");
  std::vector<std::string> covered;
  for (const auto& c : analyser_cases()) {
    auto d = diagnose(make_kernel("k", c.metrics), &h200, roofline_options{});
    EXPECT_EQ(d.roof.kind, c.kind) << c.analyser << ": got " << to_string(d.roof.kind);
    auto it = std::find(d.fired.begin(), d.fired.end(), c.analyser);
    ASSERT_NE(it, d.fired.end()) << c.analyser << " did not fire; fired: " << d.fired.size();
    const std::string& text = d.guidance[static_cast<std::size_t>(it - d.fired.begin())];
    EXPECT_TRUE(contains(text, c.says)) << c.analyser << ": " << text;
    covered.push_back(c.analyser);
  }
  // Every registered analyser has a case here.
  for (const auto& a : analysers()) {
    EXPECT_NE(std::find(covered.begin(), covered.end(), a.name), covered.end()) << a.name;
  }
}

TEST(AnalyserTest, RunOnlyForTheClassesTheyServe) {
  const gpu_peaks h200 = *peaks_for("NVIDIA H200");
  for (const auto& c : analyser_cases()) {
    // The same symptoms in a kernel of each other class: the analyser must stay silent there.
    const std::vector<std::pair<bottleneck, std::map<std::string, double, std::less<>>>> shapes = {
        {bottleneck::launch_bound, {{k_dur, 1000}}},
        {bottleneck::compute_bound, {{k_dur, 1e6}, {k_sm, 95}, {k_mem, 5}, {k_dram, 5}}},
        {bottleneck::latency_bound, {{k_dur, 1e6}, {k_sm, 20}, {k_mem, 20}, {k_dram, 20}}},
        {bottleneck::memory_bound, {{k_dur, 1e6}, {k_sm, 5}, {k_mem, 95}, {k_dram, 95}}},
    };
    const analyser* a = nullptr;
    for (const auto& x : analysers()) {
      if (x.name == c.analyser) {
        a = &x;
      }
    }
    ASSERT_NE(a, nullptr) << c.analyser;
    for (const auto& [kind, shape] : shapes) {
      auto metrics = c.metrics;
      for (const auto& [name, value] : shape) {
        metrics[name] = value;
      }
      auto d = diagnose(make_kernel("k", metrics), &h200, roofline_options{});
      ASSERT_EQ(d.roof.kind, kind) << c.analyser;
      const bool serves = std::find(a->serves.begin(), a->serves.end(), kind) != a->serves.end();
      const bool fired = std::find(d.fired.begin(), d.fired.end(), c.analyser) != d.fired.end();
      if (!serves) {
        EXPECT_FALSE(fired) << c.analyser << " fired for a " << to_string(kind) << " kernel";
      }
    }
  }
}

TEST(AnalyserTest, SilentOnAHealthyKernel) {
  const gpu_peaks h200 = *peaks_for("NVIDIA H200");
  auto k = make_kernel("k", {{k_dur, 90000},
                             {k_sm, 30},
                             {k_mem, 40},
                             {"launch__grid_size", 4096},
                             {"device__attribute_multiprocessor_count", 132},
                             {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 4 * 1000},
                             {"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 1000},
                             {"sm__warps_active.avg.pct_of_peak_sustained_active", 90},
                             {"sm__maximum_warps_per_active_cycle_pct", 100}});
  auto d = diagnose(k, &h200, roofline_options{});
  EXPECT_EQ(d.roof.kind, bottleneck::latency_bound);
  EXPECT_TRUE(d.fired.empty()) << d.fired.front();
}

// A real ncu capture on the H200 (ncu 2025, CUDA 13) of tests/sandbox/profile/ncu_kernels.cu (as
// it was before smem_limited) with the fixed metric set; harness_sum, outside the filter, is
// absent.
TEST(NcuCaptureTest, TheH200CaptureIsReadAndEachKernelsProblemNamed) {
  auto out = read_ncu_log(read_text(k_data / "ncu_raw_h200.csv"));
  ASSERT_FALSE(out.problem.has_value()) << out.problem->message;
  std::vector<std::string> names;
  for (const auto& k : out.kernels) {
    names.push_back(k.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"copy_coalesced", "copy_strided", "tiny", "fma_loop",
                                             "bank_conflicts"}));
  for (const auto& k : out.kernels) {
    for (auto m : ncu_metric_names()) {
      if (m == "device__attribute_display_name") {
        EXPECT_EQ(k.text.count(std::string(m)), 1U) << k.name;
      } else {
        EXPECT_TRUE(k.metric(m).has_value()) << k.name << " lacks " << m;
      }
    }
  }
  auto peaks = peaks_for(out.kernels[0].text.at("device__attribute_display_name"));
  ASSERT_TRUE(peaks.has_value());
  EXPECT_EQ(peaks->model, "H200");
  std::map<std::string, kernel_diagnosis> by_name;
  std::vector<kernel_diagnosis> all;
  for (const auto& k : out.kernels) {
    by_name[k.name] = diagnose(k, &*peaks, roofline_options{});
    all.push_back(by_name[k.name]);
  }
  auto fired = [&](const std::string& kernel, const std::string& analyser) {
    const auto& f = by_name.at(kernel).fired;
    return std::find(f.begin(), f.end(), analyser) != f.end();
  };
  EXPECT_EQ(by_name["copy_strided"].roof.kind, bottleneck::memory_bound);
  EXPECT_TRUE(fired("copy_strided", "uncoalesced_global"));
  EXPECT_FALSE(fired("copy_coalesced", "uncoalesced_global"));
  EXPECT_EQ(by_name["tiny"].roof.kind, bottleneck::launch_bound);
  EXPECT_TRUE(fired("tiny", "launch_overhead"));
  EXPECT_EQ(by_name["fma_loop"].roof.kind, bottleneck::compute_bound);
  EXPECT_TRUE(fired("fma_loop", "fp32_pipes"));
  EXPECT_TRUE(fired("bank_conflicts", "bank_conflicts"));
  EXPECT_FALSE(fired("copy_strided", "bank_conflicts"));

  const std::string text = profile_feedback(all, 2);
  EXPECT_EQ(text.rfind("Profile of `copy_strided` (292.8 us, grid (65536, 1, 1) x (256, 1, 1)): "
                       "memory-bound (compute 10%, memory 80% of peak, ",
                       0),
            0U)
      << text;
  EXPECT_TRUE(contains(text, "Profile of `fma_loop`")) << text;  // the second longest
  EXPECT_FALSE(contains(text, "`tiny`")) << text;                // cut by max_kernels
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_TRUE(profile_feedback({}, 3).empty());
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// On a GPU with ncu: compile the known kernels with nvcc, profile them (not the harness's) through
// ncu_command's argv, read the log, and name each one's problem: the classifier's class and the
// analyser that serves it. Set LEAP_NCU_CAPTURE to a folder to keep the log.
TEST(NcuGpuTest, ProfilesTheKnownKernelsAndNamesEachOnesProblem) {
  std::string why;
  if (!testing::gpu_present(&why)) {
    GTEST_SKIP() << why;
  }
  const std::string nvcc = testing::shared_engine().config().nvcc;
  const fs::path ncu = fs::path(nvcc).parent_path() / "ncu";
  const std::string ncu_path = fs::exists(ncu) ? ncu.string() : "ncu";
  if (std::system((ncu_path + " --version >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "ncu not found at '" << ncu_path << "'";
  }
  const fs::path dir = fs::temp_directory_path() / ("leap-ncu-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path exe = dir / "kernels";
  const std::string build = nvcc + " -O2 -o " + shell_quote(exe.string()) + " " +
                            shell_quote((k_data / "ncu_kernels.cu").string()) + " >" +
                            shell_quote((dir / "nvcc.log").string()) + " 2>&1";
  ASSERT_EQ(std::system(build.c_str()), 0) << read_text(dir / "nvcc.log");
  ncu_options o;
  o.ncu = ncu_path;
  o.log_file = (dir / "ncu.csv").string();
  const std::vector<std::string> known{"copy_coalesced", "copy_strided",   "tiny",
                                       "fma_loop",       "bank_conflicts", "smem_limited"};
  o.kernel_names = known;
  auto cmd = ncu_command(o, {exe.string()});
  ASSERT_TRUE(cmd.ok()) << cmd.err().message;
  std::string line;
  for (const auto& a : *cmd) {
    line += shell_quote(a) + " ";
  }
  line += ">" + shell_quote((dir / "program.log").string()) + " 2>&1";
  const int rc = std::system(line.c_str());
  const std::string log = read_text(dir / "ncu.csv");
  if (const char* keep = std::getenv("LEAP_NCU_CAPTURE")) {
    std::ofstream(fs::path(keep) / "ncu_gpu_test.csv") << log;
  }
  auto out = read_ncu_log(log);
  fs::remove_all(dir);
  if (out.problem && out.problem->kind == ncu_problem_kind::counters_not_permitted) {
    GTEST_SKIP() << out.problem->message;
  }
  ASSERT_EQ(rc, 0) << log;
  ASSERT_FALSE(out.problem.has_value()) << out.problem->message << "\n" << log;
  std::vector<std::string> names;
  for (const auto& k : out.kernels) {
    names.push_back(k.name);
  }
  EXPECT_EQ(names, known);
  auto peaks = peaks_for(out.kernels.at(0).text.count("device__attribute_display_name") != 0
                             ? out.kernels[0].text.at("device__attribute_display_name")
                             : "");
  ASSERT_TRUE(peaks.has_value()) << "no peaks for this GPU: the classes need its roofline";
  std::map<std::string, kernel_diagnosis> by_name;
  std::vector<kernel_diagnosis> all;
  for (const auto& k : out.kernels) {
    by_name[k.name] = diagnose(k, &*peaks, roofline_options{});
    all.push_back(by_name[k.name]);
  }
  const std::string text = profile_feedback(all, static_cast<int>(all.size()));
  auto fired = [&](const std::string& kernel, const std::string& analyser) {
    const auto& f = by_name.at(kernel).fired;
    return std::find(f.begin(), f.end(), analyser) != f.end();
  };
  EXPECT_EQ(by_name["copy_strided"].roof.kind, bottleneck::memory_bound) << text;
  EXPECT_TRUE(fired("copy_strided", "uncoalesced_global")) << text;
  EXPECT_FALSE(fired("copy_coalesced", "uncoalesced_global")) << text;
  EXPECT_EQ(by_name["tiny"].roof.kind, bottleneck::launch_bound) << text;
  EXPECT_TRUE(fired("tiny", "launch_overhead")) << text;
  EXPECT_EQ(by_name["fma_loop"].roof.kind, bottleneck::compute_bound) << text;
  EXPECT_TRUE(fired("fma_loop", "fp32_pipes")) << text;
  EXPECT_TRUE(fired("bank_conflicts", "bank_conflicts")) << text;
  EXPECT_FALSE(fired("copy_strided", "bank_conflicts")) << text;
  // One block of 4 warps per SM, limited by its shared memory: the occupancy finding names it.
  EXPECT_TRUE(fired("smem_limited", "low_occupancy")) << text;
  EXPECT_TRUE(contains(text, "bytes of shared memory per block let only 1 block share an SM"))
      << text;
}

TEST(KernelNamesTest, TheGlobalFunctionsOfASourceInOrder) {
  EXPECT_EQ(global_kernel_names(read_text(k_data / "ncu_kernels.cu")),
            (std::vector<std::string>{"copy_coalesced", "copy_strided", "tiny", "fma_loop",
                                      "bank_conflicts", "smem_limited", "harness_sum"}));
  // Attributes, templates, extern "C", a declaration before the definition (named once), a
  // __device__ helper and a host function that launches (neither is a kernel), a comment
  // mentioning __global__ without a function after it.
  const std::string source =
      "// __global__; kernels below\n"
      "template <typename T, int N>\n"
      "__global__ void __launch_bounds__(256, 2) tiled(const T* in, T* out);\n"
      "extern \"C\" __global__ void plain(float* x) { x[0] = 1; }\n"
      "__device__ float helper(float v) { return v; }\n"
      "template <typename T, int N>\n"
      "__global__ void __launch_bounds__(256, 2) tiled(const T* in, T* out) {}\n"
      "static __global__ __attribute__((noinline)) void attributed(int* p) {}\n"
      "__global__ void spec<float>(float* p) {}\n"
      "void solve(const float* x) { plain<<<1, 1>>>(nullptr); }\n";
  EXPECT_EQ(global_kernel_names(source),
            (std::vector<std::string>{"tiled", "plain", "attributed", "spec"}));
  // A KernelBench candidate's kernels live in a Python string, "\n" escapes and all.
  const std::string python =
      "src = \"__global__ void\\nscale(float* x, int n) {\\n  x[0] *= 2; }\\n\"\n"
      "cuda_src = '''\n__global__ void relu_kernel(float* x) {}\n'''\n";
  EXPECT_EQ(global_kernel_names(python), (std::vector<std::string>{"scale", "relu_kernel"}));
  EXPECT_TRUE(global_kernel_names("void solve() {}\nint my__global__var;\n").empty());
}

// A KernelBench candidate's Triton kernels, by the decorators of each definition.
TEST(KernelNamesTest, TheTritonKernelsOfAPythonSource) {
  struct triton_case {
    std::string name;
    std::string source;
    std::vector<std::string> kernels;
  };
  const std::vector<triton_case> cases{
      {"plain",
       "import triton\n@triton.jit\ndef add_kernel(x_ptr, n):\n    pass\n",
       {"add_kernel"}},
      {"indented_in_a_try",
       "try:\n    import triton\n    @triton.jit\n    def scale(x):\n        pass\nexcept "
       "ImportError:\n    pass\n",
       {"scale"}},
      {"jit_with_arguments_and_a_comment",
       "@triton.jit(do_not_specialize=['n'])  # hot\ndef k1(n):\n    pass\n",
       {"k1"}},
      {"stacked_with_autotune_over_lines",
       "@triton.autotune(\n    configs=[triton.Config({'B': 128}), triton.Config({'B': 256})],\n"
       "    key=['n'],\n)\n@triton.jit\ndef tuned(x, n, B: tl.constexpr):\n    pass\n",
       {"tuned"}},
      {"jit_above_another_decorator",
       "@triton.jit\n@some.other\n\ndef below(x):\n    pass\n",
       {"below"}},
      {"imported_jit_and_spaces",
       "from triton import jit\n@jit\ndef  j(x):\n    pass\n"
       "@ triton . jit\ndef spaced(x):\n    pass\n",
       {"j", "spaced"}},
      {"each_once", "@triton.jit\ndef k(x):\n    pass\n@triton.jit\ndef k(x):\n    pass\n", {"k"}},
      // Not kernels: a plain function, a method after a jit class decorator's other line, torch's
      // jit, numba-like names, a decorator whose name only contains jit.
      {"not_jit",
       "def helper(x):\n    return x\n@torch.jit.script\ndef scripted(x):\n    return x\n"
       "@triton.jit_like\ndef near(x):\n    pass\n@triton.jit\nx = 1\ndef after_code(y):\n"
       "    pass\n",
       {}},
      {"not_an_ascii_identifier", "@triton.jit\ndef k\xc3\xa9(x):\n    pass\n", {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(triton_kernel_names(c.source), c.kernels);
  }
}

// The modes' names are pinned in tests/common/enums_test.cpp.
TEST(ProfileModeTest, WhichVerdictsEachModeSelects) {
  const auto with = [](verdict_category c) {
    verdict v;
    v.category = c;
    v.passed = c == verdict_category::pass;
    return v;
  };
  for (const auto kind : {task_kind::cuda, task_kind::kernelbench}) {
    EXPECT_FALSE(profile_selects(profile_mode::off, kind, with(verdict_category::pass)));
    EXPECT_TRUE(profile_selects(profile_mode::passing, kind, with(verdict_category::pass)));
    EXPECT_FALSE(
        profile_selects(profile_mode::passing, kind, with(verdict_category::wrong_answer)));
    for (const auto ran : {verdict_category::pass, verdict_category::wrong_answer,
                           verdict_category::runtime, verdict_category::timeout}) {
      EXPECT_TRUE(profile_selects(profile_mode::all_compiled, kind, with(ran))) << to_string(ran);
    }
    for (const auto not_run :
         {verdict_category::format, verdict_category::compile, verdict_category::forbidden}) {
      EXPECT_FALSE(profile_selects(profile_mode::all_compiled, kind, with(not_run)))
          << to_string(not_run);
    }
  }
  for (const auto kind : {task_kind::cpp, task_kind::python, task_kind::digits}) {
    EXPECT_FALSE(profile_selects(profile_mode::all_compiled, kind, with(verdict_category::pass)));
  }
}

TEST(ProfileFeedbackTest, AppendedAfterTheVerdictsTextWithinTheBudget) {
  const std::string own = "Correct on all 3 trials.";
  const std::string profile(300, 'p');
  EXPECT_EQ(append_profile_feedback(own, profile, 2000), own + "\n\n" + profile);
  EXPECT_EQ(append_profile_feedback(own, "", 2000), own);
  // Cut to what is left, never into the verdict's own text.
  const std::string cut = append_profile_feedback(own, profile, 200);
  EXPECT_LE(cut.size(), 200U);
  EXPECT_EQ(cut.rfind(own + "\n\npppp", 0), 0U) << cut;
  EXPECT_TRUE(contains(cut, "more characters cut]")) << cut;
  // No room for a useful line: the verdict's text alone.
  EXPECT_EQ(append_profile_feedback(own, profile, own.size() + 40), own);
  const std::string full(2000, 'v');
  EXPECT_EQ(append_profile_feedback(full, profile, 2000), full);
}

// The tail of ncu's raw output that a "not profiled" note carries.
TEST(TextTailTest, KeepsTheEndInWholeLinesAndSaysWhatWasLeftOut) {
  struct tail_case {
    std::string text;
    std::size_t max;
    std::string expected;
  };
  const std::vector<tail_case> cases{
      {"", 10, ""},
      {"fits\n", 10, "fits\n"},
      {"0123456789", 10, "0123456789"},
      // A line break in the kept part: from the line after it.
      {"first line\nsecond\nthird\n", 12, "[... 18 bytes before ...]\nthird\n"},
      // None: the last bytes, from a character's first byte (\xc3\xa9 is one character).
      {"abcdefgh\xc3\xa9xyz", 4, "[... 10 bytes before ...]\nxyz"},
      {"abcdefgh\xc3\xa9xyz", 5, "[... 8 bytes before ...]\n\xc3\xa9xyz"},
      // A break only at the very end keeps the bytes before it.
      {"0123456789\n", 4, "[... 7 bytes before ...]\n789\n"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(text_tail(c.text, c.max), c.expected) << "max " << c.max << " of '" << c.text << "'";
  }
}

// What the sandboxed ncu is shown. On the H200 the toolkit's nsight-compute-* entry is a link into
// /opt/nvidia, which the sandbox did not show: the wrapper said "Nsight Compute is not installed"
// and no kernel was profiled. A toolkit laid out that way, with a link through its own name too.
TEST(NcuFoldersTest, TheWrappersNsightComputeIsShownWhereverItsLinkLeads) {
  std::string pattern = (fs::temp_directory_path() / "leap-ncu-folders-XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const fs::path root = fs::canonical(pattern);
  const fs::path toolkit = root / "cuda-13.0";
  const fs::path installed = root / "opt" / "nvidia" / "nsight-compute" / "2025.3.1";
  fs::create_directories(toolkit / "bin");
  fs::create_directories(installed);
  std::ofstream(toolkit / "bin" / "ncu") << "#!/bin/sh\n";
  fs::create_directory_symlink(installed, toolkit / "nsight-compute-2025.3.1");
  fs::create_directory_symlink(toolkit, root / "cuda");
  fs::create_directories(root / "empty-opt");

  auto has = [](const std::vector<fs::path>& folders, const fs::path& p) {
    return std::find(folders.begin(), folders.end(), p) != folders.end();
  };
  const auto folders =
      ncu_readonly_folders((root / "cuda" / "bin" / "ncu").string(), root / "empty-opt");
  EXPECT_TRUE(has(folders, root / "cuda")) << "the toolkit as named";
  EXPECT_TRUE(has(folders, toolkit)) << "the toolkit the link leads to";
  EXPECT_TRUE(has(folders, installed)) << "where its nsight-compute-* link leads";
  EXPECT_EQ(folders.size(), 3U);

  // /opt/nvidia's own nsight-compute, the wrapper's other place to look, where it exists.
  const auto with_opt =
      ncu_readonly_folders((toolkit / "bin" / "ncu").string(), root / "opt" / "nvidia");
  EXPECT_TRUE(has(with_opt, root / "opt" / "nvidia" / "nsight-compute"));
  // A bare name is looked up on PATH by the sandbox's own folders: nothing to add.
  EXPECT_TRUE(ncu_readonly_folders("ncu", root / "empty-opt").empty());
  fs::remove_all(root);
}

TEST(ProfileSummaryTest, TheStoredPartOfADiagnosis) {
  auto out = read_ncu_log(read_text(k_data / "ncu_raw_h200.csv"));
  ASSERT_FALSE(out.problem.has_value()) << out.problem->message;
  const auto peaks = peaks_for("NVIDIA H200");
  ASSERT_TRUE(peaks.has_value());
  for (const auto& k : out.kernels) {
    if (k.name != "copy_strided") {
      continue;
    }
    const auto d = diagnose(k, &*peaks, roofline_options{});
    const auto s = summarise(d);
    EXPECT_EQ(s.name, "copy_strided");
    EXPECT_EQ(s.bottleneck, "memory-bound");
    EXPECT_EQ(s.duration_ns, d.duration_ns);
    EXPECT_GT(s.duration_ns, 0);
    EXPECT_EQ(s.findings, d.fired);
    EXPECT_NE(std::find(s.findings.begin(), s.findings.end(), "uncoalesced_global"),
              s.findings.end());
    return;
  }
  FAIL() << "no copy_strided in the capture";
}

}  // namespace
}  // namespace leap::sandbox
