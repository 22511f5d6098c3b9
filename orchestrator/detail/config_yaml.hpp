// Internal to orchestrator/config: reading YAML values into typed fields, and the problems a
// config file can have, collected and reported as "SOURCE:LINE: key: what". Not a public header.
#pragma once

#include "common/result.hpp"
#include "orchestrator/detail/config_text.hpp"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace leap::config_detail {

struct problem {
  int line = 0;  // 1-based; 0 when the problem has no place in the text
  std::string key;
  std::string message;
};

// "SOURCE:LINE: key: message"; the parts a problem lacks (source, line, key) are left out.
[[nodiscard]] std::string format_problem(const std::string& source, const problem& p);

// Every problem, one per line, by line; problems without a line (defaults in conflict) last.
[[nodiscard]] error join_problems(const std::string& source, std::vector<problem> problems);

// Where a field's reader reports: the key, the key's line, and the list of problems.
struct sink {
  const std::string& key;
  int line;
  std::vector<problem>& problems;

  bool fail(const std::string& message, int at_line = 0, const std::string& suffix = "") {
    problems.push_back({at_line > 0 ? at_line : line, key + suffix, message});
    return false;
  }
};

[[nodiscard]] bool is_quoted(const YAML::Node& n);

// What a node is, for "expected X, got Y": "a list", "'abc'", "the quoted string 'abc'", ...
[[nodiscard]] std::string describe(const YAML::Node& n);

// 1-based line of the node; 0 when it has none.
[[nodiscard]] int line_of(const YAML::Node& n);

// Each reader sets `out` and returns nullopt, or returns what is wrong and leaves `out` alone.

// The text a number's node holds, for std::from_chars: the scalar without its leading '+'. A node
// that is not an unquoted scalar gives `expected` + what it is (and a hint when it is quoted).
[[nodiscard]] std::optional<std::string> number_text(const YAML::Node& n,
                                                     const std::string& expected,
                                                     std::string& text);

// Whole numbers only: 8, -1, +3; not 8.0, 1e3 or "8".
template <class T>
[[nodiscard]] std::optional<std::string> read_integer(const YAML::Node& n, T& out) {
  const std::string expected = "expected an integer, got ";
  std::string text;
  if (auto why = number_text(n, expected, text)) {
    return why;
  }
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return expected + describe(n) + " (out of range)";
  }
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) {
    return expected + describe(n);
  }
  using limits = std::numeric_limits<T>;
  if constexpr (std::is_signed_v<T>) {
    if (value < static_cast<std::int64_t>(limits::min()) ||
        value > static_cast<std::int64_t>(limits::max())) {
      return "expected an integer between " + show(limits::min()) + " and " + show(limits::max()) +
             ", got " + describe(n);
    }
  } else {
    if (value < 0 ||
        static_cast<std::uint64_t>(value) > static_cast<std::uint64_t>(limits::max())) {
      return "expected a non-negative integer, got " + describe(n);
    }
  }
  out = static_cast<T>(value);
  return std::nullopt;
}

// Finite numbers: 0.5, 1e-6, 3; not .inf, .nan or "0.5".
[[nodiscard]] std::optional<std::string> read_real(const YAML::Node& n, double& out);

[[nodiscard]] std::optional<std::string> read_text(const YAML::Node& n, std::string& out);

// YAML 1.2's core booleans only: "yes"/"on" stay errors rather than surprises.
[[nodiscard]] std::optional<std::string> read_bool(const YAML::Node& n, bool& out);

// The start of each document of `text`, up to the third. Throws YAML::Exception on a syntax error
// in them.
[[nodiscard]] std::vector<YAML::Mark> document_starts(const std::string& text);

}  // namespace leap::config_detail
