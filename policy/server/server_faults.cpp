#include "policy/server/detail/server_random.hpp"
#include "policy/server/server.hpp"

#include <charconv>
#include <cmath>
#include <utility>

namespace leap::policy {
namespace {

// Every fault that has a rate: its spec name, its field, its kind, in the order the probabilities
// are stacked (new kinds go last, so a seed draws the same faults for the older kinds).
struct rate_row {
  const char* name;
  double fault_config::*rate;
  fault_kind kind;
};
constexpr rate_row rate_table[] = {
    {"drop", &fault_config::drop, fault_kind::drop},
    {"5xx", &fault_config::http_5xx, fault_kind::http_5xx},
    {"stall", &fault_config::stall, fault_kind::stall},
    {"malformed", &fault_config::malformed, fault_kind::malformed},
    {"truncate", &fault_config::truncate, fault_kind::truncate},
    {"abort", &fault_config::abort, fault_kind::abort},
    {"429", &fault_config::status_429, fault_kind::status_429},
    {"500", &fault_config::status_500, fault_kind::status_500},
    {"502", &fault_config::status_502, fault_kind::status_502},
    {"503", &fault_config::status_503, fault_kind::status_503},
    {"504", &fault_config::status_504, fault_kind::status_504},
    {"no_token_ids", &fault_config::no_token_ids, fault_kind::no_token_ids},
    {"context_too_long", &fault_config::context_too_long, fault_kind::context_too_long},
    {"bad_request", &fault_config::bad_request, fault_kind::bad_request},
    {"hold", &fault_config::hold, fault_kind::hold},
};

constexpr const char* known_keys =
    "drop, 5xx, stall, malformed, truncate, abort, 429, 500, 502, 503, 504, no_token_ids, "
    "context_too_long, bad_request, hold, script, stall_ms, abort_tokens, hold_tokens, hold_ms, "
    "retry_after_s, seed";

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

result<std::vector<fault_kind>> parse_script(std::string_view value) {
  std::vector<fault_kind> script;
  while (!value.empty()) {
    const std::size_t colon = value.find(':');
    const std::string_view name = trim(value.substr(0, colon));
    value = colon == std::string_view::npos ? std::string_view{} : value.substr(colon + 1);
    bool found = false;
    for (std::size_t k = 0; k < fault_kind_count; ++k) {
      const auto kind = static_cast<fault_kind>(k);
      if (name == to_string(kind)) {
        script.push_back(kind);
        found = true;
        break;
      }
    }
    if (!found) {
      return error{"'script' holds an unknown fault '" + std::string(name) +
                   "' (known: none and the fault keys drop ... hold, separated by ':')"};
    }
  }
  return script;
}

int status_of(fault_kind kind) {
  switch (kind) {
    case fault_kind::status_429:
      return 429;
    case fault_kind::status_500:
      return 500;
    case fault_kind::status_502:
      return 502;
    case fault_kind::status_503:
      return 503;
    case fault_kind::status_504:
      return 504;
    case fault_kind::context_too_long:
    case fault_kind::bad_request:
      return 400;
    case fault_kind::none:
    case fault_kind::drop:
    case fault_kind::http_5xx:
    case fault_kind::stall:
    case fault_kind::malformed:
    case fault_kind::truncate:
    case fault_kind::abort:
    case fault_kind::no_token_ids:
    case fault_kind::hold:
      return 0;
  }
  return 0;
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
    case fault_kind::status_429:
      return "429";
    case fault_kind::status_500:
      return "500";
    case fault_kind::status_502:
      return "502";
    case fault_kind::status_503:
      return "503";
    case fault_kind::status_504:
      return "504";
    case fault_kind::no_token_ids:
      return "no_token_ids";
    case fault_kind::context_too_long:
      return "context_too_long";
    case fault_kind::bad_request:
      return "bad_request";
    case fault_kind::hold:
      return "hold";
  }
  return "none";
}

bool fault_config::any() const {
  double total = 0.0;
  for (const auto& row : rate_table) {
    total += this->*row.rate;
  }
  return total > 0.0 || !script.empty();
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
    for (const auto& row : rate_table) {
      if (key == row.name) {
        rate = &(config.*row.rate);
      }
    }
    if (rate != nullptr) {
      auto parsed = parse_rate(key, value);
      if (!parsed) {
        return parsed.err();
      }
      *rate = *parsed;
    } else if (key == "script") {
      auto parsed = parse_script(value);
      if (!parsed) {
        return parsed.err();
      }
      config.script = std::move(*parsed);
    } else if (key == "stall_ms" || key == "abort_tokens" || key == "hold_tokens" ||
               key == "hold_ms" || key == "retry_after_s" || key == "seed") {
      auto parsed = parse_count(key, value);
      if (!parsed) {
        return parsed.err();
      }
      if (key == "stall_ms") {
        config.stall_duration = std::chrono::milliseconds(*parsed);
      } else if (key == "abort_tokens") {
        config.abort_tokens = static_cast<std::size_t>(*parsed);
      } else if (key == "hold_tokens") {
        config.hold_tokens = static_cast<std::size_t>(*parsed);
      } else if (key == "hold_ms") {
        config.hold_duration = std::chrono::milliseconds(*parsed);
      } else if (key == "retry_after_s") {
        config.retry_after = std::chrono::seconds(*parsed);
      } else {
        config.seed = *parsed;
      }
    } else {
      return error{"unknown fault '" + std::string(key) + "' (known: " + known_keys + ")"};
    }
  }
  double total = 0.0;
  for (const auto& row : rate_table) {
    total += config.*row.rate;
  }
  if (total > 1.0 + 1e-9) {
    return error{"the fault rates add up to " + std::to_string(total) + "; they must not exceed 1"};
  }
  return config;
}

fault_decision decide_fault(const fault_config& config, std::uint64_t serial) {
  fault_decision decision;
  const std::uint64_t h = random::combine(config.seed ^ 0xFA017ULL, serial);
  decision.detail = random::mix(h);
  if (serial < config.script.size()) {
    decision.kind = config.script[serial];
  } else {
    const double u = random::unit(h);
    double edge = 0.0;
    for (const auto& row : rate_table) {
      const double rate = config.*row.rate;
      edge += rate;
      if (rate > 0.0 && u < edge) {
        decision.kind = row.kind;
        break;
      }
    }
  }
  if (decision.kind == fault_kind::http_5xx) {
    constexpr int statuses[] = {502, 503, 504};
    decision.http_status = statuses[decision.detail % 3];
  } else {
    decision.http_status = status_of(decision.kind);
  }
  return decision;
}

}  // namespace leap::policy
