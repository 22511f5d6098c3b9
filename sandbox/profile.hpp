// The profiler's pure parts (issue 34): the Nsight Compute (ncu) command line for a candidate's
// own kernels, the parser of ncu's CSV "raw" page, the roofline classifier of each kernel's
// bottleneck and the analysers that turn metrics into a sentence or two of guidance. No process is
// started here: the engine runs the command in the sandbox and hands its log to read_ncu_log. An
// internal header of the sandbox module (like feedback.hpp): nothing outside sandbox/ includes it.
#pragma once

#include "common/result.hpp"
#include "sandbox/verdict.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

// The fixed metric set, every name checked against ncu 2025 on an H200 (sm_90): duration, the
// speed-of-light throughputs, DRAM bytes, cache hit rates, achieved and theoretical occupancy with
// the per-resource block limits, the launch configuration, global sectors and requests
// (coalescing), shared-memory wavefronts and bank conflicts, warp-stall cycles per issued
// instruction, SASS floating-point instruction counts (FLOPs) and tensor-pipe instructions.
std::span<const std::string_view> ncu_metric_names();

struct ncu_options {
  std::string ncu = "ncu";  // Default: ncu on PATH (the CUDA toolkit's bin/ncu)
  // Where ncu writes its CSV and its ==PROF== lines (--log-file), so that the program's own stdout
  // cannot be mistaken for, or interleave with, the report.
  std::string log_file = "ncu.csv";
  // The candidate's kernels by function name (no parameters, no templates arguments): only these
  // are profiled, never PyTorch's or the harness's. Either names or a regex, not neither.
  std::vector<std::string> kernel_names;
  std::string kernel_regex;  // an ECMAScript regex over function names, used when names are empty
  int launch_count = 8;      // Default: 8 launches profiled at most (each one is replayed per pass)
};

// argv of `ncu --csv --page raw --print-units base --target-processes all --kernel-name-base
// function --kernel-name regex:^(a|b)$ --launch-count N --metrics ... --log-file F -- <argv>`.
// --target-processes all because the CUDA judge starts the candidate's program as its child.
// Errors: no kernel filter, a kernel name that is not a C++ identifier (names are escaped into the
// regex, so this only refuses names no kernel can have), an empty argv.
result<std::vector<std::string>> ncu_command(const ncu_options& options,
                                             const std::vector<std::string>& argv);

// One profiled kernel launch: the identification columns and every metric ncu printed (values in
// base units: ns, bytes, %, counts; thousands separators removed). Text values
// (device__attribute_display_name) are in `text`.
struct kernel_profile {
  int id = 0;
  std::string name;        // function name, "copy(const float *, float *, int)" -> "copy"
  std::string signature;   // the Kernel Name column as ncu printed it
  std::string block_size;  // "(256, 1, 1)"
  std::string grid_size;   // "(40, 1, 1)"
  std::map<std::string, double, std::less<>> metrics;
  std::map<std::string, std::string, std::less<>> text;

  [[nodiscard]] std::optional<double> metric(std::string_view name) const;
  [[nodiscard]] double metric_or(std::string_view name, double fallback) const;
};

// Parses ncu's `--csv --page raw` output: ==PROF==/==WARNING== lines are skipped, then a header
// row ("ID","Process ID",...,"Kernel Name",...,metric names), a units row (empty ID) and one row
// per launch. Errors name the line: an unterminated quote, a row whose field count differs from the
// header's, a missing "ID" or "Kernel Name" column, the details page (a "Metric Name" column) or no
// header at all. Units (ns/us/ms/s, byte/Kbyte/Mbyte/Gbyte) are scaled to base units.
result<std::vector<kernel_profile>> parse_ncu_csv(std::string_view text);

enum class ncu_problem_kind {
  counters_not_permitted,  // ERR_NVGPUCTRPERM
  no_kernels_profiled,     // the filter matched no launch
  unknown_metric,          // a metric this ncu or GPU does not know
  unreadable_output,       // the CSV did not parse (the message says where)
  failed,                  // another ==ERROR== line
};
std::string_view to_string(ncu_problem_kind kind);

