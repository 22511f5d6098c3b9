#include "tools/daemon/prometheus.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <sstream>

namespace leap::daemon {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == ':';
}

// The metric name at the start of a sample line; empty when there is none.
std::string sample_name(const std::string& line) {
  std::size_t i = 0;
  while (i < line.size() && name_char(line[i])) {
    ++i;
  }
  return line.substr(0, i);
}

struct family {
  std::string help;  // the whole "# HELP ..." line, empty when none was seen
  std::string type;  // the whole "# TYPE ..." line
  std::vector<std::string> samples;
};

// Whether `sample` belongs to family `fam`: the same name, or a summary/histogram suffix of it.
bool belongs(const std::string& sample, const std::string& fam) {
  if (sample == fam) {
    return true;
  }
  for (const char* suffix : {"_sum", "_count", "_bucket", "_total", "_created"}) {
    if (sample == fam + suffix) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<std::string> add_label(const std::string& line, const std::string& name,
                                     const std::string& value) {
  const std::string metric = sample_name(line);
  if (metric.empty()) {
    return std::nullopt;
  }
  const std::string label = name + "=\"" + value + "\"";
  std::size_t rest = metric.size();
  std::string labels;
  if (rest < line.size() && line[rest] == '{') {
    // Find the closing brace outside quoted label values.
    bool quoted = false;
    std::size_t i = rest + 1;
    for (; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted && c == '\\') {
        ++i;
      } else if (c == '"') {
        quoted = !quoted;
      } else if (!quoted && c == '}') {
        break;
      }
    }
    if (i >= line.size()) {
      return std::nullopt;
    }
    std::string inner = line.substr(rest + 1, i - rest - 1);
    while (!inner.empty() && (inner.back() == ' ' || inner.back() == ',')) {
      inner.pop_back();
    }
    labels = inner.empty() ? label : label + "," + inner;
    rest = i + 1;
  } else {
    labels = label;
  }
  // A number must follow (strtod also reads the format's NaN, +Inf and -Inf).
  const auto value_at = line.find_first_not_of(" \t", rest);
  if (value_at == std::string::npos || value_at == rest) {
    return std::nullopt;
  }
  const auto value_end = std::min(line.find_first_of(" \t", value_at), line.size());
  const std::string number = line.substr(value_at, value_end - value_at);
  char* parsed_end = nullptr;
  std::strtod(number.c_str(), &parsed_end);
  if (parsed_end != number.c_str() + number.size()) {
    return std::nullopt;
  }
  return metric + "{" + labels + "}" + line.substr(rest);
}

std::string merge_experiment_metrics(
    const std::vector<std::pair<std::string, std::string>>& id_and_text) {
  std::vector<std::string> order;
  std::map<std::string, family> families;
  const auto get = [&](const std::string& name) -> family& {
    auto [it, inserted] = families.try_emplace(name);
    if (inserted) {
      order.push_back(name);
    }
    return it->second;
  };
  for (const auto& [id, text] : id_and_text) {
    std::istringstream in(text);
    std::string current;  // the family named by the last # HELP / # TYPE line
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') {
        line.pop_back();
      }
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        std::istringstream words(line.substr(7));
        std::string fam;
        words >> fam;
        if (fam.empty()) {
          continue;
        }
        current = fam;
        auto& f = get(fam);
        auto& slot = line[2] == 'H' ? f.help : f.type;
        if (slot.empty()) {
          slot = line;
        }
        continue;
      }
      if (line.empty() || line[0] == '#') {
        continue;
      }
      auto labelled = add_label(line, "experiment", id);
      if (!labelled) {
        continue;
      }
      const std::string name = sample_name(line);
      get(!current.empty() && belongs(name, current) ? current : name).samples.push_back(*labelled);
    }
  }
  std::string out;
  for (const auto& name : order) {
    const auto& f = families.at(name);
    if (f.samples.empty()) {
      continue;
    }
    if (!f.help.empty()) {
      out += f.help + "\n";
    }
    if (!f.type.empty()) {
      out += f.type + "\n";
    }
    for (const auto& s : f.samples) {
      out += s + "\n";
    }
  }
  return out;
}

std::string daemon_metrics(const std::vector<experiment_record>& records,
                           const daemon_settings& settings, std::int64_t now_ms,
                           std::int64_t daemon_started_ms) {
  std::map<experiment_state, int> by_state;
  for (auto s : {experiment_state::queued, experiment_state::running, experiment_state::succeeded,
                 experiment_state::failed, experiment_state::cancelled}) {
    by_state[s] = 0;
  }
  int live = 0;
  int restarts = 0;
  double wait_sum = 0;
  int wait_count = 0;
  double oldest = 0;
  for (const auto& r : records) {
    ++by_state[r.state];
    if (r.state == experiment_state::running && r.pid != 0) {
      ++live;
    }
    // A seeds experiment starts one child per seed: only a seed's second start is a restart.
    if (r.seeds.empty() && r.starts > 1) {
      restarts += r.starts - 1;
    }
    for (const auto& seed : r.seeds) {
      restarts += std::max(seed.starts - 1, 0);
    }
    if (r.first_started_unix_ms > 0) {
      wait_sum += static_cast<double>(r.first_started_unix_ms - r.submitted_unix_ms) / 1000.0;
      ++wait_count;
    } else if (r.state == experiment_state::queued) {
      oldest = std::max(oldest, static_cast<double>(now_ms - r.submitted_unix_ms) / 1000.0);
    }
  }
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  const auto add = [&](const char* name, const char* help, MetricType type,
                       std::vector<prometheus::ClientMetric> samples) {
    out.push_back({name, help, type, std::move(samples)});
  };
  const auto gauge = [](double value) {
    prometheus::ClientMetric m;
    m.gauge.value = value;
    return m;
  };
  std::vector<prometheus::ClientMetric> experiments;
  for (const auto& [state, n] : by_state) {
    experiments.push_back(gauge(n));
    experiments.back().label = {{"state", to_string(state)}};
  }
  add("leap_daemon_experiments", "Experiments known to the daemon, by state.", MetricType::Gauge,
      std::move(experiments));
  add("leap_daemon_queue_length", "Experiments waiting for a slot.", MetricType::Gauge,
      {gauge(by_state[experiment_state::queued])});
  add("leap_daemon_running", "Child leap run processes alive.", MetricType::Gauge, {gauge(live)});
  add("leap_daemon_max_concurrent", "The max_concurrent setting in force.", MetricType::Gauge,
      {gauge(settings.max_concurrent)});
  prometheus::ClientMetric wait;
  wait.summary.sample_count = static_cast<std::uint64_t>(wait_count);
  wait.summary.sample_sum = wait_sum;
  add("leap_daemon_queue_wait_seconds", "Submission to first start, of started experiments.",
      MetricType::Summary, {wait});
  add("leap_daemon_oldest_queued_seconds", "Wait so far of the oldest queued experiment.",
      MetricType::Gauge, {gauge(oldest)});
  prometheus::ClientMetric restarted;
  restarted.counter.value = restarts;
  add("leap_daemon_child_restarts_total",
      "Children started again on an existing run folder after a daemon restart.",
      MetricType::Counter, {restarted});
  add("leap_daemon_uptime_seconds", "Seconds since this daemon process started.", MetricType::Gauge,
      {gauge(static_cast<double>(now_ms - daemon_started_ms) / 1000.0)});
  return prometheus::TextSerializer().Serialize(out);
}

}  // namespace leap::daemon
