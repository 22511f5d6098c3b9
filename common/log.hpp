// The log: one line per event on stderr, through spdlog, for the programs in tools/ (the libraries
// below them never write to stderr; they hand their event lines to a callback the program owns).
//
// A line reads
//   2026-12-01T21:40:28.123Z leap run | info | run quickstart | step 3 | group 5 | rollout 2 | text
// UTC time, the component (the program), the level, then the ids the line has (run, step, group,
// rollout; each left out where it does not apply) as `name value |` fields, so one grep follows one
// run, step, group or rollout through the log. No spdlog header is included here: only
// common/log.cpp pays spdlog's compile time.
#pragma once

#include "common/enums/log_verbosity.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap::log {

// The config's levels (experiment.log_level).
using level = log_verbosity;

// The ids of one line; an empty run or a negative number is left out of the line.
struct ids {
  std::string run;
  std::int64_t step = -1;     // 1-based, as progress lines count steps
  std::int64_t group = -1;    // index of the group in its step
  std::int64_t rollout = -1;  // index of the rollout in its group
};

// "run R | step S | group G | rollout K | " with the fields `i` has, in that order; "" for none.
[[nodiscard]] std::string fields(const ids& i);

// Names the program in every line ("leap run") and sets the least severe level printed (info
// until a program says otherwise). Call it once, early, from main's thread; later calls replace
// the component and level. Lines written before it carry the component "leap".
void setup(std::string_view component, level least = level::info);

// Changes the least severe level printed; thread-safe.
void set_level(level least);
[[nodiscard]] level current_level();

// Writes one line when `severity` is at least the current level; thread-safe (spdlog's mutex
// sink), so lines from several threads never interleave.
void write(level severity, std::string_view text, const ids& i = {});

inline void debug(std::string_view text, const ids& i = {}) { write(level::debug, text, i); }
inline void info(std::string_view text, const ids& i = {}) { write(level::info, text, i); }
inline void warn(std::string_view text, const ids& i = {}) { write(level::warn, text, i); }
inline void error(std::string_view text, const ids& i = {}) { write(level::error, text, i); }

}  // namespace leap::log
