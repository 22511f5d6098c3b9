// Deterministic randomness for the scripted backend and fault injection: every draw is a hash of
// what it depends on (seed, request, position), never a shared generator whose state depends on
// thread timing.
#pragma once

#include "common/splitmix.hpp"
#include "policy/chat/chat.hpp"

#include <cstdint>
#include <span>
#include <string_view>

namespace leap::policy::random {

// SplitMix64's finaliser: a bijective, well-mixed 64-bit hash.
[[nodiscard]] constexpr std::uint64_t mix(std::uint64_t x) { return splitmix64(x); }

[[nodiscard]] constexpr std::uint64_t combine(std::uint64_t a, std::uint64_t b) {
  return mix(a ^ mix(b + 0x632BE59BD9B4E019ULL));
}

// A double in [0, 1) from a hash.
[[nodiscard]] constexpr double unit(std::uint64_t h) {
  return static_cast<double>(h >> 11U) * (1.0 / 9007199254740992.0);
}

// FNV-1a over token ids: the identity of a prompt prefix.
[[nodiscard]] inline std::uint64_t hash_ids(std::span<const token_id> ids) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (const token_id id : ids) {
    h ^= static_cast<std::uint32_t>(id);
    h *= 0x100000001B3ULL;
  }
  return h;
}

[[nodiscard]] inline std::uint64_t hash_text(std::string_view text) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

}  // namespace leap::policy::random
