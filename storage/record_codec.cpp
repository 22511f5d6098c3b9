#include "storage/record_codec.hpp"

#include "common/enums/enum_names.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <map>
#include <optional>
#include <type_traits>
#include <utility>

namespace leap {

namespace {

// ---- writer
// --------------------------------------------------------------------------------------

class byte_writer {
 public:
  explicit byte_writer(record_kind kind) {
    u8(trajectory_format_version);
    u8(static_cast<std::uint8_t>(kind));
  }

  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  template <class E>
  void enumeration(E v) {
    static_assert(std::is_enum_v<E> && sizeof(E) == 1);
    u8(static_cast<std::uint8_t>(v));
  }
  void u32(std::uint32_t v) { fixed(v); }
  void u64(std::uint64_t v) { fixed(v); }
  void i32(std::int32_t v) { fixed(static_cast<std::uint32_t>(v)); }
  void i64(std::int64_t v) { fixed(static_cast<std::uint64_t>(v)); }
  void f64(double v) { fixed(std::bit_cast<std::uint64_t>(v)); }
  void str(std::string_view s) {
    count(s.size());
    out_.append(s);
  }
  void count(std::size_t n) { u32(static_cast<std::uint32_t>(n)); }

  // Arrays of 4-byte values (token ids, log-probs): one copy on a little-endian host.
  template <class T>
  void array4(const std::vector<T>& values) {
    static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>);
    count(values.size());
    if constexpr (std::endian::native == std::endian::little) {
      const auto old = out_.size();
      out_.resize(old + values.size() * 4);
      if (!values.empty()) {
        std::memcpy(out_.data() + old, values.data(), values.size() * 4);
      }
    } else {
      for (const T v : values) {
        fixed(std::bit_cast<std::uint32_t>(v));
      }
    }
  }

  void reserve(std::size_t n) { out_.reserve(n); }
  std::string take() && { return std::move(out_); }

 private:
  template <class U>
  void fixed(U v) {
    static_assert(std::is_unsigned_v<U>);
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFFU));
    }
  }

  std::string out_;
};

// ---- reader
// --------------------------------------------------------------------------------------

// Reads fields in order; the first failure sticks (later reads return defaults) so that decoders
// read straight through and check once at the end.
// A field's name in errors: a nested record's field is "<element>.<name>" ("turn.speedup").
struct field_name {
  field_name(const char* n) : name(n) {}  // NOLINT(google-explicit-constructor)
  field_name(std::string_view p, std::string_view n) : prefix(p), name(n) {}
  [[nodiscard]] std::string str() const {
    return prefix.empty() ? std::string(name) : std::string(prefix) + "." + std::string(name);
  }
  std::string_view prefix;
  std::string_view name;
};

class byte_reader {
 public:
  byte_reader(std::string_view bytes, std::string_view what) : bytes_(bytes), what_(what) {}

  // Reads the header; returns the record's format version (0 on failure).
  std::uint8_t header(record_kind expected) {
    const std::uint8_t version = u8("format version");
    const std::uint8_t kind = u8("record kind");
    if (!ok()) {
      return 0;
    }
    if (version == 0 || version > trajectory_format_version) {
      fail("format version " + std::to_string(version) +
           " is not readable by this build (it reads 1.." +
           std::to_string(trajectory_format_version) + "); a newer leap wrote it?");
      return 0;
    }
    if (kind != static_cast<std::uint8_t>(expected)) {
      fail("record kind " + std::to_string(kind) + " where kind " +
           std::to_string(static_cast<int>(expected)) + " was expected");
      return 0;
    }
    return version;
  }

