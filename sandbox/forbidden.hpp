// The forbidden-use checks: library calls where the task demands a kernel written from scratch,
// includes that could reach outside the candidate's own source, and definitions that would replace
// library functions for the harness. find_forbidden is a text pre-check on the extracted code, only
// an early exit (digraphs, line continuations, macros and `using namespace` get past any text
// search); the decision is made by the checks below it on what the toolchain saw (engine::compile).
#pragma once

#include "common/result.hpp"
#include "sandbox/task.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::sandbox {

struct forbidden_hit {
  std::string item;     // the forbidden entry that matched ("cublas"), or "#include"
  int line = 0;         // 1-based line in the candidate's code
  std::string excerpt;  // that line, trimmed
  std::string reason;   // feedback for the model
};

// Returns the first hit, or nullopt when the code is clean. Matching is a case-insensitive
// substring search on the code with comments removed ("cublas" catches cublasSgemm and
// <cublas_v2.h>). For cuda and cpp, an #include must name a system header in angle brackets without
// '..' or a leading
// '/': a quoted or absolute include could pull in the task's reference. Pure function.
std::optional<forbidden_hit> find_forbidden(std::string_view code, task_kind kind,
                                            const std::vector<std::string>& items);

// ---- Checks on the compiler's own view (see engine::compile) ----------------------------------
// They read what the toolchain wrote while building the candidate, never the candidate's text, so
// digraphs, line continuations, macros, token pasting, `using namespace` and aliases change
// nothing.

// Files named by a make-style dependency file (g++ -MD/-MF, as --MD): every prerequisite, in
// order, unescaped ("\ " -> " ", "$$" -> "$"); the target before the first ':' is dropped.
std::vector<std::string> parse_make_deps(std::string_view deps);

// Files named by the line markers of preprocessed output (`# 12 "file" 1`, `#line 3 "file"`), each
// once, in order of first appearance; "<built-in>" and "<command-line>" are dropped.
std::vector<std::string> parse_line_markers(std::string_view preprocessed);

// The header folders nvcc adds on its own, from `nvcc --dryrun`'s `#$ INCLUDES=` (-I) and
// `#$ SYSTEM_INCLUDES=` (-isystem) lines, as nvcc spells them (often
// `<toolkit>/bin/../targets/...`). nvcc computes them from where it really runs, which a link or
// wrapper script in another bin/ folder (/usr/local/bin/nvcc, Debian's /usr/bin/nvcc) hides from
// anyone looking at the path alone.
std::vector<std::string> parse_nvcc_include_dirs(std::string_view dryrun);

struct include_policy {
  std::string candidate_file;  // "solution.cpp": the only non-system file allowed
  std::vector<std::filesystem::path> system_dirs;  // canonical header folders of the toolchain
  std::vector<std::string>
      refused_libraries;  // library keys ("thrust", "cublas") from task.forbidden
};

// Library keys of a task's forbidden list: items naming a library rather than a qualified name
// ("thrust", "cub::" -> "cub", "cublas"); "std::sort" gives none. Lower-case.
std::vector<std::string> forbidden_libraries(const std::vector<std::string>& items);

// The first file the preprocessor opened that the candidate may not include: anything but its own
// file that is not (after resolving symlinks and "..") inside a system folder, or a header of a
// refused library (a path component equal to the key, or starting with it followed by a
// non-lower-case character: "cublas_v2.h", "thrust/sort.h"). Relative names are relative to the
// build folder, i.e. the candidate's scratch. The reason names the file as the compiler reported it
// (never its content). `files` as from parse_make_deps or parse_line_markers.
std::optional<forbidden_hit> check_included_files(const std::vector<std::string>& files,
                                                  const include_policy& policy);

// The assembler's dependency list (as --MD): besides its input and the compiler's temporaries, any
// file means a `.incbin` or `.include` directive read a file at compile time.
std::optional<forbidden_hit> check_assembler_files(const std::vector<std::string>& files,
                                                   std::string_view candidate_stem);

// A forbidden item in g++'s front-end dump (-fdump-tree-original): every call, address and
// instantiation appears there fully qualified ("std::sort<float*>", ";; Function void
// std::sort(...)"), whatever the source spelled. Items with "::" match a qualified name bounded by
// non-identifier characters; others match the start of an identifier, case-insensitively
// ("qsort", "cublas" in cublasSgemm_v2).
std::optional<forbidden_hit> find_forbidden_in_dump(std::string_view dump,
                                                    const std::vector<std::string>& items);

// One line of `nm -P` output.
struct object_symbol {
  std::string name;  // mangled
  char type = 'U';   // nm's letter: U undefined, T/D/B/R strong, W/V weak, ...
  [[nodiscard]] bool defined() const { return type != 'U' && type != 'w' && type != 'v'; }
  [[nodiscard]] bool weak() const {
    return type == 'W' || type == 'V' || type == 'w' || type == 'v';
  }
};
std::vector<object_symbol> parse_nm(std::string_view nm_posix_output);

// The global and weak symbols of an ELF64 little-endian relocatable object (what `nm -g` lists,
// with nm's letters: U/w/v undefined, T/W/i functions, D/V/C/u objects; a symbol without a type, as
// an assembler label makes, counts as a function), read in process: nm costs more than the checks.
// Errors say what is malformed.
result<std::vector<object_symbol>> parse_elf_symbols(std::string_view object);

// Refuses a candidate object that defines what is not its own: a function with C linkage other than
// `solve` (clock_gettime, write, cudaEventElapsedTime would shadow the library's for the harness
// too), a symbol the harness references or defines strongly, a strong definition in namespace std,
// __gnu_cxx or __cxxabiv1 (weak ones are what the headers emit: allowed), a global variable
// named like a C library object (stdout, environ...); and one that references a forbidden library
// function (undefined "cublas..."), or dlopen/dlsym when the task forbids anything. Symbols nvcc
// and gcc generate (DW.ref.*, __cuda*, __nv_*, __fatbin*) are allowed. `file` names the candidate
// in the reason ("solution.cpp defines clock_gettime: ...").
std::optional<forbidden_hit> check_object_symbols(const std::vector<object_symbol>& candidate,
                                                  const std::vector<object_symbol>& harness,
                                                  const std::vector<std::string>& forbidden_items,
                                                  std::string_view file);

}  // namespace leap::sandbox
