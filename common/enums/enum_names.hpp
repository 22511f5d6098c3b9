// The one name service of the shared vocabulary (common/enums/*.hpp). Each enum there is dense from
// 0 and has one name table: a `name_of(E)` switch with no `default:`, so that -Wswitch names the
// table when a value is added. to_string and parse are derived from that switch, never written
// again per enum or per module.
#pragma once

#include "common/result.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

namespace leap::enum_names {

// Values in declaration order: name_of(E{i}) is non-empty for every value and empty past the last.
template <class E>
constexpr std::size_t count() {
  static_assert(std::is_enum_v<E>);
  std::size_t n = 0;
  while (n < 256 && !name_of(static_cast<E>(n)).empty()) {
    ++n;
  }
  return n;
}

// Every value in declaration order: what a config key accepts, a CLI option lists, a test walks.
template <class E>
constexpr std::array<E, count<E>()> values() {
  std::array<E, count<E>()> out{};
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<E>(i);
  }
  return out;
}

// The name of `value`; "unknown(N)" for a byte outside the enum (a cast from corrupt data).
template <class E>
std::string to_string(E value) {
  const auto name = name_of(value);
  if (name.empty()) {
    return "unknown(" + std::to_string(static_cast<int>(value)) + ")";
  }
  return std::string(name);
}

// "pass, format, compile, ...": every name in declaration order.
template <class E>
std::string valid_names() {
  std::string out;
  constexpr auto n = count<E>();
  for (std::size_t i = 0; i < n; ++i) {
    out += (i == 0 ? "" : ", ") + std::string(name_of(static_cast<E>(i)));
  }
  return out;
}

// The value named `name` (exact, case-sensitive); otherwise an error "unknown <what> 'x' (valid:
// a, b, c)".
template <class E>
result<E> parse(std::string_view name, std::string_view what) {
  constexpr auto n = count<E>();
  for (std::size_t i = 0; i < n; ++i) {
    if (name_of(static_cast<E>(i)) == name) {
      return static_cast<E>(i);
    }
  }
  return error{"unknown " + std::string(what) + " '" + std::string(name) +
               "' (valid: " + valid_names<E>() + ")"};
}

}  // namespace leap::enum_names
