// Internal to the sandbox: the pieces the engine's files (engine.cpp, engine_native.cpp,
// engine_python.cpp, engine_kernelbench.cpp, engine_profile.cpp) share, defined in
// engine_parts.cpp. Not part of the module's public header.
#pragma once

#include "sandbox/engine.hpp"
#include "sandbox/gpu_clocks.hpp"
#include "sandbox/kinds.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace leap::sandbox::detail {

// The most a build's artifact (a program, an object, a library) may weigh.
inline constexpr std::size_t k_max_artifact_bytes = 256ULL << 20;
// The most a judge or harness may print as its result record.
inline constexpr std::size_t k_max_result_json_bytes = 1 << 20;

// The PATH a sandboxed tool gets: the system's directories, after extra_dir when one is given.
std::string base_path(const std::string& extra_dir);
// The directory of a program's path; empty for a bare name.
std::string dir_of(const std::string& program);
std::string memory_feedback(const resource_limits& l);
// A compiler's messages: its stderr, then its stdout.
std::string compile_log(const run_result& r);
verdict make_verdict(verdict_category c, std::string feedback);
// "timed out", "exit code 3" or "killed by SIGKILL (...)": how a run ended, for messages.
std::string how_it_ended(const run_result& r);

// Where a program at an absolute path is installed: the parent of its bin/ folder (bin: true),
// else its own folder; for the path as named and for where its links lead (a venv's python is a
// link to its base interpreter). Nothing for a relative path.
struct tool_prefix {
  std::filesystem::path folder;
  bool bin = false;
};
std::vector<tool_prefix> tool_prefixes_of(const std::filesystem::path& program);
// A question to the compilers (their version, their header folders) in the sandbox, under the
// compile limits: argv in `dir`, with the compilers' PATH.
run_request compiler_probe(const engine_config& c,
                           const std::vector<std::filesystem::path>& readonly,
                           const std::filesystem::path& dir, std::vector<std::string> argv);

// The installation folders of the given programs (a bare name is looked up on the sandbox's PATH),
// which a run needs to see. run_isolated skips those under /usr.
std::vector<std::filesystem::path> tool_prefixes(const std::vector<std::string>& programs);

// A program of a toolchain, as engine_config names it.
struct toolchain_program {
  std::string program;
  // Its installation folder is bound read-only into the sandbox's runs (toolchain_prefixes): the
  // CUDA toolkit and python may live outside /usr. The C++ compiler is not: it is taken to be the
  // system's, under /usr, which every run sees.
  bool bound = false;
};
// The toolchain's programs, each asked `--version` in this order for the kinds' cache keys
// (engine::compiler_identity): nvcc and its host compiler, for instance. Defined beside
// compiler_command (engine_native.cpp), whose switch a new toolchain meets too.
std::vector<toolchain_program> toolchain_programs(const engine_config& c, toolchain compiler);
// The installation folders of the bound programs of every kind's toolchain (tool_prefixes):
// what the engine shows its runs read-only.
std::vector<std::filesystem::path> toolchain_prefixes(const engine_config& c);

// One file of a run's or a build's folder. content is not owned: it outlives the write.
struct run_file {
  std::string name;
  const std::string* content;
  bool executable = false;
};
// Writes the files into dir (a name may hold a folder that exists); an executable one gets mode
// 0755. The first failure is returned, naming the file.
status write_run_files(const std::filesystem::path& dir, const std::vector<run_file>& files);
// A fresh folder under root named `<prefix>XXXXXX` holding the files.
result<scratch_dir> make_run_folder(const std::filesystem::path& root, const std::string& prefix,
                                    const std::vector<run_file>& files);

// A build: argv run in a fresh folder holding files; its output is the file `artifact`.
struct build_request {
  std::vector<run_file> files;
  std::vector<std::string> argv;
  std::string artifact;
  std::vector<std::pair<std::string, std::string>> env;
  resource_limits limits;
  std::vector<std::filesystem::path> readonly_paths;
  std::string what;  // what an error starting it says was being done: "running the builder"
};
// Runs a build under scratch_root. Its log is the tool's stderr then stdout, with the reason where
// the memory limit or a signal stopped it; the artifact (at most 256 MiB) when it exited 0.
result<build_output> run_build(const std::filesystem::path& scratch_root, const build_request& b);

// The candidate's files of a KernelBench run: solution.py, the extensions built in the compile pool
// under ext/<id>/ and prebuilt.json naming them (its text kept in *prebuilt_json).
std::vector<run_file> kernelbench_candidate_files(const prepared_candidate& p,
                                                  std::string* prebuilt_json);
