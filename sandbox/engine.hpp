// The verification engine: the two stages of verifying one candidate, compile (CPU) and run (a CPU
// or GPU slot), for every task kind. Synchronous and thread-safe; sandbox/verifier.hpp puts the
// stages on separate pools.
#pragma once

#include "common/enums/profile_mode.hpp"
#include "common/enums/profile_tool.hpp"
#include "common/result.hpp"
#include "sandbox/compile_cache.hpp"
#include "sandbox/feedback.hpp"
#include "sandbox/harness.hpp"
#include "sandbox/kernelbench.hpp"
#include "sandbox/process.hpp"
#include "sandbox/task.hpp"
#include "sandbox/verdict.hpp"

#include <array>
#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace leap::sandbox {

// Compile-time default for nvcc (CMake sets LEAP_NVCC_DEFAULT from the CUDA toolkit it found).
std::string default_nvcc();

// Which verdicts of the cuda and kernelbench kinds are profiled under Nsight Compute after they are
// known, and what profiles them: common/enums/profile_mode.hpp and profile_tool.hpp.
// Whether a verdict of `kind` is profiled under `mode`: the kinds whose runs use a GPU only
// (kind_traits::gpu: cuda and kernelbench); passing: a passing verdict; all_compiled: any verdict
// of a candidate that compiled (not a format, forbidden or compile verdict). Pure function.
bool profile_selects(profile_mode mode, task_kind kind, const verdict& v);

