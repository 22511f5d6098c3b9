#include "storage/record_codec.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
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

  std::uint8_t u8(std::string_view field) {
    if (!need(1, field)) {
      return 0;
    }
    return static_cast<std::uint8_t>(bytes_[pos_++]);
  }
  bool boolean(std::string_view field) {
    const auto b = u8(field);
    if (ok() && b > 1) {
      fail_at(pos_ - 1, field, "bool byte " + std::to_string(b));
    }
    return b == 1;
  }
  // Enum bytes are checked against the highest value the build knows.
  template <class E>
  E enumeration(std::string_view field, E max) {
    const auto b = u8(field);
    if (ok() && b > static_cast<std::uint8_t>(max)) {
      fail_at(pos_ - 1, field, "unknown value " + std::to_string(b));
      return E{};
    }
    return static_cast<E>(b);
  }
  std::uint32_t u32(std::string_view field) { return fixed<std::uint32_t>(field); }
  std::uint64_t u64(std::string_view field) { return fixed<std::uint64_t>(field); }
  std::int32_t i32(std::string_view field) {
    return static_cast<std::int32_t>(fixed<std::uint32_t>(field));
  }
  std::int64_t i64(std::string_view field) {
    return static_cast<std::int64_t>(fixed<std::uint64_t>(field));
  }
  double f64(std::string_view field) { return std::bit_cast<double>(fixed<std::uint64_t>(field)); }
  std::string str(std::string_view field) {
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
  std::size_t count(std::string_view field, std::size_t min_size) {
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
  std::vector<T> array4(std::string_view field, bool keep) {
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
  bool need(std::size_t n, std::string_view field) {
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
  void fail_at(std::size_t offset, std::string_view field, const std::string& message) {
    fail("byte " + std::to_string(offset) + " ('" + std::string(field) + "'): " + message);
  }
  template <class U>
  U fixed(std::string_view field) {
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

// ---- group
// ---------------------------------------------------------------------------------------

void write_turn(byte_writer& w, const turn_record& t) {
  w.array4(t.input_tokens);
  w.array4(t.output_tokens);
  w.array4(t.output_logprobs);
  w.str(t.text);
  w.boolean(t.code_hash.has_value());
  if (t.code_hash) {
    w.str(*t.code_hash);
  }
  w.enumeration(t.verdict);
  w.boolean(t.passed);
  w.str(t.feedback);
  w.f64(t.timings.generation_ms);
  w.f64(t.timings.compile_ms);
  w.f64(t.timings.run_ms);
  w.f64(t.timings.generation_queue_ms);
  w.f64(t.timings.compile_queue_ms);
  w.f64(t.timings.run_queue_ms);
  w.u64(t.weight_version);
  w.enumeration(t.finish);
  w.str(t.endpoint);
}

// The smallest encoded turn and rollout (all vectors and strings empty), for count checks.
constexpr std::size_t min_turn_bytes = 3 * 4 + 4 + 1 + 1 + 1 + 4 + 6 * 8 + 8 + 1 + 4;
constexpr std::size_t min_rollout_bytes = 4 + 4 + 4 + 4 + 8 + 8 + 1 + 4;

turn_record read_turn(byte_reader& r, bool tokens) {
  turn_record t;
  t.input_tokens = r.array4<token_id>("input_tokens", tokens);
  t.output_tokens = r.array4<token_id>("output_tokens", tokens);
  t.output_logprobs = r.array4<float>("output_logprobs", tokens);
  t.text = r.str("text");
  if (r.boolean("code_hash present")) {
    t.code_hash = r.str("code_hash");
  }
  t.verdict = r.enumeration("verdict", verdict_category::wrong_answer);
  t.passed = r.boolean("passed");
  t.feedback = r.str("feedback");
  t.timings.generation_ms = r.f64("generation_ms");
  t.timings.compile_ms = r.f64("compile_ms");
  t.timings.run_ms = r.f64("run_ms");
  t.timings.generation_queue_ms = r.f64("generation_queue_ms");
  t.timings.compile_queue_ms = r.f64("compile_queue_ms");
  t.timings.run_queue_ms = r.f64("run_queue_ms");
  t.weight_version = r.u64("weight_version");
  // `other` is never stored: the generator records it as `stop` (actors/generator.cpp).
  t.finish = r.enumeration("finish_reason", finish_reason::error);
  t.endpoint = r.str("endpoint");
  return t;
}

// Format version 6: a turn's weight segments, after everything older versions wrote.
void write_segments(byte_writer& w, const turn_record& t) {
  w.count(t.weight_segments.size());
  for (const auto& s : t.weight_segments) {
    w.u32(s.first);
    w.u64(s.version);
  }
}

constexpr std::size_t segment_bytes = 4 + 8;

void read_segments(byte_reader& r, std::uint8_t version, turn_record& t) {
  if (version < 6) {
    // Before in-flight updates one version sampled the whole turn.
    t.weight_segments = {{0, t.weight_version}};
    return;
  }
  const auto n = r.count("turn.weight_segments", segment_bytes);
  t.weight_segments.resize(n);
  for (auto& s : t.weight_segments) {
    s.first = r.u32("turn.weight_segment.first");
    s.version = r.u64("turn.weight_segment.version");
  }
}

std::size_t encoded_size_hint(const group_record& g) {
  std::size_t n = 128 + g.run_id.size() + g.task_id.size();
  for (const auto& r : g.rollouts) {
    n += min_rollout_bytes;
    for (const auto& t : r.turns) {
      n += min_turn_bytes + 8 +
           4 * (t.input_tokens.size() + t.output_tokens.size() + t.output_logprobs.size()) +
           t.text.size() + t.feedback.size() + t.endpoint.size() +
           (t.code_hash ? t.code_hash->size() + 4 : 0) + 4 +
           segment_bytes * t.weight_segments.size();
    }
  }
  return n;
}

}  // namespace

// ---- encoding
// ------------------------------------------------------------------------------------

std::string encode(const group_record& g) {
  byte_writer w(record_kind::group);
  w.reserve(encoded_size_hint(g));
  w.str(g.run_id);
  w.u64(g.step);
  w.enumeration(g.split);
  w.u32(g.group_index);
  w.str(g.task_id);
  w.i32(g.max_turns);
  w.enumeration(g.gate);
  w.i32(g.n_fail);
  w.i32(g.thresholds.lo);
  w.i32(g.thresholds.hi);
  w.boolean(g.probe);
  w.i64(g.started_unix_ms);
  w.i64(g.gated_unix_ms);
  w.i64(g.finished_unix_ms);
  w.count(g.rollouts.size());
  for (const auto& r : g.rollouts) {
    w.u32(r.index);
    w.i32(r.outcome.passed_at_turn);
    w.i32(r.outcome.generated_turns);
    w.i32(r.rank);
    w.f64(r.reward);
    w.f64(r.advantage);
    w.boolean(r.truncated);
    w.count(r.turns.size());
    for (const auto& t : r.turns) {
      write_turn(w, t);
    }
  }
  w.boolean(g.weight_version.has_value());
  w.u64(g.weight_version.value_or(0));
  for (const auto& r : g.rollouts) {
    for (const auto& t : r.turns) {
      w.f64(t.speedup);
    }
  }
  for (const auto& r : g.rollouts) {
    for (const auto& t : r.turns) {
      w.f64(t.speedup_noise);
    }
  }
  for (const auto& r : g.rollouts) {
    for (const auto& t : r.turns) {
      w.f64(t.compiled_speedup);
    }
  }
  for (const auto& r : g.rollouts) {
    for (const auto& t : r.turns) {
      w.f64(t.compiled_speedup_noise);
    }
  }
  for (const auto& r : g.rollouts) {
    for (const auto& t : r.turns) {
      write_segments(w, t);
    }
  }
  return std::move(w).take();
}

result<group_record> decode_group(std::string_view bytes, decode_options options) {
  byte_reader r(bytes, "group");
  group_record g;
  const auto version = r.header(record_kind::group);
  g.run_id = r.str("run_id");
  g.step = r.u64("step");
  g.split = r.enumeration("split", split_kind::validation);
  g.group_index = r.u32("group_index");
  g.task_id = r.str("task_id");
  g.max_turns = r.i32("max_turns");
  g.gate = r.enumeration("gate", gate_decision::open);
  g.n_fail = r.i32("n_fail");
  g.thresholds.lo = r.i32("thresholds.lo");
  g.thresholds.hi = r.i32("thresholds.hi");
  g.probe = r.boolean("probe");
  g.started_unix_ms = r.i64("started_unix_ms");
  g.gated_unix_ms = r.i64("gated_unix_ms");
  g.finished_unix_ms = r.i64("finished_unix_ms");
  const auto rollouts = r.count("rollouts", min_rollout_bytes);
  g.rollouts.resize(rollouts);
  for (auto& ro : g.rollouts) {
    ro.index = r.u32("rollout.index");
    ro.outcome.passed_at_turn = r.i32("rollout.passed_at_turn");
    ro.outcome.generated_turns = r.i32("rollout.generated_turns");
    ro.rank = r.i32("rollout.rank");
    ro.reward = r.f64("rollout.reward");
    ro.advantage = r.f64("rollout.advantage");
    ro.truncated = r.boolean("rollout.truncated");
    const auto turns = r.count("rollout.turns", min_turn_bytes);
    ro.turns.reserve(turns);
    for (std::size_t i = 0; i < turns && r.ok(); ++i) {
      ro.turns.push_back(read_turn(r, options.tokens));
    }
    if (!r.ok()) {
      break;
    }
  }
  if (version >= 2) {
    const bool measured = r.boolean("weight_version present");
    const auto value = r.u64("weight_version");
    if (measured) {
      g.weight_version = value;
    }
  }
  if (version >= 3) {
    for (auto& ro : g.rollouts) {
      for (auto& t : ro.turns) {
        t.speedup = r.f64("turn.speedup");
      }
    }
  }
  if (version >= 4) {
    for (auto& ro : g.rollouts) {
      for (auto& t : ro.turns) {
        t.speedup_noise = r.f64("turn.speedup_noise");
      }
    }
  }
  if (version >= 5) {
    for (auto& ro : g.rollouts) {
      for (auto& t : ro.turns) {
        t.compiled_speedup = r.f64("turn.compiled_speedup");
      }
    }
    for (auto& ro : g.rollouts) {
      for (auto& t : ro.turns) {
        t.compiled_speedup_noise = r.f64("turn.compiled_speedup_noise");
      }
    }
  }
  for (auto& ro : g.rollouts) {
    for (auto& t : ro.turns) {
      read_segments(r, version, t);
    }
  }
  if (auto s = r.finish(); !s) {
    return s.err();
  }
  return g;
}

std::string encode(const turn_record& t) {
  byte_writer w(record_kind::turn);
  write_turn(w, t);
  w.f64(t.speedup);
  w.f64(t.speedup_noise);
  w.f64(t.compiled_speedup);
  w.f64(t.compiled_speedup_noise);
  write_segments(w, t);
  return std::move(w).take();
}

result<turn_record> decode_turn(std::string_view bytes) {
  byte_reader r(bytes, "turn");
  const auto version = r.header(record_kind::turn);
  auto t = read_turn(r, true);
  if (version >= 3) {
    t.speedup = r.f64("speedup");
  }
  if (version >= 4) {
    t.speedup_noise = r.f64("speedup_noise");
  }
  if (version >= 5) {
    t.compiled_speedup = r.f64("compiled_speedup");
    t.compiled_speedup_noise = r.f64("compiled_speedup_noise");
  }
  read_segments(r, version, t);
  if (auto s = r.finish(); !s) {
    return s.err();
  }
  return t;
}

// ---- retry buffer
// --------------------------------------------------------------------------------------

namespace {

void write_counts(byte_writer& w, const retry_counts& c) {
  w.u32(c.admitted);
  w.u32(c.requeued);
  w.u32(c.recovered);
  w.u32(c.exhausted);
  w.u32(c.evicted);
}

retry_counts read_counts(byte_reader& r) {
  retry_counts c;
  c.admitted = r.u32("admitted");
  c.requeued = r.u32("requeued");
  c.recovered = r.u32("recovered");
  c.exhausted = r.u32("exhausted");
  c.evicted = r.u32("evicted");
  return c;
}

constexpr std::size_t retry_entry_bytes = 3 * 8 + 4;

}  // namespace

std::string encode(const retry_step_record& rec) {
  byte_writer w(record_kind::retry);
  w.u64(rec.step);
  write_counts(w, rec.counts);
  w.count(rec.retried.size());
  for (auto g : rec.retried) {
    w.u32(g);
  }
  write_counts(w, rec.buffer.total);
  w.count(rec.buffer.entries.size());
  for (const auto& e : rec.buffer.entries) {
    w.u64(e.task);
    w.u64(e.first_step);
    w.u64(e.failed_step);
    w.u32(e.attempts);
  }
  return std::move(w).take();
}

result<retry_step_record> decode_retry(std::string_view bytes) {
  byte_reader r(bytes, "retry");
  r.header(record_kind::retry);
  retry_step_record rec;
  rec.step = r.u64("step");
  rec.counts = read_counts(r);
  const auto retried = r.count("retried", 4);
  for (std::size_t i = 0; i < retried && r.ok(); ++i) {
    rec.retried.push_back(r.u32("retried slot"));
  }
  rec.buffer.total = read_counts(r);
  const auto entries = r.count("entries", retry_entry_bytes);
  for (std::size_t i = 0; i < entries && r.ok(); ++i) {
    retry_entry e;
    e.task = r.u64("entry.task");
    e.first_step = r.u64("entry.first_step");
    e.failed_step = r.u64("entry.failed_step");
    e.attempts = r.u32("entry.attempts");
    rec.buffer.entries.push_back(e);
  }
  if (auto s = r.finish(); !s) {
    return s.err();
  }
  return rec;
}

// ---- carry decision
// --------------------------------------------------------------------------------------

namespace {

// origin step, group, task, task id's count, sampled version, complete.
constexpr std::size_t carried_group_min_bytes = 8 + 4 + 8 + 4 + 8 + 1;

}  // namespace

std::string encode(const partial_carry_record& rec) {
  byte_writer w(record_kind::carry);
  w.u64(rec.step);
  w.count(rec.groups.size());
  for (const auto& g : rec.groups) {
    w.u64(g.origin_step);
    w.u32(g.group);
    w.u64(g.task);
    w.str(g.task_id);
    w.u64(g.sampled_version);
    w.boolean(g.complete);
  }
  return std::move(w).take();
}

result<partial_carry_record> decode_carry(std::string_view bytes) {
  byte_reader r(bytes, "carry");
  r.header(record_kind::carry);
  partial_carry_record rec;
  rec.step = r.u64("step");
  const auto groups = r.count("groups", carried_group_min_bytes);
  for (std::size_t i = 0; i < groups && r.ok(); ++i) {
    carried_group g;
    g.origin_step = r.u64("group.origin_step");
    g.group = r.u32("group.group");
    g.task = r.u64("group.task");
    g.task_id = r.str("group.task_id");
    g.sampled_version = r.u64("group.sampled_version");
    g.complete = r.boolean("group.complete");
    rec.groups.push_back(std::move(g));
  }
  if (auto s = r.finish(); !s) {
    return s.err();
  }
  return rec;
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

// ---- turn profile
// --------------------------------------------------------------------------------------

namespace {

// name's count, duration, bottleneck's count, findings' count.
constexpr std::size_t kernel_profile_min_bytes = 4 + 8 + 4 + 4;

}  // namespace

std::string encode(const turn_profile_record& profile) {
  byte_writer w(record_kind::profile);
  w.count(profile.kernels.size());
  for (const auto& k : profile.kernels) {
    w.str(k.name);
    w.f64(k.duration_ns);
    w.str(k.bottleneck);
    w.count(k.findings.size());
    for (const auto& f : k.findings) {
      w.str(f);
    }
  }
  w.str(profile.note);
  w.f64(profile.seconds);
  return std::move(w).take();
}

result<turn_profile_record> decode_profile(std::string_view bytes) {
  byte_reader r(bytes, "profile");
  r.header(record_kind::profile);
  turn_profile_record rec;
  const auto kernels = r.count("kernels", kernel_profile_min_bytes);
  for (std::size_t i = 0; i < kernels && r.ok(); ++i) {
    kernel_profile k;
    k.name = r.str("kernel.name");
    k.duration_ns = r.f64("kernel.duration_ns");
    k.bottleneck = r.str("kernel.bottleneck");
    const auto findings = r.count("kernel.findings", 4);
    for (std::size_t j = 0; j < findings && r.ok(); ++j) {
      k.findings.push_back(r.str("kernel.finding"));
    }
    rec.kernels.push_back(std::move(k));
  }
  rec.note = r.str("note");
  rec.seconds = r.f64("seconds");
  if (auto s = r.finish(); !s) {
    return s.err();
  }
  return rec;
}

std::string encode(const step_record& s) {
  byte_writer w(record_kind::step);
  w.str(s.run_id);
  w.u64(s.step);
  w.u64(s.weight_version);
  w.i64(s.started_unix_ms);
  w.i64(s.finished_unix_ms);
  w.f64(s.timings.wall_ms);
  w.f64(s.timings.generation_ms);
  w.f64(s.timings.compile_ms);
  w.f64(s.timings.run_ms);
  w.f64(s.timings.learner_ms);
  w.f64(s.timings.idle_ms);
  w.u32(s.counts.groups);
  w.u32(s.counts.activated_groups);
  w.u32(s.counts.probe_groups);
  w.u32(s.counts.rollouts);
  w.u32(s.counts.passed_rollouts);
  w.u32(s.counts.turns);
  w.u32(s.counts.verifier_jobs);
  w.u64(s.counts.generated_tokens);
  w.count(s.metrics.size());
  for (const auto& [name, value] : s.metrics) {
    w.str(name);
    w.f64(value);
  }
  return std::move(w).take();
}

result<step_record> decode_step(std::string_view bytes) {
  byte_reader r(bytes, "step");
  step_record s;
  r.header(record_kind::step);
  s.run_id = r.str("run_id");
  s.step = r.u64("step");
  s.weight_version = r.u64("weight_version");
  s.started_unix_ms = r.i64("started_unix_ms");
  s.finished_unix_ms = r.i64("finished_unix_ms");
  s.timings.wall_ms = r.f64("wall_ms");
  s.timings.generation_ms = r.f64("generation_ms");
  s.timings.compile_ms = r.f64("compile_ms");
  s.timings.run_ms = r.f64("run_ms");
  s.timings.learner_ms = r.f64("learner_ms");
  s.timings.idle_ms = r.f64("idle_ms");
  s.counts.groups = r.u32("groups");
  s.counts.activated_groups = r.u32("activated_groups");
  s.counts.probe_groups = r.u32("probe_groups");
  s.counts.rollouts = r.u32("rollouts");
  s.counts.passed_rollouts = r.u32("passed_rollouts");
  s.counts.turns = r.u32("turns");
  s.counts.verifier_jobs = r.u32("verifier_jobs");
  s.counts.generated_tokens = r.u64("generated_tokens");
  const auto metrics = r.count("metrics", 4 + 8);
  for (std::size_t i = 0; i < metrics && r.ok(); ++i) {
    auto name = r.str("metric name");
    const double value = r.f64("metric value");
    s.metrics[std::move(name)] = value;
  }
  if (r.ok() && s.metrics.size() != metrics) {
    r.fail("a metric name appears twice");
  }
  if (auto st = r.finish(); !st) {
    return st.err();
  }
  return s;
}

std::string encode(const run_record& run) {
  byte_writer w(record_kind::run);
  w.str(run.id);
  w.str(run.config_yaml);
  w.i64(run.created_unix_ms);
  w.enumeration(run.status);
  return std::move(w).take();
}

result<run_record> decode_run(std::string_view bytes) {
  byte_reader r(bytes, "run");
  run_record run;
  r.header(record_kind::run);
  run.id = r.str("id");
  run.config_yaml = r.str("config_yaml");
  run.created_unix_ms = r.i64("created_unix_ms");
  run.status = r.enumeration("status", run_status::interrupted);
  if (auto st = r.finish(); !st) {
    return st.err();
  }
  return run;
}

}  // namespace leap
