#include "orchestrator/config.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>

namespace leap {
namespace {

// ---------------------------------------------------------------------------------------------
// Text of values

// Shortest text that parses back to exactly `v`, spelled as a YAML float (1.0, 1.0e-06), so that
// other YAML readers see a float too.
std::string format_real(double v) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  std::string text(buffer, end);
  if (text.find_first_of(".en") == std::string::npos) {
    text += ".0";
  } else if (text.find('.') == std::string::npos && text.find('e') != std::string::npos) {
    text.insert(text.find('e'), ".0");
  }
  return text;
}

// For messages: the shortest text, without the ".0" a YAML float needs.
std::string show_number(double v) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return {buffer, end};
}

template <class T>
std::string show(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return show_number(v);
  } else {
    return std::to_string(v);
  }
}

std::string quote(const std::string& s) {
  YAML::Emitter emitter;
  emitter << YAML::DoubleQuoted << s;
  return emitter.c_str();
}

template <class Container, class Format>
std::string join(const Container& items, const std::string& separator, Format format) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) {
      out += separator;
    }
    first = false;
    out += format(item);
  }
  return out;
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) {
      return parts;
    }
    start = dot + 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Problems: what parse_config reports

struct problem {
  int line = 0;  // 1-based; 0 when the problem has no place in the text
  std::string key;
  std::string message;
};

std::string format_problem(const std::string& source, const problem& p) {
  std::string out = source;
  if (p.line > 0) {
    out += (out.empty() ? "" : ":") + std::to_string(p.line);
  }
  if (!p.key.empty()) {
    out += (out.empty() ? "" : ": ") + p.key;
  }
  out += (out.empty() ? "" : ": ") + p.message;
  return out;
}

error join_problems(const std::string& source, std::vector<problem> problems) {
  // By line, so the message reads like the file; problems without a line (defaults in conflict)
  // last.
  std::stable_sort(problems.begin(), problems.end(), [](const problem& a, const problem& b) {
    const int la = a.line > 0 ? a.line : std::numeric_limits<int>::max();
    const int lb = b.line > 0 ? b.line : std::numeric_limits<int>::max();
    return la < lb;
  });
  return error{join(problems, "\n", [&](const problem& p) { return format_problem(source, p); })};
}

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

// ---------------------------------------------------------------------------------------------
// Scalars

