#include "orchestrator/detail/config_checks.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>

namespace leap::config_detail {

bool range::contains(double v) const {
  if (lo && (lo_open ? v <= *lo : v < *lo)) {
    return false;
  }
  return !(hi && (hi_open ? v >= *hi : v > *hi));
}

std::string range::describe() const {
  if (lo && hi) {
    return "in " + std::string(lo_open ? "(" : "[") + show_number(*lo) + ", " + show_number(*hi) +
           (hi_open ? ")" : "]");
  }
  if (lo) {
    return (lo_open ? "> " : ">= ") + show_number(*lo);
  }
  if (hi) {
    return (hi_open ? "< " : "<= ") + show_number(*hi);
  }
  return "any number";
}

range at_least(double lo, std::string why) {
  return {lo, std::nullopt, false, false, std::move(why)};
}
range above(double lo, std::string why) { return {lo, std::nullopt, true, false, std::move(why)}; }
range closed(double lo, double hi, std::string why) {
  return {lo, hi, false, false, std::move(why)};
}
range open_closed(double lo, double hi, std::string why) {
  return {lo, hi, true, false, std::move(why)};
}
range closed_open(double lo, double hi, std::string why) {
  return {lo, hi, false, true, std::move(why)};
}
range anything() { return {}; }

std::optional<std::string> not_empty(const std::string& s) {
  if (s.empty()) {
    return std::optional<std::string>{"must not be empty"};
  }
  return std::nullopt;
}

bool is_digits(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

namespace {

std::optional<std::string> check_port(std::string_view port) {
  int value = 0;
  if (!is_digits(port) || port.size() > 5 ||
      std::from_chars(port.data(), port.data() + port.size(), value).ec != std::errc{} ||
      value < 1 || value > 65535) {
    return "has port '" + std::string(port) + "', expected a number in [1, 65535]";
  }
  return std::nullopt;
}

bool is_host_name(std::string_view host) {
  return !host.empty() && std::all_of(host.begin(), host.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == '_';
  });
}

// host:port, host:port/path, or [v6]:port; the port is required when `need_port`.
std::optional<std::string> check_authority(std::string_view authority, bool need_port) {
  std::string_view host = authority;
  std::optional<std::string_view> port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return std::optional<std::string>{"has an unclosed '[' in its IPv6 host"};
    }
    host = authority.substr(1, close - 1);
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return std::optional<std::string>{"has text after its IPv6 host"};
      }
      port = rest.substr(1);
    }
    if (host.empty() || !std::all_of(host.begin(), host.end(), [](unsigned char c) {
          return std::isxdigit(c) || c == ':' || c == '.';
        })) {
      return "has an invalid IPv6 host '" + std::string(host) + "'";
    }
  } else {
    const std::size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    if (host.empty()) {
      return std::optional<std::string>{"has no host"};
    }
    if (!is_host_name(host)) {
      return "has an invalid host '" + std::string(host) + "'";
    }
  }
  if (port) {
    return check_port(*port);
  }
  if (need_port) {
    return std::optional<std::string>{"has no port (expected host:port)"};
  }
  return std::nullopt;
}

}  // namespace

bool is_loopback_url(std::string_view url) {
  if (const auto scheme = url.find("://"); scheme != std::string_view::npos) {
    url.remove_prefix(scheme + 3);
  }
  if (url.starts_with("[::1]")) {
    return true;
  }
  const std::string_view host = url.substr(0, url.find_first_of(":/"));
  return host == "localhost" || host.starts_with("127.");
}

std::optional<std::string> check_url(const std::string& url) {
  const auto bad = [&](const std::string& why) -> std::optional<std::string> {
    return "'" + url + "' is not a valid endpoint URL: it " + why;
  };
  std::string_view rest = url;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else {
    return bad("must start with http:// or https://");
  }
  if (std::any_of(url.begin(), url.end(), [](unsigned char c) { return std::isspace(c); })) {
    return bad("contains white space");
  }
  if (rest.find_first_of("?#@") != std::string_view::npos) {
    return bad("has a query, fragment or user part; give the server's base URL only");
  }
  const std::size_t slash = rest.find('/');
  if (auto why = check_authority(rest.substr(0, slash), false)) {
    return bad(*why);
  }
  if (slash != std::string_view::npos) {
    // The client appends the route (/v1/completions, /generate, /tokenize) to the base URL itself.
    return bad("has a path ('" + std::string(rest.substr(slash)) +
               "'); give the server's base URL, http://host:port, and the client adds the route");
  }
  return std::nullopt;
}

std::optional<std::string> check_node_address(const std::string& address) {
  if (auto why = check_authority(address, true)) {
    return "'" + address + "' is not a valid host:port: it " + *why;
  }
  return std::nullopt;
}

}  // namespace leap::config_detail
