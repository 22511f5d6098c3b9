#include "sandbox/compare.hpp"

#include <cmath>

namespace leap::sandbox {

tolerance tolerance_for(const task& t, const arg_spec& a) {
  tolerance tol = t.tol.value_or(tolerance{});
  if (!t.tol && a.type == value_type::i32) {
    tol.atol = 0;
    tol.rtol = 0;
  }
  return tol;
}

std::optional<mismatch> compare_dumps(const task& t, const harness_dump& expected,
                                      const harness_dump& got) {
  const int trials = static_cast<int>(expected.trials.size());
  for (int trial = 0; trial < trials; ++trial) {
    if (static_cast<std::size_t>(trial) >= got.trials.size()) {
      mismatch m;
      m.arg = "(missing trial)";
      m.trial = trial;
      m.trials = trials;
      return m;
    }
    const auto& e_trial = expected.trials[trial];
    const auto& g_trial = got.trials[trial];
    if (!g_trial.modified_inputs.empty()) {
      mismatch m;
      m.arg = g_trial.modified_inputs.front();
      m.modified_input = true;
      m.trial = trial;
      m.trials = trials;
      return m;
    }
    std::size_t output = 0;
    for (const auto& a : t.args) {
      if (a.role != arg_role::output && a.role != arg_role::inout) {
        continue;
      }
      const auto& exp = e_trial.outputs.at(output);
      const auto& out = g_trial.outputs.at(output);
      ++output;
      const tolerance tol = tolerance_for(t, a);
      mismatch m;
      m.arg = a.name;
      m.trial = trial;
      m.trials = trials;
      m.atol = tol.atol;
      m.rtol = tol.rtol;
      m.expected_count = exp.size();
      m.got_count = out.size();
      if (exp.size() != out.size()) {
        return m;
      }
      double worst_excess = -1;
      double err_sq = 0, exp_sq = 0;
      for (std::size_t i = 0; i < exp.size(); ++i) {
        const double e = exp[i], g = out[i];
        const bool e_nan = std::isnan(e), g_nan = std::isnan(g);
        double diff = std::fabs(g - e);
        bool bad = false;
        double excess = 0;
        if (e_nan || g_nan) {
          bad = e_nan != g_nan;
          diff = bad ? INFINITY : 0;
          excess = bad ? INFINITY : 0;
        } else if (std::isinf(e) || std::isinf(g)) {
          bad = e != g;
          diff = bad ? INFINITY : 0;
          excess = bad ? INFINITY : 0;
        } else {
          const double allowed = tol.atol + tol.rtol * std::fabs(e);
          bad = diff > allowed;
          excess = diff - allowed;
          err_sq += diff * diff;
          exp_sq += e * e;
        }
        m.max_abs_error = std::max(m.max_abs_error, diff);
        if (e != 0 || diff != 0) {
          m.max_rel_error = std::max(m.max_rel_error, e != 0 ? diff / std::fabs(e) : INFINITY);
        }
        if (bad) {
          ++m.bad_elements;
          if (excess > worst_excess) {
            worst_excess = excess;
            m.worst_index = i;
            m.expected = e;
            m.got = g;
          }
        }
      }
      m.relative_l2 = exp_sq > 0 ? std::sqrt(err_sq / exp_sq) : 0;
      if (m.bad_elements > 0) {
        return m;
      }
      if (exp_sq > 0 && m.relative_l2 > tol.max_relative_l2) {
        m.relative_l2_failed = true;
        // Point at the element with the largest error for the feedback.
        double worst = -1;
        for (std::size_t i = 0; i < exp.size(); ++i) {
          const double diff = std::fabs(out[i] - exp[i]);
          if (diff > worst) {
            worst = diff;
            m.worst_index = i;
            m.expected = exp[i];
            m.got = out[i];
          }
        }
        return m;
      }
    }
  }
  return std::nullopt;
}

}  // namespace leap::sandbox
