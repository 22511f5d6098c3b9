// Internal to orchestrator/config: checks of single values that several keys share (ranges,
// URLs, host:port addresses, repeats in a list). Each returns nullopt when the value is fine, else
// what is wrong, worded to follow "key: ". Not a public header.
#pragma once

#include "orchestrator/detail/config_text.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::config_detail {

// An interval of allowed values, with the reason shown when a value falls outside it.
struct range {
  std::optional<double> lo;
  std::optional<double> hi;
  bool lo_open = false;
  bool hi_open = false;
  std::string why;

  [[nodiscard]] bool contains(double v) const;
  // "in [0, 1)", ">= 1", "any number".
  [[nodiscard]] std::string describe() const;
};

[[nodiscard]] range at_least(double lo, std::string why = {});
[[nodiscard]] range above(double lo, std::string why = {});
[[nodiscard]] range closed(double lo, double hi, std::string why = {});
[[nodiscard]] range open_closed(double lo, double hi, std::string why = {});
[[nodiscard]] range closed_open(double lo, double hi, std::string why = {});
[[nodiscard]] range anything();

template <class T>
[[nodiscard]] std::optional<std::string> check_range(const range& r, T v) {
  if (r.contains(static_cast<double>(v))) {
    return std::nullopt;
  }
  return "must be " + r.describe() + (r.why.empty() ? "" : " (" + r.why + ")") + ", got " + show(v);
}

using text_check = std::function<std::optional<std::string>(const std::string&)>;

[[nodiscard]] std::optional<std::string> not_empty(const std::string& s);

[[nodiscard]] bool is_digits(std::string_view s);

// A server's base URL: http(s)://host[:port], no path, query, fragment or user part.
[[nodiscard]] std::optional<std::string> check_url(const std::string& url);

// Whether an endpoint URL's host is this host's loopback: 127.0.0.0/8, localhost, [::1].
[[nodiscard]] bool is_loopback_url(std::string_view url);

// host:port or [v6]:port.
[[nodiscard]] std::optional<std::string> check_node_address(const std::string& address);

template <class T>
[[nodiscard]] std::optional<std::string> check_unique(const std::vector<T>& items) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (items[i] == items[j]) {
        if constexpr (std::is_same_v<T, std::string>) {
          return "lists '" + items[i] + "' twice";
        } else {
          return "lists " + show(items[i]) + " twice";
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace leap::config_detail
