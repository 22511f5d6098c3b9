// The benchmarks' `main`: each bench's body returns its exit status; what escapes it (a failed
// allocation, a thread that cannot start, CAF's start, a corpus line that is not a JSON string)
// ends the process with "NAME: error: WHAT" on stderr and exit status 1, instead of
// std::terminate's abort. Header-only: the benches are separate executables with nothing else in
// common to link.
//
//   int main(int argc, char** argv) { return leap::bench::main_of("bench_x", run, argc, argv); }
#pragma once

#include <cstdio>
#include <exception>

namespace leap::bench {

inline int main_of(const char* name, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: an unknown exception\n", name);
  }
  return 1;
}

}  // namespace leap::bench
