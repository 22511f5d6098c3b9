#include "storage/export.hpp"

#include "common/enums/enum_names.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>

namespace leap {

namespace {

using json = nlohmann::json;

// ---- JSON out
// ------------------------------------------------------------------------------------

template <class T>
struct export_is_vector : std::false_type {};
template <class T>
struct export_is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct export_is_optional : std::false_type {};
template <class T>
struct export_is_optional<std::optional<T>> : std::true_type {};

template <class F>
using export_value_t = std::remove_cvref_t<decltype(std::declval<F>().value)>;
template <class F>
constexpr bool export_has_legacy =
    !std::is_same_v<std::remove_cvref_t<decltype(std::declval<F>().legacy)>, no_legacy>;

// Both exports write a field as fn(value) returns it, where the value of a field that means
// something when empty (no weight segments: one segment for the whole turn) is that meaning.
template <class F, class Fn>
auto exported(const F& f, Fn&& fn) {
  if constexpr (export_has_legacy<F>) {
    if (f.value.empty()) {
      return fn(f.legacy());
    }
  }
  return fn(f.value);
}

// A record as a JSON object of its listed fields (common/field_list.hpp): enums by name,
// optionals and unmeasured numbers as null.
template <class T>
json json_of(const T& v, const field_options& options) {
  if constexpr (field_listed<T>) {
    json out = json::object();
    for_each_field(v, [&](const auto& f) {
      out[std::string(f.name)] =
          exported(f, [&](const auto& value) { return json_of(value, f.options); });
    });
    return out;
  } else if constexpr (export_is_optional<T>::value) {
    return v ? json_of(*v, options) : json(nullptr);
  } else if constexpr (std::is_enum_v<T>) {
    return enum_names::to_string(v);
  } else if constexpr (export_is_vector<T>::value) {
    if constexpr (field_listed<typename T::value_type>) {
      json out = json::array();
      for (const auto& e : v) {
        out.push_back(json_of(e, {}));
      }
      return out;
    } else {
      return v;
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    return measured(v, options.json) ? json(v) : json(nullptr);
  } else {
    return v;
  }
}

// Nsight Compute's view of the candidate's kernels (verifier.profile); null when none. Its turn is
// the one it is written in.
json profile_json(const turn_profile_record* p) {
  if (p == nullptr) {
    return nullptr;
  }
  auto out = json_of(*p, {});
  out.erase("turn");
  return out;
}

const turn_profile_record* profile_of(const group_profiles& profiles, std::uint32_t rollout,
                                      std::size_t turn) {
  const auto it = profiles.find({rollout, static_cast<std::uint32_t>(turn)});
  return it == profiles.end() ? nullptr : &it->second;
}

json group_json(const group_record& g, const group_profiles& profiles) {
  auto out = json_of(g, {});
  auto& rollouts = out["rollouts"];
  for (std::size_t r = 0; r < g.rollouts.size(); ++r) {
    auto& turns = rollouts[r]["turns"];
    for (std::size_t t = 0; t < g.rollouts[r].turns.size(); ++t) {
      turns[t]["profile"] = profile_json(profile_of(profiles, g.rollouts[r].index, t));
    }
  }
  return out;
}

// ---- JSON in
// -------------------------------------------------------------------------------------

// Reads fields by name; the first error sticks and names the field's path.
class json_reader {
 public:
  template <class T>
  T get(const json& obj, std::string_view key, const std::string& path) {
    const auto where = path.empty() ? std::string(key) : path + "." + std::string(key);
    if (!error_.empty()) {
      return T{};
    }
    if (!obj.is_object()) {
      fail(path.empty() ? "the line" : path, "is not an object");
      return T{};
    }
    const auto it = obj.find(key);
    if (it == obj.end()) {
      fail(where, "is missing");
      return T{};
    }
    return convert<T>(*it, where);
  }

  template <class T>
  T convert(const json& v, const std::string& where) {
    if constexpr (std::is_same_v<T, bool>) {
      if (v.is_boolean()) {
        return v.get<bool>();
      }
      fail(where, "is not a boolean");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (v.is_string()) {
        return v.get<std::string>();
      }
      fail(where, "is not a string");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (v.is_number()) {
        return v.get<T>();
      }
      if (v.is_null()) {  // how JSON writes NaN and infinities
        return std::numeric_limits<T>::quiet_NaN();
      }
      fail(where, "is not a number");
    } else if constexpr (std::is_integral_v<T>) {
      if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
          return static_cast<T>(u);
        }
      } else if (v.is_number_integer()) {
        const auto i = v.get<std::int64_t>();
        if (i >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
            (i < 0 || static_cast<std::uint64_t>(i) <=
                          static_cast<std::uint64_t>(std::numeric_limits<T>::max()))) {
          return static_cast<T>(i);
        }
      } else {
        fail(where, "is not an integer");
        return T{};
      }
      fail(where, "is out of range");
    } else {
      static_assert(std::is_same_v<T, json>);
      return v;
    }
    return T{};
  }

