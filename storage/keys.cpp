#include "storage/keys.hpp"

namespace leap {

group_ref ref_of(const group_record& group) {
  return {group.run_id, group.step, group.split, group.group_index};
}

namespace keys {

namespace {

constexpr std::size_t group_tail = 8 + 1 + 4;  // step, split, group index

std::uint64_t read_be(std::string_view bytes) {
  std::uint64_t v = 0;
  for (const char c : bytes) {
    v = (v << 8) | static_cast<unsigned char>(c);
  }
  return v;
}

// Splits "id \0 rest" at the first NUL; nullopt when there is none or the id is empty.
std::optional<std::pair<std::string_view, std::string_view>> split_id(std::string_view key) {
  const auto nul = key.find('\0');
  if (nul == std::string_view::npos || nul == 0) {
    return std::nullopt;
  }
  return std::pair{key.substr(0, nul), key.substr(nul + 1)};
}

std::optional<group_ref> parse_group_tail(std::string_view run_id, std::string_view tail) {
  if (tail.size() != group_tail) {
    return std::nullopt;
  }
  const auto split = static_cast<unsigned char>(tail[8]);
  if (split > static_cast<unsigned char>(split_kind::validation)) {
    return std::nullopt;
  }
  return group_ref{std::string(run_id), read_be(tail.substr(0, 8)), static_cast<split_kind>(split),
                   static_cast<std::uint32_t>(read_be(tail.substr(9, 4)))};
}

void append_group_tail(std::string& out, const group_ref& ref) {
  append_u64be(out, ref.step);
  out.push_back(static_cast<char>(ref.split));
  append_u32be(out, ref.group_index);
}

}  // namespace

void append_u64be(std::string& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xFFU));
  }
}

void append_u32be(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xFFU));
  }
}

std::string id_prefix(std::string_view id) {
  std::string k(id);
  k.push_back('\0');
  return k;
}

std::string run(std::string_view run_id) { return std::string(run_id); }

std::string step(std::string_view run_id, std::uint64_t step) {
  auto k = id_prefix(run_id);
  append_u64be(k, step);
  return k;
}

std::string group(const group_ref& ref) {
  auto k = id_prefix(ref.run_id);
  append_group_tail(k, ref);
  return k;
}

std::string metric(std::string_view run_id, std::string_view name, std::uint64_t step) {
  auto k = id_prefix(run_id);
  k.append(name);
  k.push_back('\0');
  append_u64be(k, step);
  return k;
}

std::string task(std::string_view task_id, const group_ref& ref) {
  auto k = id_prefix(task_id);
  k.append(ref.run_id);
  k.push_back('\0');
  append_group_tail(k, ref);
  return k;
}

std::optional<std::pair<std::string, std::uint64_t>> parse_step(std::string_view key) {
  const auto parts = split_id(key);
  if (!parts || parts->second.size() != 8) {
    return std::nullopt;
  }
  return std::pair{std::string(parts->first), read_be(parts->second)};
}

std::optional<group_ref> parse_group(std::string_view key) {
  const auto parts = split_id(key);
  if (!parts) {
    return std::nullopt;
  }
  return parse_group_tail(parts->first, parts->second);
}

std::optional<metric_key> parse_metric(std::string_view key) {
  const auto run = split_id(key);
  if (!run) {
    return std::nullopt;
  }
  const auto name = split_id(run->second);
  if (!name || name->second.size() != 8) {
    return std::nullopt;
  }
  return metric_key{std::string(run->first), std::string(name->first), read_be(name->second)};
}

std::optional<std::pair<std::string, group_ref>> parse_task(std::string_view key) {
  const auto task = split_id(key);
  if (!task) {
    return std::nullopt;
  }
  const auto run = split_id(task->second);
  if (!run) {
    return std::nullopt;
  }
  auto ref = parse_group_tail(run->first, run->second);
  if (!ref) {
    return std::nullopt;
  }
  return std::pair{std::string(task->first), std::move(*ref)};
}