struct engine_config {
  std::filesystem::path scratch_root = default_scratch_root();  // Default: $TMPDIR/leap-sandbox
  // Default: $XDG_CACHE_HOME/leap/compile, else $HOME/.cache/leap/compile
  std::filesystem::path cache_dir;
  std::uint64_t cache_max_bytes = 2ULL << 30;  // Default: 2 GiB; 0 disables the disk cache
  std::string cxx = "g++";                     // Default: g++
  std::string cxx_flags = "-std=c++17 -O2";    // Default: -std=c++17 -O2
  std::string nvcc = default_nvcc();           // Default: the toolkit's nvcc found by CMake
  std::string nvcc_flags = "-std=c++17 -O2";   // Default: -std=c++17 -O2
  std::string cuda_arch = "sm_90a";            // Default: sm_90a (one architecture, plain nvcc)
  std::string python = "python3";              // Default: python3
  int trials = 3;                              // Default: 3 seeded trials with fresh inputs
  int timing_reps = 0;  // Default: 0 (timing off); >0 times passing candidates
  // "auto", "cuda" or "cpu"; decided by the engine's own probe of the slot (python3 -c "import
  // torch"), never by anything the candidate's process reports. "cuda" on a slot whose torch sees
  // no GPU is an infrastructure error. Default: auto (cuda when torch sees one, else cpu)
  std::string kernelbench_device = "auto";
  // Memory for cached KernelBench reference data (inputs and expected outputs, per problem, seed,
  // trials and device), least recently used evicted first. Default: 4 GiB
  std::size_t kernelbench_cache_bytes = 4ULL << 30;
  resource_limits compile_limits = [] {
    resource_limits l;
    l.wall = std::chrono::seconds(60);
    l.cpu_seconds = 60;
    l.address_space_bytes = 0;    // nvcc's cicc and ptxas reserve large address ranges
    l.memory_bytes = 4ULL << 30;  // so the whole compiler tree is bounded by its cgroup instead
    l.file_size_bytes = 512ULL << 20;
    l.scratch_bytes = 1ULL << 30;  // objects, nvcc's temporaries and the executable
    l.open_files = 256;
    l.processes = 64;
    l.output_cap_bytes = 256 << 10;
    return l;
  }();
  // RLIMIT_DATA of every compiler process of a candidate's build (set by the build script, so it
  // holds for nvcc, whose cicc needs RLIMIT_AS unlimited): an `#include "/dev/zero"` or a template
  // explosion ends with "out of memory" instead of taking the host's. 0: none. Default: 3 GiB
  std::uint64_t compile_memory_bytes = 3ULL << 30;
  // cpp runs. Default: resource_limits{} (10 s, 4 GiB address space, 4 GiB for the whole tree)
  resource_limits run_limits;
  resource_limits cuda_run_limits = [] {
    resource_limits l;
    l.address_space_bytes = 0;  // the CUDA driver maps the GPU's whole address space
    l.processes = 256;          // the driver starts threads, which RLIMIT_NPROC counts
    l.open_files = 256;
    l.memory_bytes = 8ULL << 30;  // host memory: the CUDA context and pinned buffers
    return l;
  }();
  resource_limits python_limits = [] {
    resource_limits l;
    l.address_space_bytes = 2ULL << 30;
    l.memory_bytes = 4ULL << 30;
    return l;
  }();
  // The candidate's and the reference's program each (inputs and outputs travel as files).
  resource_limits kernelbench_limits = [] {
    resource_limits l;
    l.wall = std::chrono::seconds(120);
    l.cpu_seconds = 600;
    l.address_space_bytes = 0;
    l.processes = 512;
    l.open_files = 1024;
    l.memory_bytes = 16ULL << 30;    // torch (CPU tensors when no GPU) in the whole tree
    l.file_size_bytes = 4ULL << 30;  // a KernelBench problem's inputs reach hundreds of MiB
    l.scratch_bytes = 4ULL << 30;    // those files, and load_inline's build folder under HOME
    return l;
  }();
  // KernelBench: extensions a candidate builds with load_inline at import are built in the compile
  // pool (no GPU) and cached, not in its run (kernelbench.hpp). Off: every build happens in the
  // run, as KernelBench itself does it. Default: true
  bool kernelbench_prebuild = true;
  // With prebuild: torch's extension headers are precompiled once per compiler, torch and flags
  // (g++'s .gch, kept in the compile cache's folder store) and every extension build in the compile
  // pool includes them first; a header g++ refuses is built around (the build note says so). The
  // cache folder must be outside /tmp for the sandbox to see it. Default: true
  bool kernelbench_pch = true;
  // With prebuild and pch: the engine starts building torch's precompiled header for the default
  // flags (prepare_kernelbench) when it is created, so the first candidate's build finds it ready
  // or waits for that one build. For callers that know they serve KernelBench tasks; others would
  // spend a minute of a core on a header no task uses. Default: false
  bool kernelbench_pch_ahead = false;
  // KernelBench with timing: the reference is also timed under torch.compile (inductor), once per
  // problem, and a verdict carries both speedups. Default: true
  bool kernelbench_compiled_baseline = true;
  // KernelBench runs: as each run starts, the slot starts the judge of its next run ahead of the
  // job (in a sandbox of its own, as every run: one judge serves one candidate), so that torch's
  // import, CUDA's start and (where the own-kernel check wants it) the profiler's start are done
  // before a candidate arrives; the run's limits start with the job. Costs an idle judge and runner
  // (host memory; on a GPU two CUDA contexts) per run slot. For long-lived engines (leap run,
  // leap verifier-node); a one-shot verify would start one nobody uses. Default: false
  bool kernelbench_standby = false;
  // With kernelbench_standby: how many runs ahead a slot keeps judges started, per run sharing
  // it. 1 gives the next run's judge the current run's time to get ready; on a saturated slot,
  // whose next job comes as its run ends, a short run leaves it part of its start to wait for,
  // and 2 gives it two runs' time at twice the idle judges (host memory; on a GPU, two CUDA
  // contexts each). Default: 1
  int kernelbench_standby_depth = 1;
  // The recorder's import and each extension's build (the host compiler and nvcc over torch's
  // headers). Default: 300 s wall, 8 GiB for the whole tree, 2 GiB of scratch
  resource_limits kernelbench_build_limits = [] {
    resource_limits l;
    l.wall = std::chrono::seconds(300);
    l.cpu_seconds = 900;
    l.address_space_bytes = 0;
    l.memory_bytes = 8ULL << 30;
    l.file_size_bytes = 1ULL << 30;
    l.scratch_bytes = 2ULL << 30;
    l.open_files = 1024;
    l.processes = 256;
    l.output_cap_bytes = 1 << 20;
    return l;
  }();
  feedback_options feedback;
  // Profiling under Nsight Compute after the verdict (profile_selects; engine_profile.cpp). Its
  // failures are notes on the verdict, never a different verdict. Default: off
  profile_mode profile = profile_mode::off;
  // The ncu executable. Default: empty, the ncu beside nvcc (the CUDA toolkit's bin/ncu)
  std::string ncu;
  // What profiles a selected verdict. Default: automatic (ncu, kernel events where counters are
  // not permitted)
  profile_tool profiler = profile_tool::automatic;
  // The events library (sandbox/cupti/). Default: empty, the one this build made, if any
  std::string kernel_events_library;
  // The profiling run (the candidate replayed once per metric pass under ncu), in the sandbox like
  // the candidate's own run. Default: cuda_run_limits with 120 s wall and 300 s of CPU
  resource_limits profile_limits = [] {
    resource_limits l;
    l.wall = std::chrono::seconds(120);
    l.cpu_seconds = 300;
    l.address_space_bytes = 0;
    l.processes = 256;
    l.open_files = 1024;
    l.memory_bytes = 8ULL << 30;
    l.output_cap_bytes = 256 << 10;
    return l;
  }();
  // Kernels named in the feedback (longest first). Default: 2
  std::size_t profile_max_kernels = 2;
  // Device memory of a GPU kept out of the shares of the runs that share it (engine::run's
  // `sharing`): the CUDA contexts, the KernelBench judges' buffers, the GPU keeper's. Default: 4
  // GiB
  std::uint64_t gpu_memory_reserve_bytes = 4ULL << 30;
  // Device memory one torch process's CUDA context takes: a KernelBench judge started ahead of its
  // job holds two (its own and its runner's), which the shares of the runs beside it leave out
  // (shared_gpu_reserve). Measured: 526 MiB a process on an H100 with torch 2.11
  // (KernelBenchMemoryGpuTest.SharesLeaveRoomForTheJudgesWaiting prints it). Default: 640 MiB
  std::uint64_t gpu_context_bytes = 640ULL << 20;
  // Tests only: replaces the engine's own slot probe (probe_slot) where the real one cannot run
  // (no GPU). Production code leaves it empty. Default: empty (the real probe)
  std::function<status(task_kind kind, int gpu)> probe_override;
};