  std::uint8_t u8(field_name field) {
    if (!need(1, field)) {
      return 0;
    }
    return static_cast<std::uint8_t>(bytes_[pos_++]);
  }
  bool boolean(field_name field) {
    const auto b = u8(field);
    if (ok() && b > 1) {
      fail_at(pos_ - 1, field, "bool byte " + std::to_string(b));
    }
    return b == 1;
  }
  // Enum bytes are checked against the highest value the build knows.
  template <class E>
  E enumeration(field_name field, E max) {
    const auto b = u8(field);
    if (ok() && b > static_cast<std::uint8_t>(max)) {
      fail_at(pos_ - 1, field, "unknown value " + std::to_string(b));
      return E{};
    }
    return static_cast<E>(b);
  }
  std::uint32_t u32(field_name field) { return fixed<std::uint32_t>(field); }
  std::uint64_t u64(field_name field) { return fixed<std::uint64_t>(field); }
  std::int32_t i32(field_name field) {
    return static_cast<std::int32_t>(fixed<std::uint32_t>(field));
  }
  std::int64_t i64(field_name field) {
    return static_cast<std::int64_t>(fixed<std::uint64_t>(field));
  }
  double f64(field_name field) { return std::bit_cast<double>(fixed<std::uint64_t>(field)); }
  std::string str(field_name field) {
    const auto n = u32(field);
    if (!need(n, field)) {
      return {};
    }
    std::string s(bytes_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A count of elements that take at least `min_size` bytes each, checked against what is left so
  // that a corrupt count cannot ask for a huge allocation.
  std::size_t count(field_name field, std::size_t min_size) {
    const auto n = u32(field);
    if (ok() && static_cast<std::uint64_t>(n) * min_size > remaining()) {
      fail_at(pos_ - 4, field,
              "count " + std::to_string(n) + " exceeds the " + std::to_string(remaining()) +
                  " bytes left");
      return 0;
    }
    return n;
  }
  template <class T>
  std::vector<T> array4(field_name field, bool keep) {
    static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>);
    const auto n = count(field, 4);
    std::vector<T> values;
    if (!ok()) {
      return values;
    }
    if (!keep) {
      pos_ += n * 4;
      return values;
    }
    values.resize(n);
    if constexpr (std::endian::native == std::endian::little) {
      if (n > 0) {
        std::memcpy(values.data(), bytes_.data() + pos_, n * 4);
      }
      pos_ += n * 4;
    } else {
      for (auto& v : values) {
        v = std::bit_cast<T>(fixed<std::uint32_t>(field));
      }
    }
    return values;
  }

  // Call once after the last field: trailing bytes are an error too.
  status finish() {
    if (ok() && pos_ != bytes_.size()) {
      fail_at(pos_, "end of record", std::to_string(bytes_.size() - pos_) + " trailing bytes");
    }
    if (!ok()) {
      return error{error_};
    }
    return ok_status();
  }

  [[nodiscard]] bool ok() const { return error_.empty(); }
  [[nodiscard]] std::size_t remaining() const { return bytes_.size() - pos_; }

  // Failures found by a decoder's own checks (a count mismatch, ...).
  void fail(const std::string& message) {
    if (ok()) {
      error_ = std::string(what_) + " record: " + message;
    }
  }

 private:
  bool need(std::size_t n, field_name field) {
    if (!ok()) {
      return false;
    }
    if (n > remaining()) {
      fail_at(pos_, field,
              "truncated: needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
                  " left");
      return false;
    }
    return true;
  }
  void fail_at(std::size_t offset, field_name field, const std::string& message) {
    fail("byte " + std::to_string(offset) + " ('" + field.str() + "'): " + message);
  }
  template <class U>
  U fixed(field_name field) {
    if (!need(sizeof(U), field)) {
      return 0;
    }
    U v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      v |= static_cast<U>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
    }
    pos_ += sizeof(U);
    return v;
  }

  std::string_view bytes_;
  std::string_view what_;
  std::size_t pos_ = 0;
  std::string error_;
};

// ---- the records' fields, generically
// ----------------------------------------------------------------------------------------------
//
// One pass writes a record's version-1 fields, nested records and their lists included. Then, for
// each later format version and each field of that version in listed order, one pass over the whole
// record writes that field wherever it occurs (a turn's speedup, in a group: every turn's, in
// rollout and turn order): the layout every version so far has had, kept so that older bytes read
// unchanged.

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_map : std::false_type {};
template <class K, class V>
struct is_map<std::map<K, V>> : std::true_type {};

