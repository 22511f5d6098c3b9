#include "tools/daemon/api.hpp"

#include "common/crypto.hpp"
#include "orchestrator/config.hpp"
#include "tools/launch/launch.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>

namespace leap::daemon {

std::string error_body(int code, const std::string& message) {
  std::string type = "server_error";
  switch (code) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 409:
      type = "conflict_error";
      break;
    case 413:
      type = "request_too_large_error";
      break;
    case 503:
      type = "unavailable_error";
      break;
    default:
      break;
  }
  // A message may quote what the client sent: bytes that are not UTF-8 become U+FFFD instead of
  // making the error itself fail.
  return nlohmann::json{{"error", {{"message", message}, {"type", type}, {"code", code}}}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1fU;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0fU;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07U;
    } else {
      return i;  // a continuation byte, an overlong lead (0xc0, 0xc1) or 0xf5..0xff
    }
    if (i + len > n) {
      return i;
    }
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0U) != 0x80U) {
        return i;
      }
      cp = (cp << 6) | (s[i + k] & 0x3fU);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return i;
    }
    i += len;
  }
  return std::nullopt;
}

std::size_t flow_nesting_depth(std::string_view text) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  char quote = 0;
  bool comment = false;
  bool escaped = false;
  char previous = '\n';
  for (const char c : text) {
    if (comment) {
      comment = c != '\n';
    } else if (quote == '"') {
      // Double-quoted YAML escapes with a backslash; single-quoted doubles the quote, which
      // closing and reopening handles.
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        quote = 0;
      }
    } else if (quote == '\'') {
      if (c == '\'') {
        quote = 0;
      }
    } else if (c == '#' && (previous == ' ' || previous == '\t' || previous == '\n')) {
      comment = true;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    previous = c;
  }
  return deepest;
}

bool authorized(const std::string& authorization, const std::string& token) {
  const std::string scheme = "bearer ";
  if (token.empty() || authorization.size() <= scheme.size()) {
    return false;
  }
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) {
      return false;
    }
  }
  auto given = authorization.substr(scheme.size());
  while (!given.empty() && given.back() == ' ') {
    given.pop_back();
  }
  return crypto::constant_time_equal(given, token);
}

result<std::optional<std::size_t>> parse_tail(const std::string& value, bool present) {
  if (!present) {
    return std::optional<std::size_t>{};
  }
  const bool digits =
      !value.empty() && value.size() <= 9 &&
      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoul(value) == 0) {
    return error{"tail: expected a number of lines >= 1, got '" + value + "'"};
  }
  return std::optional<std::size_t>{std::stoul(value)};
}

result<submit_request> parse_submit(const std::string& body, const std::string& source_value,
                                    const std::string& cwd_value,
                                    const std::optional<std::string>& seeds_value) {
  submit_request r;
  if (seeds_value) {
    // The command's own parser, so that the daemon takes exactly what `leap run --seeds` takes;
    // its messages name the option, ours the query parameter.
    auto seeds = launch::parse_seeds(*seeds_value);
    if (!seeds) {
      std::string message = seeds.err().message;
      if (message.rfind("--seeds", 0) == 0) {
        message = "seeds" + message.substr(7);
      }
      return error{message + " (the seeds query parameter)"};
    }
    r.seeds_spec = *seeds_value;
    r.seeds = *seeds;
  }
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return error{"the request body must hold the experiment config (YAML)"};
  }
  if (auto bad = first_invalid_utf8(body)) {
    return error{"the request body is not UTF-8 text (byte " + std::to_string(*bad) +
                 " is not); a config must be UTF-8"};
  }
  if (const auto depth = flow_nesting_depth(body); depth > max_config_nesting) {
    return error{"the request body nests [ ] and { } " + std::to_string(depth) +
                 " deep; a config nests at most " + std::to_string(max_config_nesting)};
  }
  for (auto [name, value] :
       {std::pair{config_name_header, &source_value}, std::pair{cwd_header, &cwd_value}}) {
    if (first_invalid_utf8(*value)) {
      return error{std::string(name) + ": not UTF-8 text"};
    }
  }
  r.yaml = body;
  if (!source_value.empty()) {
    r.source = source_value;
  }
  if (!cwd_value.empty()) {
    if (!std::filesystem::path(cwd_value).is_absolute()) {
      return error{std::string(cwd_header) + ": '" + cwd_value + "' is not an absolute path"};
    }
    r.cwd = cwd_value;
  }
  return r;
}

result<experiment_record> make_submission(const submit_request& request, std::uint64_t seq,
                                          const std::string& experiment_dir, std::int64_t now_ms) {
  auto config = parse_config(request.yaml, request.source);
  if (!config) {
    return config.err();
  }
  experiment_record r;
  r.seq = seq;
  r.id = id_of(seq);
  r.name = config->experiment.name;
  r.state = experiment_state::queued;
  r.config_source = request.source;
  r.cwd = request.cwd.empty() ? experiment_dir : request.cwd;
  r.run_dir = (std::filesystem::path(r.cwd) / config->experiment.run_dir).lexically_normal();
  // "runs/x/" and "runs/x" are one folder.
  while (r.run_dir.size() > 1 && r.run_dir.back() == '/') {
    r.run_dir.pop_back();
  }
  r.submitted_unix_ms = now_ms;
  r.seeds_spec = request.seeds_spec;
  for (const auto seed : request.seeds) {
    seed_record s;
    s.seed = seed;
    r.seeds.push_back(s);
  }
  return r;
}

std::optional<std::string> run_dir_user(const std::vector<experiment_record>& records,
                                        const std::string& run_dir) {
  for (const auto& r : records) {
    if (!is_final(r.state) && r.run_dir == run_dir) {
      return r.id;
    }
  }
  return std::nullopt;
}

nlohmann::json status_json(const std::vector<experiment_record>& records,
                           const daemon_settings& settings, bool stopping, std::int64_t now_ms,
                           std::int64_t started_ms) {
  std::map<std::string, int> counts;
  for (const char* s : {"queued", "running", "succeeded", "failed", "cancelled"}) {
    counts[s] = 0;
  }
  nlohmann::json running = nlohmann::json::array();
  nlohmann::json queue = nlohmann::json::array();
  std::vector<const experiment_record*> sorted;
  sorted.reserve(records.size());
  for (const auto& r : records) {
    sorted.push_back(&r);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
  for (const auto* r : sorted) {
    ++counts[to_string(r->state)];
    if (r->state == experiment_state::running) {
      running.push_back(r->id);
    }
    if (r->state == experiment_state::queued) {
      queue.push_back(r->id);
    }
  }
  return {{"state", stopping ? "stopping" : "serving"},
          {"uptime_s", static_cast<double>(now_ms - started_ms) / 1000.0},
          {"settings",
           {{"port", settings.port},
            {"max_concurrent", settings.max_concurrent},
            {"grace_period_s", settings.grace_period_s}}},
          {"experiments", counts},
          {"running", running},
          {"queue", queue}};
}

}  // namespace leap::daemon