// The KernelBench judge's folder for a candidate: its solution.py, the runner and the judge, the
// reference's inputs.bin, and the extensions built in the compile pool under ext/<id>/ with
// prebuilt.json naming them (where the runner's load_inline finds them).
status write_kernelbench_folder(const std::filesystem::path& dir, const prepared_candidate& p,
                                const std::string& inputs);

// A KernelBench judge started ahead of its job (judge.py --standby: it and its runner import torch
// and start CUDA, then wait): its run_isolated call on a thread of its own, the socket its job goes
// down (the judge's descriptor 3) and the run's start gate. Each serves exactly one job, in a
// sandbox of its own, so that isolation is a fresh run's; only the wait is taken off the job's
// time. Not thread-safe: one owner at a time.
class started_judge {
 public:
  // Starts `request` (its working_dir, which `dir` owns, holding judge.py and runner.py; its
  // pass_fd and start_gate_fd are set here) and returns at once. `fits` is the owner's word for
  // which jobs it suits.
  static result<std::unique_ptr<started_judge>> start(run_request request, scratch_dir dir,
                                                      std::string fits);
  started_judge(const started_judge&) = delete;
  started_judge& operator=(const started_judge&) = delete;
  // Not fed: closes the job's socket (the judge then exits without a record) and waits for the end.
  ~started_judge();

  // What the judge's run ended with, and whether the whole job reached it before it ended (not:
  // it was gone already, the slot's failure rather than the candidate's).
  struct fed_run {
    result<run_result> run = error{"not run"};
    bool delivered = false;
  };
  // Opens the start gate (the run's limits start now), sends the job (b"LKBJOB01", the header's
  // length as u32 and the header: {"config", "files": [[name, bytes]...], "inputs_bytes"}, then
  // each file and the inputs), waits for the judge's one-byte receipt and then for the run's end.
  // Once only.
  fed_run feed(const nlohmann::json& config, const std::vector<run_file>& files,
               const std::string& inputs);
  // Whether the run ended already (a standby that died while it waited is not worth feeding).
  [[nodiscard]] bool ended() const;
  [[nodiscard]] const std::string& fits() const { return fits_; }
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_.path(); }

 private:
  started_judge(scratch_dir dir, std::string fits) : dir_(std::move(dir)), fits_(std::move(fits)) {}
  scratch_dir dir_;
  std::string fits_;
  int job_fd_ = -1;
  int gate_fd_ = -1;
  std::future<result<run_result>> run_;
};

// The GPU's clocks around one timed run (gpu_clocks.hpp); an empty note where there is no GPU or
// no NVML (said, not an error: the timing stands, unmarked).
class clock_watch {
 public:
  // gpu < 0: a GPU slot without a device of its own sees the driver's default device, the first.
  explicit clock_watch(int gpu, bool on) : gpu_(std::max(gpu, 0)), on_(on) {
    if (on_) {
      before_ = sample_gpu_clocks(gpu_);
    }
  }
  [[nodiscard]] clock_window finish() const {
    if (!on_) {
      return {};
    }
    if (!before_) {
      return {.note = "clocks not read: " + before_.err().message};
    }
    auto after = sample_gpu_clocks(gpu_);
    if (!after) {
      return {.note = "clocks not read: " + after.err().message};
    }
    return compare_clock_samples(*before_, *after);
  }

 private:
  int gpu_;
  bool on_;
  result<gpu_clock_sample> before_ = error{"not sampled"};
};

// A GPU slot's keeper process (harness.hpp, keeper_source), started and owned by the engine.
class gpu_keeper {
 public:
  // Writes `binary` below `scratch_root`, starts it with exactly `env` and waits up to
  // `ready_within` for its CUDA to be up. Errors say what the keeper said, or that it did not
  // answer in time.
  static result<std::unique_ptr<gpu_keeper>> start(
      const std::filesystem::path& scratch_root, const std::string& binary,
      const std::vector<std::pair<std::string, std::string>>& env,
      std::chrono::milliseconds ready_within);
  gpu_keeper(const gpu_keeper&) = delete;
  gpu_keeper& operator=(const gpu_keeper&) = delete;
  // Closes the control socket, which ends the keeper; one that has not ended within 2 s is killed.
  ~gpu_keeper();

  // A new session for one judge: the judge's end of a socketpair whose other end the keeper now
  // serves (close-on-exec; the caller owns it). An error: the keeper is gone.
  result<int> session();
  // Whether the process is still running (reaps it when not).
  [[nodiscard]] bool alive();

 private:
  gpu_keeper(pid_t pid, int control) : pid_(pid), control_(control) {}
  pid_t pid_;
  int control_;
  bool exited_ = false;
};

}  // namespace leap::sandbox::detail
