// Live telemetry of a run: a registry of counters, gauges and fixed-bucket histograms, snapshots of
// it, and their renderings as Prometheus text exposition (format 0.0.4) and as JSON.
//
// The series are prometheus-cpp's (Debian's prometheus-cpp-dev 1.0.1: prometheus::Registry owns
// them, prometheus::TextSerializer writes the exposition); this header keeps them out of its
// includers. What prometheus-cpp 1.0.1 does not do is kept here: families and series in
// registration order with labels in the order given (its families come out grouped by type,
// its series in hash order, its labels sorted by name), the refusals of a name registered again
// with another help text or other buckets and of the label name "le" (it accepts all three), and
// escaping of HELP text (it writes it as is).
//
// Cost model: registration takes a mutex and happens once (at start-up); every update afterwards
// is a compare-and-swap loop on one atomic (counters, gauges) or a short critical section of the
// series' own mutex (histograms, prometheus::Histogram::Observe) on a series the caller holds a
// reference to, so the actors may update metrics on every turn without contention between
// series. A snapshot takes the registration mutex only to walk the series list; a histogram is
// read under its own mutex, so its count, bucket counts and sum in a snapshot are consistent
// with each other (its `+Inf` bucket always equals its `_count`).
//
// Labels are kept minimal: a series has a few (name, value) pairs fixed at registration (e.g.
// stage="compile"); there is no per-observation label lookup.
//
// No CAF, no network: the actors update the series, `leap run` renders snapshots to files.
#pragma once

#include "common/result.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace leap::telemetry {

class registry;

using label_set = std::vector<std::pair<std::string, std::string>>;

enum class metric_type { counter, gauge, histogram };
[[nodiscard]] const char* to_string(metric_type t);

// A monotonically increasing value (events, tokens): a handle on a prometheus::Counter that its
// registry owns. Thread-safe, lock-free.
class counter {
 public:
  // Adds `v` (>= 0; a negative value is ignored, since a counter never goes down).
  void inc(double v = 1.0) noexcept;
  [[nodiscard]] double value() const noexcept;

 private:
  friend class registry;
  explicit counter(prometheus::Counter& series) : series_(&series) {}
  prometheus::Counter* series_;
};

// A value that goes up and down (queue depths, the weight version): a handle on a
// prometheus::Gauge that its registry owns. Thread-safe, lock-free.
class gauge {
 public:
  void set(double v) noexcept;
  void add(double v) noexcept;
  [[nodiscard]] double value() const noexcept;

 private:
  friend class registry;
  explicit gauge(prometheus::Gauge& series) : series_(&series) {}
  prometheus::Gauge* series_;
};

// Observations counted into fixed buckets (upper bounds, ascending; an implicit +Inf bucket
// follows): a prometheus::Histogram, owned by the registry or, made with the public constructor,
// by this object. A value equal to a bound counts into that bound's bucket. Thread-safe:
// observe() is a short search over the bounds and two additions under the series' mutex.
class histogram {
 public:
  explicit histogram(std::vector<double> bounds);
  histogram(const histogram&) = delete;
  histogram& operator=(const histogram&) = delete;
  ~histogram();
  void observe(double v) noexcept;
  [[nodiscard]] const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts, the last one the +Inf bucket, and the sum.
  [[nodiscard]] std::vector<std::uint64_t> bucket_counts() const;
  [[nodiscard]] double sum() const noexcept;

 private:
  friend class registry;
  histogram(std::vector<double> bounds, prometheus::Histogram& series);
  std::vector<double> bounds_;
  std::unique_ptr<prometheus::Histogram> owned_;  // null when the registry owns the series
  prometheus::Histogram* series_;
};

// Bucket presets. Latencies are in seconds, as Prometheus names them.
[[nodiscard]] std::vector<double> latency_buckets();     // 5 ms .. 10 min
[[nodiscard]] std::vector<double> short_wait_buckets();  // 1 ms .. 60 s
[[nodiscard]] std::vector<double> version_buckets();     // 0, 1, 2, 3, 4, 8, 16

struct series_snapshot {
  label_set labels;
  double value = 0.0;  // counter and gauge
  // histogram: upper bounds (without +Inf), cumulative counts (one more: the +Inf bucket), sum
  // and count (== the +Inf bucket).
  std::vector<double> bounds;
  std::vector<std::uint64_t> cumulative;
  double sum = 0.0;
  std::uint64_t count = 0;
};

