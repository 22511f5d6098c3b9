// The text `leap run` prints: one progress line per step, one per validation, and the summary
// table of a run's step records. Pure functions, no CAF.
#pragma once

#include "actors/experiment.hpp"
#include "orchestrator/trajectory.hpp"

#include <string>
#include <vector>

namespace leap::actors {

// "1h02m", "3m05s", "12.4s", "850ms".
[[nodiscard]] std::string format_duration(double ms);

// step 3/20 | groups 8 (2 resumed) | activated 3 | pass@1 0.450 @2 0.520 @3 0.560 | 4.2s
//   (gen 3.1s compile 0.8s run 0.2s learn 0.1s idle 0.0s) | ETA 1m10s
// (one line; steps are shown 1-based).
[[nodiscard]] std::string format_step_line(const step_progress& p);

// validation after step 4 | 12 tasks, 24 rollouts | pass@1 0.333 @2 0.417 @3 0.458
[[nodiscard]] std::string format_validation_line(const validation_progress& p);

// A fixed-width table, one row per step record (steps 1-based): groups, activated, pass@m for
// m = 1..max_turns (the records' acc_at_m metrics), turns per pass, verifier jobs, generated turns,
// wall time; then a total row (sums, and means of the rates weighted by groups).
[[nodiscard]] std::string format_summary_table(const std::vector<step_record>& steps,
                                               int max_turns);

}  // namespace leap::actors