// KernelBench runs keep every trial's and timing set's inputs and outputs as files in their
// scratch, a tmpfs whose pages count as the run's memory: a problem with large tensors needs more
// than the default 4 GiB. Sets kernelbench_limits' scratch to `bytes` and grows its largest file
// to it and its memory limit to it plus what torch itself may hold (12 GiB); never shrinks them.
void set_kernelbench_scratch(engine_config& config, std::uint64_t bytes);

// Infrastructure failures of a run slot: the contract of every run function (run_native,
// run_python, run_kernelbench). A run returns an error ONLY for a failure the engine established
// itself: the run could not be started, or the engine's own probe of the slot (probe_slot) failed.
// What the candidate printed or wrote is at most a hint to run the probe: with the probe passing,
// the failure is the candidate's own (a verdict). Such an error is made by
// infrastructure_error(gpu, what), which tags it with the slot's GPU (-1: a slot without a CUDA
// device); verifier retries tagged errors on another slot and ends the run only when the failure
// persists. An untagged error (a broken task, no compiler) reaches the caller at once.
error infrastructure_error(int gpu, const std::string& what);
// The GPU of an error made by infrastructure_error (-1 for a slot without one); nullopt for any
// other error. Pure function.
std::optional<int> infrastructure_slot(const error& e);
// Whether a CUDA or torch error text says device memory ran out: torch's OutOfMemoryError and its
// "CUDA out of memory", CUDA's cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY, the CUDA
// libraries' *_ALLOC_FAILED statuses, "out of memory" in any case. Pure function.
bool says_device_memory_exhausted(std::string_view text);

// The compile stage's outcome: either a verdict already (format, forbidden, compile) or what the
// run stage needs.
struct prepared_candidate {
  std::optional<verdict> final_verdict;
  std::string code;                              // the extracted code
  std::string binary;                            // cpp/cuda: the executable
  std::shared_ptr<const harness_dump> expected;  // cpp/cuda: the reference's outputs
  std::shared_ptr<const std::string> judge;      // cpp/cuda: the judge's executable (harness.hpp)
  std::optional<timing_stats> reference_time;
  // cpp/cuda with timing: whether reference_time was measured by this engine's reference run or
  // kept in the compile cache (and when it was measured); the verdict's timing_note starts with it
  std::string reference_time_note;
  // kernelbench: the libraries built in the compile pool, by the recorder's id of their request
  struct extension {
    std::string id;
    std::string name;
    std::shared_ptr<const std::string> library;
  };
  std::vector<extension> extensions;
  std::string build_note;  // kernelbench: where the extensions were built, for the verdict
  double compile_ms = 0;
  bool cache_hit = false;
};

namespace detail {
class gpu_keeper;
class started_judge;
}  // namespace detail

class engine {
 public:
  // Opens the compile cache and checks the configuration. Errors name the key or path.
  static result<std::unique_ptr<engine>> create(engine_config config);

