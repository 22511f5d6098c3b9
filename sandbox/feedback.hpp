// The feedback text a model reads in a debug turn: compiler errors at the candidate's own line
// numbers, runtime errors by name, mismatches with numbers. Pure functions of their inputs, so the
// same failure always gives the same text (tests/sandbox/feedback_test.cpp holds the cases).
#pragma once

#include "sandbox/compare.hpp"
#include "sandbox/harness.hpp"
#include "sandbox/process.hpp"
#include "sandbox/verdict.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

struct feedback_options {
  std::size_t char_budget = 2000;  // Default: 2000 characters
  int max_compiler_errors = 3;     // Default: 3 (first errors only; the rest cascade from them)
};

// Replaces absolute paths by their file name ("/usr/include/c++/12/vector:12" -> "vector:12") and
// compiler temporaries by "<tmp>", so the text holds no host path and does not vary run to run.
std::string strip_host_paths(std::string_view text);

// Cuts `text` to at most `budget` characters at a line boundary where possible, ending with a
// marker that says how much was cut. Unchanged when it fits.
std::string trim_to_budget(std::string text, std::size_t budget);

// The first errors of a g++ or nvcc log that concern `candidate_file` (compiled exactly as the
// model wrote it, so the line numbers are its own), with their source excerpt and caret; linker
// errors turned into advice
// ("solve is not defined with the required signature: void solve(...)" for an undefined solve,
// "do not define main()" for a duplicate main). `signature` is the required entry point. Warnings,
// notes and host paths are dropped, and nothing of another file is quoted: diagnostics located in
// any file but `candidate_file` (library headers, the harness, a file included by a trick) are only
// counted, with the candidate's line that instantiated them.
std::string compile_feedback(std::string_view log, std::string_view candidate_file,
                             std::string_view signature, const feedback_options& options);

// "Wrong answer: output 'y' (trial 2 of 3) ..." with counts, errors, worst index, expected vs got;
// or "solve() wrote into its input 'x' ..." for a modified input.
std::string mismatch_feedback(const mismatch& m);

// "The program was killed by SIGSEGV (...)." plus the tail of its stderr.
std::string signal_feedback(int signal, std::string_view stderr_text);
// "The program exited with code N before finishing." plus the tail of its stderr.
std::string exit_feedback(int code, std::string_view stderr_text);
// "Time limit exceeded: ..." for wall-clock (`cpu` false) or CPU-time limits.
std::string timeout_feedback(double limit_seconds, bool cpu);
// "Runtime error: the program left 1.8 GiB in its working folder; the limit is 256 MiB ..." for a
// run with run_result::scratch_exceeded, under `limits` (sizes rounded, no exact counts).
std::string scratch_feedback(const run_result& r, const resource_limits& limits);

// The feedback for a failure the harness reported in an error record of its result stream: a CUDA
// error by name with advice, a CUDA initialisation the program itself broke, or where and what.
std::string harness_error_feedback(const harness_failure& e, std::string_view stderr_text);

// The verdict category and feedback for a python judge's JSON result (see python_judge.hpp; the
// engine itself handles its candidate_lost and judge_error statuses). A result whose status says
// the task itself is broken (a syntax error in tests.py, no tests) is an error, not a verdict.
struct categorized_feedback {
  verdict_category category = verdict_category::runtime;
  std::string text;
};
result<categorized_feedback> python_result_feedback(std::string_view result_json);

// The verdict for a KernelBench run from a JSON result: the candidate program's status file
// (syntax_error, import_error, error) or what the engine's judge found (mismatch, modified_input,
// no_own_kernel, incomplete, passed; see sandbox/kernelbench.hpp). Never an error: the status file
// is the candidate's word, so anything unknown or unreadable is a runtime verdict, and nothing it
// says (no GPU, no torch) can stop a run. Pure function.
categorized_feedback kernelbench_result_feedback(std::string_view result_json);

// The last lines of a program's stderr (at most `max_chars`), host paths stripped and harness
// marker lines removed.
std::string stderr_tail(std::string_view stderr_text, std::size_t max_chars);

}  // namespace leap::sandbox
