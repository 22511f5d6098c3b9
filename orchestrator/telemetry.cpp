#include "orchestrator/telemetry.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <prometheus/client_metric.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <stdexcept>
#include <system_error>
#include <unistd.h>

namespace leap::telemetry {

const char* to_string(metric_type t) {
  switch (t) {
    case metric_type::counter:
      return "counter";
    case metric_type::gauge:
      return "gauge";
    case metric_type::histogram:
      return "histogram";
  }
  return "untyped";
}

void counter::inc(double v) noexcept { series_->Increment(v); }  // ignores v < 0

double counter::value() const noexcept { return series_->Value(); }

void gauge::set(double v) noexcept { series_->Set(v); }

void gauge::add(double v) noexcept { series_->Increment(v); }  // v may be negative

double gauge::value() const noexcept { return series_->Value(); }

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      owned_(std::make_unique<prometheus::Histogram>(bounds_)),
      series_(owned_.get()) {}

histogram::histogram(std::vector<double> bounds, prometheus::Histogram& series)
    : bounds_(std::move(bounds)), series_(&series) {}

histogram::~histogram() = default;

void histogram::observe(double v) noexcept { series_->Observe(v); }

std::vector<std::uint64_t> histogram::bucket_counts() const {
  const auto buckets = series_->Collect().histogram.bucket;  // cumulative, +Inf last
  std::vector<std::uint64_t> out(buckets.size());
  std::uint64_t below = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    out[i] = buckets[i].cumulative_count - below;
    below = buckets[i].cumulative_count;
  }
  return out;
}

double histogram::sum() const noexcept { return series_->Collect().histogram.sample_sum; }

std::vector<double> latency_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
}

std::vector<double> short_wait_buckets() {
  return {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60};
}

std::vector<double> version_buckets() { return {0, 1, 2, 3, 4, 8, 16}; }

const family_snapshot* snapshot::find(const std::string& name) const {
  for (const auto& f : families) {
    if (f.name == name) {
      return &f;
    }
  }
  return nullptr;
}

const series_snapshot* snapshot::find(const std::string& name, const label_set& labels) const {
  const auto* f = find(name);
  if (f == nullptr) {
    return nullptr;
  }
  for (const auto& s : f->series) {
    const bool all = std::all_of(labels.begin(), labels.end(), [&](const auto& want) {
      return std::find(s.labels.begin(), s.labels.end(), want) != s.labels.end();
    });
    if (all) {
      return &s;
    }
  }
  return nullptr;
}

namespace {

bool name_char(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (alpha || (colon && c == ':')) {
    return true;
  }
  return !first && c >= '0' && c <= '9';
}

}  // namespace

bool valid_metric_name(const std::string& name) {
  if (name.empty()) {
    return false;
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, true)) {
      return false;
    }
  }
  return true;
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || name == "le") {
    return false;
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, false)) {
      return false;
    }
  }
  return true;
}

// A series in registration order: the handle the caller updates, on a metric of the
// prometheus::Registry.
struct registry::series {
  label_set labels;
  std::unique_ptr<counter> c;
  std::unique_ptr<gauge> g;
  std::unique_ptr<histogram> h;
};

struct registry::state {
  struct family {
    std::string name;
    std::string help;
    metric_type type;
    prometheus::Family<prometheus::Counter>* counters = nullptr;  // the one of `type`
    prometheus::Family<prometheus::Gauge>* gauges = nullptr;
    prometheus::Family<prometheus::Histogram>* histograms = nullptr;
    std::vector<std::unique_ptr<series>> members;
  };
  mutable std::mutex mutex;
  prometheus::Registry metrics;
  std::vector<std::unique_ptr<family>> families;
};

registry::registry() : state_(std::make_unique<state>()) {}

registry::~registry() = default;