  // Extraction, forbidden check, compilation (cached, de-duplicated) and, once per task, the
  // reference's expected outputs (skipped when `with_reference` is false: a compile-only check,
  // whose result run() cannot judge).
  //
  // cpp and cuda candidates are compiled to an object on their own and linked with the harness's
  // object (harness first) afterwards, and judged on what the toolchain saw, not on their text:
  //  - includes: every file the preprocessor opened (g++ -MD; nvcc's kept .ii line markers, device
  //    and host passes) must be the candidate's own file or lie in a system header folder, and not
  //    belong to a library the task forbids (thrust/, cub/, cublas*.h...);
  //  - the assembler's dependency list: no .incbin/.include of any file;
  //  - forbidden names (cpp): g++'s front-end dump, where every use is fully qualified;
  //  - the object's symbols (nm): no definition of a library function or object, nothing the
  //    harness uses, no forbidden library call (see check_object_symbols).
  // A refusal is a `forbidden` verdict that names the file or symbol, never another file's content;
  // compile errors are reduced to the candidate's own diagnostics. Every compiler process has
  // compile_limits and compile_memory_bytes. The outcome, refusals included, is cached.
  //
  // Errors are infrastructure failures (no compiler, a task whose
  // reference does not compile), never the candidate's fault. Thread-safe.
  result<prepared_candidate> compile(const task& t, std::string_view answer,
                                     bool with_reference = true);

  // Runs a prepared candidate in isolation and judges it. `gpu` is the CUDA device for cuda and
  // kernelbench runs (CUDA_VISIBLE_DEVICES), or -1 to leave the variable unset. Thread-safe.
  // kernelbench: an error is either the engine's own probe of the slot failing (the message starts
  // with "infrastructure:" and names the slot: torch does not import, or kernelbench_device is
  // "cuda" and torch sees no GPU) or the task's reference failing; nothing the candidate's process
  // prints or writes can produce one.
  // A verdict that profile_selects chose is profiled (profile_candidate) before run() returns.
  // `sharing`: how many runs share this GPU at once (the verifier's runs per GPU for an untimed
  // run; 1: the run has it alone). Above 1, a kernelbench run's torch allocations are capped at
  // its share of the GPU's memory, (total - gpu_memory_reserve_bytes) / sharing, set in the
  // candidate's process before it imports solution.py, and a cuda run's failure for device memory
  // names its share; either way a failure for device memory sets verdict::device_memory_failure.
  result<verdict> run(const task& t, const prepared_candidate& prepared, int gpu, int sharing = 1);
  // run() without the profiling: for callers that profile elsewhere, off the verdict's path
  // (verifier: its profiling pool). Thread-safe.
  result<verdict> judge(const task& t, const prepared_candidate& prepared, int gpu,
                        int sharing = 1);

  // Both stages in the calling thread. For a KernelBench task the run slot gets ready beside the
  // build, on a thread of its own (ready_kernelbench_slot): a one-shot verification (`leap verify`)
  // would otherwise pay the slot's start after the build.
  result<verdict> verify(const task& t, std::string_view answer, int gpu = -1);

  // KernelBench (issue 30): starts building, on a thread of the engine's own, torch's precompiled
  // header for the extension builds' default flags (no extra_cflags; CUDA's headers when torch has
  // CUDA), in the compile cache's folder store. A candidate whose build asks for that header while
  // it is being built waits for this one build (the cache builds a key once); one that asks later
  // finds it ready. Once per engine: later calls return at once. Nothing is built with
  // kernelbench_prebuild or kernelbench_pch off. Thread-safe.
  void prepare_kernelbench();
  // Waits for prepare_kernelbench's build (starting it when it was not started), calling
  // `progress` with the seconds waited every 10 s while it lasts. Returns the header's folder, or
  // not ok with the reason (off, a cache under /tmp, a build that failed): a note, since every
  // build goes on without it. Errors: infrastructure (torch does not import in the compile pool).
  // Thread-safe.
  result<folder_lookup> kernelbench_prepared(const std::function<void(int seconds)>& progress = {});
  // Waits for a preparation still running, then ends the GPU slots' keepers (see run_native's cuda
  // path).
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // The profiling hook run() calls for a verdict profile_selects chose (engine_profile.cpp): the
  // candidate's program again under ncu (engine_config::ncu) in the sandbox, under profile_limits,
  // filtered to the __global__ kernels of its own source, on the slot's GPU. Sets v.profile (the
  // kernels, or a note saying why there are none: no ncu, counters not permitted and what would
  // permit them, the time limit) and appends the diagnosis to v.feedback within the feedback
  // budget. Nothing else of `v` changes; never fails. Thread-safe.
  void profile_candidate(const task& t, const prepared_candidate& p, verdict& v, int gpu);
  // The fall-back of profile_candidate: the run `make_target` prepares in a folder, with the
  // events library injected; `counters_note` (what would permit counters) leads the note.
  void profile_from_events(
      const std::vector<std::string>& kernel_names,
      const std::function<result<run_request>(const std::filesystem::path&)>& make_target,
      const std::string& counters_note, verdict& v);

