#include "storage/export.hpp"

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

// [{"first": 0, "version": 6}, {"first": 3, "version": 7}]: which version sampled which output
// tokens; one segment for a turn sampled with one version.
json segments_json(const turn_record& t) {
  json out = json::array();
  for (const auto& s : weight_segments_of(t)) {
    out.push_back(json{{"first", s.first}, {"version", s.version}});
  }
  return out;
}

// The CSV's cell: "first:version" per segment, separated by spaces ("0:6 3:7").
std::string segments_cell(const turn_record& t) {
  std::string out;
  for (const auto& s : weight_segments_of(t)) {
    out += (out.empty() ? "" : " ") + std::to_string(s.first) + ":" + std::to_string(s.version);
  }
  return out;
}

json profile_json(const turn_profile_record* p) {
  if (p == nullptr) {
    return nullptr;
  }
  json kernels = json::array();
  for (const auto& k : p->kernels) {
    kernels.push_back(json{{"name", k.name},
                           {"duration_ns", k.duration_ns},
                           {"bottleneck", k.bottleneck},
                           {"findings", k.findings}});
  }
  return json{{"kernels", std::move(kernels)}, {"note", p->note}, {"seconds", p->seconds}};
}

const turn_profile_record* profile_of(const group_profiles& profiles, std::uint32_t rollout,
                                      std::size_t turn) {
  const auto it = profiles.find({rollout, static_cast<std::uint32_t>(turn)});
  return it == profiles.end() ? nullptr : &it->second;
}

json turn_json(const turn_record& t, const turn_profile_record* profile) {
  return json{
      {"input_tokens", t.input_tokens},
      {"output_tokens", t.output_tokens},
      {"output_logprobs", t.output_logprobs},
      {"text", t.text},
      {"code_hash", t.code_hash ? json(*t.code_hash) : json(nullptr)},
      {"verdict", to_string(t.verdict)},
      {"passed", t.passed},
      {"feedback", t.feedback},
      {"timings",
       {{"generation_ms", t.timings.generation_ms},
        {"compile_ms", t.timings.compile_ms},
        {"run_ms", t.timings.run_ms},
        {"generation_queue_ms", t.timings.generation_queue_ms},
        {"compile_queue_ms", t.timings.compile_queue_ms},
        {"run_queue_ms", t.timings.run_queue_ms}}},
      {"weight_version", t.weight_version},
      {"weight_segments", segments_json(t)},
      {"finish_reason", to_string(t.finish)},
      {"endpoint", t.endpoint},
      // Reference median / candidate median of a timed pass; null when not measured.
      {"speedup", t.speedup > 0 ? json(t.speedup) : json(nullptr)},
      {"speedup_noise", t.speedup_noise >= 0 ? json(t.speedup_noise) : json(nullptr)},
      // The same over the reference under torch.compile (kernelbench); null when not measured.
      {"compiled_speedup", t.compiled_speedup > 0 ? json(t.compiled_speedup) : json(nullptr)},
      {"compiled_speedup_noise",
       t.compiled_speedup_noise >= 0 ? json(t.compiled_speedup_noise) : json(nullptr)},
      // Nsight Compute's view of the candidate's kernels (verifier.profile); null when none.
      {"profile", profile_json(profile)},
  };
}

