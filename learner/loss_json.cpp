#include "learner/detail/loss_json.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace leap::learner::detail {
namespace {

using json = nlohmann::json;

template <class T>
json to_json_value(const T& value) {
  if constexpr (field_listed<const T>) {
    json j = json::object();
    for_each_field(value, [&](const auto& f) { j[std::string(f.name)] = to_json_value(f.value); });
    return j;
  } else if constexpr (std::is_enum_v<T>) {
    return std::string(name_of(value));
  } else {
    static_assert(std::is_arithmetic_v<T>, "a listed option is a number, an enum or a struct");
    return value;
  }
}

// Reads `j` into `out`; `path` names the member in errors ("offpolicy.low").
template <class T>
status from_json_value(const json& j, T& out, const std::string& path) {
  const auto wrong = [&](const char* expected) {
    return error{(path.empty() ? std::string("the loss options") : path) + ": expected " +
                 expected + ", got " + j.dump()};
  };
  if constexpr (field_listed<T>) {
    if (!j.is_object()) {
      return wrong("an object");
    }
    status s = ok_status();
    for_each_field(out, [&](auto& f) {
      if (!s) {
        return;
      }
      const std::string member =
          path.empty() ? std::string(f.name) : path + "." + std::string(f.name);
      const auto it = j.find(std::string(f.name));
      s = it == j.end() ? status{error{member + ": missing"}}
                        : from_json_value(*it, f.value, member);
    });
    return s;
  } else if constexpr (std::is_enum_v<T>) {
    if (!j.is_string()) {
      return wrong("a name");
    }
    auto value = enum_names::parse<T>(j.get<std::string>(), "name");
    if (!value) {
      return value.err().wrap(path);
    }
    out = *value;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) {
      return wrong("true or false");
    }
    out = j.get<bool>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) {
      return wrong("a number");
    }
    out = j.get<T>();
  } else {
    static_assert(std::is_integral_v<T> && std::is_signed_v<T>);
    if (!j.is_number_integer()) {
      return wrong("an integer");
    }
    using limits = std::numeric_limits<T>;
    // An unsigned JSON number above int64's range would wrap when read as one.
    const bool fits =
        j.is_number_unsigned()
            ? j.get<std::uint64_t>() <= static_cast<std::uint64_t>(limits::max())
            : j.get<std::int64_t>() >= limits::min() && j.get<std::int64_t>() <= limits::max();
    if (!fits) {
      return wrong("an integer in its type's range");
    }
    out = static_cast<T>(j.get<std::int64_t>());
  }
  return ok_status();
}

}  // namespace

json loss_options_json(const loss_options& options) { return to_json_value(options); }

result<loss_options> loss_options_from_json(const json& j) {
  loss_options out;
  if (auto s = from_json_value(j, out, ""); !s) {
    return s.err();
  }
  return out;
}

}  // namespace leap::learner::detail
