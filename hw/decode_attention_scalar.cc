// decode_attention_scalar.cc: the portable tile step of the CPU attention kernels (see
// attention_internal.h), used on CPUs without AVX2+FMA and forced by tests to check the
// vectorized step against it. Same arithmetic as the AVX2 step, one lane at a time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "hw/attention_internal.h"
#include "hw/paged_kv.h"

namespace feather::hw::attention_internal {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

template <KvDtype kDtype>
float LoadElem(const void* base, size_t index) {
  if constexpr (kDtype == KvDtype::kFp32) {
    return static_cast<const float*>(base)[index];
  } else {
    return Bf16ToFloat(static_cast<const uint16_t*>(base)[index]);
  }
}

// Base-2 score of one query against one KV row.
template <KvDtype kDtype>
float Score(const float* q, const void* k, uint32_t row, uint32_t head_dim) {
  float dot = 0;
  const size_t base = size_t{row} * head_dim;
  for (uint32_t d = 0; d < head_dim; ++d) dot += q[d] * LoadElem<kDtype>(k, base + d);
  return dot;
}

// One lane: scores, online-softmax update, o = o·alpha + Σ p·v.
template <KvDtype kDtype>
void TileLane(const TileArgs& args, uint32_t lane) {
  const uint32_t dim = args.head_dim;
  const float* q = args.q + size_t{lane} * dim;
  float* o = args.o + size_t{lane} * dim;
  const uint32_t visible =
      args.limit == nullptr
          ? args.tokens
          : static_cast<uint32_t>(std::max(
                0, std::min<int32_t>(args.limit[lane], static_cast<int32_t>(args.tokens))));
  float scores[kTileTokens];
  float tile_max = kMinusInf;
  for (uint32_t t = 0; t < visible; ++t) {
    scores[t] = Score<kDtype>(q, args.k, t, dim);
    tile_max = std::max(tile_max, scores[t]);
  }
  const float m_old = args.m[lane];
  const float m_new = std::max(m_old, tile_max);
  const float m_use = m_new == kMinusInf ? 0.0f : m_new;  // no token yet: avoid −inf − −inf
  const float alpha = std::exp2(m_old - m_use);
  float sum = 0;
  for (uint32_t t = 0; t < visible; ++t) {
    scores[t] = std::exp2(scores[t] - m_use);
    sum += scores[t];
  }
  args.m[lane] = m_new;
  args.l[lane] = args.l[lane] * alpha + sum;
  for (uint32_t d = 0; d < dim; ++d) o[d] *= alpha;
  for (uint32_t t = 0; t < visible; ++t) {
    const size_t base = size_t{t} * dim;
    for (uint32_t d = 0; d < dim; ++d) o[d] += scores[t] * LoadElem<kDtype>(args.v, base + d);
  }
}

template <KvDtype kDtype, uint32_t kLaneCount>
void TileScalar(const TileArgs& args) {
  for (uint32_t lane = 0; lane < kLaneCount; ++lane) TileLane<kDtype>(args, lane);
}

template <KvDtype kDtype, size_t... kI>
constexpr void FillRow(TileFn (&row)[kLanes][2], std::index_sequence<kI...>) {
  ((row[kI][0] = &TileScalar<kDtype, kI + 1>, row[kI][1] = &TileScalar<kDtype, kI + 1>), ...);
}

constexpr TileKernels MakeScalarKernels() {
  TileKernels kernels{};  // pair_group {0, 0}, kNatural: natural column order; fp32 math
  FillRow<KvDtype::kFp32>(kernels.fn[0], std::make_index_sequence<kLanes>());
  FillRow<KvDtype::kBf16>(kernels.fn[1], std::make_index_sequence<kLanes>());
  return kernels;
}

constexpr TileKernels kScalarKernels = MakeScalarKernels();

}  // namespace

const TileKernels& ScalarTileKernels() { return kScalarKernels; }

}  // namespace feather::hw::attention_internal