  // The engine's own probe of a run slot for `kind`, with CUDA_VISIBLE_DEVICES=gpu (-1: unset).
  // cuda: a tiny known-good CUDA program, built once per engine the way candidates are (nvcc, same
  // flags and architecture) and run under cuda_run_limits, must print its known answer. cpp and
  // digits: nothing to probe (ok). python: python3 starts and imports the judge's modules in the
  // sandbox (probe_python). kernelbench: torch imports and, where a CUDA device is wanted, sees one
  // (kernelbench_device, cached once it worked). Returns ok, or an error saying what failed.
  // Thread-safe.
  status probe_slot(task_kind kind, int gpu);

  // "g++ (Debian 12.2.0-14) 12.2.0" etc.; part of every cache key. Cached after the first call.
  result<std::string> compiler_identity(task_kind kind);

  [[nodiscard]] const engine_config& config() const { return config_; }
  [[nodiscard]] compile_cache& cache() { return *cache_; }
  // Runs of KernelBench references so far (not those found in memory or in the compile cache).
  // For tests and benchmarks.
  [[nodiscard]] std::uint64_t kernelbench_reference_runs() const {
    return kernelbench_reference_runs_.load();
  }
  // cpp/cuda: reference runs whose own times became the reference's timing (not those that took
  // the time kept in the compile cache). For tests and benchmarks.
  [[nodiscard]] std::uint64_t reference_timings() const { return reference_timings_.load(); }
  // Timed runs of KernelBench baselines so far, eager and compiled (not those found in memory or in
  // the compile cache). For tests and benchmarks.
  [[nodiscard]] std::uint64_t kernelbench_baseline_runs() const {
    return kernelbench_baseline_runs_.load();
  }

 private:
  explicit engine(engine_config config);

