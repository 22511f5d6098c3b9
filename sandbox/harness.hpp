// The programs that run a candidate: a C++ or CUDA harness generated from a task's args spec, and
// the Python runner for `python` tasks (kernelbench's are in sandbox/kernelbench.hpp). Also the
// parser of the harness's output file, which the engine compares outside the candidate's process.
#pragma once

#include "common/enums/enum_names.hpp"
#include "common/result.hpp"
#include "sandbox/task.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

enum class harness_flavor : std::uint8_t {
  host_reference,  // calls reference(...) with host pointers (built with g++ for cpp and cuda
                   // tasks)
  host_candidate,  // calls solve(...) with host pointers (cpp tasks)
  cuda_candidate,  // cudaMalloc/cudaMemcpy around solve(...) with device pointers (cuda tasks)
};

// The harness's main(): `prog <seed> <trials> <timing reps>`, a nonce line (32 hex digits) on
// stdin. A constructor that runs before any of the candidate's (priority 101) moves the engine's
// stdout pipe to a private descriptor and points fd 1 at stderr, so nothing the candidate prints
// can mix into the results. The buffers are allocated once (same addresses for every call); each
// call (the trials, then with reps > 0 one warm-up and `reps` timed repetitions) refills the inputs
// from a seeded generator (fresh values per call, the same in every flavor) and the outputs with
// fresh garbage, calls the entry point and writes one framed record: the call's time, every
// output/inout array and a hash per input (the candidate's after the call, the reference's as
// generated; the engine compares them). After the last record the harness ends the process with
// _exit at once: no atexit handler, static destructor or thread of the candidate runs after it.
// The candidate flavors also check that solve() left no thread running (/proc/self/task) and,
// for cuda, that its results were ordered with the default stream; the cuda timing is taken with
// every stream synchronised. Failures are an error record in the stream (kind "cuda_init", "cuda",
// "threads", "stream", "io") and exit code 3.
// The comparison is deliberately not in this program: the candidate runs in the same process and
// could forge any verdict it printed; it cannot forge outputs it did not compute.
std::string harness_source(const task& t, harness_flavor flavor);

// `void solve(<params>);` (or reference) as the suite format defines it, e.g.
// "void solve(const float* x, float* y, int n)".
std::string entry_signature(const task& t, const std::string& name);

// One call's results as read back from the harness's stream.
struct trial_dump {
  std::vector<std::vector<double>> outputs;  // per output/inout arg, in args order
  // Names of input args whose content changed: filled by the engine from input_hashes (the
  // harness's stream carries hashes, never a verdict of its own).
  std::vector<std::string> modified_inputs;
  std::vector<std::uint64_t> input_hashes;  // per input arg, in args order
  std::vector<std::uint64_t> counts;        // element count per non-scalar arg, in args order
  double ms = 0;                            // the call's time
};

// What failed, as the first text of the harness's error record names it (leap_fail's `kind` in the
// generated source). The engine (whether to probe the GPU) and the feedback switch on it without a
// `default:`, so -Wswitch names both places when the harness reports a new kind.
enum class harness_failure_kind : std::uint8_t {
  cuda_init,  // CUDA could not be initialised before the first call
  cuda,       // a CUDA call or a kernel of the run failed (`name`: the cudaError_t's name)
  threads,    // solve() left a thread running, or /proc could not be read to tell
  stream,     // the candidate's work on a stream was unfinished when solve() returned
  other,      // a kind the harness never writes: only the candidate's own bytes can carry one
};

// The one name table (the error record's text). Empty for a byte outside the enum.
constexpr std::string_view name_of(harness_failure_kind k) {
  switch (k) {
    case harness_failure_kind::cuda_init:
      return "cuda_init";
    case harness_failure_kind::cuda:
      return "cuda";
    case harness_failure_kind::threads:
      return "threads";
    case harness_failure_kind::stream:
      return "stream";
    case harness_failure_kind::other:
      return "other";
  }
  return {};
}

[[nodiscard]] inline std::string to_string(harness_failure_kind k) {
  return enum_names::to_string(k);
}

// The kind an error record names; `other` for any text the harness does not write. Pure function.
[[nodiscard]] harness_failure_kind parse_harness_failure_kind(std::string_view text);

// A failure the harness reported in its stream (only a hint: the engine decides with its own
// probe whether a failure is the GPU's).
struct harness_failure {
  harness_failure_kind kind = harness_failure_kind::other;
  std::string name;   // "cudaErrorIllegalAddress"
  std::string where;  // "running solve() (synchronising after it)"
  std::string text;   // "an illegal memory access was encountered"
};

struct harness_dump {
  std::vector<trial_dump> trials;
  std::vector<trial_dump> extra;  // the warm-up and the timed repetitions, in order
  std::vector<double> rep_ms;     // per timed repetition, empty without timing
  std::uint32_t planned_trials = 0, planned_reps = 0;  // as announced in the header
  bool started = false;                                // the header was written
  bool reached_solve = false;  // the harness was about to make its first call
  bool complete = false;       // the end record (with the nonce) was read
  std::optional<harness_failure> failure;
  std::size_t bytes = 0;  // the stream's length
};

// Parses the harness's stream against the task's args and the run's nonce (32 hex digits; empty
// skips the check). A stream that stops early (the program died) is a dump with complete == false;
// an error means the stream is malformed: bytes the harness never writes (a record of unknown
// type, a count beyond what is left, a wrong nonce, anything after the end record), which only the
// candidate's own writes can cause. `counts` (the reference's element count per non-scalar arg;
// null: not checked) makes a count that differs malformed too. Pure function.
result<harness_dump> parse_dump(const std::string& bytes, const task& t,
                                const std::string& nonce_hex,
                                const std::vector<std::uint64_t>* counts = nullptr);

}  // namespace leap::sandbox
