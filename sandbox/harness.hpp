// The programs that run a candidate: a C++ or CUDA harness generated from a task's args spec, and
// the Python runner for `python` tasks (kernelbench's are in sandbox/kernelbench.hpp). Also the
// parser of the harness's output file, which the engine compares outside the candidate's process.
#pragma once

#include "common/result.hpp"
#include "sandbox/task.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace leap::sandbox {

enum class harness_flavor : std::uint8_t {
  host_reference,  // calls reference(...) with host pointers (built with g++ for cpp and cuda tasks)
  host_candidate,  // calls solve(...) with host pointers (cpp tasks)
  cuda_candidate,  // cudaMalloc/cudaMemcpy around solve(...) with device pointers (cuda tasks)
};

// The harness's main(): `prog <seed> <trials> <dump file> [timing reps]`. For each trial it fills
// the inputs from a seeded generator (same values in every flavor), fills outputs with seeded
// garbage (their initial content is unspecified), calls the entry point once, and appends every
// output/inout array and a "was this input modified" flag per input to the dump file. With reps > 0
// it then times reps calls on trial 0's inputs (CUDA events after an L2 flush for cuda). Errors go
// to stderr as a line "LEAP_HARNESS_ERROR <kind> <name> <where>: <text>" and exit code 3.
// The comparison is deliberately not in this program: the candidate runs in the same process and
// could forge any verdict it printed; it cannot forge outputs it did not compute.
std::string harness_source(const task& t, harness_flavor flavor);

// `void solve(<params>);` (or reference) as the suite format defines it, e.g.
// "void solve(const float* x, float* y, int n)".
std::string entry_signature(const task& t, const std::string& name);

// One trial's results as read back from the dump file.
struct trial_dump {
  std::vector<std::vector<double>> outputs;  // per output/inout arg, in args order
  std::vector<std::string> modified_inputs;  // names of input args whose content changed
};

struct harness_dump {
  std::vector<trial_dump> trials;
  std::vector<double> rep_ms;  // per timed repetition, empty without timing
};

// Parses a dump file against the task's args. Errors say what is missing or inconsistent (a
// truncated dump means the harness did not finish).
result<harness_dump> parse_dump(const std::string& bytes, const task& t);


}  // namespace leap::sandbox