  void fail(const std::string& where, const std::string& message) {
    if (error_.empty()) {
      error_ = where + (message.starts_with(":") ? "" : " ") + message;
    }
  }
  [[nodiscard]] bool ok() const { return error_.empty(); }
  [[nodiscard]] const std::string& message() const { return error_; }

 private:
  std::string error_;
};

// The enums a group's JSON names, each read by its vocabulary's parser (whose errors list the
// valid names).
result<verdict_category> parse_named(verdict_category /*type*/, std::string_view n) {
  return parse_verdict_category(n);
}
result<finish_reason> parse_named(finish_reason /*type*/, std::string_view n) {
  return parse_finish_reason(n);
}
result<split_kind> parse_named(split_kind /*type*/, std::string_view n) {
  return parse_split_kind(n);
}
result<gate_decision> parse_named(gate_decision /*type*/, std::string_view n) {
  return parse_gate_decision(n);
}
result<optimise_decision> parse_named(optimise_decision /*type*/, std::string_view n) {
  return parse_optimise_decision(n);
}

// Reads what json_of wrote. A field the store keeps beside the record, or added after the first
// format version, may be absent (an export made before it): it reads as such a record does.
template <class T>
void read_json(json_reader& r, const json& v, const std::string& where,
               const field_options& options, T& out) {
  if constexpr (field_listed<T>) {
    for_each_field(out, [&](auto& f) {
      using F = std::remove_cvref_t<decltype(f)>;
      if (!r.ok()) {
        return;
      }
      const auto key = where.empty() ? std::string(f.name) : where + "." + std::string(f.name);
      if (v.is_object()) {
        if (const auto it = v.find(f.name); it == v.end()) {
          if (f.options.since > 1 || !f.options.stored) {
            if constexpr (export_has_legacy<F>) {
              f.value = f.legacy();
            }
            return;
          }
        } else {
          read_json(r, *it, key, f.options, f.value);
          return;
        }
      }
      (void)r.get<json>(v, f.name, where);  // says what is wrong: not an object, or missing
    });
  } else if constexpr (export_is_optional<T>::value) {
    if (v.is_null()) {
      out.reset();
    } else {
      typename T::value_type value{};
      read_json(r, v, where, options, value);
      out = std::move(value);
    }
  } else if constexpr (std::is_enum_v<T>) {
    const auto name = r.convert<std::string>(v, where);
    if (!r.ok()) {
      return;
    }
    auto value = parse_named(T{}, name);
    if (!value) {
      r.fail(where, ": " + value.err().message);
      return;
    }
    out = *value;
  } else if constexpr (export_is_vector<T>::value) {
    if (!v.is_array()) {
      r.fail(where, "is not an array");
      return;
    }
    out.clear();
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size() && r.ok(); ++i) {
      typename T::value_type e{};
      read_json(r, v[i], where + "[" + std::to_string(i) + "]", {}, e);
      out.push_back(std::move(e));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    // An unmeasured number is null; any other null is how JSON writes NaN and infinities.
    if (!(v.is_null() && options.json != json_unmeasured::never)) {
      out = r.convert<T>(v, where);
    }
  } else {
    out = r.convert<T>(v, where);
  }
}

// ---- CSV
// -----------------------------------------------------------------------------------------

std::string number(double v) {
  if (std::isnan(v)) {
    return "nan";
  }
  if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  }
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, v).ptr;
  return {buffer, end};
}

