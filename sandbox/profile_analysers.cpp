// The profiler's analysers (issue 34): each one a small function from one kernel's metrics to a
// sentence or two of guidance with the numbers, and a row of the registry at the bottom naming the
// bottleneck classes it serves. Adding an analyser is a function and a row here, and its case in
// tests/sandbox/profile_test.cpp.
#include "sandbox/profile.hpp"

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdio>

namespace leap::sandbox {
namespace {

// printf into a std::string: every analyser writes numbers into a fixed sentence.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

const char* plural(double n) { return n == 1.0 ? "" : "s"; }
std::string format(const char* fmt, ...) {
  std::array<char, 512> buf{};
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf.data(), buf.size(), fmt, args);  // NOLINT(clang-analyzer-valist.Uninitialized)
  va_end(args);
  return buf.data();
}

// Global loads: 32 threads reading consecutive 4-byte words touch 4 sectors of 32 bytes per
// request, 16-byte vector loads 16. More than 16 sectors per request is scattered access whatever
// the element size (a stride-32 float gather touches 32, using 4 bytes of each sector).
std::optional<std::string> uncoalesced_global(const kernel_profile& k, const roofline& /*r*/) {
  for (const char* op : {"ld", "st"}) {
    auto sectors = k.metric("l1tex__t_sectors_pipe_lsu_mem_global_op_" + std::string(op) + ".sum");
    auto requests =
        k.metric("l1tex__t_requests_pipe_lsu_mem_global_op_" + std::string(op) + ".sum");
    if (!sectors || !requests || *requests <= 0) {
      continue;
    }
    const double per_request = *sectors / *requests;
    if (per_request > 16.0) {
      return format(
          "Global %s in `%s` touch %.1f sectors of 32 bytes per warp request (4 when 32 threads "
          "access consecutive 4-byte words): with 4-byte elements only %.0f of each sector's 32 "
          "bytes are used. Make consecutive threads access consecutive addresses (e.g. index with "
          "threadIdx.x in the fastest dimension, or stage a transpose through shared memory).",
          op[0] == 'l' ? "loads" : "stores", k.name.c_str(), per_request,
          std::max(1.0, 128.0 / per_request));
    }
  }
  return std::nullopt;
}

std::optional<std::string> bank_conflicts(const kernel_profile& k, const roofline& /*r*/) {
  const double conflicts =
      k.metric_or("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 0) +
      k.metric_or("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 0);
  const double wavefronts = k.metric_or("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 0) +
                            k.metric_or("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", 0);
  if (wavefronts <= 0 || conflicts < 0.25 * wavefronts) {
    return std::nullopt;
  }
  const double ideal = std::max(1.0, wavefronts - conflicts);
  return format(
      "%.0f%% of the shared-memory wavefronts in `%s` are bank-conflict replays (about %.1f-way): "
      "pad the shared array (e.g. [32][33] instead of [32][32]) or change the index so that the 32 "
      "threads of a warp hit 32 different banks.",
      100.0 * conflicts / wavefronts, k.name.c_str(), wavefronts / ideal);
}

// The resource that caps resident blocks per SM: the smallest of ncu's per-resource limits.
struct limiter {
  std::string_view name;
  double blocks = 0;
};
std::optional<limiter> occupancy_limiter(const kernel_profile& k) {
  const std::array<std::pair<std::string_view, std::string_view>, 4> limits = {{
      {"warps", "launch__occupancy_limit_warps"},
      {"registers", "launch__occupancy_limit_registers"},
      {"shared memory", "launch__occupancy_limit_shared_mem"},
      {"blocks per SM", "launch__occupancy_limit_blocks"},
  }};
  std::optional<limiter> best;
  for (const auto& [name, metric] : limits) {
    auto v = k.metric(metric);
    if (v && (!best || *v < best->blocks)) {
      best = limiter{name, *v};
    }
  }
  return best;
}

std::optional<std::string> low_occupancy(const kernel_profile& k, const roofline& /*r*/) {
  auto achieved = k.metric("sm__warps_active.avg.pct_of_peak_sustained_active");
  auto theoretical = k.metric("sm__maximum_warps_per_active_cycle_pct");
  auto lim = occupancy_limiter(k);
  if (!theoretical || !lim || lim->name == "registers") {
    return std::nullopt;  // register_pressure says it with the register count
  }
  if (!achieved) {
    // A profile from kernel events: no achieved occupancy, only what the launch allows.
    if (*theoretical >= 50.0 || (lim->name != "shared memory" && lim->name != "blocks per SM")) {
      return std::nullopt;
    }
    if (lim->name == "shared memory") {
      const double smem = k.metric_or("launch__shared_mem_per_block_static", 0) +
                          k.metric_or("launch__shared_mem_per_block_dynamic", 0);
      return format(
          "Occupancy of `%s` can be at most %.0f%%: %.0f bytes of shared memory per block let "
          "only %.0f block%s share an SM. Use smaller tiles or fewer shared buffers per block.",
          k.name.c_str(), *theoretical, smem, lim->blocks, plural(lim->blocks));
    }
    return format(
        "Occupancy of `%s` can be at most %.0f%%: blocks of %.0f threads are too small to fill an "
        "SM within its %.0f-block limit. Use at least 128 threads per block.",
        k.name.c_str(), *theoretical, k.metric_or("launch__block_size", 0), lim->blocks);
  }
  if (*achieved >= 50.0) {
    return std::nullopt;
  }
  if (*theoretical < 100.0 && lim->name == "shared memory") {
    const double smem = k.metric_or("launch__shared_mem_per_block_static", 0) +
                        k.metric_or("launch__shared_mem_per_block_dynamic", 0);
    return format(
        "Occupancy of `%s` is %.0f%% (at most %.0f%%): %.0f bytes of shared memory per block let "
        "only %.0f block%s share an SM. Use smaller tiles or fewer shared buffers per block.",
        k.name.c_str(), *achieved, *theoretical, smem, lim->blocks, plural(lim->blocks));
  }
  if (*theoretical < 100.0 && lim->name == "blocks per SM") {
    return format(
        "Occupancy of `%s` is %.0f%% (at most %.0f%%): blocks of %.0f threads are too small to "
        "fill an SM within its %.0f-block limit. Use at least 128 threads per block.",
        k.name.c_str(), *achieved, *theoretical, k.metric_or("launch__block_size", 0), lim->blocks);
  }
  return format(
      "Occupancy of `%s` is %.0f%% of the SM's warps although %.0f%% could be resident: warps "
      "finish unevenly or too few blocks are launched for the last wave. Give each thread equal "
      "work and launch enough blocks to fill every SM several times.",
      k.name.c_str(), *achieved, *theoretical);
}

std::optional<std::string> register_pressure(const kernel_profile& k, const roofline& /*r*/) {
  auto regs = k.metric("launch__registers_per_thread");
  auto theoretical = k.metric("sm__maximum_warps_per_active_cycle_pct");
  auto lim = occupancy_limiter(k);
  if (!regs || !theoretical || !lim || lim->name != "registers" || *theoretical >= 100.0 ||
      k.metric_or("launch__occupancy_limit_warps", 0) <= lim->blocks) {
    return std::nullopt;
  }
  return format(
      "`%s` uses %.0f registers per thread, which lets only %.0f block%s of %.0f threads share an "
      "SM (theoretical occupancy %.0f%%). Keep fewer values live per thread, or cap registers "
      "with __launch_bounds__(threads, min_blocks).",
      k.name.c_str(), *regs, lim->blocks, plural(lim->blocks), k.metric_or("launch__block_size", 0),
      *theoretical);
}

std::optional<std::string> small_grid(const kernel_profile& k, const roofline& /*r*/) {
  auto grid = k.metric("launch__grid_size");
  auto sms = k.metric("device__attribute_multiprocessor_count");
  if (!grid || !sms || *grid >= *sms) {
    return std::nullopt;
  }
  return format(
      "`%s` launches %.0f blocks for %.0f SMs, so %.0f SMs stay idle. Split the work into at "
      "least as many blocks as SMs (several per SM hide latency better).",
      k.name.c_str(), *grid, *sms, *sms - *grid);
}

std::optional<std::string> launch_overhead(const kernel_profile& k, const roofline& /*r*/) {
  auto ns = k.metric("gpu__time_duration.sum");
  if (!ns) {
    return std::nullopt;
  }
  return format(
      "`%s` runs for %.1f us, about what launching it costs: fuse it into a neighbouring kernel or "
      "give each launch more work; for many small launches, CUDA graphs cut the launch cost.",
      k.name.c_str(), *ns / 1000.0);
}

std::optional<std::string> dram_traffic(const kernel_profile& k, const roofline& r) {
  auto dram = k.metric("dram__throughput.avg.pct_of_peak_sustained_elapsed");
  if (!dram || *dram < 50.0 || !r.intensity) {
    return std::nullopt;
  }
  if (r.ridge) {
    return format(
        "`%s` keeps DRAM %.0f%% busy at %.2f FLOP per byte, below the GPU's ridge point of %.1f: "
        "its time is the bytes it moves. Move fewer bytes: reuse data through shared memory or "
        "registers, fuse passes over the same data, use narrower types.",
        k.name.c_str(), *dram, *r.intensity, *r.ridge);
  }
  return format(
      "`%s` keeps DRAM %.0f%% busy at %.2f FLOP per byte: its time is the bytes it moves. Move "
      "fewer bytes: reuse data through shared memory or registers, fuse passes, narrower types.",
      k.name.c_str(), *dram, *r.intensity);
}

std::optional<std::string> fp32_pipes(const kernel_profile& k, const roofline& r) {
  if (r.tensor || r.flops <= 0) {
    return std::nullopt;
  }
  return format(
      "`%s` is bound by its arithmetic (SM throughput %.0f%%, %.3g FLOPs on the CUDA cores, none "
      "on tensor cores): use tensor cores (WMMA/mma in FP16/BF16/TF32) where precision allows, or "
      "fewer instructions per result.",
      k.name.c_str(), r.compute_pct, r.flops);
}

std::optional<std::string> warp_stalls(const kernel_profile& k, const roofline& /*r*/) {
  struct reason {
    std::string_view metric;
    const char* what;
    const char* advice;
  };
  static const std::array<reason, 6> k_reasons = {{
      {"long_scoreboard", "global or local memory loads",
       "keep more independent loads in flight per thread, or more warps per SM"},
      {"barrier", "__syncthreads()", "do more work between barriers, or balance work across warps"},
      {"mio_throttle", "the shared-memory/special-function queue",
       "issue fewer, wider shared-memory accesses and remove bank conflicts"},
      {"short_scoreboard", "shared memory or special math results",
       "remove bank conflicts and reuse shared values from registers"},
      {"lg_throttle", "the global/local memory queue",
       "use wider (vector) loads and fewer local-memory spills"},
      {"wait", "fixed-latency dependencies", "interleave independent instructions (unroll)"},
  }};
  const reason* worst = nullptr;
  double cycles = 0;
  for (const auto& r : k_reasons) {
    const double v = k.metric_or(
        "smsp__average_warps_issue_stalled_" + std::string(r.metric) + "_per_issue_active.ratio",
        0);
    if (v > cycles) {
      cycles = v;
      worst = &r;
    }
  }
  if (worst == nullptr || cycles < 4.0) {
    return std::nullopt;
  }
  return format("Warps in `%s` wait %.1f cycles per issued instruction on %s: %s.", k.name.c_str(),
                cycles, worst->what, worst->advice);
}

using b = bottleneck;
const std::array<analyser, 9> k_analysers = {{
    {"uncoalesced_global", {b::memory_bound, b::latency_bound}, &uncoalesced_global},
    {"bank_conflicts", {b::memory_bound, b::latency_bound, b::compute_bound}, &bank_conflicts},
    // unknown: a profile without counters (kernel events), whose launch metrics these read.
    {"register_pressure",
     {b::latency_bound, b::memory_bound, b::compute_bound, b::unknown},
     &register_pressure},
    {"low_occupancy", {b::latency_bound, b::memory_bound, b::unknown}, &low_occupancy},
    {"small_grid", {b::latency_bound, b::memory_bound, b::compute_bound, b::unknown}, &small_grid},
    {"launch_overhead", {b::launch_bound}, &launch_overhead},
    {"dram_traffic", {b::memory_bound}, &dram_traffic},
    {"fp32_pipes", {b::compute_bound}, &fp32_pipes},
    {"warp_stalls", {b::latency_bound}, &warp_stalls},
}};

}  // namespace

std::span<const analyser> analysers() { return k_analysers; }

}  // namespace leap::sandbox
