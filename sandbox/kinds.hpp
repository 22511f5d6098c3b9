// Everything the sandbox does differently by task kind, in one table: one row per kind. The rest of
// the sandbox asks traits_of(kind) and switches on the row's closed enums (pipeline, toolchain,
// required_source), never on the kind itself, so that:
//  - a new kind verified like an existing one is its value in common/enums/task_kind.hpp and its
//    row in sandbox/kinds.cpp (the switch there has no `default:`: -Wswitch names it);
//  - a kind that needs a new way of being built or judged adds a value to pipeline or toolchain
//    below, and -Wswitch names every place in the engine that must handle it (for a pipeline
//    engine.cpp; for a toolchain engine_native.cpp: the compiler's command, flags, header folders,
//    its programs asked for the cache key and shown read-only to the runs).
#pragma once

#include "common/enums/task_kind.hpp"

#include <cstdint>
#include <span>
#include <string_view>

namespace leap::sandbox {

// How the engine verifies a candidate of the kind (engine::compile, engine::run, probe_slot).
enum class pipeline : std::uint8_t {
  text,  // judged in-process on the answer's own text (sandbox/digits.hpp): nothing is built or run
  native,        // extracted, checked, compiled and linked with the generated harness
                 // (sandbox/harness.hpp), run against the reference's outputs
  python_tests,  // extracted, checked, run by the python judge against tests.py
                 // (sandbox/python_judge.hpp)
  kernelbench,   // extracted, checked, ModelNew run against the problem's Model under torch
                 // (sandbox/kernelbench.hpp)
};

// What builds or runs the candidate. Its `--version` output is part of every cache key of the kind
// (engine::compiler_identity), and a native kind's build follows it.
enum class toolchain : std::uint8_t {
  none,     // nothing (text pipeline)
  cxx,      // engine_config::cxx (g++)
  nvcc,     // engine_config::nvcc, with cxx as its host compiler (both identities count)
  python3,  // engine_config::python
};

// How the generated harness declares the candidate's entry point, which it calls. A candidate
// built by another language's compiler (C, Rust) exports an unmangled `solve`; its row says `c`
// and the harness, still C++, declares it `extern "C"`.
enum class entry_linkage : std::uint8_t {
  cpp,  // `void solve(...)` with C++ linkage (cpp, cuda; unused by the kinds with no harness)
  c,    // `extern "C" void solve(...)`
};

// The field a task of the kind must carry besides id and kind (validate_task, the suite format).
enum class required_source : std::uint8_t {
  args_and_reference,  // 'args' of `void solve(...)` and reference.cpp (host C++17 `void
                       // reference(...)`)
  tests,               // tests.py
  problem,             // the KernelBench problem source (Model, get_inputs, get_init_inputs)
  target,              // an integer 'target' >= 0
};

struct kind_traits {
  task_kind kind;
  pipeline judged_by;
  toolchain compiler;
  entry_linkage entry;
  // Its runs use the run slot's GPU (CUDA_VISIBLE_DEVICES names the slot's device). A native kind
  // on a GPU is built with the CUDA harness, runs with the slot's keeper under cuda_run_limits, and
  // its slot is probed with the engine's CUDA program (engine_native.cpp).
  bool gpu;
  required_source needs;
  // The candidate's file (".cu"), also solution.<ext> and wrong/<label>.<ext> in the suite format.
  std::string_view extension;
  // The info string of the kind's fenced block: named in extraction's feedback ("```cuda"), put
  // around a bare source file by `leap verify`, written by the scripted policy's answers.
  std::string_view fence;
  // The info strings that mark a block as the kind's (extract_code); empty: every block does.
  std::span<const std::string_view> fence_languages;
  // '#' starts a comment and no #include rule applies (find_forbidden); otherwise C/C++ comments,
  // and an #include must name a system header in angle brackets.
  bool hash_comments;
  // The forbidden identifiers when a task names none ("forbidden" absent from task.json).
  std::span<const std::string_view> default_forbidden;
};

// The row of `kind`. A byte outside the enum (a cast from corrupt data) gets the cpp row, as
// `task::kind`'s default; callers hold kinds parsed by parse_task_kind. Pure function.
[[nodiscard]] const kind_traits& traits_of(task_kind kind);

}  // namespace leap::sandbox