bool is_quoted(const YAML::Node& n) { return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"; }

// User text shown in a message: on one line, and short, since a broken indentation can fold many
// lines into one scalar.
std::string excerpt(const std::string& text) {
  constexpr std::size_t limit = 60;
  std::string out;
  for (const char ch : text.substr(0, limit)) {
    out += ch == '\n' || ch == '\r' || ch == '\t' ? ' ' : ch;
  }
  return text.size() > limit ? out + "..." : out;
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return is_quoted(n) ? "the quoted string '" + excerpt(n.Scalar()) + "'"
                          : "'" + excerpt(n.Scalar()) + "'";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing (null)";
}

int line_of(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

// Whole numbers only: 8, -1, +3; not 8.0, 1e3 or "8".
template <class T>
std::optional<std::string> read_integer(const YAML::Node& n, T& out) {
  const std::string expected = "expected an integer, got ";
  if (!n.IsScalar() || is_quoted(n)) {
    return expected + describe(n) + (n.IsScalar() ? " (remove the quotes)" : "");
  }
  std::string text = n.Scalar();
  if (!text.empty() && text.front() == '+') {
    text.erase(0, 1);
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
std::optional<std::string> read_real(const YAML::Node& n, double& out) {
  const std::string expected = "expected a number, got ";
  if (!n.IsScalar() || is_quoted(n)) {
    return expected + describe(n) + (n.IsScalar() ? " (remove the quotes)" : "");
  }
  std::string text = n.Scalar();
  if (!text.empty() && text.front() == '+') {
    text.erase(0, 1);
  }
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) {
    return expected + describe(n);
  }
  if (!std::isfinite(value)) {
    return "expected a finite number, got " + describe(n);
  }
  out = value;
  return std::nullopt;
}

std::optional<std::string> read_text(const YAML::Node& n, std::string& out) {
  if (!n.IsScalar()) {
    return "expected a string, got " + describe(n);
  }
  out = n.Scalar();
  return std::nullopt;
}

// YAML 1.2's core booleans only: "yes"/"on" stay errors rather than surprises.
std::optional<std::string> read_bool(const YAML::Node& n, bool& out) {
  if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) {
    out = n.Scalar() == "true";
    return std::nullopt;
  }
  return "expected true or false, got " + describe(n);
}

// ---------------------------------------------------------------------------------------------
// Value checks

// An interval of allowed values, with the reason shown when a value falls outside it.
struct range {
  std::optional<double> lo;
  std::optional<double> hi;
  bool lo_open = false;
  bool hi_open = false;
  std::string why;

  [[nodiscard]] bool contains(double v) const {
    if (lo && (lo_open ? v <= *lo : v < *lo)) {
      return false;
    }
    return !(hi && (hi_open ? v >= *hi : v > *hi));
  }

  [[nodiscard]] std::string describe() const {
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
};

range at_least(double lo, std::string why = {}) {
  return {lo, std::nullopt, false, false, std::move(why)};
}
range above(double lo, std::string why = {}) {
  return {lo, std::nullopt, true, false, std::move(why)};
}
range closed(double lo, double hi, std::string why = {}) {
  return {lo, hi, false, false, std::move(why)};
}
range open_closed(double lo, double hi, std::string why = {}) {
  return {lo, hi, true, false, std::move(why)};
}
range closed_open(double lo, double hi, std::string why = {}) {
  return {lo, hi, false, true, std::move(why)};
}
range anything() { return {}; }

template <class T>
std::optional<std::string> check_range(const range& r, T v) {
  if (r.contains(static_cast<double>(v))) {
    return std::nullopt;
  }
  return "must be " + r.describe() + (r.why.empty() ? "" : " (" + r.why + ")") + ", got " + show(v);
}

using text_check = std::function<std::optional<std::string>(const std::string&)>;

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

// Whether an endpoint URL's host is this host's loopback: 127.0.0.0/8, localhost, [::1].
bool is_loopback_url(std::string_view url) {
  if (const auto scheme = url.find("://"); scheme != std::string_view::npos) {
    url.remove_prefix(scheme + 3);
  }
  if (url.starts_with("[::1]")) return true;
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

std::optional<std::string> check_run_name(const std::string& name) {
  if (name.empty()) {
    return std::optional<std::string>{"must not be empty"};
  }
  const auto bad = std::find_if(name.begin(), name.end(), [](unsigned char c) {
    return !(std::isalnum(c) || c == '.' || c == '_' || c == '-');
  });
  if (bad != name.end()) {
    return "may hold only letters, digits, '.', '_' and '-' (it names files and store keys), got "
           "'" +
           name + "'";
  }
  return std::nullopt;
}

std::optional<std::string> check_torch_device(const std::string& device) {
  if (device == "cpu" || device == "cuda") return std::nullopt;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
      std::all_of(device.begin() + 5, device.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return "must be cpu, cuda or cuda:N, got '" + device + "'";
}

std::optional<std::string> check_init_preset(const std::string& preset) {
  if (preset.empty() || preset == "tiny" || preset == "small") return std::nullopt;
  return "must be tiny, small or empty (the model must exist), got '" + preset + "'";
}

std::optional<std::string> check_python(const std::string& python) {
  if (python.empty()) return "must name an interpreter (default: python3)";
  if (python.find('/') != std::string::npos && python.front() != '/') {
    return "must be a name (python3) or an absolute path, not the relative path '" + python + "'";
  }
  return std::nullopt;
}

std::optional<std::string> check_weight_sync(const std::string& method) {
  if (method.empty() || method == "disk" || method == "in_memory" || method == "nccl" ||
      method == "ipc") {
    return std::nullopt;
  }
  return "must be disk, in_memory, nccl, ipc or empty (disk, or in_memory for the embedded server), "
         "got '" +
         method + "'";
}

std::optional<std::string> check_cuda_arch(const std::string& arch) {
  std::string_view digits;
  std::string_view view = arch;
  if (view.starts_with("sm_")) {
    digits = view.substr(3);
    if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
      digits.remove_suffix(1);
    }
  } else if (view.starts_with("compute_")) {
    digits = view.substr(8);
  }
  if (digits.size() < 2 || digits.size() > 3 || !is_digits(digits)) {
    return "expected an nvcc architecture such as sm_90a, sm_80 or compute_90, got '" + arch + "'";
  }
  return std::nullopt;
}

template <class T>
std::optional<std::string> check_unique(const std::vector<T>& items) {
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

// ---------------------------------------------------------------------------------------------
// The schema: one entry per key

struct field_spec {
  std::string key;
  std::string type;
  std::string meaning;
  // Converts the YAML value into the config; reports through the sink and returns false on failure.
  std::function<bool(const YAML::Node&, experiment_config&, sink&)> read;
  // The value as YAML text.
  std::function<std::string(const experiment_config&)> write;
  // The field's own range check; empty when any value of the type is fine.
  std::function<std::optional<std::string>(const experiment_config&)> check;
};

// Accessors take a mutable config so that one lambda serves reading and writing; writers only read
// through it (see `view`).
// A member name cannot be parenthesised, hence the NOLINT.
// clang-format off
#define LEAP_FIELD(member) \
  ([](experiment_config& c) -> auto& { return c.member; })  // NOLINT(bugprone-macro-parentheses)
// clang-format on

template <class Access>
auto& view(const Access& access, const experiment_config& c) {
  return access(const_cast<experiment_config&>(c));  // NOLINT: read-only use of a shared accessor
}

template <class Access>
field_spec integer_field(std::string key, Access access, range r, std::string meaning) {
  using T = std::remove_reference_t<decltype(access(std::declval<experiment_config&>()))>;
  field_spec f{std::move(key), "integer", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    T value{};
    if (auto why = read_integer(n, value)) {
      return s.fail(*why);
    }
    access(c) = value;
    return true;
  };
  f.write = [access](const experiment_config& c) { return show(view(access, c)); };
  f.check = [access, r](const experiment_config& c) { return check_range(r, view(access, c)); };
  return f;
}

template <class Access>
field_spec bool_field(std::string key, Access access, std::string meaning) {
  field_spec f{std::move(key), "boolean", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    bool value = false;
    if (auto why = read_bool(n, value)) {
      return s.fail(*why);
    }
    access(c) = value;
    return true;
  };
  f.write = [access](const experiment_config& c) {
    return std::string(view(access, c) ? "true" : "false");
  };
  return f;
}

template <class Access>
field_spec real_field(std::string key, Access access, range r, std::string meaning) {
  field_spec f{std::move(key), "number", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    double value = 0.0;
    if (auto why = read_real(n, value)) {
      return s.fail(*why);
    }
    access(c) = value;
    return true;
  };
  f.write = [access](const experiment_config& c) { return format_real(view(access, c)); };
  if (r.lo || r.hi) {
    f.check = [access, r](const experiment_config& c) { return check_range(r, view(access, c)); };
  }
  return f;
}

template <class Access>
field_spec text_field(std::string key, Access access, text_check check, std::string meaning) {
  field_spec f{std::move(key), "string", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    std::string value;
    if (auto why = read_text(n, value)) {
      return s.fail(*why);
    }
    access(c) = std::move(value);
    return true;
  };
  f.write = [access](const experiment_config& c) { return quote(view(access, c)); };
  if (check) {
    f.check = [access, check = std::move(check)](const experiment_config& c) {
      return check(view(access, c));
    };
  }
  return f;
}

// Levenshtein distance, ignoring case.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above_cell = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above_cell;
    }
  }
  return row[b.size()];
}

// Closest name by edit distance, for "did you mean"; nullopt when nothing is close.
std::optional<std::string> closest(const std::string& name,
                                   const std::vector<std::string>& candidates) {
  const std::size_t limit = name.size() <= 3 ? 1 : name.size() <= 6 ? 2 : 3;
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_distance && d < candidate.size()) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

template <class Enum>
std::string enum_type(const std::vector<Enum>& values) {
  return "one of: " + join(values, ", ", [](Enum v) { return to_string(v); });
}

template <class Access, class Enum = std::remove_reference_t<
                            decltype(std::declval<Access>()(std::declval<experiment_config&>()))>>
field_spec choice_field(std::string key, Access access, std::vector<Enum> values,
                        std::string meaning) {
  field_spec f{std::move(key), enum_type(values), std::move(meaning), {}, {}, {}};
  f.read = [access, values](const YAML::Node& n, experiment_config& c, sink& s) {
    std::vector<std::string> names;
    for (const Enum v : values) {
      names.push_back(to_string(v));
    }
    const std::string expected =
        "expected one of " + join(names, ", ", [](const std::string& x) { return x; });
    if (!n.IsScalar()) {
      return s.fail(expected + ", got " + describe(n));
    }
    for (const Enum v : values) {
      if (to_string(v) == n.Scalar()) {
        access(c) = v;
        return true;
      }
    }
    const auto guess = closest(n.Scalar(), names);
    return s.fail(expected + ", got " + describe(n) +
                  (guess ? "; did you mean '" + *guess + "'?" : ""));
  };
  f.write = [access](const experiment_config& c) { return to_string(view(access, c)); };
  return f;
}

// A list whose elements are read by `read_element`; element problems name the element's index and
// line.
template <class T, class ReadElement>
bool read_list(const YAML::Node& n, std::vector<T>& out, sink& s, const std::string& element_type,
               ReadElement read_element) {
  if (!n.IsSequence()) {
    return s.fail("expected a list of " + element_type + ", got " + describe(n) +
                  (n.IsScalar() ? " (write [" + n.Scalar() + "] for a list of one)" : ""));
  }
  std::vector<T> values;
  bool ok = true;
  std::size_t index = 0;
  for (const auto& element : n) {
    T value{};
    if (auto why = read_element(element, value)) {
      ok = s.fail(*why, line_of(element), "[" + std::to_string(index) + "]");
    }
    values.push_back(std::move(value));
    ++index;
  }
  if (ok) {
    out = std::move(values);
  }
  return ok;
}

template <class T>
std::string write_list(const std::vector<T>& values) {
  return "[" +
         join(values, ", ",
              [](const T& v) {
                if constexpr (std::is_same_v<T, std::string>) {
                  return quote(v);
                } else if constexpr (std::is_floating_point_v<T>) {
                  return format_real(v);
                } else {
                  return show(v);
                }
              }) +
         "]";
}

// Checks each element with `check`, and the list for repeats when `unique`.
template <class T, class Check>
std::optional<std::string> check_elements(const std::vector<T>& values, Check check, bool unique) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (auto why = check(values[i])) {
      return "[" + std::to_string(i) + "] " + *why;
    }
  }
  return unique ? check_unique(values) : std::nullopt;
}

template <class Access>
field_spec text_list_field(std::string key, Access access, text_check check, bool unique,
                           std::string meaning) {
  field_spec f{std::move(key), "list of strings", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    return read_list(n, access(c), s, "strings",
                     [](const YAML::Node& e, std::string& v) { return read_text(e, v); });
  };
  f.write = [access](const experiment_config& c) { return write_list(view(access, c)); };
  f.check = [access, check, unique](const experiment_config& c) {
    return check_elements(view(access, c), check, unique);
  };
  return f;
}

template <class Access>
field_spec integer_list_field(std::string key, Access access, range r, std::string meaning) {
  using T = typename std::remove_reference_t<decltype(access(
      std::declval<experiment_config&>()))>::value_type;
  field_spec f{std::move(key), "list of integers", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    return read_list(n, access(c), s, "integers",
                     [](const YAML::Node& e, T& v) { return read_integer(e, v); });
  };
  f.write = [access](const experiment_config& c) { return write_list(view(access, c)); };
  f.check = [access, r](const experiment_config& c) {
    return check_elements(
        view(access, c), [&](T v) { return check_range(r, v); }, true);
  };
  return f;
}