struct family_snapshot {
  std::string name;
  std::string help;
  metric_type type = metric_type::gauge;
  std::vector<series_snapshot> series;  // in registration order
};

struct snapshot {
  std::int64_t unix_ms = 0;
  std::vector<family_snapshot> families;  // in registration order

  // The family called `name`, or null.
  [[nodiscard]] const family_snapshot* find(const std::string& name) const;
  // The series of `name` whose labels include every pair of `labels`, or null.
  [[nodiscard]] const series_snapshot* find(const std::string& name, const label_set& labels) const;
};

// Metric names: [a-zA-Z_:][a-zA-Z0-9_:]*; label names: [a-zA-Z_][a-zA-Z0-9_]* and not "le"
// (reserved for histogram buckets).
[[nodiscard]] bool valid_metric_name(const std::string& name);
[[nodiscard]] bool valid_label_name(const std::string& name);

class registry {
 public:
  registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;
  ~registry();

  // Registers a series (or returns the one already registered under the same name and labels).
  // The reference stays valid for the registry's lifetime. Thread-safe (takes a mutex: register
  // once, then update through the reference). Throws std::invalid_argument on a programming error:
  // an invalid metric or label name, a name registered with another type or help text, or a
  // histogram registered again with other buckets (or with bounds not strictly ascending).
  counter& add_counter(const std::string& name, const std::string& help, label_set labels = {});
  gauge& add_gauge(const std::string& name, const std::string& help, label_set labels = {});
  histogram& add_histogram(const std::string& name, const std::string& help,
                           const std::vector<double>& bounds, label_set labels = {});

  // Reads every series once. Thread-safe; `unix_ms` is the caller's clock reading.
  [[nodiscard]] snapshot take(std::int64_t unix_ms = 0) const;

 private:
  struct state;  // the prometheus::Registry and the registration-order index (telemetry.cpp)
  struct series;
  series& find_or_add(const std::string& name, const std::string& help, metric_type type,
                      label_set labels, const std::vector<double>* bounds);

  std::unique_ptr<state> state_;
};

// Prometheus text exposition format 0.0.4, written by prometheus::TextSerializer: per family
// `# HELP` (backslash and newline escaped) and `# TYPE`, then one line per series
// (`name{l="v"} value`; label values escape backslash, double quote and newline); histograms as
// `_count`, `_sum`, then cumulative `_bucket{le="..."}` lines ending with le="+Inf". Families and
// series in the snapshot's order. Numbers with up to 16 significant digits (integers below 1e16
// exactly); +Inf and -Inf as Prometheus spells them, NaN as prometheus-cpp spells it ("Nan",
// which Prometheus' parser accepts: it reads the value case-insensitively). Ends with a newline.
[[nodiscard]] std::string to_prometheus(const snapshot& s);

// The same as one JSON object: {"unix_ms": N, "metrics": [{"name", "help", "type", "series":
// [{"labels": {...}, "value"} or {"labels", "count", "sum", "buckets": [{"le", "count"}...],
// "p50", "p90", "p99"}]}]}; a non-finite number is written as null, the +Inf bound as "+Inf".
[[nodiscard]] std::string to_json(const snapshot& s);

// The q-quantile (q in [0, 1]) of a histogram series, interpolated linearly inside the bucket that
// holds it, as Prometheus' histogram_quantile does (the first bucket's lower bound is 0; a quantile
// that falls into the +Inf bucket is the highest finite bound). 0 when the histogram is empty.
[[nodiscard]] double quantile(const series_snapshot& h, double q);

// The snapshot as flat name -> value pairs, for a step record: `prefix` + the metric name without
// its `leap_` prefix, then each label value (`.`-joined); a histogram gives `.count`, `.sum`,
// `.mean`, `.p50`, `.p90` and `.p99`. Example: `telemetry.compile_seconds.p50`,
// `telemetry.queue_depth.generation`.
[[nodiscard]] std::map<std::string, double> summary_values(const snapshot& s,
                                                           const std::string& prefix);

// Generated tokens (or any counter) per second between two readings.
class rate_meter {
 public:
  // The rate since the previous call (0 on the first call or when no time passed).
  double update(double total, double now_seconds);

 private:
  bool primed_ = false;
  double last_total_ = 0.0;
  double last_seconds_ = 0.0;
};

}  // namespace leap::telemetry
