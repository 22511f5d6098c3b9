// How the actors hand their log lines to the program: each line with its severity and its ids
// (run, step, group, rollout, where the line is about one), never formatted into the text, so
// that the program's log (common/log.hpp) prints them as fields and one grep follows one group or
// rollout. The libraries never write to stderr themselves. No CAF.
#pragma once

#include "common/log.hpp"

#include <functional>
#include <string>
#include <utility>

namespace leap::actors {

struct log_line {
  log::level severity = log::level::info;
  std::string text;  // one line, no newline, no ids
  log::ids ids;      // those that apply; log::ids{} for a line about the whole process
};

// Called on actor threads (several at once): must be thread-safe and must not block for long.
// Null: the lines are dropped.
using log_sink = std::function<void(const log_line&)>;

// Hands `line` to `sink` when there is one.
inline void emit(const log_sink& sink, log::level severity, std::string text, log::ids ids = {}) {
  if (sink) {
    sink(log_line{severity, std::move(text), std::move(ids)});
  }
}

// The program's log as a sink: log::write with the line's ids, each id the line lacks taken from
// `defaults` (e.g. the run's). For programs, which link leap::log; the libraries never call it.
[[nodiscard]] inline log_sink program_log(log::ids defaults = {}) {
  return [defaults = std::move(defaults)](const log_line& line) {
    log::ids ids = line.ids;
    if (ids.run.empty()) {
      ids.run = defaults.run;
    }
    if (ids.step < 0) {
      ids.step = defaults.step;
    }
    if (ids.group < 0) {
      ids.group = defaults.group;
    }
    if (ids.rollout < 0) {
      ids.rollout = defaults.rollout;
    }
    log::write(line.severity, line.text, ids);
  };
}

}  // namespace leap::actors