template <class Access>
field_spec real_list_field(std::string key, Access access, std::string meaning) {
  field_spec f{std::move(key), "list of numbers", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    return read_list(n, access(c), s, "numbers",
                     [](const YAML::Node& e, double& v) { return read_real(e, v); });
  };
  f.write = [access](const experiment_config& c) { return write_list(view(access, c)); };
  return f;
}

template <class Access>
field_spec real_pair_field(std::string key, Access access, range r, std::string meaning) {
  field_spec f{std::move(key), "list of 2 numbers", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    std::vector<double> values;
    if (!read_list(n, values, s, "2 numbers",
                   [](const YAML::Node& e, double& v) { return read_real(e, v); })) {
      return false;
    }
    if (values.size() != 2) {
      return s.fail("expected a list of 2 numbers, got " + std::to_string(values.size()));
    }
    access(c) = {values[0], values[1]};
    return true;
  };
  f.write = [access](const experiment_config& c) {
    const auto& pair = view(access, c);
    return write_list(std::vector<double>(pair.begin(), pair.end()));
  };
  f.check = [access, r](const experiment_config& c) {
    const auto& pair = view(access, c);
    return check_elements(
        std::vector<double>(pair.begin(), pair.end()), [&](double v) { return check_range(r, v); },
        false);
  };
  return f;
}

std::optional<std::string> check_top_k(int k) {
  if (k == -1 || k >= 1) {
    return std::nullopt;
  }
  return "must be -1 (disabled) or >= 1, got " + std::to_string(k);
}

// The sampling keys, for the training and the validation section alike.
template <class Section>
void add_sampling_fields(std::vector<field_spec>& fields, const std::string& prefix,
                         Section section, const std::string& purpose) {
  fields.push_back(real_field(
      prefix + ".temperature",
      [section](experiment_config & c) -> auto& { return section(c).temperature; }, at_least(0),
      "Softmax temperature of " + purpose + "; >= 0, 0 is greedy."));
  {
    field_spec f = integer_field(
        prefix + ".top_k", [section](experiment_config & c) -> auto& { return section(c).top_k; },
        anything(), "Keep the k most likely tokens of " + purpose + "; -1 disables, else >= 1.");
    f.check = [section](const experiment_config& c) { return check_top_k(view(section, c).top_k); };
    fields.push_back(std::move(f));
  }
  fields.push_back(real_field(
      prefix + ".top_p", [section](experiment_config & c) -> auto& { return section(c).top_p; },
      open_closed(0, 1), "Nucleus sampling mass of " + purpose + ", in (0, 1]."));
  fields.push_back(integer_field(
      prefix + ".max_tokens",
      [section](experiment_config & c) -> auto& { return section(c).max_tokens; }, at_least(1),
      "Most tokens generated per turn of " + purpose + "; >= 1."));
  fields.push_back(integer_field(
      prefix + ".seed", [section](experiment_config & c) -> auto& { return section(c).seed; },
      at_least(-1),
      "Per-request seed base of " + purpose +
          ": -1 sends none; s >= 0 gives request k the seed s + k (replayable on a "
          "deterministic server)."));
  fields.push_back(text_list_field(
      prefix + ".stop", [section](experiment_config & c) -> auto& { return section(c).stop; },
      not_empty, true, "Strings that end a generation of " + purpose + "."));
  fields.push_back(integer_list_field(
      prefix + ".stop_token_ids",
      [section](experiment_config & c) -> auto& { return section(c).stop_token_ids; }, at_least(0),
      "Token ids that end a generation of " + purpose +
          ", besides the tokenizer's end-of-sequence token."));
}

