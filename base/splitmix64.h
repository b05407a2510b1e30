// splitmix64.h: SplitMix64 (Steele, Lea, Flood 2014), the one copy every layer uses.
//
// Two uses, one arithmetic:
//   SplitMix64Hash(x)  a stateless 64-bit mix of x: token ids and weights of the CPU engine
//                      derived from (request, position) or (seed, tag) without any state;
//   SplitMix64{seed}   a tiny deterministic generator (Next, NextUnit): the stop policies' draws
//                      and the seeding of base/rng.h's xoshiro256**.
// Hash(x) equals the first Next() of a generator seeded with x. Deterministic on every platform
// and compiler (no std:: distributions, whose output differs between standard libraries).
// O(1), constexpr, no allocation.
#pragma once

#include <cstdint>

namespace feather {

inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ULL;

// The output mix applied to an already advanced state.
[[nodiscard]] constexpr uint64_t SplitMix64Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Stateless: the value a generator seeded with `x` returns first.
[[nodiscard]] constexpr uint64_t SplitMix64Hash(uint64_t x) {
  return SplitMix64Finalize(x + kSplitMix64Gamma);
}

struct SplitMix64 {
  uint64_t state = 0;
  // The next 64-bit value (advances the state by the golden gamma).
  [[nodiscard]] constexpr uint64_t Next() { return SplitMix64Finalize(state += kSplitMix64Gamma); }
  // Uniform in [0, 1) with 53 random bits.
  [[nodiscard]] constexpr double NextUnit() {
    return static_cast<double>(Next() >> 11) * 0x1.0p-53;
  }
};

}  // namespace feather
