#include "policy/server_faults.hpp"

#include "policy/server_random.hpp"

#include <charconv>
#include <cmath>
#include <utility>

namespace leap::policy {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

result<double> parse_rate(std::string_view key, std::string_view value) {
  double rate = 0.0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), rate);
  if (ec != std::errc{} || end != value.data() + value.size() || !std::isfinite(rate) ||
      rate < 0.0 || rate > 1.0) {
    return error{"the rate of '" + std::string(key) + "' must be a number in [0, 1] (got '" +
                 std::string(value) + "')"};
  }
  return rate;
}

result<std::uint64_t> parse_count(std::string_view key, std::string_view value) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc{} || end != value.data() + value.size()) {
    return error{"'" + std::string(key) + "' must be a non-negative integer (got '" +
                 std::string(value) + "')"};
  }
  return n;
}

}  // namespace

const char* to_string(fault_kind kind) {
  switch (kind) {
    case fault_kind::none:
      return "none";
    case fault_kind::drop:
      return "drop";
    case fault_kind::http_5xx:
      return "5xx";
    case fault_kind::stall:
      return "stall";
    case fault_kind::malformed:
      return "malformed";
    case fault_kind::truncate:
      return "truncate";
    case fault_kind::abort:
      return "abort";
  }
  return "none";
}

bool fault_config::any() const {
  return drop + http_5xx + stall + malformed + truncate + abort > 0.0;
}

result<fault_config> parse_fault_spec(std::string_view spec) {
  fault_config config;
  spec = trim(spec);
  if (spec.empty() || spec == "none") {
    return config;
  }
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) {
      continue;
    }
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return error{"'" + std::string(item) + "' is not key=value (e.g. drop=0.05)"};
    }
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    double* rate = nullptr;
    if (key == "drop") {
      rate = &config.drop;
    } else if (key == "5xx") {
      rate = &config.http_5xx;
    } else if (key == "stall") {
      rate = &config.stall;
    } else if (key == "malformed") {
      rate = &config.malformed;
    } else if (key == "truncate") {
      rate = &config.truncate;
    } else if (key == "abort") {
      rate = &config.abort;
    }
    if (rate != nullptr) {
      auto parsed = parse_rate(key, value);
      if (!parsed) {
        return parsed.err();
      }
      *rate = *parsed;
    } else if (key == "stall_ms") {
      auto parsed = parse_count(key, value);
      if (!parsed) {
        return parsed.err();
      }
      config.stall_duration = std::chrono::milliseconds(*parsed);
    } else if (key == "seed") {
      auto parsed = parse_count(key, value);
      if (!parsed) {
        return parsed.err();
      }
      config.seed = *parsed;
    } else {
      return error{"unknown fault '" + std::string(key) +
                   "' (known: drop, 5xx, stall, malformed, truncate, abort, stall_ms, seed)"};
    }
  }
  const double total = config.drop + config.http_5xx + config.stall + config.malformed +
                       config.truncate + config.abort;
  if (total > 1.0 + 1e-9) {
    return error{"the fault rates add up to " + std::to_string(total) + "; they must not exceed 1"};
  }
  return config;
}

fault_decision decide_fault(const fault_config& config, std::uint64_t serial) {
  fault_decision decision;
  const std::uint64_t h = random::combine(config.seed ^ 0xFA017ULL, serial);
  decision.detail = random::mix(h);
  const double u = random::unit(h);
  const std::pair<double, fault_kind> table[] = {
      {config.drop, fault_kind::drop},         {config.http_5xx, fault_kind::http_5xx},
      {config.stall, fault_kind::stall},       {config.malformed, fault_kind::malformed},
      {config.truncate, fault_kind::truncate}, {config.abort, fault_kind::abort},
  };
  double edge = 0.0;
  for (const auto& [rate, kind] : table) {
    edge += rate;
    if (rate > 0.0 && u < edge) {
      decision.kind = kind;
      break;
    }
  }
  if (decision.kind == fault_kind::http_5xx) {
    constexpr int statuses[] = {502, 503, 504};
    decision.http_status = statuses[decision.detail % 3];
  }
  return decision;
}

}  // namespace leap::policy