std::vector<field_spec> build_fields() {
  std::vector<field_spec> f;

  // experiment
  f.push_back(
      text_field("experiment.name", LEAP_FIELD(experiment.name), check_run_name,
                 "Names the run in logs, metrics and store keys; letters, digits, '.', '_', '-'."));
  f.push_back(
      integer_field("experiment.seed", LEAP_FIELD(experiment.seed), at_least(0),
                    "Seeds the orchestrator's random choices (task order, validation split, "
                    "simulation): same config and seed, same run."));
  f.push_back(text_field(
      "experiment.run_dir", LEAP_FIELD(experiment.run_dir), not_empty,
      "Folder for the run's store, logs, metrics and checkpoints; created when missing."));
  f.push_back(integer_field("experiment.steps", LEAP_FIELD(experiment.steps), at_least(1),
                            "Training steps (one learner update each) before the run ends; >= 1."));
  f.push_back(
      choice_field("experiment.log_level", LEAP_FIELD(experiment.log_level),
                   std::vector{log_verbosity::trace, log_verbosity::debug, log_verbosity::info,
                               log_verbosity::warn, log_verbosity::error, log_verbosity::off},
                   "Least severe log level printed."));

  // data
  f.push_back(
      text_field("data.train", LEAP_FIELD(data.train), nullptr,
                 "Task suite to train on (file or folder); empty: none, which only `leap simulate` "
                 "accepts."));
  f.push_back(
      text_field("data.validation", LEAP_FIELD(data.validation), nullptr,
                 "Held-out task suite for validation; exclusive with data.validation_fraction."));
  f.push_back(
      real_field("data.validation_fraction", LEAP_FIELD(data.validation_fraction),
                 closed_open(0, 1, "1 would leave nothing to train on"),
                 "Fraction of the training tasks held out for validation when data.validation is "
                 "empty, in [0, 1); 0 and no data.validation: no validation."));
  f.push_back(text_list_field(
      "data.task_kinds", LEAP_FIELD(data.task_kinds), not_empty, true,
      "Task kinds to keep (the sandbox's names, e.g. cuda); empty keeps every kind."));
  f.push_back(integer_field("data.batch_size", LEAP_FIELD(data.batch_size), at_least(1),
                            "Tasks per training step; >= 1. The paper's batch is 32."));

  // rollout
  f.push_back(integer_field("rollout.group_size", LEAP_FIELD(rollout.group_size),
                            at_least(2, "a group needs peers to compare with"),
                            "Rollouts per task (G); >= 2. The paper samples 8."));
  f.push_back(
      integer_field("rollout.max_turns", LEAP_FIELD(rollout.max_turns), at_least(1),
                    "Most turns per rollout (M), the first included; >= 1. The paper uses 3."));
  add_sampling_fields(
      f, "rollout.sampling", [](experiment_config & c) -> auto& { return c.rollout.sampling; },
      "training rollouts");
  f.push_back(
      integer_field("rollout.validation.every", LEAP_FIELD(rollout.validation.every), at_least(0),
                    "Validate every this many training steps (and after the last); 0 disables."));
  f.push_back(integer_field("rollout.validation.n", LEAP_FIELD(rollout.validation.n), at_least(1),
                            "Samples per validation task; accuracy is averaged over them; >= 1."));
  add_sampling_fields(
      f, "rollout.validation.sampling",
      [](experiment_config & c) -> auto& { return c.rollout.validation.sampling; }, "validation");

  // gate
  f.push_back(choice_field(
      "gate.policy", LEAP_FIELD(gate.policy),
      std::vector{gate_policy::none, gate_policy::full, gate_policy::dcp,
                  gate_policy::dcp_adaptive},
      "Which groups enter debug turns: none (single-turn GRPO), full (any failure), "
      "dcp (tau_min <= N_fail <= tau_max), dcp_adaptive (thresholds follow quantiles)."));
  f.push_back(choice_field(
      "gate.unit", LEAP_FIELD(gate.unit),
      std::vector{threshold_unit::count, threshold_unit::fraction},
      "Whether gate.tau_min and gate.tau_max count failures or give them as a fraction "
      "of rollout.group_size."));
  f.push_back(
      real_field("gate.tau_min", LEAP_FIELD(gate.tau_min), anything(),
                 "Fewest failures for a group to open (fraction in [0, 1], or whole count <= "
                 "group_size); 0.5: the paper's best range, fail rate >= 50%."));
  f.push_back(
      real_field("gate.tau_max", LEAP_FIELD(gate.tau_max), anything(),
                 "Most failures for a group to open, >= gate.tau_min; same unit as gate.tau_min."));
  f.push_back(
      real_field("gate.adaptive_low_quantile", LEAP_FIELD(gate.adaptive_low_quantile), closed(0, 1),
                 "dcp_adaptive: tau_min follows this quantile of recent groups' failure fractions, "
                 "in [0, 1]."));
  f.push_back(real_field(
      "gate.adaptive_high_quantile", LEAP_FIELD(gate.adaptive_high_quantile), closed(0, 1),
      "dcp_adaptive: tau_max follows this quantile, in [adaptive_low_quantile, 1]."));
  f.push_back(
      integer_field("gate.adaptive_window", LEAP_FIELD(gate.adaptive_window), at_least(1),
                    "dcp_adaptive: the quantiles are over the last this many groups; >= 1."));
  f.push_back(
      integer_field("gate.adaptive_min_groups", LEAP_FIELD(gate.adaptive_min_groups), at_least(0),
                    "dcp_adaptive: static thresholds apply until this many groups were seen; <= "
                    "adaptive_window."));
  f.push_back(real_field(
      "gate.probe_fraction", LEAP_FIELD(gate.probe_fraction), closed(0, 1),
      "Fraction of the groups the gate closed that still run debug turns for measurement only "
      "(never trained on; replay reports their recovery beside the opened groups'), in [0, 1]."));

  // reward
  f.push_back(choice_field(
      "reward.kind", LEAP_FIELD(reward.kind),
      std::vector{reward_kind::rank, reward_kind::static_scalar, reward_kind::binary},
      "rank: the paper's tournament of (pass turn, failure) ranks, in [-1, 1]; static: "
      "reward.static_rewards per turn; binary: 1 pass, 0 failure."));
  f.push_back(
      real_list_field("reward.static_rewards", LEAP_FIELD(reward.static_rewards),
                      "static: reward of a pass at turn m is the m-th value; one value per turn "
                      "(rollout.max_turns)."));
  f.push_back(real_field("reward.failure_reward", LEAP_FIELD(reward.failure_reward), anything(),
                         "Reward of a rollout that never passed (static and binary)."));

  // advantage
  f.push_back(choice_field(
      "advantage.kind", LEAP_FIELD(advantage.kind),
      std::vector{advantage_kind::grpo, advantage_kind::mean_only, advantage_kind::none},
      "grpo: (R - mean) / (std + epsilon); mean_only: R - mean (Dr.GRPO); none: R."));
  f.push_back(real_field("advantage.epsilon", LEAP_FIELD(advantage.epsilon),
                         above(0, "a group of equal rewards has std 0"),
                         "Added to the group's reward std before dividing (grpo); > 0."));
  f.push_back(
      real_field("advantage.gamma", LEAP_FIELD(advantage.gamma), open_closed(0, 1),
                 "Discount of earlier turns' tokens for a non-negative advantage, in (0, 1]; 1 "
                 "weighs every turn alike."));

  // learner
  f.push_back(choice_field(
      "learner.kind", LEAP_FIELD(learner.kind),
      std::vector{learner_kind::record, learner_kind::torch},
      "record: store scored batches, update nothing (dry runs, benchmarks); torch: the "
      "LibTorch learner."));
  f.push_back(
      text_field("learner.model_path", LEAP_FIELD(learner.model_path), nullptr,
                 "Folder of the initial policy weights (safetensors + config.json); required for "
                 "learner.kind torch."));
  f.push_back(real_field("learner.lr", LEAP_FIELD(learner.lr),
                         above(0, "a zero rate trains nothing; use learner.kind: record"),
                         "AdamW learning rate; > 0. The paper's 1e-6."));
  f.push_back(real_field("learner.weight_decay", LEAP_FIELD(learner.weight_decay), at_least(0),
                         "AdamW decoupled weight decay; >= 0. The paper's 0.1."));
  f.push_back(real_pair_field("learner.betas", LEAP_FIELD(learner.betas), closed_open(0, 1),
                              "AdamW [beta1, beta2], each in [0, 1)."));
  f.push_back(
      real_field("learner.clip_low", LEAP_FIELD(learner.clip_low),
                 closed_open(0, 1, "the ratio's lower bound 1 - clip_low must stay positive"),
                 "Ratio clip below 1: the ratio is kept >= 1 - clip_low; in [0, 1)."));
  f.push_back(real_field(
      "learner.clip_high", LEAP_FIELD(learner.clip_high), at_least(0),
      "Ratio clip above 1 (DAPO's clip-higher, 0.28): the ratio is kept <= 1 + clip_high."));
  f.push_back(real_field("learner.kl_coef", LEAP_FIELD(learner.kl_coef), at_least(0),
                         "Weight of the KL penalty to the initial policy; 0 disables it."));
  f.push_back(choice_field(
      "learner.loss_aggregation", LEAP_FIELD(learner.loss_aggregation),
      std::vector{loss_aggregation::token_mean, loss_aggregation::seq_mean_token_mean,
                  loss_aggregation::seq_mean_token_sum},
      "How token losses become the batch loss; seq_mean_token_mean is the paper's "
      "sample-level loss (long rollouts do not dominate)."));
  f.push_back(real_field("learner.grad_clip", LEAP_FIELD(learner.grad_clip), at_least(0),
                         "Global gradient-norm clip; 0 disables clipping."));
  f.push_back(integer_field("learner.warmup_steps", LEAP_FIELD(learner.warmup_steps), at_least(0),
                            "Steps of linear learning-rate warm-up from 0."));
  f.push_back(integer_field(
      "learner.micro_batch_tokens", LEAP_FIELD(learner.micro_batch_tokens), at_least(1),
      "Tokens per forward/backward pass; gradients accumulate over micro-batches."));
  f.push_back(integer_field(
      "learner.mini_batches", LEAP_FIELD(learner.mini_batches), at_least(1),
      "Optimiser steps per training step (the batch split in parts); 1 is on-policy."));
  f.push_back(text_field("learner.checkpoint_dir", LEAP_FIELD(learner.checkpoint_dir), nullptr,
                         "Folder for checkpoints; empty: <run_dir>/checkpoints."));
  f.push_back(integer_field(
      "learner.checkpoint_every", LEAP_FIELD(learner.checkpoint_every), at_least(0),
      "Save a checkpoint every this many steps (and after the last); 0: only after the "
      "last."));
  f.push_back(text_field("learner.device", LEAP_FIELD(learner.device), check_torch_device,
                         "Where the LibTorch learner runs (and the model of an embedded policy "
                         "server): cpu, cuda or cuda:N."));
  f.push_back(text_field(
      "learner.init_preset", LEAP_FIELD(learner.init_preset), check_init_preset,
      "tiny or small: when learner.model_path holds no model, write a random model of that "
      "shape there first (seeded by experiment.seed), byte-level or with policy.tokenizer's "
      "vocabulary; empty: the model must exist."));

  // policy
  f.push_back(choice_field(
      "policy.flavour", LEAP_FIELD(policy.flavour),
      std::vector{server_flavour::vllm, server_flavour::sglang, server_flavour::embedded},
      "Inference server protocol: vllm (/v1/completions, token ids), sglang (/generate), "
      "embedded (in-process; no endpoints)."));
  f.push_back(text_field(
      "policy.weight_sync", LEAP_FIELD(policy.weight_sync), check_weight_sync,
      "How the torch learner's weights reach the servers: disk (a folder per step, the "
      "server's load route), in_memory (embedded server only: copied in the process), nccl "
      "(vLLM's weight-transfer engine: one vllm server with --weight-transfer-config "
      "'{\"backend\": \"nccl\"}' receives a broadcast from the learner; gloo on cpu), ipc "
      "(one vllm server on the learner's GPU, on this host, with --weight-transfer-config "
      "'{\"backend\": \"ipc\"}': it copies the weights out of the learner's CUDA buffer); empty: "
      "in_memory for an embedded server with policy.model, else disk."));
  f.push_back(
      text_list_field("policy.endpoints", LEAP_FIELD(policy.endpoints), check_url, true,
                      "Base URLs http(s)://host[:port] of the servers, no path; load-balanced, a "
                      "conversation pinned to one."));
  f.push_back(text_field(
      "policy.model", LEAP_FIELD(policy.model), nullptr,
      "Model name sent with requests (vLLM's --served-model-name); empty: the endpoint's "
      "only model. For embedded: a model folder served by LibTorch in-process, with its own "
      "tokenizer.json and chat template when it has them, else byte-level; empty: the "
      "scripted backend."));
  f.push_back(
      text_field("policy.tokenizer", LEAP_FIELD(policy.tokenizer), nullptr,
                 "Folder with tokenizer.json and tokenizer_config.json (chat template), rendered "
                 "locally for every flavour (an embedded model then serves it); empty: the "
                 "endpoint tokenises."));
  f.push_back(integer_field("policy.max_in_flight", LEAP_FIELD(policy.max_in_flight), at_least(1),
                            "Most requests in flight per endpoint (back-pressure); >= 1."));
  f.push_back(real_field("policy.request_timeout_s", LEAP_FIELD(policy.request_timeout_s), above(0),
                         "Seconds a generation request may take before it is retried; > 0."));
  f.push_back(integer_field("policy.retries", LEAP_FIELD(policy.retries), at_least(0),
                            "Retries of a failed or timed-out request before the rollout fails."));
  f.push_back(bool_field("policy.stream", LEAP_FIELD(policy.stream),
                         "Ask for streamed responses (SSE): a cut stream resumes from the tokens "
                         "already received instead of generating them again."));

  // verifier
  f.push_back(integer_field("verifier.compile_workers", LEAP_FIELD(verifier.compile_workers),
                            at_least(0), "Parallel compilations; 0: one per CPU core."));
  f.push_back(integer_field(
      "verifier.gpu_slots", LEAP_FIELD(verifier.gpu_slots), at_least(0),
      "Candidates run on GPUs at once on this host (one per GPU keeps timings honest); 0: "
      "none locally."));
  f.push_back(real_field("verifier.compile_timeout_s", LEAP_FIELD(verifier.compile_timeout_s),
                         above(0), "Wall-clock limit of one compilation, seconds; > 0."));
  f.push_back(real_field("verifier.run_timeout_s", LEAP_FIELD(verifier.run_timeout_s), above(0),
                         "Wall-clock limit of one candidate run, seconds; > 0."));
  f.push_back(integer_field(
      "verifier.output_limit_bytes", LEAP_FIELD(verifier.output_limit_bytes), at_least(1),
      "Most bytes of a candidate's output kept; more is an output-flood verdict."));
  f.push_back(text_field("verifier.cache_dir", LEAP_FIELD(verifier.cache_dir), nullptr,
                         "Folder of the content-addressed compile cache; empty: <run_dir>/cache."));
  f.push_back(integer_field(
      "verifier.cache_max_bytes", LEAP_FIELD(verifier.cache_max_bytes), at_least(0),
      "Size at which the compile cache evicts its oldest entries; 0 disables the cache."));
  f.push_back(
      text_field("verifier.cuda_arch", LEAP_FIELD(verifier.cuda_arch), check_cuda_arch,
                 "nvcc -arch of CUDA candidates: sm_NN[a|f] or compute_NN; sm_90a is H100/H200."));
  f.push_back(text_field("verifier.python", LEAP_FIELD(verifier.python), check_python,
                         "Interpreter of python and kernelbench tasks: a name found in /usr/local/bin,"
                         " /usr/bin or /bin, or an absolute path (a virtualenv's python)."));
  f.push_back(integer_field(
      "verifier.feedback_max_chars", LEAP_FIELD(verifier.feedback_max_chars), at_least(1),
      "Characters of compiler/runtime feedback kept for a debug turn's prompt."));
  f.push_back(text_list_field("verifier.nodes", LEAP_FIELD(verifier.nodes), check_node_address,
                              true, "Remote verifier nodes (`leap verifier-node`) as host:port."));
  f.push_back(integer_field(
      "verifier.local_jobs", LEAP_FIELD(verifier.local_jobs), at_least(0),
      "With verifier.nodes: jobs this host's verifier takes beside the nodes; 0: all to nodes."));
  f.push_back(text_field("verifier.node_secret_file", LEAP_FIELD(verifier.node_secret_file),
                         nullptr, "File with the nodes' shared secret (--secret-file); empty: none."));
  f.push_back(real_field("verifier.node_timeout_s", LEAP_FIELD(verifier.node_timeout_s), above(0),
                         "Seconds without traffic after which a node counts as cut off."));
  f.push_back(real_field("verifier.node_retry_max_s", LEAP_FIELD(verifier.node_retry_max_s),
                         above(0), "Longest delay between attempts to reach a lost node, seconds."));
  f.push_back(text_field("verifier.tls.certificate", LEAP_FIELD(verifier.tls_certificate), nullptr,
                         "PEM certificate of this side for TLS to the nodes; empty: plain TCP."));
  f.push_back(text_field("verifier.tls.key", LEAP_FIELD(verifier.tls_key), nullptr,
                         "PEM private key of verifier.tls.certificate."));
  f.push_back(text_field("verifier.tls.ca", LEAP_FIELD(verifier.tls_ca), nullptr,
                         "PEM CA file; set: the nodes' certificates are required and checked."));

  // schedule
  f.push_back(choice_field(
      "schedule.mode", LEAP_FIELD(schedule.mode),
      std::vector{schedule_mode::streaming, schedule_mode::barrier},
      "streaming: each stage starts when its input arrives; barrier: each stage waits for "
      "the whole batch (timing baseline)."));
  f.push_back(
      integer_field("schedule.max_staleness", LEAP_FIELD(schedule.max_staleness), at_least(0),
                    "Steps generation may run ahead of the learner; 0 is strictly on-policy."));

  // simulation
  f.push_back(integer_field("simulation.tasks", LEAP_FIELD(simulation.tasks), at_least(1),
                            "`leap simulate`: synthetic tasks; >= data.batch_size."));
  f.push_back(
      real_field("simulation.difficulty_alpha", LEAP_FIELD(simulation.difficulty_alpha), above(0),
                 "`leap simulate`: first-turn pass probabilities ~ Beta(alpha, beta); alpha > 0."));
  f.push_back(real_field("simulation.difficulty_beta", LEAP_FIELD(simulation.difficulty_beta),
                         above(0), "`leap simulate`: beta of that Beta distribution; > 0."));
  f.push_back(
      real_field("simulation.debug_fix_probability", LEAP_FIELD(simulation.debug_fix_probability),
                 closed(0, 1),
                 "`leap simulate`: chance a failed rollout of an opened group passes at each debug "
                 "turn, in [0, 1]."));
  f.push_back(real_field(
      "simulation.skill_gain", LEAP_FIELD(simulation.skill_gain), at_least(0),
      "`leap simulate`: step size of the synthetic policy (logit += skill_gain * advantage "
      "* (outcome - p)); 0 freezes it."));
  return f;
}

