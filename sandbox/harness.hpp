// The programs that run a candidate: a C++ or CUDA harness generated from a task's args spec, and
// the Python runner for `python` tasks (kernelbench's are in sandbox/kernelbench.hpp). Also the
// parser of the harness's output file, which the engine compares outside the candidate's process.
#pragma once

#include "common/enums/enum_names.hpp"
#include "common/result.hpp"
#include "sandbox/kinds.hpp"
#include "sandbox/task.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

enum class harness_flavour : std::uint8_t {
  host_reference,  // the stub that calls reference(...) (cpp and cuda tasks; built with g++)
  host_candidate,  // the stub that calls solve(...) (cpp tasks)
  cuda_candidate,  // cudaMalloc/cudaMemcpy around solve(...) with device pointers (cuda tasks)
};

// The host kinds (cpp candidates, and the reference of cpp and cuda tasks) run as two processes:
// the judge (judge_source, no code of the task's) and the entry point's program (a host flavour's
// stub linked with the candidate or the reference), which the judge starts itself.
//
// The judge: `judge <seed> <trials> <timing reps> <program> [reference]`, a nonce line (32 hex
// digits) on stdin, its stdout the engine's pipe (moved to a private descriptor; fd 1 and the
// program's stdout point at stderr). It makes itself non-dumpable (a process of the same uid can
// neither read its memory nor open its descriptors through /proc; ptrace and process_vm_* are
// refused by the sandbox's seccomp filter), allocates every buffer in a sealed memfd and starts
// the program with the memfd on descriptor 3 and a SOCK_SEQPACKET channel on descriptor 4.
// Per call it generates the inputs and the outputs' garbage in its own memory, takes its clock,
// writes them into the shared buffers, sends 'G', waits for 'D' (and for threads the call started
// to end, up to a second), copies the outputs out and hashes the inputs as the program left them,
// and only then stops its clock. So the outputs it records are the ones that existed when the call
// was answered, the time covers every write they needed, and neither the time, the hashes nor the
// stream is the program's to write: a program that patches its own clocks, forks or keeps threads
// changes nothing of the record. A program that ends passes its exit status or signal on as the
// judge's own; one that closes or garbles the channel is a "channel" failure. After the last call
// the judge kills the program and ends the stream.
//
// The stub: maps the buffers at the offsets the judge sends and answers every 'G' with a call and
// a 'D'. It is trusted with nothing.
//
// CUDA candidates run under the CUDA judge (judge_source with `gpu`), which creates no CUDA
// context of its own: the buffers are device memory of the GPU slot's keeper (keeper_source), a
// process the engine keeps per slot outside every run's sandbox, which the judge reaches through
// a session socket the engine passes as its descriptor 3. The judge stages inputs and outputs in a
// memfd only it and the keeper hold; the keeper allocates the buffers (CUDA virtual memory, cleared
// whole) and gives their descriptors, which the judge hands to the stub, which maps them. Per call
// the judge stages the inputs, has the keeper copy them to the device (and flush L2 for timed
// calls), starts its clock, sends "G<timed>", waits for 'D', has the keeper take a keyed sum of
// every buffer on the device and stops its clock; the copies the keeper then stages back must give
// the same sums ("stream" failure "late" otherwise). The stub checks launch errors and, for untimed
// calls, that results were ordered with the default stream, and reports a failure as 'F' + kind +
// three texts, which the judge writes as an error record (kind "cuda_init", "cuda" or "stream";
// exit code 3). A keeper that ends the session, answers out of turn or fails for good is "keeper"
// (the slot's: the engine starts another); a CUDA error of the run's own is "cuda". The
// comparison is never in either program: the engine compares the outputs with the reference's.
// `linkage` is how the stub declares the entry point (the kind's row; the reference's is cpp).
std::string harness_source(const task& t, harness_flavour flavour, entry_linkage linkage);

// The judge's source for a task (see above), host code built with g++; with `gpu`, the CUDA
// candidates' judge, whose buffers are the GPU keeper's (see harness_source).
std::string judge_source(const task& t, bool gpu);

// The GPU keeper's source (CUDA, built with nvcc and linked with the driver library): one process
// per GPU slot, started by the engine outside the runs' sandboxes, whose one CUDA context holds
// the device buffers of every cuda run on that slot, so that a run creates one context (the
// candidate's), not two. Descriptor 3 is the engine's control socket (SOCK_SEQPACKET): the keeper
// answers "K" once CUDA is up (or "E" + why, and exits), then every message on it brings one
// session socket (SCM_RIGHTS), served on a thread of its own until the judge's side closes, when
// everything of the session is freed. The keeper ends with the control socket or its parent.
// Session protocol (each a SOCK_SEQPACKET message): 'O' u32 n, u8 flush_l2, n x (u64 offset, u64
// bytes) with the staging memfd -> 'o' n x u64 mapped sizes with n buffer descriptors; 'U' u8
// timed u8 fill -> 'u'; 'S' u64 key -> 's' n x u64 keyed sums; 'B' -> 'b'; any CUDA failure ->
// 'E' u32-length name and text, and the session ends.
const std::string& keeper_source();

// Python source defining `_leap_fence()`: installs, in the calling process, the filter a judge puts
// on the process it starts (harness.cpp's fence_filter: it may signal only itself, set no SIGIO
// owner and change no other process's limits). Returns whether the filter is in place. For the
// KernelBench judge, whose candidate's process is Python started by a Python judge.
const std::string& fence_python_source();

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
  channel,    // the program closed or wrote into the judge's channel (host kinds)
  keeper,     // cuda: the GPU slot's keeper ended, failed for good or broke its protocol; the
              // judge's own record (the stub cannot report it): the slot's, never the candidate's
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
    case harness_failure_kind::channel:
      return "channel";
    case harness_failure_kind::keeper:
      return "keeper";
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