void append_field(std::string& out, std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) {
    out.append(field);
    return;
  }
  out.push_back('"');
  for (const char c : field) {
    if (c == '"') {
      out.push_back('"');
    }
    out.push_back(c);
  }
  out.push_back('"');
}

void append_row(std::string& out, const std::vector<std::string>& fields) {
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    append_field(out, fields[i]);
  }
  out.push_back('\n');
}

std::string flag(bool b) { return b ? "true" : "false"; }

// "first:version" per weight segment, separated by spaces ("0:6 3:7").
std::string segments_cell(const std::vector<turn_weight_segment>& segments) {
  std::string out;
  for (const auto& s : segments) {
    out += (out.empty() ? "" : " ") + std::to_string(s.first) + ":" + std::to_string(s.version);
  }
  return out;
}

// A profile_* cell of one entry per kernel, space-separated, so that the n-th entries of these
// cells describe one kernel; empty without a profile.
std::string per_kernel(const turn_profile_record* p, std::string (*entry)(const kernel_profile&)) {
  std::string out;
  if (p == nullptr) {
    return out;
  }
  for (std::size_t i = 0; i < p->kernels.size(); ++i) {
    out += (i == 0 ? "" : " ") + entry(p->kernels[i]);
  }
  return out;
}

// The CSV's columns are the records' fields (common/field_list.hpp): the group's, repeated on each
// of its rows, then the rollout's, then the turn's between the few columns below that are no
// field. A row level's column walk (csv_record) emits, per column, its name and a function making
// its cell; the header takes the names, a row the cells, so a cell cannot shift under another
// column's name. A column's cell by its field's type:
// - a number, bool, string, enum (by name), or an optional of one (empty when absent); a number
//   the field marks as not measured (field_options::json) is empty, as JSON writes null;
// - a nested record: its fields' columns (named with the field's csv_prefix);
// - a list of token ids: its count. A list of log-probs has no column: its count is the token
//   list's, and its values, one per token, say nothing per turn;
// - a list of small records: one cell of its own (the weight segments: segments_cell), not a
//   list of columns;
// - a list of rollouts or turns: the next level's rows, not a cell.
template <class T>
constexpr bool csv_row_level = std::is_same_v<T, rollout_record> || std::is_same_v<T, turn_record>;

template <class T>
constexpr bool csv_no_cell = false;

