// KernelBench tasks: the Python programs that run them and the judge that compares their data.
//
// The task's problem.py (the reference Model) and the candidate's solution.py (ModelNew) never
// share a process. The reference program runs problem.py alone, once per task, seed, trial count
// and device (the engine caches it): it draws `trials` sets of seeded inputs, writes to inputs.bin
// per case its seeds and a digest when problem.py drew it alike twice from them (else its values),
// and the reference's outputs to expected.bin.
//
// A candidate runs as two processes in one sandbox. The judge program (Python, none of the
// candidate's code) reads inputs.bin and removes it, draws the cases inputs.bin left to it from
// their seeds and checks their digests, makes itself non-dumpable and starts the
// runner under a seccomp filter (it may signal only itself). Per trial it writes the inputs into
// memory it owns (CUDA: device memory of its own context, opened by the runner through CUDA IPC;
// CPU: a sealed memfd) beside buffers for the outputs (the reference's dtypes and shapes); the
// runner builds ModelNew after torch.manual_seed(seed) from the init inputs exactly as the
// reference built Model (so their parameters match, as in KernelBench), calls it, copies each
// output that has the reference's dtype and shape into its buffer and describes the rest. The
// judge then reads the outputs and the inputs as the call left them itself and writes the record
// to the engine's pipe. The engine's judge is C++: it parses the record as plain data (nothing
// written by either program is ever unpickled or executed) and compares it with per-dtype
// tolerances, a relative-L2 guard, an exact dtype check and a bitwise check of the inputs against
// the reference's copies. What the runner reports itself (the kernels that ran, an error) can only
// fail a verdict.
#pragma once

#include "common/enums/enum_names.hpp"
#include "common/result.hpp"
#include "sandbox/task.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace leap::sandbox {

// The policy for task `t` on `device` ("cuda" or "cpu"): the task's own_kernel field when set
// ("require" or "off"), else require on cuda and off on cpu. Off on CPU because CPU torch runs
// KernelBench only as a functional check (development, tests). A task that asks "require" on the
// CPU is an error naming the task and the key: there the only evidence of a kernel of its own is
// what the candidate's own interpreter reports (a call into a module it compiled), which the
// candidate can forge, so the CPU check could never be as strong as the GPU's.
result<own_kernel_policy> own_kernel_for(const task& t, const std::string& device);

// The reference program. stdin: one JSON line {"trials", "seed", "device": "cuda"|"cpu",
// "timing_sets", "timing_seeds", "ship_inputs": true to write every case's values}; runs
// problem.py from its working directory and writes inputs.bin and expected.bin there. Exit code 0
// on success; otherwise its stderr says what failed.
const std::string& kernelbench_reference_source();

// The judge program (judge.py). stdin: one JSON line {"device", "own_kernel": "require"|"off",
// "problem": problem.py's text, for the cases it draws and the timed calls' fresh inputs,
// "slots": per trial, the reference's outputs: {"tag": "T", "dtype", "shape"} or {"tag": <another
// tag>}}; inputs.bin and runner.py in its working directory. Its stdout: "LKBJUDG1", a u32 length
// and a JSON status ({"status": "ok", "own": [per trial {"own", "other"}]}, or the runner's
// syntax/import/runtime error, "incomplete", or {"status": "judge_error", "message"} when the judge
// itself failed before any of the candidate's code ran, with "inputs_differ": true when a case it
// drew from its seeds did not match the reference's digest), then, when ok, the trials' data in
// out.bin's format (kb_file::candidate). A runner that dies or exits with a non-zero code passes
// its signal or code on as the judge's.
const std::string& kernelbench_judge_source();

// glibc's mmap and trim thresholds in the environment of the KernelBench pipeline's runs (the
// judge, the runner it starts, the reference, the slot's probe; not the compile pool), in bytes:
// fixed, so that no process's timed calls pay page faults another's do not
// (engine::kernelbench_request says why).
inline constexpr std::string_view k_kernelbench_malloc_threshold = "4294967296";

// The candidate's runner (runner.py), started by the judge: descriptor 4 is the judge's channel
// (JSON messages), descriptor 3 the CPU buffers. It imports solution.py, then answers each trial
// (see the top of this file). Whatever it says is the candidate's word.
const std::string& kernelbench_candidate_source();

// --- Extension builds in the compile pool (kernelbench_build.cpp).
//
// A candidate that builds a C++/CUDA extension with torch.utils.cpp_extension.load_inline at import
// would otherwise build it inside its run, holding the GPU slot for a minute. The engine instead
// runs the recorder in the compile pool (no GPU): it imports solution.py with load_inline replaced
// by a recorder, and writes what was asked. Each request the engine accepts
// (kb_extension_refusal) is built by the builder, a program that runs none of the candidate's code
// (it compiles the sources and loads nothing), and the library is cached by the engine under a key
// of the request and the toolchain. The runner's load_inline then imports the library built for
// the same request (kernelbench_extension_id_source names it the same way in both programs) and
// builds only what has none: a call the recorder did not see (made in ModelNew's constructor, or
// by code that failed without a GPU) is built in the run, as before, and the verdict says so.

