// How a run stands: stored in its run record (storage's codec as one byte, exports by name), shown
// by `leap replay`, the daemon and the launcher, so values only grow at the end.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap {

// Written by name in exports and logs: never rename a value.
enum class run_status : std::uint8_t {
  running,      // started and not known to have ended (also what a killed run leaves behind)
  finished,     // all its steps are done
  failed,       // stopped on an error
  interrupted,  // stopped on request (SIGINT, SIGTERM) before its last step
};

// The one name table. Empty for a byte outside the enum.
constexpr std::string_view name_of(run_status v) {
  switch (v) {
    case run_status::running:
      return "running";
    case run_status::finished:
      return "finished";
    case run_status::failed:
      return "failed";
    case run_status::interrupted:
      return "interrupted";
  }
  return {};
}

// "running", "finished", "failed", "interrupted"; "unknown(N)" for a byte outside the enum.
[[nodiscard]] inline std::string to_string(run_status v) { return enum_names::to_string(v); }

}  // namespace leap
