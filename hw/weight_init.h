// weight_init.h: the one rule for a model's random weights and its rows' tokens, shared by every
// backend (hw/cpu_backend.h; hw/cuda/) so that `engine: cpu` and `engine: cuda` of the same model
// config and seed hold identical weights and feed identical tokens.
//
// Each matrix has a tag (TagOf); element i of it is
//   UniformWeight(WeightKey(seed, tag), i, bound) = (2·u − 1)·bound,  u = top 24 bits of
//   SplitMix64Hash(key + i) / 2^24 ∈ [0, 1),
// a counter-based value, so it does not depend on the thread count or the device that fills it.
// Bounds: ±sqrt(3 / fan_in) for the projections and the LM head (variance 1/fan_in: activations
// stay O(1) through the layers), ±sqrt(3) for the embedding (unit-variance rows); RMSNorm weights
// are 1. A row's token is TokenOf(request id, position, vocab).
//
// All functions are O(1) and FEATHER_HOST_DEVICE (nvcc calls the constexpr SplitMix64 with
// --expt-relaxed-constexpr).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/splitmix64.h"
#include "hw/host_device.h"

namespace feather::hw {

// Matrices of the model (per layer ones take the layer in TagOf).
enum class WeightMatrix : uint8_t { kQkv = 1, kO = 2, kGateUp = 3, kDown = 4, kLmHead, kEmbedding };

[[nodiscard]] FEATHER_HOST_DEVICE constexpr uint64_t TagOf(WeightMatrix matrix, uint32_t layer) {
  switch (matrix) {
    case WeightMatrix::kLmHead:
      return 1;
    case WeightMatrix::kEmbedding:
      return 2;
    default:
      return (uint64_t{layer + 1} << 8) + static_cast<uint64_t>(matrix);
  }
}

[[nodiscard]] FEATHER_HOST_DEVICE constexpr uint64_t WeightKey(uint64_t seed, uint64_t tag) {
  return SplitMix64Hash(seed ^ SplitMix64Hash(tag));
}

[[nodiscard]] FEATHER_HOST_DEVICE constexpr float UniformWeight(uint64_t key, uint64_t index,
                                                                float bound) {
  const uint64_t bits = SplitMix64Hash(key + index);
  const float unit = static_cast<float>(bits >> 40) * 0x1.0p-24F;  // [0, 1)
  return (2.0F * unit - 1.0F) * bound;
}

// ±sqrt(3 / fan_in): the bound of a projection with `fan_in` inputs.
[[nodiscard]] inline float ProjectionBound(uint64_t fan_in) {
  return std::sqrt(3.0F / static_cast<float>(fan_in));
}
// The embedding's bound (unit-variance rows).
[[nodiscard]] inline float EmbeddingBound() { return std::sqrt(3.0F); }

// The token at `position` of request `id`: a cheap hash, so the embedding is a real row gather.
[[nodiscard]] FEATHER_HOST_DEVICE constexpr uint32_t TokenOf(uint64_t id, uint32_t position,
                                                             uint32_t vocab) {
  return static_cast<uint32_t>(SplitMix64Hash((id << 32) | position) % vocab);
}

}  // namespace feather::hw