template <class T>
std::string csv_cell(const T& v, const field_options& options) {
  if constexpr (export_is_optional<T>::value) {
    return v ? csv_cell(*v, options) : std::string();
  } else if constexpr (std::is_same_v<T, bool>) {
    return flag(v);
  } else if constexpr (std::is_enum_v<T>) {
    return enum_names::to_string(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return measured(v, options.json) ? number(v) : std::string();
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (export_is_vector<T>::value && std::is_integral_v<typename T::value_type>) {
    return std::to_string(v.size());
  } else if constexpr (std::is_same_v<T, std::vector<turn_weight_segment>>) {
    return segments_cell(v);
  } else {
    static_assert(csv_no_cell<T>, "a field of a type without a CSV cell: give it one here");
    return {};
  }
}

// Emits emit(prefix, name, make_cell) for each column of `record`'s fields, in their listed order.
template <class Record, class Emit>
void csv_record(const Record& record, std::string_view prefix, Emit& emit) {
  for_each_field(record, [&](const auto& f) {
    using V = export_value_t<decltype(f)>;
    const auto name = f.options.csv.empty() ? f.name : f.options.csv;
    if constexpr (field_listed<V>) {
      csv_record(f.value, std::string(prefix) + std::string(f.options.csv), emit);
    } else if constexpr (export_is_vector<V>::value) {
      using E = typename V::value_type;
      if constexpr (!csv_row_level<E> && !std::is_floating_point_v<E>) {
        emit(prefix, name, [&] {
          return exported(f, [&](const auto& value) { return csv_cell(value, f.options); });
        });
      }
    } else {
      emit(prefix, name, [&] { return csv_cell(f.value, f.options); });
    }
  });
}

// A turn as its row sees it: its place in the rollout and its stored profile (null when none).
struct csv_turn {
  const turn_record& turn;
  std::size_t index;
  const turn_profile_record* profile;
};

// The turn's columns that are no field of a record: its index in the rollout (before the turn's
// fields, beside the other identifying columns) and its stored profile (after them).
struct csv_extra_column {
  std::string_view name;
  bool before_fields;
  std::string (*cell)(const csv_turn&);
};

constexpr auto turn_extra_columns = std::to_array<csv_extra_column>({
    {"turn", true, [](const csv_turn& t) { return std::to_string(t.index); }},
    {"profile_seconds", false,
     [](const csv_turn& t) { return t.profile ? number(t.profile->seconds) : std::string(); }},
    {"profile_note", false,
     [](const csv_turn& t) { return t.profile ? t.profile->note : std::string(); }},
    {"profile_kernels", false,
     [](const csv_turn& t) {
       return per_kernel(t.profile, [](const kernel_profile& k) { return k.name; });
     }},
    {"profile_duration_ns", false,
     [](const csv_turn& t) {
       return per_kernel(t.profile, [](const kernel_profile& k) { return number(k.duration_ns); });
     }},
    {"profile_bottlenecks", false,
     [](const csv_turn& t) {
       return per_kernel(t.profile, [](const kernel_profile& k) { return k.bottleneck; });
     }},
    {"profile_findings", false,
     [](const csv_turn& t) {
       // A kernel's analysers joined by '+', "-" for none.
       return per_kernel(t.profile, [](const kernel_profile& k) {
         std::string findings;
         for (const auto& f : k.findings) {
           findings += (findings.empty() ? "" : "+") + f;
         }
         return findings.empty() ? std::string("-") : findings;
       });
     }},
    {"profile_source", false,
     [](const csv_turn& t) { return t.profile ? t.profile->source : std::string(); }},
});

template <class Emit>
void csv_turn_columns(const csv_turn& t, Emit& emit) {
  const auto extras = [&](bool before_fields) {
    for (const auto& c : turn_extra_columns) {
      if (c.before_fields == before_fields) {
        emit(std::string_view(), c.name, [&] { return c.cell(t); });
      }
    }
  };
  extras(true);
  csv_record(t.turn, {}, emit);
  extras(false);
}

// An emitter that appends each column's cell to `cells`.
struct csv_cells {
  std::vector<std::string>& cells;
  template <class Make>
  void operator()(std::string_view /*prefix*/, std::string_view /*name*/, const Make& make) {
    cells.push_back(make());
  }
};

// The stored profiles of one run, by group.
using run_profiles = std::map<std::tuple<std::uint64_t, split_kind, std::uint32_t>, group_profiles>;

result<run_profiles> load_run_profiles(const trajectory_store& store, const std::string& run_id) {
  auto stored = store.profiles(run_id);
  if (!stored) {
    return stored.err();
  }
  run_profiles out;
  for (auto& p : *stored) {
    const auto& t = p.turn;
    out[{t.step, t.split, t.group}].insert_or_assign(std::pair{t.rollout, t.turn}, std::move(p));
  }
  return out;
}

template <class Each>
result<export_counts> export_groups(const trajectory_store& store, const export_query& query,
                                    std::ostream& out, Each&& each) {
  export_counts counts;
  group_query q;
  q.run_id = query.run_id;
  // Groups come ordered by run: each run's profiles are read when its first group comes.
  std::optional<std::string> profiles_run;
  run_profiles profiles;
  const group_profiles none;
  auto s = store.for_each_group(q, [&](group_record&& g) -> status {
    if (profiles_run != g.run_id) {
      auto loaded = load_run_profiles(store, g.run_id);
      if (!loaded) {
        return loaded.err();
      }
      profiles = std::move(*loaded);
      profiles_run = g.run_id;
    }
    const auto found = profiles.find({g.step, g.split, g.group_index});
    counts.rows += each(g, found == profiles.end() ? none : found->second);
    ++counts.groups;
    if (!out) {
      // errno is the failed write's (a stream sets no error of its own): a full disk says so.
      return error{"write failed after " + std::to_string(counts.groups - 1) +
                   " groups: " + std::strerror(errno)};
    }
    return ok_status();
  });
  if (!s) {
    return s.err();
  }
  out.flush();
  if (!out) {
    return error{"write failed after " + std::to_string(counts.groups) +
                 " groups: " + std::strerror(errno)};
  }
  return counts;
}

}  // namespace

std::string to_json_line(const group_record& group, const group_profiles& profiles) {
  return group_json(group, profiles).dump(-1, ' ', false, json::error_handler_t::replace);
}

result<group_record> group_from_json(std::string_view line) {
  const auto j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return error{"not a JSON value"};
  }
  json_reader r;
  group_record g;
  read_json(r, j, "", {}, g);
  if (!r.ok()) {
    return error{r.message()};
  }
  return g;
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> columns = [] {
    std::vector<std::string> out;
    auto names = [&](std::string_view prefix, std::string_view name, const auto& /*make_cell*/) {
      out.push_back(std::string(prefix) + std::string(name));
    };
    csv_record(group_record{}, {}, names);
    csv_record(rollout_record{}, {}, names);
    const turn_record turn{};
    csv_turn_columns(csv_turn{turn, 0, nullptr}, names);
    return out;
  }();
  return columns;
}

