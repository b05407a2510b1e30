// rng.h: the simulator's random number generator, identical on every platform and compiler.
//
// std::*_distribution results are implementation-defined, which would break "same scenario and
// seed give identical results"; so feather draws everything from xoshiro256** seeded through
// SplitMix64, with its own bounded-integer and floating-point conversions.
#pragma once

#include <cstdint>

#include "base/splitmix64.h"

namespace feather {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    SplitMix64 seeder{seed};
    for (uint64_t& word : state_) word = seeder.Next();
  }

  // Uniform 64-bit value (xoshiro256**).
  uint64_t NextU64() {
    const uint64_t result = RotateLeft(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = RotateLeft(state_[3], 45);
    return result;
  }

  // Uniform integer in [0, bound), bound > 0 (Lemire's multiply-shift; the tiny bias of the
  // rejection-free form is irrelevant for workloads and keeps draws one-per-call).
  uint64_t Uniform(uint64_t bound) {
    __extension__ typedef unsigned __int128 Wide;  // GCC/Clang builtin; -Wpedantic-clean
    return static_cast<uint64_t>((static_cast<Wide>(NextU64()) * bound) >> 64);
  }

  // Uniform integer in [lo, hi], lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Uniform(static_cast<uint64_t>(hi - lo) + 1));
  }

  // Uniform double in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t RotateLeft(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

}  // namespace feather
