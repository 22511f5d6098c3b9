// What verification says about one candidate: pass or fail, why, and the text the model reads.
#pragma once

#include "common/enums/verdict_category.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace leap::sandbox {

// verdict_category and its names (to_string, parse_verdict_category) come from the shared
// vocabulary.

struct timing_stats {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  int reps = 0;
};

struct verdict {
  bool passed = false;
  verdict_category category = verdict_category::runtime;
  // For the model: deterministic, free of host paths and harness internals, within the budget.
  std::string feedback;
  double compile_ms = 0;  // 0 when nothing was compiled (python) or on a cache hit's lookup only
  double run_ms = 0;      // wall time of the candidate's run
  // Compiled and waiting for a run slot (a GPU for cuda work); set by the verifier's pipeline.
  double run_queue_ms = 0;
  bool cache_hit = false;
  std::optional<timing_stats> candidate_time;  // only when timing is on and the candidate passed
  std::optional<timing_stats> reference_time;
  std::optional<double> speedup;  // reference median / candidate median
  // For logs, not for the model: isolation applied, raw stderr tail, etc.
  std::string diagnostics;
};

}  // namespace leap::sandbox