#undef LEAP_FIELD

// A check that reads several keys; reported at `keys.front()` (or the first of `keys` present in
// the text), skipped when any of them already has a problem.
struct cross_check {
  std::vector<std::string> keys;
  std::function<std::optional<std::string>(const experiment_config&)> check;
};

bool opens_debug_turns(gate_policy p) { return p != gate_policy::none; }

std::optional<std::string> check_threshold(const experiment_config& c, double tau) {
  if (c.gate.unit == threshold_unit::fraction) {
    if (tau < 0.0 || tau > 1.0) {
      return "must be a fraction in [0, 1] when gate.unit is fraction, got " + show(tau);
    }
    return std::nullopt;
  }
  if (tau != std::floor(tau)) {
    return "must be a whole number of failures when gate.unit is count, got " + show(tau) +
           " (or set gate.unit: fraction)";
  }
  if (tau < 0.0) {
    return "must be >= 0, got " + show(tau);
  }
  if (tau > c.rollout.group_size) {
    return "must be <= rollout.group_size (" + show(c.rollout.group_size) +
           ") when gate.unit is count, got " + show(tau);
  }
  return std::nullopt;
}

std::vector<cross_check> build_cross_checks() {
  std::vector<cross_check> checks;
  checks.push_back({{"gate.tau_min", "gate.unit", "rollout.group_size"},
                    [](const experiment_config& c) { return check_threshold(c, c.gate.tau_min); }});
  checks.push_back({{"gate.tau_max", "gate.unit", "rollout.group_size"},
                    [](const experiment_config& c) { return check_threshold(c, c.gate.tau_max); }});
  checks.push_back({{"gate.tau_min", "gate.tau_max"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.gate.tau_min > c.gate.tau_max) {
                        return "must be <= gate.tau_max (" + show(c.gate.tau_max) + "), got " +
                               show(c.gate.tau_min) + ": no group could open";
                      }
                      return std::nullopt;
                    }});
  checks.push_back({{"gate.adaptive_high_quantile", "gate.adaptive_low_quantile"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.gate.adaptive_high_quantile < c.gate.adaptive_low_quantile) {
                        return "must be >= gate.adaptive_low_quantile (" +
                               show(c.gate.adaptive_low_quantile) + "), got " +
                               show(c.gate.adaptive_high_quantile);
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"gate.adaptive_min_groups", "gate.adaptive_window"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.gate.adaptive_min_groups > c.gate.adaptive_window) {
           return "must be <= gate.adaptive_window (" + show(c.gate.adaptive_window) + "), got " +
                  show(c.gate.adaptive_min_groups) +
                  ": the window never holds more groups, so the adaptive thresholds would never "
                  "apply";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"gate.policy", "rollout.max_turns"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (opens_debug_turns(c.gate.policy) && c.rollout.max_turns < 2) {
           return "'" + to_string(c.gate.policy) +
                  "' opens groups for debug turns, but rollout.max_turns is 1 and leaves none; "
                  "use gate.policy: none or raise rollout.max_turns";
         }
         return std::nullopt;
       }});
  checks.push_back({{"reward.static_rewards", "reward.kind", "rollout.max_turns"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.reward.kind == reward_kind::static_scalar &&
                          c.reward.static_rewards.size() !=
                              static_cast<std::size_t>(c.rollout.max_turns)) {
                        return "must hold one reward per turn, rollout.max_turns = " +
                               show(c.rollout.max_turns) + " values, got " +
                               show(c.reward.static_rewards.size());
                      }
                      return std::nullopt;
                    }});
  checks.push_back({{"policy.endpoints", "policy.flavour"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.policy.flavour != server_flavour::embedded &&
                          c.policy.endpoints.empty()) {
                        return "must list at least one URL when policy.flavour is " +
                               to_string(c.policy.flavour);
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"learner.model_path", "learner.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.learner.kind == learner_kind::torch && c.learner.model_path.empty()) {
           return std::optional<std::string>{
               "is required when learner.kind is torch (the initial weights to train)"};
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.model", "learner.kind", "policy.flavour"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.learner.kind == learner_kind::torch && c.policy.flavour == server_flavour::embedded &&
             c.policy.model.empty()) {
           return std::optional<std::string>{
               "is required when learner.kind is torch and policy.flavour is embedded: the model "
               "folder the embedded server serves (normally learner.model_path)"};
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync", "policy.flavour", "policy.model", "learner.kind", "policy.endpoints"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.policy.weight_sync == "in_memory" &&
             (c.policy.flavour != server_flavour::embedded || c.policy.model.empty())) {
           return std::optional<std::string>{
               "in_memory needs policy.flavour embedded with a policy.model (the server must "
               "share the learner's process)"};
         }
         if (c.policy.weight_sync == "nccl") {
           // vLLM's weight-transfer routes; one broadcast group per run, with one server in it.
           if (c.policy.flavour != server_flavour::vllm) {
             return "nccl needs policy.flavour vllm (the weight-transfer routes of vllm serve "
                    "--weight-transfer-config and leap serve-policy), got " +
                    to_string(c.policy.flavour);
           }
           if (c.learner.kind != learner_kind::torch) {
             return std::optional<std::string>{
                 "nccl needs learner.kind torch (the learner broadcasts its weights)"};
           }
           if (c.policy.endpoints.size() != 1) {
             return "nccl drives exactly one server (one broadcast group per run), got " +
                    show(c.policy.endpoints.size()) + " endpoints";
           }
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync", "policy.flavour", "learner.kind", "learner.device", "policy.endpoints"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.policy.weight_sync != "ipc") return std::nullopt;
         // CUDA IPC: the learner exports a device buffer that one server process on the same host
         // opens, through vLLM's weight-transfer routes.
         if (c.policy.flavour != server_flavour::vllm) {
           return "ipc needs policy.flavour vllm (the weight-transfer routes of leap serve-policy "
                  "--weight-transfer-config), got " + to_string(c.policy.flavour);
         }
         if (c.learner.kind != learner_kind::torch) {
           return std::optional<std::string>{
               "ipc needs learner.kind torch (the learner exports its weights)"};
         }
         if (!c.learner.device.starts_with("cuda")) {
           return "ipc needs learner.device cuda (the weights are shared in GPU memory), got " +
                  c.learner.device;
         }
         if (c.policy.endpoints.size() != 1) {
           return "ipc drives exactly one server (on the learner's host), got " +
                  show(c.policy.endpoints.size()) + " endpoints";
         }
         if (!is_loopback_url(c.policy.endpoints.front())) {
           return "ipc needs the server on this host: its endpoint must be a loopback address "
                  "(127.0.0.1, localhost, [::1]), got " + c.policy.endpoints.front();
         }
         return std::nullopt;
       }});
  checks.push_back({{"policy.tokenizer"}, [](const experiment_config& c) -> std::optional<std::string> {
                      // The embedded scripted backend (no policy.model) reads prompts as the
                      // byte-level ChatML it answers in; a model serves any vocabulary.
                      if (!c.policy.tokenizer.empty() &&
                          c.policy.flavour == server_flavour::embedded && c.policy.model.empty()) {
                        return std::optional<std::string>{
                            "needs policy.model with policy.flavour embedded: the embedded "
                            "scripted backend speaks the byte-level tokenizer only"};
                      }
                      return std::nullopt;
                    }});
  checks.push_back({{"learner.mini_batches", "data.batch_size", "rollout.group_size"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      const std::int64_t rollouts =
                          static_cast<std::int64_t>(c.data.batch_size) * c.rollout.group_size;
                      if (c.learner.mini_batches > rollouts) {
                        return "must be <= data.batch_size * rollout.group_size (" +
                               show(rollouts) + " rollouts per step), got " +
                               show(c.learner.mini_batches);
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"schedule.max_staleness", "schedule.mode"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.schedule.mode == schedule_mode::barrier && c.schedule.max_staleness != 0) {
           return "must be 0 when schedule.mode is barrier (steps run strictly one after "
                  "another), got " +
                  show(c.schedule.max_staleness);
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"data.validation_fraction", "data.validation"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (!c.data.validation.empty() && c.data.validation_fraction > 0.0) {
           return "must be 0 when data.validation names a validation set (use one or the "
                  "other), got " +
                  show(c.data.validation_fraction);
         }
         return std::nullopt;
       }});
  checks.push_back({{"simulation.tasks", "data.batch_size"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.simulation.tasks < c.data.batch_size) {
                        return "must be >= data.batch_size (" + show(c.data.batch_size) +
                               "): a step samples that many distinct tasks, got " +
                               show(c.simulation.tasks);
                      }
                      return std::nullopt;
                    }});
  return checks;
}

