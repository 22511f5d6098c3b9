// Internal to orchestrator/config: what the schema's section files (schema_*.cpp) share: the
// builders of a key's entry, one per C++ type of member, and `operational`. A key's own check lives
// beside its entry in the section's file; checks that several sections use are in config_checks.
// Not a public header.
#pragma once

#include "orchestrator/detail/config_checks.hpp"
#include "orchestrator/detail/config_schema.hpp"
#include "orchestrator/detail/config_text.hpp"
#include "orchestrator/detail/config_yaml.hpp"

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace leap::config_detail {

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

// The reader of a scalar key: `read` (read_integer, read_real, ...) converts the node into the
// member; a problem goes to the sink and leaves the member as it was.
template <class T, class Access>
auto scalar_reader(Access access, std::optional<std::string> (*read)(const YAML::Node&, T&)) {
  return [access, read](const YAML::Node& n, experiment_config& c, sink& s) {
    T value{};
    if (auto why = read(n, value)) {
      return s.fail(*why);
    }
    access(c) = std::move(value);
    return true;
  };
}

template <class Access>
field_spec integer_field(std::string key, Access access, range r, std::string meaning) {
  using T = std::remove_reference_t<decltype(access(std::declval<experiment_config&>()))>;
  field_spec f{std::move(key), "integer", std::move(meaning), {}, {}, {}};
  f.read = scalar_reader<T>(access, &read_integer<T>);
  f.write = [access](const experiment_config& c) { return show(view(access, c)); };
  f.check = [access, r](const experiment_config& c) { return check_range(r, view(access, c)); };
  return f;
}

template <class Access>
field_spec bool_field(std::string key, Access access, std::string meaning) {
  field_spec f{std::move(key), "boolean", std::move(meaning), {}, {}, {}};
  f.read = scalar_reader<bool>(access, &read_bool);
  f.write = [access](const experiment_config& c) {
    return std::string(view(access, c) ? "true" : "false");
  };
  return f;
}

template <class Access>
field_spec real_field(std::string key, Access access, range r, std::string meaning) {
  field_spec f{std::move(key), "number", std::move(meaning), {}, {}, {}};
  f.read = scalar_reader<double>(access, &read_real);
  f.write = [access](const experiment_config& c) { return format_real(view(access, c)); };
  if (r.lo || r.hi) {
    f.check = [access, r](const experiment_config& c) { return check_range(r, view(access, c)); };
  }
  return f;
}

template <class Access>
field_spec text_field(std::string key, Access access, text_check check, std::string meaning) {
  field_spec f{std::move(key), "string", std::move(meaning), {}, {}, {}};
  f.read = scalar_reader<std::string>(access, &read_text);
  f.write = [access](const experiment_config& c) { return quote(view(access, c)); };
  if (check) {
    f.check = [access, check = std::move(check)](const experiment_config& c) {
      return check(view(access, c));
    };
  }
  return f;
}

// `intro`, then, for an enum whose header says what each value means (`meaning_of(E)` beside its
// name table), ": a (meaning of a), b (meaning of b)." in declaration order.
template <class Enum>
std::string with_meanings(std::string intro) {
  if constexpr (requires(Enum e) { meaning_of(e); }) {
    intro += ":";
    const char* separator = " ";
    for (const Enum v : enum_names::values<Enum>()) {
      intro += separator + std::string(name_of(v)) + " (" + std::string(meaning_of(v)) + ")";
      separator = ", ";
    }
    intro += ".";
  }
  return intro;
}

// An enum's key accepts exactly the names of its table (common/enums, enum_names.hpp), in
// declaration order: a value added to the enum is accepted, listed and documented here with no
// edit, and the config never spells a name of its own. Where the enum has meaning_of, `meaning`
// is the key's intro and each value's meaning follows it (with_meanings).
template <class Access, class Enum = std::remove_reference_t<
                            decltype(std::declval<Access>()(std::declval<experiment_config&>()))>>
field_spec choice_field(std::string key, Access access, std::string meaning) {
  field_spec f{std::move(key),
               "one of: " + enum_names::valid_names<Enum>(),
               with_meanings<Enum>(std::move(meaning)),
               {},
               {},
               {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    const std::string expected = "expected one of " + enum_names::valid_names<Enum>();
    if (!n.IsScalar()) {
      return s.fail(expected + ", got " + describe(n));
    }
    if (auto value = enum_names::parse<Enum>(n.Scalar(), "")) {
      access(c) = *value;
      return true;
    }
    std::vector<std::string> names;
    for (const Enum v : enum_names::values<Enum>()) {
      names.emplace_back(name_of(v));
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

// The reader of a list key: `read` (read_integer, read_real, ...) converts each element; see
// read_list.
template <class T, class Access>
auto list_reader(Access access, std::string element_type,
                 std::optional<std::string> (*read)(const YAML::Node&, T&)) {
  return [access, element_type = std::move(element_type), read](const YAML::Node& n,
                                                                experiment_config& c, sink& s) {
    return read_list(n, access(c), s, element_type, read);
  };
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
  f.read = list_reader<std::string>(access, "strings", &read_text);
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
  f.read = list_reader<T>(access, "integers", &read_integer<T>);
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
  f.read = list_reader<double>(access, "numbers", &read_real);
  f.write = [access](const experiment_config& c) { return write_list(view(access, c)); };
  return f;
}

template <class Access>
field_spec real_pair_field(std::string key, Access access, const range& r, std::string meaning) {
  field_spec f{std::move(key), "list of 2 numbers", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    std::vector<double> values;
    if (!read_list(n, values, s, "2 numbers", &read_real)) {
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

// For a rule that bounds one key by another's value: "must be <= KEY (BOUND), got VALUE" (then
// ": why" when given) when value > bound, else nothing.
template <class T>
[[nodiscard]] std::optional<std::string> at_most_key(T value, const std::string& bound_key, T bound,
                                                     const std::string& why = {}) {
  if (value > bound) {
    return "must be <= " + bound_key + " (" + show(bound) + "), got " + show(value) +
           (why.empty() ? "" : ": " + why);
  }
  return std::nullopt;
}

// The same for a lower bound: "must be >= KEY (BOUND), got VALUE" when value < bound.
template <class T>
[[nodiscard]] std::optional<std::string> at_least_key(T value, const std::string& bound_key,
                                                      T bound, const std::string& why = {}) {
  if (value < bound) {
    return "must be >= " + bound_key + " (" + show(bound) + "), got " + show(value) +
           (why.empty() ? "" : ": " + why);
  }
  return std::nullopt;
}

// A key a resumed run may change (field_spec::resumable).
[[nodiscard]] inline field_spec operational(field_spec f) {
  f.resumable = true;
  return f;
}

}  // namespace leap::config_detail