// The Python functions _leap_extension_args and _leap_extension_id (both programs use them).
const std::string& kernelbench_extension_id_source();
// The recorder (recorder.py beside solution.py). Its stdout: "LKBREC01", a u32 length and a JSON
// {"status": "ok" | "import_failed", "message", "extensions": [{"id", "args"}], "other": [what the
// run will build itself]}. Everything in it is the candidate's word: it chooses only what is built
// for its own run.
const std::string& kernelbench_recorder_source();
// The builder (builder.py beside request.json, load_inline's arguments, and pch.json when the
// engine has a precompiled header for its flags): writes ext.so, or exits non-zero with torch's
// build log. Its log says whether the header was used ("LEAP_PCH used", "LEAP_PCH refused: why":
// then built without it, "LEAP_PCH absent: why") and each part's milliseconds ("LEAP_BUILD_MS").
const std::string& kernelbench_builder_source();
// The precompiled header's builder (pch.py beside request.json: {"extra_cflags", "with_cuda"}):
// compiles torch/extension.h with the compiler and flags load_inline would use for such a request
// into leap_torch.h.gch beside leap_torch.h. Runs none of the candidate's code: the flags are its
// only input, and they have passed kb_extension_refusal.
const std::string& kernelbench_pch_source();

struct kb_extension_request {
  std::string id;  // the recorder's name for it (what the runner will look up)
  nlohmann::json args;
};
struct kb_recording {
  bool import_ok = false;  // the import finished (without a GPU)
  std::string message;     // why it did not
  std::vector<kb_extension_request> extensions;
  std::vector<std::string> other;  // builds the recorder could not take (the run makes them)
};
// Parses the recorder's stdout. Bounded: at most 16 extensions. Pure function.
result<kb_recording> parse_kb_recording(std::string_view out);

// The extension builder's log as the engine reads it: the builder's own lines (those that start
// "LEAP_<mark>_", the mark the engine gave it in LEAP_BUILDER_MARK) as "LEAP_...", and every other
// "LEAP_" (the compilers quoting an answer's #pragma message or #warning) as "LEAP-", so that only
// the builder tells the engine whether the precompiled header was refused. Pure function.
std::string own_builder_lines(std::string_view log, std::string_view mark);

// Why the request `args` may not be built in the compile pool (a flag outside the allowlist: paths,
// plugins, wrappers; include paths; a name that is not an identifier; not a Python module), or
// nullopt when it may. A refused request is built in the candidate's run instead. Pure function.
std::optional<std::string> kb_extension_refusal(const nlohmann::json& args);

// One value of the data format (tensors, Python scalars, None, strings, lists and tuples).
struct kb_value {
  // T tensor, I int, F float, B bool, N None, S str, L list, U tuple, O other; D (the judge's, in
  // a candidate's outputs only) a tensor's dtype and shape whose data it did not take: not the
  // reference's dtype and shape
  char tag = 'N';
  std::string dtype;                // T: "float32", ...
  std::vector<std::int64_t> shape;  // T
  std::string_view data;        // T: raw little-endian elements; S, O: the text (type name for O)
  std::int64_t integer = 0;     // I, B
  double real = 0;              // F
  std::vector<kb_value> items;  // L, U
};

// One trial as read back: inputs.bin gives seed, init and inputs; expected.bin gives outputs;
// the judge's record (LKBOUT02) gives outputs and which forward argument the call changed, as the
// judge compared the inputs with its own copies.
//
// inputs.bin (LKBIN002) holds a case's values ('V': init and inputs encoded) only where problem.py
// did not draw them alike twice from their seeds; every other case ('D') is left to the judge to
// draw from the same seeds, with the size of its tensors and a digest the judge checks its draw
// against: so a problem with large tensors sends its expected outputs, never its inputs.
struct kb_trial {
  std::uint64_t seed = 0;
  kb_value init;
  kb_value inputs;
  kb_value outputs;
  std::uint32_t changed_argument = 0;  // 1 + the first changed argument's index; 0: none
  std::uint64_t drawn_bytes = 0;       // a 'D' case: its tensors' bytes (init and inputs stay N)
};

// A parsed file. The values point into `bytes`, which the struct keeps alive.
struct kb_data {
  std::shared_ptr<const std::string> bytes;
  std::vector<kb_trial> trials;
  // The tensors' bytes of the cases left to the judge to draw (saturating): what the cases hold
  // beyond `bytes`.
  std::uint64_t drawn_bytes = 0;
};

enum class kb_file : std::uint8_t { inputs, expected, candidate };

