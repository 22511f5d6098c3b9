// How a struct lists its members once: `fields(x)`, declared next to the struct, returns a tuple of
// named references (`field(name, member, options)`), and every other form the struct takes is
// derived from it by walking the list (`for_each_field`, or `std::apply` over `fields(x)`):
// - the stored records (orchestrator/trajectory.hpp, retry.hpp, partial_rollouts.hpp,
//   turn_profile.hpp): the store's binary codec (storage/record_codec.cpp), the JSON export and
//   import and the CSV export's record columns (storage/export.cpp) and CAF's inspect
//   (actors/messages.hpp);
// - `leap replay`'s per-turn means (orchestrator/replay.cpp), of the turn fields that ask for them;
// - the loss options (common/loss_options.hpp): the data-parallel learner's wire
//   (learner/loss_json.cpp).
// A new member is added to the struct and to its `fields()`, nowhere else (its documentation, and
// for an option its config key and its use, aside). Any struct with a `fields()` is inspectable by
// CAF (actors/messages.hpp), so one never needs a hand-written `inspect`.
//
// The options (`opt()`) say what the store and the export must know of a field; a struct the store
// never sees (the loss options) gives none. A record's list is in the order the store writes the
// fields, which is not always the struct's: the stored bytes never change meaning. A field added
// after the first format version carries the version that added it (`since`); the codec writes it
// after every field of the versions before (see storage/record_codec.hpp) and reads older records
// with its default; the format version itself is the newest `since` of the stored records
// (newest_since), so a field added with the next version's `since` needs no other edit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace leap {

// How the JSON export writes a number that means "not measured" below a bound (the CSV export
// reads it too: an empty cell where JSON writes null).
enum class json_unmeasured : std::uint8_t {
  never,                // always the number
  unless_positive,      // null unless > 0
  unless_non_negative,  // null unless >= 0
};

// What the store and the exports must know of a field. Every listed field carries them (the
// codec reads them off each field of a record, so `field()` must be able to default them); a
// struct that neither the store nor the export sees (the loss options) leaves them at their
// defaults, which mean nothing to its other readers.
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
  // The CSV export's column for the field, where its name would clash or say too little in a row
  // that holds the group's, the rollout's and the turn's fields side by side ("rollout_index" for a
  // rollout's "index"); for a nested record, the prefix of its fields' columns ("threshold_": the
  // columns threshold_lo and threshold_hi). Never the stored or JSON name. Default: empty (the
  // field's name; a nested record's fields under their own names)
  std::string_view csv;
  // `leap replay` shows the field's mean per step over the training turns that measured it (a
  // number or a bool of a turn record, or of a record nested in it): a column of the per-turn table
  // and of steps.csv, named as the CSV export names it. Default: false
  bool replay_mean = false;
};

// false for a number that is the field's mark for "not measured" (field_options::json): JSON
// writes it as null, CSV as an empty cell, and replay's means leave it out.
constexpr bool measured(double v, json_unmeasured rule) {
  switch (rule) {
    case json_unmeasured::unless_positive:
      return v > 0;
    case json_unmeasured::unless_non_negative:
      return v >= 0;
    case json_unmeasured::never:
      break;
  }
  return true;
}

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
  constexpr opt& csv_name(std::string_view name) {
    o_.csv = name;
    return *this;
  }
  constexpr opt& csv_prefix(std::string_view prefix) {
    o_.csv = prefix;
    return *this;
  }
  constexpr opt& replay_mean() {
    o_.replay_mean = true;
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
struct listed_field {
  std::string_view name;
  T& value;
  field_options options;
  Legacy legacy;
};

template <class T>
constexpr listed_field<T> field(std::string_view name, T& value, field_options options = {}) {
  return {name, value, options, {}};
}

template <class T, class Legacy>
constexpr listed_field<T, Legacy> field(std::string_view name, T& value, field_options options,
                                        Legacy legacy) {
  return {name, value, options, legacy};
}

// X is T or const T: one `fields()` serves readers and writers
// (`template <maybe_const<my_struct> X> constexpr auto fields(X& x)`).
template <class X, class T>
concept maybe_const = std::is_same_v<std::remove_const_t<X>, T>;

// A type whose members `fields()` lists.
template <class T>
concept field_listed = requires(T& x) {
  fields(x);
};

// Calls fn(field) for each of x's fields, in their listed order.
template <class X, class Fn>
constexpr void for_each_field(X& x, Fn&& fn) {
  std::apply([&](auto&&... f) { (fn(f), ...); }, fields(x));
}

// The newest `since` among T's stored fields and those of every record nested in them (a member,
// a list's element, an optional's value; not a map's): the format version a store of T needs.
// Builds a default T. 1 for a type without fields().
template <class T>
std::uint8_t newest_since() {
  if constexpr (field_listed<T>) {
    std::uint8_t newest = 1;
    T x{};
    for_each_field(x, [&](const auto& f) {
      using V = std::remove_cvref_t<decltype(f.value)>;
      if (f.options.stored) {
        newest = std::max({newest, f.options.since, newest_since<V>()});
      }
    });
    return newest;
  } else if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
    return newest_since<typename T::value_type>();
  } else {
    return 1;
  }
}

}  // namespace leap