// The schema with its lookups, built once.
struct schema {
  std::vector<field_spec> fields;
  std::vector<cross_check> checks;
  std::map<std::string, std::size_t, std::less<>> by_key;
  std::set<std::string, std::less<>> sections;               // "rollout", "rollout.validation", ...
  std::map<std::string, std::vector<std::string>> children;  // prefix ("" = top) -> names, in order

  schema() : fields(build_fields()), checks(build_cross_checks()) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
      by_key.emplace(fields[i].key, i);
      const auto parts = split_key(fields[i].key);
      std::string prefix;
      for (const auto& part : parts) {
        auto& names = children[prefix];
        if (std::find(names.begin(), names.end(), part) == names.end()) {
          names.push_back(part);
        }
        prefix = prefix.empty() ? part : prefix + "." + part;
        if (prefix != fields[i].key) {
          sections.insert(prefix);
        }
      }
    }
  }

  [[nodiscard]] const field_spec* field(std::string_view key) const {
    const auto it = by_key.find(key);
    return it == by_key.end() ? nullptr : &fields[it->second];
  }
};

const schema& the_schema() {
  static const schema s;
  return s;
}

std::string suggestion(const schema& s, const std::string& prefix, const std::string& name) {
  const auto it = s.children.find(prefix);
  const std::vector<std::string> siblings =
      it == s.children.end() ? std::vector<std::string>{} : it->second;
  if (auto guess = closest(name, siblings)) {
    return "; did you mean '" + *guess + "'?";
  }
  // The right name in the wrong section ("rollout.temperature"): point at every key whose last part
  // is nearest that name, if any is near.
  std::vector<std::string> elsewhere;
  std::size_t nearest = std::numeric_limits<std::size_t>::max();
  const auto consider = [&](const std::string& key) {
    const std::string leaf = split_key(key).back();
    if (!closest(name, {leaf})) {
      return;
    }
    const std::size_t d = edit_distance(name, leaf);
    if (d < nearest) {
      elsewhere.clear();
      nearest = d;
    }
    if (d == nearest) {
      elsewhere.push_back(key);
    }
  };
  for (const auto& f : s.fields) {
    consider(f.key);
  }
  for (const auto& section : s.sections) {
    consider(section);
  }
  if (!elsewhere.empty() && elsewhere.size() <= 3) {
    return "; did you mean " +
           join(elsewhere, " or ", [](const std::string& k) { return "'" + k + "'"; }) + "?";
  }
  return "; expected one of: " + join(siblings, ", ", [](const std::string& k) { return k; });
}