json group_json(const group_record& g, const group_profiles& profiles) {
  json rollouts = json::array();
  for (const auto& r : g.rollouts) {
    json turns = json::array();
    for (std::size_t i = 0; i < r.turns.size(); ++i) {
      turns.push_back(turn_json(r.turns[i], profile_of(profiles, r.index, i)));
    }
    rollouts.push_back(json{
        {"index", r.index},
        {"passed_at_turn", r.outcome.passed_at_turn},
        {"generated_turns", r.outcome.generated_turns},
        {"rank", r.rank},
        {"reward", r.reward},
        {"advantage", r.advantage},
        {"truncated", r.truncated},
        {"turns", std::move(turns)},
    });
  }
  return json{
      {"run_id", g.run_id},
      {"step", g.step},
      {"split", to_string(g.split)},
      {"group_index", g.group_index},
      {"task_id", g.task_id},
      {"max_turns", g.max_turns},
      {"gate", to_string(g.gate)},
      {"n_fail", g.n_fail},
      {"thresholds", {{"lo", g.thresholds.lo}, {"hi", g.thresholds.hi}}},
      {"probe", g.probe},
      {"started_unix_ms", g.started_unix_ms},
      {"gated_unix_ms", g.gated_unix_ms},
      {"finished_unix_ms", g.finished_unix_ms},
      {"weight_version", g.weight_version ? json(*g.weight_version) : json(nullptr)},
      {"optimise", g.optimise ? json(to_string(*g.optimise)) : json(nullptr)},
      {"rollouts", std::move(rollouts)},
  };
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

  template <class T>
  std::vector<T> array(const json& obj, std::string_view key, const std::string& path) {
    const auto v = get<json>(obj, key, path);
    std::vector<T> out;
    if (!ok()) {
      return out;
    }
    const auto where = path.empty() ? std::string(key) : path + "." + std::string(key);
    if (!v.is_array()) {
      fail(where, "is not an array");
      return out;
    }
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size() && ok(); ++i) {
      out.push_back(convert<T>(v[i], where + "[" + std::to_string(i) + "]"));
    }
    return out;
  }

  template <class E, class P>
  E enumeration(const json& obj, std::string_view key, const std::string& path, P parse,
                std::string_view what) {
    const auto name = get<std::string>(obj, key, path);
    if (!ok()) {
      return E{};
    }
    const auto value = parse(name);
    if (!value) {
      // The shared vocabulary's parsers (common/enums) say it all, valid names included.
      std::string message = ": unknown " + std::string(what) + " '" + name + "'";
      if constexpr (requires { value.err(); }) {
        message = ": " + value.err().message;
      }
      fail(path.empty() ? std::string(key) : path + "." + std::string(key), message);
      return E{};
    }
    return *value;
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

turn_record turn_from(json_reader& r, const json& j, const std::string& path) {
  turn_record t;
  t.input_tokens = r.array<token_id>(j, "input_tokens", path);
  t.output_tokens = r.array<token_id>(j, "output_tokens", path);
  t.output_logprobs = r.array<float>(j, "output_logprobs", path);
  t.text = r.get<std::string>(j, "text", path);
  const auto hash = r.get<json>(j, "code_hash", path);
  if (r.ok() && !hash.is_null()) {
    t.code_hash = r.convert<std::string>(hash, path + ".code_hash");
  }
  t.verdict = r.enumeration<verdict_category>(
      j, "verdict", path, [](const std::string& n) { return parse_verdict_category(n); },
      "verdict");
  t.passed = r.get<bool>(j, "passed", path);
  t.feedback = r.get<std::string>(j, "feedback", path);
  const auto timings = r.get<json>(j, "timings", path);
  const auto tp = path + ".timings";
  t.timings.generation_ms = r.get<double>(timings, "generation_ms", tp);
  t.timings.compile_ms = r.get<double>(timings, "compile_ms", tp);
  t.timings.run_ms = r.get<double>(timings, "run_ms", tp);
  t.timings.generation_queue_ms = r.get<double>(timings, "generation_queue_ms", tp);
  t.timings.compile_queue_ms = r.get<double>(timings, "compile_queue_ms", tp);
  t.timings.run_queue_ms = r.get<double>(timings, "run_queue_ms", tp);
  t.weight_version = r.get<std::uint64_t>(j, "weight_version", path);
  t.finish = r.enumeration<finish_reason>(
      j, "finish_reason", path, [](const std::string& n) { return parse_finish_reason(n); },
      "finish reason");
  t.endpoint = r.get<std::string>(j, "endpoint", path);
  // Optional: exports written before format version 6 have no segments (one version sampled the
  // whole turn), which reads as the store reads such records.
  if (const auto it = j.find("weight_segments"); r.ok() && it != j.end()) {
    const auto sp = path + ".weight_segments";
    if (!it->is_array()) {
      r.fail(sp, "is not an array");
    } else {
      for (std::size_t i = 0; i < it->size() && r.ok(); ++i) {
        const auto& e = (*it)[i];
        const auto ep = sp + "[" + std::to_string(i) + "]";
        t.weight_segments.push_back(
            {r.get<std::uint32_t>(e, "first", ep), r.get<std::uint64_t>(e, "version", ep)});
      }
    }
  } else {
    t.weight_segments = {{0, t.weight_version}};
  }
  // Optional: exports written before issue 31 have no speedup or noise (not measured).
  if (const auto it = j.find("speedup_noise"); r.ok() && it != j.end() && !it->is_null()) {
    t.speedup_noise = r.convert<double>(*it, path + ".speedup_noise");
  }
  if (const auto it = j.find("speedup"); r.ok() && it != j.end() && !it->is_null()) {
    t.speedup = r.convert<double>(*it, path + ".speedup");
  }
  for (const auto& [key, field] :
       {std::pair{"compiled_speedup", &turn_record::compiled_speedup},
        std::pair{"compiled_speedup_noise", &turn_record::compiled_speedup_noise}}) {
    if (const auto it = j.find(key); r.ok() && it != j.end() && !it->is_null()) {
      t.*field = r.convert<double>(*it, path + "." + key);
    }
  }
  return t;
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

const char* flag(bool b) { return b ? "true" : "false"; }

// The profile_* cells: seconds, note, then per kernel (space-separated) its name, duration,
// bottleneck and findings; all empty without a profile.
std::array<std::string, 6> profile_cells(const turn_profile_record* p) {
  std::array<std::string, 6> cells;
  if (p == nullptr) {
    return cells;
  }
  cells[0] = number(p->seconds);
  cells[1] = p->note;
  for (const auto& k : p->kernels) {
    const char* gap = cells[2].empty() ? "" : " ";
    cells[2] += gap + k.name;
    cells[3] += gap + number(k.duration_ns);
    cells[4] += gap + k.bottleneck;
    std::string findings;
    for (const auto& f : k.findings) {
      findings += (findings.empty() ? "" : "+") + f;
    }
    cells[5] += gap + (findings.empty() ? std::string("-") : findings);
  }
  return cells;
}

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
  g.run_id = r.get<std::string>(j, "run_id", "");
  g.step = r.get<std::uint64_t>(j, "step", "");
  g.split = r.enumeration<split_kind>(
      j, "split", "", [](const std::string& n) { return parse_split_kind(n); }, "split");
  g.group_index = r.get<std::uint32_t>(j, "group_index", "");
  g.task_id = r.get<std::string>(j, "task_id", "");
  g.max_turns = r.get<int>(j, "max_turns", "");
  g.gate = r.enumeration<gate_decision>(
      j, "gate", "", [](const std::string& n) { return parse_gate_decision(n); }, "gate decision");
  g.n_fail = r.get<int>(j, "n_fail", "");
  const auto thresholds = r.get<json>(j, "thresholds", "");
  g.thresholds.lo = r.get<int>(thresholds, "lo", "thresholds");
  g.thresholds.hi = r.get<int>(thresholds, "hi", "thresholds");
  g.probe = r.get<bool>(j, "probe", "");
  g.started_unix_ms = r.get<std::int64_t>(j, "started_unix_ms", "");
  g.gated_unix_ms = r.get<std::int64_t>(j, "gated_unix_ms", "");
  g.finished_unix_ms = r.get<std::int64_t>(j, "finished_unix_ms", "");
  // Absent or null: a group with none (training groups, exports made before it existed).
  if (j.is_object() && j.contains("weight_version") && !j["weight_version"].is_null()) {
    g.weight_version = r.get<std::uint64_t>(j, "weight_version", "");
  }
  // Absent or null: no stored optimisation decision (gate.optimise off, exports made before it).
  if (j.is_object() && j.contains("optimise") && !j["optimise"].is_null()) {
    g.optimise = r.enumeration<optimise_decision>(
        j, "optimise", "", [](const std::string& n) { return parse_optimise_decision(n); },
        "optimise decision");
  }
  const auto rollouts = r.array<json>(j, "rollouts", "");
  for (std::size_t i = 0; i < rollouts.size() && r.ok(); ++i) {
    const auto path = "rollouts[" + std::to_string(i) + "]";
    const auto& rj = rollouts[i];
    rollout_record ro;
    ro.index = r.get<std::uint32_t>(rj, "index", path);
    ro.outcome.passed_at_turn = r.get<int>(rj, "passed_at_turn", path);
    ro.outcome.generated_turns = r.get<int>(rj, "generated_turns", path);
    ro.rank = r.get<int>(rj, "rank", path);
    ro.reward = r.get<double>(rj, "reward", path);
    ro.advantage = r.get<double>(rj, "advantage", path);
    ro.truncated = r.get<bool>(rj, "truncated", path);
    const auto turns = r.array<json>(rj, "turns", path);
    for (std::size_t t = 0; t < turns.size() && r.ok(); ++t) {
      ro.turns.push_back(turn_from(r, turns[t], path + ".turns[" + std::to_string(t) + "]"));
    }
    g.rollouts.push_back(std::move(ro));
  }
  if (!r.ok()) {
    return error{r.message()};
  }
  return g;
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> columns = {"run_id",
                                                   "step",
                                                   "split",
                                                   "group_index",
                                                   "task_id",
                                                   "max_turns",
                                                   "gate",
                                                   "n_fail",
                                                   "threshold_lo",
                                                   "threshold_hi",
                                                   "probe",
                                                   "group_started_unix_ms",
                                                   "group_gated_unix_ms",
                                                   "group_finished_unix_ms",
                                                   "group_weight_version",
                                                   "rollout_index",
                                                   "passed_at_turn",
                                                   "generated_turns",
                                                   "rank",
                                                   "reward",
                                                   "advantage",
                                                   "truncated",
                                                   "turn",
                                                   "input_tokens",
                                                   "output_tokens",
                                                   "verdict",
                                                   "passed",
                                                   "finish_reason",
                                                   "weight_version",
                                                   "weight_segments",
                                                   "endpoint",
                                                   "generation_ms",
                                                   "compile_ms",
                                                   "run_ms",
                                                   "generation_queue_ms",
                                                   "compile_queue_ms",
                                                   "run_queue_ms",
                                                   "speedup",
                                                   "compiled_speedup",
                                                   "code_hash",
                                                   "profile_seconds",
                                                   "profile_note",
                                                   "profile_kernels",
                                                   "profile_duration_ns",
                                                   "profile_bottlenecks",
                                                   "profile_findings",
                                                   "feedback",
                                                   "text"};
  return columns;
}

std::string csv_header() {
  std::string out;
  append_row(out, csv_columns());
  return out;
}

std::size_t append_csv_rows(const group_record& g, std::string& out,
                            const group_profiles& profiles) {
  std::vector<std::string> group_fields = {
      g.run_id,
      std::to_string(g.step),
      to_string(g.split),
      std::to_string(g.group_index),
      g.task_id,
      std::to_string(g.max_turns),
      to_string(g.gate),
      std::to_string(g.n_fail),
      std::to_string(g.thresholds.lo),
      std::to_string(g.thresholds.hi),
      flag(g.probe),
      std::to_string(g.started_unix_ms),
      std::to_string(g.gated_unix_ms),
      std::to_string(g.finished_unix_ms),
      g.weight_version ? std::to_string(*g.weight_version) : std::string(),
  };
  std::size_t rows = 0;
  for (const auto& r : g.rollouts) {
    auto fields = group_fields;
    fields.insert(fields.end(), {std::to_string(r.index), std::to_string(r.outcome.passed_at_turn),
                                 std::to_string(r.outcome.generated_turns), std::to_string(r.rank),
                                 number(r.reward), number(r.advantage), flag(r.truncated)});
    const auto rollout_width = fields.size();
    if (r.turns.empty()) {
      fields.resize(csv_columns().size());
      append_row(out, fields);
      ++rows;
      continue;
    }
    for (std::size_t i = 0; i < r.turns.size(); ++i) {
      const auto& t = r.turns[i];
      const auto cells = profile_cells(profile_of(profiles, r.index, i));
      fields.resize(rollout_width);
      fields.insert(fields.end(),
                    {std::to_string(i),
                     std::to_string(t.input_tokens.size()),
                     std::to_string(t.output_tokens.size()),
                     to_string(t.verdict),
                     flag(t.passed),
                     to_string(t.finish),
                     std::to_string(t.weight_version),
                     segments_cell(t),
                     t.endpoint,
                     number(t.timings.generation_ms),
                     number(t.timings.compile_ms),
                     number(t.timings.run_ms),
                     number(t.timings.generation_queue_ms),
                     number(t.timings.compile_queue_ms),
                     number(t.timings.run_queue_ms),
                     t.speedup > 0 ? number(t.speedup) : std::string(),
                     t.compiled_speedup > 0 ? number(t.compiled_speedup) : std::string(),
                     t.code_hash.value_or(""),
                     cells[0],
                     cells[1],
                     cells[2],
                     cells[3],
                     cells[4],
                     cells[5],
                     t.feedback,
                     t.text});
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
