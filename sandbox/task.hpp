// The task model: what a candidate is verified against, and the loaders for the project's suite
// directory, a JSONL dataset file and a KernelBench directory.
#pragma once

#include "common/enums/enum_names.hpp"
#include "common/enums/task_kind.hpp"
#include "common/result.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

// task_kind and its names (to_string, parse_task_kind) come from the shared vocabulary
// (common/enums/task_kind.hpp).

enum class value_type : std::uint8_t { f32, f64, i32 };

// kernelbench: whether ModelNew must run a kernel of its own (see own_kernel_for in
// sandbox/kernelbench.hpp). Written by name in task.json's "own_kernel" and in the candidate
// program's stdin: never rename a value.
enum class own_kernel_policy : std::uint8_t { require, off };

// The one name table ("require", "off"). Empty for a byte outside the enum.
constexpr std::string_view name_of(own_kernel_policy p) {
  switch (p) {
    case own_kernel_policy::require:
      return "require";
    case own_kernel_policy::off:
      return "off";
  }
  return {};
}

[[nodiscard]] inline std::string to_string(own_kernel_policy p) { return enum_names::to_string(p); }

enum class arg_role : std::uint8_t { input, output, inout, scalar };

// One parameter of `void solve(...)`, in order (see the suite format).
struct arg_spec {
  std::string name;
  value_type type = value_type::f32;
  arg_role role = arg_role::input;
  std::string count;  // pointer args: an integer, a scalar arg's name, or a '*'-product of both
  double low = -1.0;  // input/inout value range (integers: inclusive bounds). Default: [-1, 1]
  double high = 1.0;
  double value = 0.0;  // scalar args
};

struct tolerance {
  double atol = 1e-5;  // Default: 1e-5 for floating point, 0 for int
  double rtol = 1e-5;  // Default: 1e-5 for floating point, 0 for int
  // Reward-hack guard: besides the element-wise check, the relative L2 error ||got-exp|| / ||exp||
  // must stay below this when the expected output is not all zero, so that zeros cannot pass on a
  // near-zero reference. Default: 0.05
  double max_relative_l2 = 0.05;
};

struct labelled_code {
  std::string label;  // e.g. "off_by_one", from wrong/<label>.<ext>
  std::string code;
};

struct task {
  std::string id;  // "<kind>/<name>"
  task_kind kind = task_kind::cpp;
  int difficulty = 1;
  std::string category;
  std::string prompt;
  std::vector<arg_spec> args;          // cuda/cpp
  std::optional<tolerance> tol;        // absent: per-type defaults
  std::vector<std::string> forbidden;  // absent in task.json: the kind's defaults
  std::uint64_t seed = 1234;
  // cuda/cpp: reference.cpp (`void reference(...)`, host C++17). kernelbench: the problem file
  // (Model, get_inputs, get_init_inputs). python: unused.
  std::string reference;
  std::string tests;  // python: tests.py, the tests feedback may quote
  // python: hidden_tests.py, run after every test of tests.py passed; feedback says only that one
  // failed and how (wrong value, exception, timeout), never its code, inputs or expected values.
  // Default: empty (no hidden tests)
  std::string hidden_tests;
  std::string solution;              // a known-good candidate (bare code), may be empty
  std::vector<labelled_code> wrong;  // known-bad candidates
  std::string origin;                // where it was loaded from, for messages
  int target = 0;                    // digits: the sum the answer's digits must reach
  // kernelbench: whether ModelNew must run a kernel of its own; empty: the engine's default,
  // require on CUDA and off on CPU (see sandbox/kernelbench.hpp). Default: empty
  std::optional<own_kernel_policy> own_kernel;
};

// The file extension of a candidate of `kind` (".cu", ".cpp", ".py"): traits_of(kind).extension.
const char* candidate_extension(task_kind kind);

// The forbidden identifiers applied when a task.json names none: traits_of(kind).default_forbidden
// (cuda: cublas, cudnn, cutlass, thrust, cub::, torch; other kinds: none).
std::vector<std::string> default_forbidden(task_kind kind);

// Which rules a loader applies to a task it read.
enum class task_checks : std::uint8_t {
  full,    // validate_task: everything verification needs. Default
  format,  // task.json's own fields only: for a reader that serves a suite's answers without
           // verifying them (the scripted policy, launch::load_scripted_suite)
};

// Parses a task.json object (suite format) without the files beside it. `context` prefixes errors
// ("sandbox/suite/cpp/x/task.json"). Errors name the key and what is wrong with it.
result<task> parse_task_json(const std::string& json_text, const std::string& context);

// Checks the cross-field rules: what the kind requires (traits_of(kind).needs: args and reference
// for cuda/cpp, tests for python, the problem source for kernelbench), pointer counts that resolve
// to integers through the scalars, unique arg names. Errors name the task id and field.
status validate_task(const task& t);

// Resolves a pointer arg's count with the scalar values. Errors name the unknown term.
result<std::int64_t> element_count(const task& t, const arg_spec& arg);

// Loads one suite task directory: task.json, reference.cpp, tests.py, hidden_tests.py,
// solution.<ext>, wrong/*.
result<task> load_task_dir(const std::filesystem::path& dir,
                           task_checks checks = task_checks::full);

// Loads every task below `root` (<kind>/<name>/task.json), sorted by id. An invalid task is an
// error naming its directory. The one reader of the suite format: the sandbox, `leap run` and
// the scripted policy (`leap serve-policy --suite`) all read suites through it.
result<std::vector<task>> load_suite(const std::filesystem::path& root,
                                     task_checks checks = task_checks::full);

// A JSONL dataset: one task object per line with task.json's fields plus inline "reference",
// "solution", "wrong" ([{"label", "code"}]), "tests" and "hidden_tests". Blank lines are skipped.
// Errors name the file and the 1-based line.
result<std::vector<task>> load_jsonl(const std::filesystem::path& file);

// A KernelBench directory: either a folder of level folders (level1/, level2/, ...) or one level
// folder, each holding problem files "<n>_<name>.py" defining Model, get_inputs and
// get_init_inputs. Ids are "kernelbench/<level>/<file stem>". Errors name the file lacking a
// definition.
result<std::vector<task>> load_kernelbench_dir(const std::filesystem::path& dir);
// One KernelBench problem file.
result<task> load_kernelbench_file(const std::filesystem::path& file, const std::string& level);

// Finds a task for `leap verify`-like callers: an id looked up in `suite_root`, a task directory,
// a .jsonl file (first task, or the one whose id matches `id_in_file`), or a KernelBench .py file.
result<task> resolve_task(const std::string& spec, const std::filesystem::path& suite_root);

}  // namespace leap::sandbox