struct parse_state {
  experiment_config config;
  std::vector<problem> problems;
  std::map<std::string, int> lines;  // dotted key or section -> 1-based line where the text sets it
  std::set<std::string> failed;      // keys with a problem: checks that read them are skipped
};

void walk(const schema& s, const YAML::Node& map, const std::string& prefix, parse_state& state) {
  std::map<std::string, int> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node& key_node = it->first;
    const YAML::Node& value = it->second;
    const int line = line_of(key_node);
    if (!key_node.IsScalar()) {
      state.problems.push_back(
          {line, prefix, "expected a plain key name, got " + describe(key_node)});
      continue;
    }
    const std::string name = excerpt(key_node.Scalar());
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (const auto first = seen.find(name); first != seen.end()) {
      state.problems.push_back(
          {line, key, "duplicate key (first set at line " + std::to_string(first->second) + ")"});
      state.failed.insert(key);
      continue;
    }
    seen.emplace(name, line);
    state.lines.emplace(key, line);
    if (const field_spec* f = s.field(key)) {
      sink out{key, line, state.problems};
      if (!f->read(value, state.config, out)) {
        state.failed.insert(key);
      }
    } else if (s.sections.contains(key)) {
      if (value.IsNull()) {
        continue;  // "gate:" with nothing under it: every key keeps its default
      }
      if (!value.IsMap()) {
        state.problems.push_back(
            {line, key, "expected a section (a mapping of keys), got " + describe(value)});
        continue;
      }
      walk(s, value, key, state);
    } else {
      state.problems.push_back({line, key, "unknown key" + suggestion(s, prefix, name)});
    }
  }
}

// Range and consistency checks. `lines` places each problem; `failed` holds keys that already have
// a problem, and grows with the keys that fail here.
void run_checks(const schema& s, const experiment_config& c,
                const std::map<std::string, int>& lines, std::set<std::string>& failed,
                std::vector<problem>& problems) {
  const auto line_of_key = [&](const std::string& key) {
    const auto it = lines.find(key);
    return it == lines.end() ? 0 : it->second;
  };
  for (const auto& f : s.fields) {
    if (!f.check || failed.contains(f.key)) {
      continue;
    }
    if (auto why = f.check(c)) {
      problems.push_back({line_of_key(f.key), f.key, *why});
      failed.insert(f.key);
    }
  }
  for (const auto& check : s.checks) {
    if (std::any_of(check.keys.begin(), check.keys.end(),
                    [&](const std::string& k) { return failed.contains(k); })) {
      continue;
    }
    if (auto why = check.check(c)) {
      int line = 0;
      for (const auto& k : check.keys) {
        if ((line = line_of_key(k)) > 0) {
          break;
        }
      }
      problems.push_back({line, check.keys.front(), *why});
      failed.insert(check.keys.front());
    }
  }
}

// The start of each document of `text`, up to the third. yaml-cpp 0.7's LoadAll never returns on a
// stray ',' outside brackets: it yields empty documents at the same place for ever. Counting with
// the event parser, which stops early, turns that into an error instead of a hang.
class document_counter : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;

  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& /*mark*/, YAML::anchor_t /*anchor*/) override {}
  void OnAlias(const YAML::Mark& /*mark*/, YAML::anchor_t /*anchor*/) override {}
  void OnScalar(const YAML::Mark& /*mark*/, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                const std::string& /*value*/) override {}
  void OnSequenceStart(const YAML::Mark& /*mark*/, const std::string& /*tag*/,
                       YAML::anchor_t /*anchor*/, YAML::EmitterStyle::value /*style*/) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& /*mark*/, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                  YAML::EmitterStyle::value /*style*/) override {}
  void OnMapEnd() override {}
};

// Throws YAML::Exception on a syntax error in the first three documents.
std::vector<YAML::Mark> document_starts(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  document_counter counter;
  while (counter.starts.size() < 3 && parser.HandleNextDocument(counter)) {
  }
  return std::move(counter.starts);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

bool operator==(const experiment_config& a, const experiment_config& b) {
  const auto gate_equal = [](const gate_config& x, const gate_config& y) {
    return x.policy == y.policy && x.unit == y.unit && x.tau_min == y.tau_min &&
           x.tau_max == y.tau_max && x.adaptive_low_quantile == y.adaptive_low_quantile &&
           x.adaptive_high_quantile == y.adaptive_high_quantile &&
           x.adaptive_window == y.adaptive_window && x.adaptive_min_groups == y.adaptive_min_groups;
  };
  const auto reward_equal = [](const reward_config& x, const reward_config& y) {
    return x.kind == y.kind && x.static_rewards == y.static_rewards &&
           x.failure_reward == y.failure_reward;
  };
  const auto advantage_equal = [](const advantage_config& x, const advantage_config& y) {
    return x.kind == y.kind && x.epsilon == y.epsilon && x.gamma == y.gamma;
  };
  return a.experiment == b.experiment && a.data == b.data && a.rollout == b.rollout &&
         gate_equal(a.gate, b.gate) && reward_equal(a.reward, b.reward) &&
         advantage_equal(a.advantage, b.advantage) && a.learner == b.learner &&
         a.policy == b.policy && a.verifier == b.verifier && a.schedule == b.schedule &&
         a.simulation == b.simulation;
}

result<std::string> read_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return error{path + ": cannot read config: it is a directory"};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int code = errno;
    return error{path + ": cannot read config: " +
                 (code != 0 ? std::strerror(code) : "cannot open the file")};
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return error{path + ": cannot read config: read error"};
  }
  return text.str();
}

