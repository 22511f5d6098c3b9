// Prometheus text exposition (format 0.0.4) for the daemon's /metrics: its own metrics, computed
// from the experiment records, and the metrics each running `leap run` writes to
// RUN_DIR/metrics.prom, copied with an added label experiment="ID". Pure. The copying is text
// processing of our own: prometheus-cpp 1.0.1 writes the format but has no parser for it.
#pragma once

#include "tools/daemon/experiment.hpp"
#include "tools/daemon/settings.hpp"

#include <string>
#include <utility>
#include <vector>

namespace leap::daemon {

// One sample line with `name="value"` added as its first label: `m 1` -> `m{name="value"} 1`,
// `m{a="b"} 1 1700` -> `m{name="value",a="b"} 1 1700`. Label values may hold escaped quotes and
// braces. nullopt for a line that is not a sample (no value, unbalanced braces). `value` must not
// need escaping (experiment ids do not).
[[nodiscard]] std::optional<std::string> add_label(const std::string& sample_line,
                                                   const std::string& name,
                                                   const std::string& value);

// The metrics files of several experiments as one exposition: every sample gets
// experiment="ID"; samples of a family are grouped under one # HELP / # TYPE pair (the first
// one seen), families in order of first appearance. Other comments, blank lines and lines that
// are not samples are dropped, so one bad file cannot break the daemon's output.
[[nodiscard]] std::string merge_experiment_metrics(
    const std::vector<std::pair<std::string, std::string>>& id_and_text);

// The daemon's own metrics, written by prometheus::TextSerializer (computed from the records on
// every scrape, so there is no registry): leap_daemon_experiments{state=...},
// leap_daemon_queue_length, leap_daemon_running, leap_daemon_max_concurrent,
// leap_daemon_queue_wait_seconds (summary of submission-to-first-start of every started experiment,
// and the oldest current wait as leap_daemon_oldest_queued_seconds),
// leap_daemon_child_restarts_total (starts beyond the first), leap_daemon_uptime_seconds.
[[nodiscard]] std::string daemon_metrics(const std::vector<experiment_record>& records,
                                         const daemon_settings& settings, std::int64_t now_ms,
                                         std::int64_t daemon_started_ms);

}  // namespace leap::daemon