// Parses one of the three files. Errors say what is missing or malformed (a truncated file means
// its writer stopped early). Bounded: nesting depth, counts and sizes are checked against the bytes
// present, so any byte string is safe to parse.
result<kb_data> parse_kb_file(std::shared_ptr<const std::string> bytes, kb_file kind);

// Per-dtype (atol, rtol) and the relative-L2 limit. Defaults as KernelBench runs: float32 and
// float16 1e-2/1e-2, bfloat16 2e-2/2e-2, float64 1e-5/1e-5, other dtypes 1e-2/1e-2 (integers then
// compare exactly); max_relative_l2 0.05. A task's tolerance replaces float32's and float64's.
struct kb_tolerances {
  std::map<std::string, std::pair<double, double>> per_dtype;
  double max_relative_l2 = 0.05;
};
kb_tolerances kb_tolerances_for(const task& t);

// The "status" of a KernelBench result: what the candidate program's `.leap_status` says (ok,
// syntax_error, import_error, error) or what the engine's judge found (mismatch, modified_input,
// no_own_kernel, incomplete, passed), or the judge's own failure (judge_error). The engine and
// kernelbench_result_feedback (feedback.hpp) switch on it without a `default:`, so -Wswitch names
// them when a status is added.
enum class kernelbench_status : std::uint8_t {
  ok,
  syntax_error,
  import_error,
  error,
  mismatch,
  modified_input,
  no_own_kernel,
  incomplete,
  passed,
  // the judge's own failure before any of the candidate's code ran (its torch, its buffers, the
  // runner's start or its opening of the buffers): the slot's fault, an infrastructure error
  judge_error,
  unknown,  // absent, or a text neither program writes (the status file is the candidate's word)
};

// The one name table (the JSON's text). Empty for a byte outside the enum.
constexpr std::string_view name_of(kernelbench_status s) {
  switch (s) {
    case kernelbench_status::ok:
      return "ok";
    case kernelbench_status::syntax_error:
      return "syntax_error";
    case kernelbench_status::import_error:
      return "import_error";
    case kernelbench_status::error:
      return "error";
    case kernelbench_status::mismatch:
      return "mismatch";
    case kernelbench_status::modified_input:
      return "modified_input";
    case kernelbench_status::no_own_kernel:
      return "no_own_kernel";
    case kernelbench_status::incomplete:
      return "incomplete";
    case kernelbench_status::passed:
      return "passed";
    case kernelbench_status::judge_error:
      return "judge_error";
    case kernelbench_status::unknown:
      return "unknown";
  }
  return {};
}

// The status a result names; `unknown` for any other text. Pure function.
[[nodiscard]] inline kernelbench_status parse_kernelbench_status(std::string_view text) {
  auto status = enum_names::parse<kernelbench_status>(text, "kernelbench status");
  return status ? status.value() : kernelbench_status::unknown;
}

// The first problem with the candidate's results, trial by trial: a JSON object that
// kernelbench_result_feedback turns into a verdict ({"status": "mismatch", ...} naming the output,
// the worst element and the errors; {"status": "modified_input", ...}), or nullopt when every
// output matches and every input is unchanged. Pure function.
std::optional<nlohmann::json> judge_kernelbench(const kb_data& inputs, const kb_data& expected,
                                                const kb_data& got, const kb_tolerances& tol);

// Where a KernelBench run's wall time went: the judge's stamps (its record's "stamps", pairs of a
// step's name and the wall-clock second it ended) lined up between the engine's launch of the
// judge (or its job's arrival, for a judge started ahead) and the judge's end, each step's duration
// in milliseconds, in order: the first is "judge_started" (the sandbox's and python's start) or
// "job_received" (the job's transfer, and for a judge started with its job, torch's import before
// it read it), every later name the step that ended then, and
// "judge_exited" the time from the record to the judge's end. Empty when the stamps are missing,
// out of order or outside [launched, ended] (a clock that stepped). Pure function.
std::vector<std::pair<std::string, double>> kernelbench_run_phases(const nlohmann::json& stamps,
                                                                   double launched_s,
                                                                   double ended_s);

// Device memory kept out of the shares of `sharing` runs on one GPU (the judge caps each runner's
// torch allocations at (GPU memory - this) / sharing): the configured reserve (the running
// judges', runners' and keeper's CUDA contexts), each running judge's own buffers (its region for
// the problem's data and its own copies of the inputs: twice `data_bytes`), and the CUDA contexts
// of `waiting_judges` judges started ahead of their jobs, two processes each, `context_bytes`
// apiece. Saturates instead of wrapping. Pure function.
std::uint64_t shared_gpu_reserve(std::uint64_t configured, int sharing, std::uint64_t data_bytes,
                                 std::uint64_t waiting_judges, std::uint64_t context_bytes);

}  // namespace leap::sandbox