result<experiment_config> load_config(const std::string& path) {
  auto text = read_config_file(path);
  if (!text) return text.err();
  return parse_config(*text, path);
}

result<experiment_config> parse_config(const std::string& yaml_text,
                                       const std::string& source_name) {
  const schema& s = the_schema();
  YAML::Node root;
  try {
    const auto starts = document_starts(yaml_text);
    if (starts.size() > 1) {
      // A document starting where the previous one did: the parser made no progress (a stray ',').
      const bool stuck =
          starts[1].pos == starts[0].pos || (starts.size() > 2 && starts[2].pos == starts[1].pos);
      const YAML::Mark& at = starts[1];
      return join_problems(source_name, {{at.line + 1, "",
                                          stuck ? "YAML syntax error: text outside any mapping or "
                                                  "list (a ',' outside brackets?) (column " +
                                                      std::to_string(at.column + 1) + ")"
                                                : "expected one YAML document, found a second one "
                                                  "here (remove the '---' separator)"}});
    }
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const std::string column =
        e.mark.is_null() ? "" : " (column " + std::to_string(e.mark.column + 1) + ")";
    return join_problems(source_name, {{line, "", "YAML syntax error: " + e.msg + column}});
  }
  std::vector<YAML::Node> documents;
  if (root.IsDefined()) {
    documents.push_back(root);
  }
  parse_state state;
  if (!documents.empty() && !documents.front().IsNull()) {
    const YAML::Node& root = documents.front();
    if (!root.IsMap()) {
      return join_problems(
          source_name, {{line_of(root), "",
                         "expected a mapping of sections (experiment:, rollout:, ...) at the top "
                         "level, got " +
                             describe(root)}});
    }
    walk(s, root, "", state);
  }
  run_checks(s, state.config, state.lines, state.failed, state.problems);
  if (!state.problems.empty()) {
    return join_problems(source_name, std::move(state.problems));
  }
  return std::move(state.config);
}

std::optional<int> config_key_line(const std::string& yaml_text, std::string_view key) {
  YAML::Node node;
  try {
    node = YAML::Load(yaml_text);
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
  int line = 0;
  for (const auto& part : split_key(std::string(key))) {
    if (!node.IsMap()) return std::nullopt;
    bool found = false;
    // The key's own line (a section's value starts on the line below it).
    for (auto it = node.begin(); it != node.end() && !found; ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == part) {
        line = line_of(it->first);
        YAML::Node value = it->second;
        node.reset(value);  // operator= would overwrite the referenced node's value
        found = true;
      }
    }
    if (!found) return std::nullopt;
  }
  return line > 0 ? std::optional<int>(line) : std::nullopt;
}

bool resume_may_change(std::string_view key) {
  // Where and how fast the experiment runs, not what it computes: the endpoints (a server that came
  // back on another port), request timeouts and retries, worker counts, caches, remote nodes and
  // their credentials, logging, and how many steps to run. Everything else (data, sampling, gate,
  // reward, advantage, optimiser, verifier limits that decide verdicts) defines the experiment.
  static const std::set<std::string, std::less<>> operational = {
      "experiment.steps",          "experiment.log_level",      "learner.checkpoint_every",
      "learner.micro_batch_tokens", "policy.endpoints",         "policy.max_in_flight",
      "policy.request_timeout_s",  "policy.retries",            "policy.stream",
      "verifier.compile_workers",  "verifier.gpu_slots",        "verifier.cache_dir",
      "verifier.python",
      "verifier.cache_max_bytes",  "verifier.nodes",            "verifier.local_jobs",
      "verifier.node_secret_file", "verifier.node_timeout_s",   "verifier.node_retry_max_s",
      "verifier.tls.certificate",  "verifier.tls.key",          "verifier.tls.ca"};
  return operational.contains(key) || key.rfind("simulation.", 0) == 0;
}

std::vector<std::string> resume_conflicts(const experiment_config& stored,
                                          const experiment_config& now) {
  std::vector<std::string> out;
  for (const auto& f : the_schema().fields) {
    if (resume_may_change(f.key)) continue;
    const std::string a = f.write(stored);
    const std::string b = f.write(now);
    if (a != b) out.push_back(f.key + " (stored " + a + ", now " + b + ")");
  }
  return out;
}

status validate_config(const experiment_config& config) {
  std::vector<problem> problems;
  std::set<std::string> failed;
  run_checks(the_schema(), config, {}, failed, problems);
  if (!problems.empty()) {
    return join_problems("", std::move(problems));
  }
  return ok_status();
}

std::string render_config(const experiment_config& config) {
  std::string out;
  std::vector<std::string> open;  // the sections the previous key was written in
  for (const auto& f : the_schema().fields) {
    auto parts = split_key(f.key);
    const std::string leaf = parts.back();
    parts.pop_back();
    std::size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    open.resize(common);
    for (std::size_t depth = common; depth < parts.size(); ++depth) {
      if (depth == 0 && !out.empty()) {
        out += "\n";
      }
      out += std::string(2 * depth, ' ') + parts[depth] + ":\n";
      open.push_back(parts[depth]);
    }
    out += std::string(2 * parts.size(), ' ') + leaf + ": " + f.write(config) + "\n";
  }
  return out;
}

std::vector<config_key_doc> config_keys() {
  const experiment_config defaults;
  std::vector<config_key_doc> docs;
  for (const auto& f : the_schema().fields) {
    docs.push_back({f.key, f.type, f.write(defaults), f.meaning});
  }
  return docs;
}

std::string config_reference_markdown() {
  const auto cell = [](const std::string& text) {
    std::string out;
    for (const char ch : text) {
      out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    }
    return out;
  };
  std::string out = "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& doc : config_keys()) {
    out += "| `" + doc.key + "` | " + cell(doc.type) + " | `" + cell(doc.default_value) + "` | " +
           cell(doc.meaning) + " |\n";
  }
  return out;
}

std::optional<std::string> config_value(const experiment_config& config, std::string_view key) {
  if (const field_spec* f = the_schema().field(key)) {
    return f->write(config);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Enum names

namespace {
template <class Enum>
std::optional<Enum> parse_by_name(std::initializer_list<Enum> values, const std::string& name) {
  for (const Enum v : values) {
    if (to_string(v) == name) {
      return v;
    }
  }
  return std::nullopt;
}
}  // namespace

std::string to_string(log_verbosity v) {
  switch (v) {
    case log_verbosity::trace:
      return "trace";
    case log_verbosity::debug:
      return "debug";
    case log_verbosity::info:
      return "info";
    case log_verbosity::warn:
      return "warn";
    case log_verbosity::error:
      return "error";
    case log_verbosity::off:
      return "off";
  }
  return "unknown";
}

std::optional<log_verbosity> parse_log_verbosity(const std::string& name) {
  return parse_by_name({log_verbosity::trace, log_verbosity::debug, log_verbosity::info,
                        log_verbosity::warn, log_verbosity::error, log_verbosity::off},
                       name);
}

std::string to_string(learner_kind k) {
  switch (k) {
    case learner_kind::record:
      return "record";
    case learner_kind::torch:
      return "torch";
  }
  return "unknown";
}

std::optional<learner_kind> parse_learner_kind(const std::string& name) {
  return parse_by_name({learner_kind::record, learner_kind::torch}, name);
}

std::string to_string(schedule_mode m) {
  switch (m) {
    case schedule_mode::streaming:
      return "streaming";
    case schedule_mode::barrier:
      return "barrier";
  }
  return "unknown";
}

std::optional<schedule_mode> parse_schedule_mode(const std::string& name) {
  return parse_by_name({schedule_mode::streaming, schedule_mode::barrier}, name);
}

}  // namespace leap