// Arrays of 4-byte numbers (token ids, log-probs, slots) are copied whole.
template <class T>
struct is_array4 : std::false_type {};
template <class T>
struct is_array4<std::vector<T>> : std::bool_constant<std::is_arithmetic_v<T> && sizeof(T) == 4> {};

template <class F>
using field_value_t = std::remove_cvref_t<decltype(std::declval<F>().value)>;

template <class F>
constexpr bool has_legacy =
    !std::is_same_v<std::remove_cvref_t<decltype(std::declval<F>().legacy)>, no_legacy>;

template <class E>
E enum_max(const field_options& options) {
  return options.enum_max >= 0 ? static_cast<E>(options.enum_max)
                               : static_cast<E>(enum_names::count<E>() - 1);
}

// The fewest bytes a T takes (its version-1 fields), for count checks: a corrupt count must not ask
// for a huge allocation.
template <class T>
std::size_t min_bytes(const field_options& options = {}) {
  if constexpr (field_listed<T>) {
    static const std::size_t n = [] {
      std::size_t sum = 0;
      T x{};
      for_each_field(x, [&](auto& f) {
        if (f.options.stored && f.options.since == 1) {
          sum += min_bytes<field_value_t<decltype(f)>>(f.options);
        }
      });
      return sum;
    }();
    return n;
  } else if constexpr (is_optional<T>::value) {
    return 1 + (options.padded ? min_bytes<typename T::value_type>() : 0);
  } else if constexpr (std::is_same_v<T, std::string> || is_vector<T>::value || is_map<T>::value) {
    return 4;
  } else {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    return sizeof(T);
  }
}

class record_writer {
 public:
  explicit record_writer(record_kind kind) : w_(kind) {}

  template <class R>
  std::string encode(const R& root) && {
    base(root);
    for (std::uint8_t version = 2; version <= trajectory_format_version; ++version) {
      for (std::size_t k = 0;; ++k) {
        bool found = false;
        late(root, version, k, found);
        if (!found) {
          break;
        }
      }
    }
    return std::move(w_).take();
  }

 private:
  template <class R>
  void base(const R& r) {
    for_each_field(r, [&](const auto& f) {
      if (f.options.stored && f.options.since == 1) {
        value(f.value, f.options);
      }
    });
  }

  // The k-th field of `version` in r and in every record nested in its version-1 fields.
  template <class R>
  void late(const R& r, std::uint8_t version, std::size_t k, bool& found) {
    std::size_t index = 0;
    for_each_field(r, [&](const auto& f) {
      using T = field_value_t<decltype(f)>;
      if (!f.options.stored) {
        return;
      }
      if (f.options.since == version) {
        if (index++ == k) {
          value(f.value, f.options);
          found = true;
        }
      } else if (f.options.since == 1) {
        if constexpr (field_listed<T>) {
          late(f.value, version, k, found);
        } else if constexpr (is_vector<T>::value) {
          if constexpr (field_listed<typename T::value_type>) {
            for (const auto& e : f.value) {
              late(e, version, k, found);
            }
          }
        }
      }
    });
  }