registry::series& registry::find_or_add(const std::string& name, const std::string& help,
                                        metric_type type, label_set labels,
                                        const std::vector<double>* bounds) {
  // prometheus-cpp checks names as well, but refuses only what the exposition format cannot
  // carry: "le" as a label and conflicting help texts or buckets pass there.
  if (!valid_metric_name(name)) {
    throw std::invalid_argument("invalid metric name '" + name + "'");
  }
  prometheus::Labels by_name;
  for (const auto& [label, value] : labels) {
    if (!valid_label_name(label)) {
      std::string what = name;
      what.append(": invalid label name '").append(label).append("'");
      throw std::invalid_argument(what);
    }
    by_name[label] = value;
  }
  if (by_name.size() != labels.size()) {
    throw std::invalid_argument(name + ": a label given twice");
  }
  if (bounds != nullptr) {
    for (std::size_t i = 0; i < bounds->size(); ++i) {
      if (!std::isfinite((*bounds)[i]) || (i > 0 && (*bounds)[i] <= (*bounds)[i - 1])) {
        throw std::invalid_argument(name + ": bucket bounds must be finite and strictly ascending");
      }
    }
  }
  std::lock_guard lock(state_->mutex);
  state::family* fam = nullptr;
  for (auto& f : state_->families) {
    if (f->name == name) {
      fam = f.get();
    }
  }
  if (fam == nullptr) {
    auto f = std::make_unique<state::family>();
    f->name = name;
    f->help = help;
    f->type = type;
    switch (type) {
      case metric_type::counter:
        f->counters = &prometheus::BuildCounter().Name(name).Help(help).Register(state_->metrics);
        break;
      case metric_type::gauge:
        f->gauges = &prometheus::BuildGauge().Name(name).Help(help).Register(state_->metrics);
        break;
      case metric_type::histogram:
        f->histograms =
            &prometheus::BuildHistogram().Name(name).Help(help).Register(state_->metrics);
        break;
    }
    state_->families.push_back(std::move(f));
    fam = state_->families.back().get();
  } else if (fam->type != type || fam->help != help) {
    throw std::invalid_argument(name + ": registered again with another type or help text");
  }
  for (auto& s : fam->members) {
    if (s->labels != labels) {
      continue;
    }
    if (bounds != nullptr && s->h->bounds() != *bounds) {
      throw std::invalid_argument(name + ": registered again with other buckets");
    }
    return *s;
  }
  auto s = std::make_unique<series>();
  s->labels = std::move(labels);
  switch (type) {
    case metric_type::counter:
      s->c.reset(new counter(fam->counters->Add(by_name)));
      break;
    case metric_type::gauge:
      s->g.reset(new gauge(fam->gauges->Add(by_name)));
      break;
    case metric_type::histogram:
      s->h.reset(new histogram(*bounds, fam->histograms->Add(by_name, *bounds)));
      break;
  }
  fam->members.push_back(std::move(s));
  return *fam->members.back();
}

counter& registry::add_counter(const std::string& name, const std::string& help, label_set labels) {
  return *find_or_add(name, help, metric_type::counter, std::move(labels), nullptr).c;
}

gauge& registry::add_gauge(const std::string& name, const std::string& help, label_set labels) {
  return *find_or_add(name, help, metric_type::gauge, std::move(labels), nullptr).g;
}

histogram& registry::add_histogram(const std::string& name, const std::string& help,
                                   const std::vector<double>& bounds, label_set labels) {
  return *find_or_add(name, help, metric_type::histogram, std::move(labels), &bounds).h;
}

snapshot registry::take(std::int64_t unix_ms) const {
  snapshot out;
  out.unix_ms = unix_ms;
  std::lock_guard lock(state_->mutex);
  for (const auto& f : state_->families) {
    family_snapshot fs{f->name, f->help, f->type, {}};
    for (const auto& s : f->members) {
      series_snapshot ss;
      ss.labels = s->labels;
      switch (f->type) {
        case metric_type::counter:
          ss.value = s->c->value();
          break;
        case metric_type::gauge:
          ss.value = s->g->value();
          break;
        case metric_type::histogram: {
          // One Collect() reads the buckets and the sum under the series' mutex.
          const auto read = s->h->series_->Collect().histogram;
          ss.bounds = s->h->bounds();
          for (const auto& b : read.bucket) {
            ss.cumulative.push_back(b.cumulative_count);
          }
          ss.count = read.sample_count;
          ss.sum = read.sample_sum;
          break;
        }
      }
      fs.series.push_back(std::move(ss));
    }
    out.families.push_back(std::move(fs));
  }
  return out;
}