namespace {
constexpr std::string_view turn_tag = "leap.turn";
constexpr std::string_view profile_tag = "leap.profile";

// "tag \0 run_id \0 step split group rollout:u32be turn:u32be": the turn and profile keys.
std::string turn_keys_of_run(std::string_view tag, std::string_view run_id) {
  std::string k = id_prefix(tag);
  k += id_prefix(run_id);
  return k;
}

std::string turn_key_of(std::string_view tag, const group_ref& ref, std::uint32_t rollout,
                        std::uint32_t turn) {
  std::string k = turn_keys_of_run(tag, ref.run_id);
  append_group_tail(k, ref);
  append_u32be(k, rollout);
  append_u32be(k, turn);
  return k;
}

std::optional<turn_key> parse_turn_key(std::string_view tag, std::string_view key) {
  const auto prefix = id_prefix(tag);
  if (!key.starts_with(prefix)) {
    return std::nullopt;
  }
  auto parts = split_id(key.substr(prefix.size()));
  if (!parts || parts->second.size() != group_tail + 8) {
    return std::nullopt;
  }
  auto ref = parse_group_tail(parts->first, parts->second.substr(0, group_tail));
  if (!ref) {
    return std::nullopt;
  }
  const auto rest = parts->second.substr(group_tail);
  return turn_key{std::move(*ref), static_cast<std::uint32_t>(read_be(rest.substr(0, 4))),
                  static_cast<std::uint32_t>(read_be(rest.substr(4, 4)))};
}
}  // namespace

std::string turns_of_run(std::string_view run_id) { return turn_keys_of_run(turn_tag, run_id); }

std::string turns_of_group(const group_ref& ref) {
  std::string k = turns_of_run(ref.run_id);
  append_group_tail(k, ref);
  return k;
}

std::string turn(const group_ref& ref, std::uint32_t rollout, std::uint32_t turn) {
  return turn_key_of(turn_tag, ref, rollout, turn);
}

std::optional<turn_key> parse_turn(std::string_view key) { return parse_turn_key(turn_tag, key); }

std::string profiles_of_run(std::string_view run_id) {
  return turn_keys_of_run(profile_tag, run_id);
}

std::string profile(const group_ref& ref, std::uint32_t rollout, std::uint32_t turn) {
  return turn_key_of(profile_tag, ref, rollout, turn);
}

std::optional<turn_key> parse_profile(std::string_view key) {
  return parse_turn_key(profile_tag, key);
}

namespace {
constexpr std::string_view retry_tag = "leap.retry";
constexpr std::string_view carry_tag = "leap.carry";

// "tag \0 run_id \0 step:u64be": the retry and carry keys.
std::string step_keys_of_run(std::string_view tag, std::string_view run_id) {
  std::string k = id_prefix(tag);
  k += id_prefix(run_id);
  return k;
}

std::optional<std::pair<std::string, std::uint64_t>> parse_step_key(std::string_view tag,
                                                                    std::string_view key) {
  const auto prefix = id_prefix(tag);
  if (!key.starts_with(prefix)) {
    return std::nullopt;
  }
  auto parts = split_id(key.substr(prefix.size()));
  if (!parts || parts->second.size() != 8) {
    return std::nullopt;
  }
  return std::pair{std::string(parts->first), read_be(parts->second)};
}
}  // namespace

std::string retries_of_run(std::string_view run_id) { return step_keys_of_run(retry_tag, run_id); }

std::string retry(std::string_view run_id, std::uint64_t step) {
  std::string k = retries_of_run(run_id);
  append_u64be(k, step);
  return k;
}

std::optional<std::pair<std::string, std::uint64_t>> parse_retry(std::string_view key) {
  return parse_step_key(retry_tag, key);
}

std::string carries_of_run(std::string_view run_id) { return step_keys_of_run(carry_tag, run_id); }

std::string carry(std::string_view run_id, std::uint64_t step) {
  std::string k = carries_of_run(run_id);
  append_u64be(k, step);
  return k;
}

std::optional<std::pair<std::string, std::uint64_t>> parse_carry(std::string_view key) {
  return parse_step_key(carry_tag, key);
}

std::string optimise(const group_ref& ref) {
  std::string k = id_prefix("leap.optimise");
  k += id_prefix(ref.run_id);
  append_group_tail(k, ref);
  return k;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last != 0xFF) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return end;
}

}  // namespace keys
}  // namespace leap
