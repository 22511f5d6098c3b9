// How a record lists its fields once: `fields(x)` (declared next to each record's struct) returns a
// tuple of named references, and every form the record takes is derived from it: the store's binary
// codec (storage/record_codec.cpp), the JSON export and import (storage/export.cpp) and CAF's
// inspect (actors/messages.hpp). A new field is added to the struct and to its `fields()`, nowhere
// else (its documentation aside).
//
// The list is in the order the store writes the fields, which is not always the struct's: the
// stored bytes never change meaning. A field added after the first format version carries the
// version that added it (`since`); the codec writes it after every field of the versions before
// (see storage/record_codec.hpp) and reads older records with its default.
#pragma once

#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace leap {

// How the JSON export writes a number that means "not measured" below a bound.
enum class json_unmeasured : std::uint8_t {
  never,                // always the number
  unless_positive,      // null unless > 0
  unless_non_negative,  // null unless >= 0
};

struct field_options {
  // The trajectory format version that added the field. Default: 1
  std::uint8_t since = 1;
  // Token ids or log-probs: decode_options::tokens == false leaves them empty. Default: false
  bool tokens = false;
  // false: not in the record's bytes (the store keeps it under keys of its own); it still travels
  // in messages and exports. Default: true
  bool stored = true;
  // An optional stored as its presence flag and always a value (the value's default when absent),
  // rather than the value only when present. Default: false
  bool padded = false;
  // The highest enum value the store writes (values above it are refused when read); negative: the
  // enum's last value. Default: -1
  int enum_max = -1;
  json_unmeasured json = json_unmeasured::never;
  // A list's element as the store's errors name it ("turn" in "turn.speedup"); empty: the list's
  // name. Default: empty
  std::string_view element;
};

// Options as a chain: field("speedup", x.speedup, opt().since(3).null_unless_positive()).
class opt {
 public:
  constexpr opt& since(std::uint8_t version) {
    o_.since = version;
    return *this;
  }
  constexpr opt& tokens() {
    o_.tokens = true;
    return *this;
  }
  constexpr opt& beside_record() {
    o_.stored = false;
    return *this;
  }
  constexpr opt& padded() {
    o_.padded = true;
    return *this;
  }
  template <class E>
  constexpr opt& enum_max(E value) {
    o_.enum_max = static_cast<int>(value);
    return *this;
  }
  constexpr opt& null_unless_positive() {
    o_.json = json_unmeasured::unless_positive;
    return *this;
  }
  constexpr opt& null_unless_non_negative() {
    o_.json = json_unmeasured::unless_non_negative;
    return *this;
  }
  constexpr opt& element(std::string_view name) {
    o_.element = name;
    return *this;
  }
  constexpr operator field_options() const { return o_; }  // NOLINT(google-explicit-constructor)

 private:
  field_options o_;
};

// What a record without the field (stored before its version, or an export before it) reads as,
// when that is not the type's default: a callable returning the value. `no_legacy` when none.
struct no_legacy {};

template <class T, class Legacy = no_legacy>
struct record_field {
  std::string_view name;
  T& value;
  field_options options;
  Legacy legacy;
};

template <class T>
constexpr record_field<T> field(std::string_view name, T& value, field_options options = {}) {
  return {name, value, options, {}};
}

template <class T, class Legacy>
constexpr record_field<T, Legacy> field(std::string_view name, T& value, field_options options,
                                        Legacy legacy) {
  return {name, value, options, legacy};
}

// X is T or const T: one `fields()` serves readers and writers.
template <class X, class T>
concept record_ref = std::is_same_v<std::remove_const_t<X>, T>;

// A type whose fields are listed.
template <class T>
concept described_record = requires(T& x) {
  fields(x);
};

// Calls fn(field) for each of x's fields, in their listed order.
template <class X, class Fn>
constexpr void for_each_field(X& x, Fn&& fn) {
  std::apply([&](auto&&... f) { (fn(f), ...); }, fields(x));
}

}  // namespace leap