namespace {

// Shortest form that reads back to the same double (JSON only; non-finite numbers are null).
std::string json_number(double v) {
  if (!std::isfinite(v)) {
    return "null";
  }
  char buffer[64];
  auto r = std::to_chars(buffer, buffer + sizeof buffer, v);
  return {buffer, r.ptr};
}

// The format escapes backslash and newline in HELP text; prometheus-cpp 1.0.1 writes it as is.
std::string escape_help(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string to_prometheus(const snapshot& s) {
  std::vector<prometheus::MetricFamily> families;
  families.reserve(s.families.size());
  for (const auto& f : s.families) {
    prometheus::MetricFamily out{f.name, escape_help(f.help), prometheus::MetricType::Untyped, {}};
    switch (f.type) {
      case metric_type::counter:
        out.type = prometheus::MetricType::Counter;
        break;
      case metric_type::gauge:
        out.type = prometheus::MetricType::Gauge;
        break;
      case metric_type::histogram:
        out.type = prometheus::MetricType::Histogram;
        break;
    }
    for (const auto& series : f.series) {
      prometheus::ClientMetric m;
      for (const auto& [name, value] : series.labels) {
        m.label.push_back({name, value});
      }
      switch (f.type) {
        case metric_type::counter:
          m.counter.value = series.value;
          break;
        case metric_type::gauge:
          m.gauge.value = series.value;
          break;
        case metric_type::histogram:
          m.histogram.sample_count = series.count;
          m.histogram.sample_sum = series.sum;
          for (std::size_t i = 0; i < series.cumulative.size(); ++i) {
            const double le = i < series.bounds.size() ? series.bounds[i]
                                                       : std::numeric_limits<double>::infinity();
            m.histogram.bucket.push_back({series.cumulative[i], le});
          }
          break;
      }
      out.metric.push_back(std::move(m));
    }
    families.push_back(std::move(out));
  }
  return prometheus::TextSerializer().Serialize(families);
}

std::string to_json(const snapshot& s) {
  std::string out = "{\"unix_ms\":" + std::to_string(s.unix_ms) + ",\"metrics\":[";
  for (std::size_t fi = 0; fi < s.families.size(); ++fi) {
    const auto& f = s.families[fi];
    if (fi > 0) {
      out += ",";
    }
    out += "{\"name\":" + json_string(f.name) + ",\"help\":" + json_string(f.help) +
           ",\"type\":\"" + to_string(f.type) + "\",\"series\":[";
    for (std::size_t si = 0; si < f.series.size(); ++si) {
      const auto& series = f.series[si];
      if (si > 0) {
        out += ",";
      }
      out += "{\"labels\":{";
      for (std::size_t li = 0; li < series.labels.size(); ++li) {
        if (li > 0) {
          out += ",";
        }
        out += json_string(series.labels[li].first) + ":" + json_string(series.labels[li].second);
      }
      out += "}";
      if (f.type != metric_type::histogram) {
        out += ",\"value\":" + json_number(series.value) + "}";
        continue;
      }
      out += ",\"count\":" + std::to_string(series.count) + ",\"sum\":" + json_number(series.sum) +
             ",\"buckets\":[";
      for (std::size_t i = 0; i < series.cumulative.size(); ++i) {
        if (i > 0) {
          out += ",";
        }
        out +=
            "{\"le\":" +
            (i < series.bounds.size() ? json_number(series.bounds[i]) : std::string("\"+Inf\"")) +
            ",\"count\":" + std::to_string(series.cumulative[i]) + "}";
      }
      out += "],\"p50\":" + json_number(quantile(series, 0.5)) +
             ",\"p90\":" + json_number(quantile(series, 0.9)) +
             ",\"p99\":" + json_number(quantile(series, 0.99)) + "}";
    }
    out += "]}";
  }
  return out + "]}\n";
}

double quantile(const series_snapshot& h, double q) {
  if (h.count == 0 || h.cumulative.empty()) {
    return 0.0;
  }
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(h.count);
  std::size_t i = 0;
  while (i < h.cumulative.size() && static_cast<double>(h.cumulative[i]) < rank) {
    ++i;
  }
  if (i >= h.bounds.size()) {
    return h.bounds.empty() ? 0.0 : h.bounds.back();
  }
  const double lower = i == 0 ? 0.0 : h.bounds[i - 1];
  const double upper = h.bounds[i];
  const double below = i == 0 ? 0.0 : static_cast<double>(h.cumulative[i - 1]);
  const double in_bucket = static_cast<double>(h.cumulative[i]) - below;
  if (in_bucket <= 0.0) {
    return upper;
  }
  return lower + (upper - lower) * (rank - below) / in_bucket;
}

std::map<std::string, double> summary_values(const snapshot& s, const std::string& prefix) {
  std::map<std::string, double> out;
  for (const auto& f : s.families) {
    std::string base = f.name;
    if (base.rfind("leap_", 0) == 0) {
      base = base.substr(5);
    }
    for (const auto& series : f.series) {
      std::string key = prefix + base;
      for (const auto& [label, value] : series.labels) {
        key += "." + value;
      }
      if (f.type != metric_type::histogram) {
        out[key] = series.value;
        continue;
      }
      out[key + ".count"] = static_cast<double>(series.count);
      out[key + ".sum"] = series.sum;
      out[key + ".mean"] = series.count > 0 ? series.sum / static_cast<double>(series.count) : 0.0;
      out[key + ".p50"] = quantile(series, 0.5);
      out[key + ".p90"] = quantile(series, 0.9);
      out[key + ".p99"] = quantile(series, 0.99);
    }
  }
  return out;
}

double rate_meter::update(double total, double now_seconds) {
  double rate = 0.0;
  if (primed_ && now_seconds > last_seconds_) {
    rate = std::max(0.0, total - last_total_) / (now_seconds - last_seconds_);
  }
  primed_ = true;
  last_total_ = total;
  last_seconds_ = now_seconds;
  return rate;
}

}  // namespace leap::telemetry