struct ncu_problem {
  ncu_problem_kind kind = ncu_problem_kind::failed;
  std::string message;  // what happened and, for permissions, exactly what is needed
};

struct ncu_outcome {
  std::vector<kernel_profile> kernels;  // empty when `problem` is set
  std::optional<ncu_problem> problem;
};

// The whole log ncu wrote (the --log-file, or its stdout): the permission error or an unknown
// metric are a problem whatever else the log holds; otherwise the launches ncu profiled, even when
// another ==ERROR== line follows (the program exiting non-zero, as a failing candidate may); with
// no launch, that ==ERROR== line, "No kernels were profiled" or the CSV's error is the problem.
// `messages`: what else ncu and its targets printed (their stderr), searched for those errors
// only: it is never read as CSV, where a target's own warning (Python's, with a comma) would be
// taken for a row. Never an error: profiling failing must never fail a verdict.
ncu_outcome read_ncu_log(std::string_view log, std::string_view messages = {});

// What ERR_NVGPUCTRPERM means and exactly what would permit the counters (the driver parameter,
// the capability): the counters_not_permitted problem's message.
std::string counters_not_permitted_message();

// The end of `text` in at most about `max_bytes`: whole lines where a line break falls in the
// kept part, after a "[... N bytes before ...]" line when anything was left out; `text` itself
// when it fits. Never splits a UTF-8 sequence. Pure function.
std::string text_tail(std::string_view text, std::size_t max_bytes);

// The folders a sandboxed `ncu` must read beside the sandbox's own read-only ones: its own folder
// (through a symlink too) and, for a toolkit's bin/ncu wrapper, the toolkit, plus where the
// wrapper finds Nsight Compute: the toolkit's nsight-compute-* entries and their targets (a
// package may install it under /opt/nvidia and link it there, and a link whose target the sandbox
// does not show makes the wrapper say Nsight Compute is not installed), and /opt/nvidia's
// nsight-compute folder, the wrapper's other place to look, where it exists.
std::vector<std::filesystem::path> ncu_readonly_folders(
    const std::string& ncu, const std::filesystem::path& opt_nvidia = "/opt/nvidia");

// Peak figures of one GPU model, from its vendor datasheet (profile.cpp cites each).
struct gpu_peaks {
  std::string_view model;        // "H200"
  double fp32_flops = 0;         // FLOP/s, non-tensor FP32 (FMA counted as 2)
  double fp16_tensor_flops = 0;  // FLOP/s, dense FP16/BF16 tensor, FP32 accumulate
  double dram_bytes_per_s = 0;
};
// The table's row for ncu's device__attribute_display_name ("NVIDIA H200", "NVIDIA H100 PCIe",
// "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA GeForce RTX 4090"); nullopt for other models.
std::optional<gpu_peaks> peaks_for(std::string_view display_name);

enum class bottleneck { memory_bound, compute_bound, latency_bound, launch_bound, unknown };
std::string_view to_string(bottleneck b);

struct roofline_options {
  double launch_bound_ns = 5000;  // Default: 5 us; a kernel shorter than this costs about a launch
  double busy_pct = 60;           // Default: 60 (ncu's own speed-of-light threshold)
};

struct roofline {
  bottleneck kind = bottleneck::unknown;
  double flops = 0;                 // FP32 + FP16 + FP64 SASS FLOPs (FMA = 2), tensor ops excluded
  double dram_bytes = 0;            // read + write
  std::optional<double> intensity;  // FLOP per DRAM byte; nullopt without DRAM traffic
  std::optional<double> ridge;      // peak FLOP/s over peak bytes/s of the model, when known
  double compute_pct = 0;           // sm__throughput, % of peak
  double memory_pct = 0;            // the busiest memory unit, % of peak
  bool tensor = false;  // tensor-pipe work outweighs the CUDA cores' (the ridge uses its peak)
  // Any throughput metric was measured; false for a profile from kernel events (no counters),
  // whose class is launch-bound or unknown.
  bool counters = false;
};

