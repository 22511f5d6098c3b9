// SplitMix64's finaliser: a bijective, well-mixed 64-bit hash whose output is the same on every
// platform (unlike the standard library's distributions). The project's deterministic draws (task
// order, sampling seeds, the scripted backend's choices) are hashes of what they depend on.
#pragma once

#include <cstdint>

namespace leap {

[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

}  // namespace leap
