// The daemon's own settings: HOME/daemon.yaml, read at start and again on SIGHUP. Every key has a
// default, so a missing file is valid.
#pragma once

#include "common/result.hpp"

#include <string>

namespace leap::daemon {

struct daemon_settings {
  // TCP port of the control API on 127.0.0.1; 0 picks a free one (written to HOME/port). A change
  // takes effect at the next start, not on SIGHUP. Default: 7433
  int port = 7433;
  // Experiments run at once; >= 1. Lowering it stops nothing, it only delays admissions.
  // Default: 1
  int max_concurrent = 1;
  // Seconds a child `leap run` gets after SIGTERM (cancel, daemon stop) before SIGKILL; > 0.
  // Default: 30
  double grace_period_s = 30.0;
  // Connections the control API holds open at once (waiting for their request in the gate or
  // served by a worker); 0 means the API's worker count (api_threads), so that a whole request
  // never waits for a worker. At the cap a new connection takes the place of the one that has
  // waited longest for its request, else it is answered 503 with Retry-After
  // (policy/http/http.hpp). Takes effect at the next start, not on SIGHUP. Default: 0 (8)
  int max_connections = 0;

  friend bool operator==(const daemon_settings&, const daemon_settings&) = default;
};

// Parses daemon.yaml text. Errors name every problem, one per line, as "SOURCE:LINE: key: what is
// wrong" (unknown keys, wrong types, values out of range, YAML syntax). Thread-safe.
[[nodiscard]] result<daemon_settings> parse_settings(const std::string& yaml_text,
                                                     const std::string& source_name);

// Reads and parses the file; a missing file gives the defaults. Thread-safe.
[[nodiscard]] result<daemon_settings> load_settings(const std::string& path);

// "port 7433, max_concurrent 1, grace_period_s 30, max_connections 0" for logs.
[[nodiscard]] std::string describe(const daemon_settings& s);

}  // namespace leap::daemon
