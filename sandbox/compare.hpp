// Comparison of a candidate's outputs with the reference's, done in the engine's process where the
// candidate cannot reach it.
#pragma once

#include "sandbox/harness.hpp"
#include "sandbox/task.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace leap::sandbox {

struct mismatch {
  std::string arg;  // output name ("y"), or "input 'x'" style text for a modified input
  int trial = 0;    // 0-based
  int trials = 1;
  bool modified_input = false;
  std::size_t expected_count = 0;
  std::size_t got_count = 0;
  std::size_t bad_elements = 0;
  std::size_t worst_index = 0;
  double expected = 0;
  double got = 0;
  double max_abs_error = 0;
  double max_rel_error = 0;
  double relative_l2 = 0;
  double atol = 0;
  double rtol = 0;
  bool relative_l2_failed = false;  // element-wise it passed, but the whole is off (zeros on ~0)
};

// The tolerance that applies to arg `a` of task `t`: the task's, or the per-type default
// (1e-5/1e-5 for float and double, exact for int).
tolerance tolerance_for(const task& t, const arg_spec& a);

// The first mismatch between `expected` and `got` trial by trial, output by output (an element is
// fine when |got - exp| <= atol + rtol * |exp|; NaN only matches NaN), or a modified input; nullopt
// when everything matches. Pure function.
std::optional<mismatch> compare_dumps(const task& t, const harness_dump& expected,
                                      const harness_dump& got);

}  // namespace leap::sandbox