  struct reference_data {
    std::shared_ptr<const harness_dump> expected;
    std::optional<timing_stats> time;
    std::string time_note;                     // prepared_candidate::reference_time_note
    std::shared_ptr<const std::string> judge;  // the task's judge (harness.hpp), built once
  };
  // The reference's time for verdicts: the one kept in the compile cache for this reference,
  // host and protocol, or `rep_ms` (this run's times), which is then kept; and the note saying
  // which (reference_time_note).
  result<std::pair<std::optional<timing_stats>, std::string>> reference_time(
      const task& t, const std::string& run_key, const std::vector<double>& rep_ms);
  result<std::string> harness_object(const task& t);
  // The task's judge executable (harness.hpp): the host judge, or with `gpu` the CUDA candidates'
  // (host code too: the device work is the keeper's); cached like any build. Linked statically,
  // except `for_profiler`: ncu's process-tree tracking loads itself into every process of the
  // tree, which a static judge cannot load; under ncu the candidate it started then never got past
  // its CUDA start (seen on an H100).
  result<std::string> judge_program(const task& t, bool gpu, bool for_profiler = false);
  // A program the sandbox generated for `t` (`what`: "harness", "judge"), built by `argv` from
  // `source` in `file`, cached under its identity, argv and source. Errors name the task.
  result<std::string> generated_program(const task& t, const std::string& what,
                                        const std::string& identity, const std::string& file,
                                        const std::string& source,
                                        const std::vector<std::string>& argv,
                                        const std::string& artifact);
  result<reference_data> reference_outputs(const task& t);
  // The folders whose headers a candidate may include (canonical): the compiler's own search list,
  // and for cuda the toolkit's include folders. Probed once per kind.
  result<std::vector<std::filesystem::path>> system_include_dirs(task_kind kind);
  // The candidate's build with the checks on the compiler's view (see compile()).
  result<build_output> build_candidate(const task& t, const std::string& source,
                                       const std::string& object,
                                       const std::vector<std::filesystem::path>& system_dirs);
  // Runs `argv` in a fresh folder holding `files` under compile_limits (or `limits`), with the
  // compilers' PATH (or `env`), and returns the file `artifact` it made.
  result<build_output> build_in_sandbox(
      const std::vector<std::pair<std::string, std::string>>& files,
      const std::vector<std::string>& argv, const std::string& artifact,
      const std::vector<std::pair<std::string, std::string>>* env = nullptr,
      const resource_limits* limits = nullptr);
  std::vector<std::pair<std::string, std::string>> run_env(int gpu) const;
  // compile() of a native kind once its code passed extraction and the forbidden-use pre-check.
  result<prepared_candidate> compile_native(const task& t, prepared_candidate p,
                                            bool with_reference);
  // probe_slot() of a native kind: the CUDA probe for cuda, nothing for cpp.
  status probe_native_slot(task_kind kind, int gpu);
  result<verdict> run_native(const task& t, const prepared_candidate& p, int gpu, int sharing);
  result<std::string> cuda_probe_binary();
  result<verdict> run_python(const task& t, const prepared_candidate& p);
  // `python3 -c 'import ...'` in the sandbox: ok, or an "infrastructure: ..." error saying why not.
  status probe_python();
  result<verdict> run_kernelbench(const task& t, const prepared_candidate& p, int gpu, int sharing);
  // The compile pool's part of a kernelbench candidate: records its load_inline calls and builds
  // (or finds in the cache) each one the engine accepts; a build error is a compile verdict.
  // Errors: infrastructure (the toolchain does not build a known-good extension).
  status prebuild_kernelbench(const task& t, prepared_candidate& p);
  // One accepted load_inline request, built by the builder under kernelbench_build_limits and
  // cached under the request and the toolchain.
  result<cache_lookup> build_extension(const nlohmann::json& args);
  // torch's extension headers precompiled for the flags of `args` (kernelbench_pch_source), in the
  // compile cache's folder store: built once per toolchain and flags. Not ok (the log says why)
  // when it could not be built. With `wait` false only a header in place now is taken: none is
  // built or waited for.
  result<folder_lookup> extension_pch(const nlohmann::json& args, const std::string& toolchain,
                                      bool wait = true);
  // python, torch, CUDA and nvcc versions and the architecture: part of every extension's key.
  result<std::string> extension_toolchain();
  // prepare_kernelbench's work: the toolchain, then the header for the default flags.
  result<folder_lookup> default_extension_pch();
  // A python script of the engine's own in the compile pool: `python -I -B args...` in `dir`, with
  // extension_env(), kernelbench_build_limits and the tools' folders.
  run_request compile_pool_request(const std::filesystem::path& dir,
                                   std::vector<std::string> args) const;
  // Builds a known-good extension (CUDA or C++ only) once per engine: a candidate's failed build is
  // its own only when this one builds. Errors: infrastructure.
  status probe_extension_toolchain(bool cuda);
  // The recorder's and builder's environment: no GPU, the compilers and the python's folder on
  // PATH, torch's architecture list from cuda_arch.
  std::vector<std::pair<std::string, std::string>> extension_env() const;