  template <class T>
  void value(const T& v, const field_options& options) {
    if constexpr (field_listed<T>) {
      base(v);
    } else if constexpr (std::is_same_v<T, bool>) {
      w_.boolean(v);
    } else if constexpr (std::is_enum_v<T>) {
      w_.enumeration(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      w_.str(v);
    } else if constexpr (is_array4<T>::value) {
      w_.array4(v);
    } else if constexpr (is_vector<T>::value) {
      w_.count(v.size());
      for (const auto& e : v) {
        value(e, {});
      }
    } else if constexpr (is_optional<T>::value) {
      w_.boolean(v.has_value());
      if (options.padded) {
        value(v.value_or(typename T::value_type{}), {});
      } else if (v) {
        value(*v, {});
      }
    } else if constexpr (is_map<T>::value) {
      w_.count(v.size());
      for (const auto& [key, mapped] : v) {
        value(key, {});
        value(mapped, {});
      }
    } else {
      static_assert(std::is_arithmetic_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
      if constexpr (std::is_floating_point_v<T>) {
        static_assert(sizeof(T) == 8);
        w_.f64(v);
      } else if constexpr (sizeof(T) == 4) {
        w_.u32(static_cast<std::uint32_t>(v));
      } else {
        w_.u64(static_cast<std::uint64_t>(v));
      }
    }
  }

  byte_writer w_;
};

class record_reader {
 public:
  record_reader(std::string_view bytes, std::string_view what, bool tokens)
      : r_(bytes, what), tokens_(tokens) {}

  template <class R>
  status decode(R& root, record_kind kind) {
    const auto version = r_.header(kind);
    base(root, {});
    for (std::uint8_t v = 2; v <= version && r_.ok(); ++v) {
      for (std::size_t k = 0; r_.ok(); ++k) {
        bool found = false;
        late(root, {}, v, k, found);
        if (!found) {
          break;
        }
      }
    }
    if (r_.ok()) {
      upgrade(root, version);
    }
    return r_.finish();
  }

 private:
  // `prefix` names the record in errors: the element name of the list it is in.
  template <class R>
  void base(R& r, std::string_view prefix) {
    for_each_field(r, [&](auto& f) {
      if (f.options.stored && f.options.since == 1 && r_.ok()) {
        value(f.value, f.options, {prefix, f.name});
      }
    });
  }

  template <class R>
  void late(R& r, std::string_view prefix, std::uint8_t version, std::size_t k, bool& found) {
    std::size_t index = 0;
    for_each_field(r, [&](auto& f) {
      using T = field_value_t<decltype(f)>;
      if (!f.options.stored || !r_.ok()) {
        return;
      }
      if (f.options.since == version) {
        if (index++ == k) {
          value(f.value, f.options, {prefix, f.name});
          found = true;
        }
      } else if (f.options.since == 1) {
        if constexpr (field_listed<T>) {
          late(f.value, prefix, version, k, found);
        } else if constexpr (is_vector<T>::value) {
          if constexpr (field_listed<typename T::value_type>) {
            for (auto& e : f.value) {
              late(e, element_of(f.name, f.options), version, k, found);
            }
          }
        }
      }
    });
  }

  // Fields newer than the record take what such a record means (their legacy value, if any).
  template <class R>
  void upgrade(R& r, std::uint8_t version) {
    for_each_field(r, [&](auto& f) {
      using F = std::remove_cvref_t<decltype(f)>;
      using T = field_value_t<F>;
      if constexpr (has_legacy<F>) {
        if (f.options.since > version) {
          f.value = f.legacy();
        }
      }
      if (f.options.since == 1) {
        if constexpr (field_listed<T>) {
          upgrade(f.value, version);
        } else if constexpr (is_vector<T>::value) {
          if constexpr (field_listed<typename T::value_type>) {
            for (auto& e : f.value) {
              upgrade(e, version);
            }
          }
        }
      }
    });
  }

  template <class T>
  void value(T& v, const field_options& options, field_name name) {
    if constexpr (field_listed<T>) {
      base(v, name.prefix);
    } else if constexpr (std::is_same_v<T, bool>) {
      v = r_.boolean(name);
    } else if constexpr (std::is_enum_v<T>) {
      v = r_.enumeration(name, enum_max<T>(options));
    } else if constexpr (std::is_same_v<T, std::string>) {
      v = r_.str(name);
    } else if constexpr (is_array4<T>::value) {
      v = r_.array4<typename T::value_type>(name, tokens_ || !options.tokens);
    } else if constexpr (is_vector<T>::value) {
      using E = typename T::value_type;
      const auto n = r_.count(name, min_bytes<E>());
      v.clear();
      v.reserve(n);
      for (std::size_t i = 0; i < n && r_.ok(); ++i) {
        E e{};
        if constexpr (field_listed<E>) {
          base(e, element_of(name.name, options));
        } else {
          value(e, {}, name);
        }
        v.push_back(std::move(e));
      }
    } else if constexpr (is_optional<T>::value) {
      const bool present = r_.boolean(name);
      if (present || options.padded) {
        typename T::value_type e{};
        value(e, {}, name);
        if (present) {
          v = std::move(e);
        }
      }
    } else if constexpr (is_map<T>::value) {
      const auto n =
          r_.count(name, min_bytes<typename T::key_type>() + min_bytes<typename T::mapped_type>());
      v.clear();
      for (std::size_t i = 0; i < n && r_.ok(); ++i) {
        typename T::key_type key{};
        typename T::mapped_type mapped{};
        value(key, {}, name);
        value(mapped, {}, name);
        v[std::move(key)] = std::move(mapped);
      }
      if (r_.ok() && v.size() != n) {
        r_.fail("a name appears twice in '" + name.str() + "'");
      }
    } else {
      static_assert(std::is_arithmetic_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
      if constexpr (std::is_floating_point_v<T>) {
        v = r_.f64(name);
      } else if constexpr (sizeof(T) == 4) {
        v = static_cast<T>(r_.u32(name));
      } else {
        v = static_cast<T>(r_.u64(name));
      }
    }
  }

  static std::string_view element_of(std::string_view name, const field_options& options) {
    return options.element.empty() ? name : options.element;
  }

  byte_reader r_;
  bool tokens_;
};

template <class R>
std::string encode_record(record_kind kind, const R& record) {
  return record_writer(kind).encode(record);
}

template <class R>
result<R> decode_record(std::string_view bytes, record_kind kind, std::string_view what,
                        bool tokens = true) {
  R record{};
  record_reader reader(bytes, what, tokens);
  if (auto s = reader.decode(record, kind); !s) {
    return s.err();
  }
  return record;
}

}  // namespace

std::string encode(const group_record& group) { return encode_record(record_kind::group, group); }
std::string encode(const step_record& step) { return encode_record(record_kind::step, step); }
std::string encode(const run_record& run) { return encode_record(record_kind::run, run); }
std::string encode(const turn_record& turn) { return encode_record(record_kind::turn, turn); }
std::string encode(const retry_step_record& retry) {
  return encode_record(record_kind::retry, retry);
}
std::string encode(const partial_carry_record& carry) {
  return encode_record(record_kind::carry, carry);
}
std::string encode(const turn_profile_record& profile) {
  return encode_record(record_kind::profile, profile);
}

result<group_record> decode_group(std::string_view bytes, decode_options options) {
  return decode_record<group_record>(bytes, record_kind::group, "group", options.tokens);
}
result<step_record> decode_step(std::string_view bytes) {
  return decode_record<step_record>(bytes, record_kind::step, "step");
}
result<run_record> decode_run(std::string_view bytes) {
  return decode_record<run_record>(bytes, record_kind::run, "run");
}
result<turn_record> decode_turn(std::string_view bytes) {
  return decode_record<turn_record>(bytes, record_kind::turn, "turn");
}
result<retry_step_record> decode_retry(std::string_view bytes) {
  return decode_record<retry_step_record>(bytes, record_kind::retry, "retry");
}
result<partial_carry_record> decode_carry(std::string_view bytes) {
  return decode_record<partial_carry_record>(bytes, record_kind::carry, "carry");
}
result<turn_profile_record> decode_profile(std::string_view bytes) {
  return decode_record<turn_profile_record>(bytes, record_kind::profile, "profile");
}

// ---- optimisation decision
// --------------------------------------------------------------------------------------

std::string encode_optimise(optimise_decision decision) {
  byte_writer w(record_kind::optimise);
  w.enumeration(decision);
  return std::move(w).take();
}

result<optimise_decision> decode_optimise(std::string_view bytes) {
  byte_reader r(bytes, "optimisation decision");
  r.header(record_kind::optimise);
  const auto decision = r.enumeration("decision", optimise_decision::open);
  if (auto s = r.finish(); !s) {
    return s.err();
  }
  return decision;
}

}  // namespace leap