std::string csv_header() {
  std::string out;
  append_row(out, csv_columns());
  return out;
}

std::size_t append_csv_rows(const group_record& g, std::string& out,
                            const group_profiles& profiles) {
  std::vector<std::string> fields;
  csv_cells cells{fields};
  csv_record(g, {}, cells);
  const auto group_width = fields.size();
  std::size_t rows = 0;
  for (const auto& r : g.rollouts) {
    fields.resize(group_width);
    csv_record(r, {}, cells);
    const auto rollout_width = fields.size();
    if (r.turns.empty()) {
      // Still one row, so that the rollout's reward is not lost; its turn cells stay empty.
      fields.resize(csv_columns().size());
      append_row(out, fields);
      ++rows;
      continue;
    }
    for (std::size_t i = 0; i < r.turns.size(); ++i) {
      fields.resize(rollout_width);
      csv_turn_columns(csv_turn{r.turns[i], i, profile_of(profiles, r.index, i)}, cells);
      append_row(out, fields);
      ++rows;
    }
  }
  return rows;
}

result<export_counts> export_jsonl(const trajectory_store& store, const export_query& query,
                                   std::ostream& out) {
  return export_groups(store, query, out,
                       [&](const group_record& g, const group_profiles& p) -> std::size_t {
                         out << to_json_line(g, p) << '\n';
                         return 1;
                       });
}

result<export_counts> export_csv(const trajectory_store& store, const export_query& query,
                                 std::ostream& out) {
  out << csv_header();
  std::string rows;
  return export_groups(store, query, out,
                       [&](const group_record& g, const group_profiles& p) -> std::size_t {
                         rows.clear();
                         const auto n = append_csv_rows(g, rows, p);
                         out << rows;
                         return n;
                       });
}

}  // namespace leap