  // KernelBench: the inputs (the candidate's, and the held copies) and the expected outputs.
  struct kernelbench_reference {
    kb_data inputs;
    kb_data expected;
    std::string problem;  // problem.py's text, for the judge's fresh inputs
    // How its cases were obtained, for the verdict's reference_note: the problem's run in the
    // sandbox (0 when read from the compile cache) and the whole of it (the run, the cache's read
    // or write, the parse), in seconds.
    double run_s = 0;
    double obtained_s = 0;
  };
  // "cuda" or "cpu" for `gpu`'s slot, from the engine's own probe (cached per slot once it worked).
  // Errors start with "infrastructure:" and name the slot.
  result<std::string> kernelbench_device(int gpu);
  // The reference program's results, once per problem, seed, trials and device.
  result<std::shared_ptr<const kernelbench_reference>> kernelbench_reference_for(
      const task& t, const std::string& device, int gpu);
  // What names a reference's results in memory and, with the slot's identity, on disk.
  [[nodiscard]] std::string kernelbench_reference_key(const task& t,
                                                      const std::string& device) const;
  // From now on `t`'s reference on `device` sends every case's values (a judge drew other values
  // from the seeds than the reference did), in this engine and, through a marker in the compile
  // cache, in others on it; true the first time in this engine. Thread-safe.
  bool ship_kernelbench_inputs(const task& t, const std::string& device, int gpu);
  // The compile cache's key of that marker for a reference key on `gpu`'s slot (its identity).
  std::string kernelbench_ship_marker(const std::string& key, int gpu);
  // KernelBench with timing_reps > 0: this many sets of inputs for the first trial's model are
  // drawn by the reference beside the trials, with their expected outputs; the judge checks as
  // many timed calls, each on a set of its own, and gives its other timed calls inputs it draws.
  [[nodiscard]] int kernelbench_timing_sets() const { return config_.timing_reps > 0 ? 8 : 0; }
  // The slot's device and the task's reference on it: what a KernelBench run and its profiling
  // run start from. Errors: those of kernelbench_device and kernelbench_reference_for.
  struct kernelbench_slot {
    std::string device;
    std::shared_ptr<const kernelbench_reference> reference;
  };
  result<kernelbench_slot> kernelbench_slot_for(const task& t, int gpu);
  // What a KernelBench run's judge must have been started with to take this job: a judge started
  // ahead is fed a job only when its `fits` words are the job's.
  struct kernelbench_judge_fit {
    int slot_key = -1;  // the GPU, or -1 for the CPU's slot
    own_kernel_policy policy = own_kernel_policy::off;
    bool warm_profiler = false;
    std::size_t output_cap = 0;  // the record's cap, rounded up to a power of two
    std::string fits;
  };
  result<kernelbench_judge_fit> kernelbench_fit(const task& t, const kernelbench_slot& slot,
                                                int gpu) const;
  // Everything of a KernelBench run that does not depend on the candidate, done ahead of it: the
  // slot's torch probe, the reference's outputs and a judge started for the job and kept as the
  // slot's standby (unless one that fits is waiting). Its errors are not the verdict's: run()
  // meets the same probe and reference again (the reference's outcome is kept) and starts a judge
  // of its own when none was readied, and reports what fails there.
  status ready_kernelbench_slot(const task& t, int gpu);
  // `python -I -B args...` in `dir` with run_env(gpu) (-1: no CUDA_VISIBLE_DEVICES), python's
  // folder on PATH, kernelbench_limits: the slot's probe, the reference and the judge.
  run_request kernelbench_request(const std::filesystem::path& dir, int gpu,
                                  std::vector<std::string> args) const;
  // What the judge is told of its job (stdin's line, or a standby's job header): the device, the
  // own-kernel policy, the outputs' shapes per trial, trials, timing repetitions, the GPU's share.
  nlohmann::json kernelbench_judge_config(const kernelbench_reference& ref,
                                          const std::string& device, own_kernel_policy policy,
                                          int sharing) const;
  // The judge's run in `dir` (its files already there) for `ref` on `device`; `sharing` as run()'s.
  run_request kernelbench_judge_request(const std::filesystem::path& dir,
                                        const kernelbench_reference& ref, const std::string& device,
                                        int gpu, own_kernel_policy policy, int sharing = 1) const;
  // A KernelBench baseline: the reference as written (eager) or under torch.compile (inductor).
  enum class kernelbench_baseline { eager, compiled };
  struct baseline_time {
    std::optional<timing_stats> time;
    std::string note;  // compiled: why there is no time (no torch.compile, inductor failed)
    // On a GPU: the clocks over the measurement. A throttled one is not remembered (the next
    // verification measures again) and its speedups are withheld.
    std::string clock_note;
    bool throttled = false;
  };
  // A baseline's time under the judge's protocol (the reference's Model run as the candidate's
  // ModelNew), once per problem, seed, trials, device, repetitions and slot identity (python,
  // torch, CUDA, GPU model or CPU capability); concurrent callers share one measurement. Kept in
  // the compile cache too (keyed also by the judge's and runner's sources, digest-checked when read
  // back, a damaged entry measured again), so other engines and processes on the cache reuse it.
  // Never kept: a failure or a throttled measurement. Eager: a failure is the slot's (an
  // infrastructure error). Compiled: a failure is a note, remembered in memory like a time (a
  // model inductor cannot compile stays so); on disk only "this torch has no torch.compile",
  // which the slot identity's torch version decides.
  result<baseline_time> kernelbench_baseline_time(const task& t, const kernelbench_reference& ref,
                                                  const std::string& device, int gpu,
                                                  kernelbench_baseline which);