// The kernel's class: launch-bound when its duration is under launch_bound_ns; unknown when no
// throughput metric was measured (a profile from kernel events); latency-bound when
// neither compute nor memory throughput reaches busy_pct of peak; otherwise the roofline's side
// (intensity below the model's ridge point: memory-bound) when the model is known and the kernel
// moved DRAM bytes, else whichever throughput is higher. `peaks` nullptr: no ridge.
roofline classify(const kernel_profile& k, const gpu_peaks* peaks, const roofline_options& options);

// An analyser turns one kernel's metrics into one or two sentences of guidance, with the numbers,
// or nothing when its problem is absent. Each serves some classes and runs only for those.
struct analyser {
  std::string_view name;
  std::vector<bottleneck> serves;
  std::optional<std::string> (*run)(const kernel_profile& k, const roofline& r);
};
// Every analyser (profile_analysers.cpp: adding one is a function and a row there, and its test).
std::span<const analyser> analysers();

struct kernel_diagnosis {
  std::string kernel;
  double duration_ns = 0;  // 0 when ncu did not report it
  std::string grid_size;   // "(65536, 1, 1)"
  std::string block_size;  // "(256, 1, 1)"
  roofline roof;
  // sm__maximum_warps_per_active_cycle_pct, when known
  std::optional<double> theoretical_occupancy_pct;
  std::vector<std::string> guidance;  // in the registry's order
  std::vector<std::string> fired;     // the analysers' names, same order
};
kernel_diagnosis diagnose(const kernel_profile& k, const gpu_peaks* peaks,
                          const roofline_options& options);

// The text a debug or optimisation turn appends after the verdict's own: per kernel, longest first
// and at most `max_kernels`, "Profile of `copy_strided` (292.8 us, grid (65536, 1, 1) x (256, 1,
// 1)): memory-bound (compute 10%, memory 80% of peak, 0.00 FLOP/byte, ridge 14.0)." and its
// guidance, one line per kernel; without counters (kernel events) the class is followed by "(no
// hardware counters; theoretical occupancy 50%)". Empty for no kernels. The caller trims it to its
// budget.
std::string profile_feedback(const std::vector<kernel_diagnosis>& kernels, std::size_t max_kernels);

// The names of the `__global__` functions `source` defines or declares (comments and string
// contents are read too: a KernelBench candidate's kernels live in load_inline's source strings),
// in order of appearance, each once: the identifier before the parameter list, after the return
// type and any __launch_bounds__(...) or other attribute. Pure function.
std::vector<std::string> global_kernel_names(std::string_view source);

// The names of the Triton kernels a Python `source` defines: each `def NAME(` whose decorators
// (one per line, a decorator's arguments may span lines) include `@triton.jit` or `@jit`, with or
// without arguments, in any order with others (`@triton.autotune(...)`), in order of appearance,
// each once. Triton names the compiled kernel after the function, so these are the names ncu
// shows. Names that are not ASCII identifiers are left out (ncu_command would refuse them). A
// textual reading: a definition only a string holds counts too, one built at run time does not.
// Pure function.
std::vector<std::string> triton_kernel_names(std::string_view source);

// The compact part of a diagnosis kept with the turn (verdict.hpp: kernel_summary).
kernel_summary summarise(const kernel_diagnosis& d);

// `verdict_text` followed by a blank line and `profile_text` cut to what is left of `budget`
// (sandbox/feedback.cpp; trim_to_budget's marker when cut). The verdict's own text is never cut
// for the profile: with less than a line's room left (or no profile text) it comes back alone.
// Pure function.
std::string append_profile_feedback(std::string verdict_text, std::string_view profile_text,
                                    std::size_t budget);

}  // namespace leap::sandbox