  engine_config config_;
  // What every sandboxed command may read besides the system folders: the CUDA toolkit and the
  // python installation when they live outside /usr (run_request::readonly_paths).
  std::vector<std::filesystem::path> readonly_paths_;
  std::unique_ptr<compile_cache> cache_;
  std::mutex mutex_;
  std::mutex identity_mutex_;
  std::map<task_kind, std::string> compiler_ids_;
  std::map<task_kind, std::vector<std::filesystem::path>> include_dirs_;
  std::map<std::string, std::shared_future<result<reference_data>>> references_;
  std::map<int, std::string> kernelbench_devices_;
  // Per slot, what a reference's outputs depend on beyond the problem: python, torch and CUDA
  // versions, and the GPU's name and capability (or the CPU's vector capability). Set with
  // kernelbench_devices_; part of the reference's key in the compile cache.
  std::map<int, std::string> kernelbench_identities_;
  // Bounded by kernelbench_cache_bytes, least recently used first out (a KernelBench problem's
  // inputs and outputs reach hundreds of MiB; a run over a whole level would otherwise keep them
  // all).
  struct kernelbench_cache_entry {
    std::shared_future<result<std::shared_ptr<const kernelbench_reference>>> future;
    std::uint64_t last_use = 0;
    std::size_t bytes = 0;  // 0 while being computed
  };
  std::map<std::string, kernelbench_cache_entry> kernelbench_references_;
  // References (by kernelbench_reference_key) whose cases a judge could not draw alike: their
  // values are sent (kernelbench_reference_for). mutex_.
  std::set<std::string> kernelbench_ship_inputs_;
  // ncu said GPU counters are not permitted (profile_tool::automatic): later profiles go straight
  // to kernel events.
  std::atomic<bool> counters_not_permitted_{false};
  std::atomic<std::uint64_t> reference_timings_{0};
  std::atomic<std::uint64_t> kernelbench_reference_runs_{0};
  std::atomic<std::uint64_t> kernelbench_baseline_runs_{0};
  std::map<std::string, std::shared_future<result<baseline_time>>> kernelbench_times_;  // mutex_
  std::uint64_t kernelbench_uses_ = 0;
  // cuda runs: one keeper process per GPU slot (harness.hpp, keeper_source) holds the device
  // buffers, so that a run creates one CUDA context, the candidate's. Started at the slot's first
  // run and again after it died; a keeper that could not start fails the run as the slot's.
  result<int> keeper_session(int gpu);
  result<std::string> keeper_program();  // under keeper_mutex_
  bool keeper_alive(int gpu);
  void drop_keeper(int gpu);
  std::mutex keeper_mutex_;
  std::optional<std::string> keeper_binary_;
  std::map<int, std::unique_ptr<detail::gpu_keeper>> keepers_;
  std::mutex probe_mutex_;
  std::optional<std::string> probe_binary_;         // built once, under probe_mutex_
  std::optional<std::string> extension_toolchain_;  // under probe_mutex_
  std::array<bool, 2> extension_probe_ok_{};        // C++, CUDA; under probe_mutex_
  // KernelBench judges started ahead of their jobs (engine_config::kernelbench_standby), per GPU
  // slot (-1: the CPU's); at most kernelbench_standby_depth per run sharing the slot. Started as a
  // run starts, with the words of that run's judge (its device, whether it warmed the profiler, its
  // output cap), taken by a run whose judge would have the same words.
  std::unique_ptr<detail::started_judge> take_standby_judge(int slot, const std::string& fits);
  // Judges waiting on `slot` that are alive and would take a job with these words.
  std::size_t standby_judges_fitting(int slot, const std::string& fits);
  void keep_standby_judge(int slot, std::size_t most, std::unique_ptr<detail::started_judge> j);
  result<std::unique_ptr<detail::started_judge>> start_kernelbench_judge(int gpu,
                                                                         const std::string& device,
                                                                         bool warm_profiler,
                                                                         std::size_t output_cap,
                                                                         const std::string& fits);
  std::mutex standby_mutex_;
  std::map<int, std::vector<std::unique_ptr<detail::started_judge>>> standby_judges_;
  // prepare_kernelbench's build: started once, joined by the destructor.
  std::mutex prepare_mutex_;
  std::shared_future<result<folder_lookup>> prepared_;  // under prepare_mutex_
  std::thread prepare_thread_;                          // under prepare_mutex_
};

// Waits for e.kernelbench_prepared(), saying through `say` what is happening, one line each: that
// the header is being built, every 10 s how long it has taken, and how it ended (ready, built in
// how long, or why not: builds then go on without it). For commands that prepare before they take
// work (leap verify --prepare, leap verifier-node). Returns whether the header is ready.
bool prepare_kernelbench_saying(engine& e, const std::function<void(const std::string&)>& say);

// Splits "-std=c++17 -O2" into words (no quoting: flags are plain words).
std::vector<std::string> split_flags(const std::string& flags);

}  // namespace leap::sandbox
