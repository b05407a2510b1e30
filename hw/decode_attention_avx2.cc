// decode_attention_avx2.cc: the AVX2+FMA tile step of the CPU attention kernels (see
// attention_internal.h). Compiled with -mavx2 -mfma and reached only through ActiveTileKernels(),
// after a runtime check of the CPU. Uses only intrinsics and its own internal functions, so no
// inline function shared with other translation units is emitted here with AVX2 code in it.
//
// A tile step for a batch of kL query vectors and n ≤ 16 KV rows:
//   scores: rows × lanes dot products, kT rows at a time so each query load feeds kT FMAs; the
//     kL accumulators of a row reduce (hadd tree) into one register, one lane per query (two
//     rows per register when kL ≤ 4);
//   softmax: vectorized across the lanes (max, base-2 exp, running sum);
//   values: o[lane] = o·alpha + Σ_rows p·v, kCb column chunks at a time held in registers.
// Query and output rows stay in L1 (a batch is ≤ 8 × head_dim × 4 bytes each), the KV tile is
// read once per batch from L1/L2, once per kernel from memory, and while it is processed the
// next tile is prefetched at the pace of the reads (TileArgs::next_k). Measured on the Zen 3 VM
// this was written on: ~70 cycles per token for 4 lanes at head dim 64 with the KV in L2 (the
// FMAs alone need 32), ~23 GB/s per core for fp32 — well above a core's share of DRAM bandwidth.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "hw/attention_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace feather::hw::attention_internal {
namespace {

template <bool kBf16>
inline __m256 LoadRow8(const void* base, size_t index) {
  if constexpr (kBf16) {
    const __m128i half = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + index));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(base) + index);
  }
}

// 2^x, relative error ~2e-7 (Cephes exp2f polynomial on [−0.5, 0.5]); x ≤ −127 (−inf too) gives
// exactly 0 because the exponent field is then 0, so no denormal is ever produced.
inline __m256 Exp2(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f));
  x = _mm256_min_ps(x, _mm256_set1_ps(127.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// Prefetches the cache lines of base[begin, end) (base may be null: nothing to fetch).
inline void PrefetchLines(const void* base, size_t begin, size_t end) {
  if (base == nullptr) return;
  const char* bytes = static_cast<const char*>(base);
  for (size_t offset = begin & ~size_t{63}; offset < end; offset += 64) {
    _mm_prefetch(bytes + offset, _MM_HINT_T0);
  }
}

template <bool kBf16>
constexpr size_t kElemBytes = kBf16 ? 2 : 4;

// Scores live token-major in a small buffer, kStride floats per token: 4 when a batch has at most
// 4 lanes, so that one register holds two tokens and the softmax evaluates half as many
// exponentials; 8 otherwise.
constexpr int ScoreStride(int lanes) { return lanes <= 4 ? 4 : 8; }

// Lane j of the result = the horizontal sum of in[j].
inline __m256 Reduce8(const __m256* in) {
  const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(in[0], in[1]), _mm256_hadd_ps(in[2], in[3]));
  const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(in[4], in[5]), _mm256_hadd_ps(in[6], in[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                       _mm256_permute2f128_ps(h0123, h4567, 0x31));
}
inline __m128 Reduce4(const __m256* in) {
  const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(in[0], in[1]), _mm256_hadd_ps(in[2], in[3]));
  return _mm_add_ps(_mm256_castps256_ps128(h0123), _mm256_extractf128_ps(h0123, 1));
}

// Scores of KV rows [row, row + kT) against the kL queries, into s[row · stride ..].
template <bool kBf16, int kL, int kT>
inline void ScoreRows(const float* q, const void* k, uint32_t row, uint32_t dim, float* s) {
  __m256 acc[kT][kL];
  for (int t = 0; t < kT; ++t) {
    for (int j = 0; j < kL; ++j) acc[t][j] = _mm256_setzero_ps();
  }
  const size_t base = size_t{row} * dim;
  for (uint32_t c = 0; c < dim; c += 8) {
    __m256 keys[kT];
    for (int t = 0; t < kT; ++t) {
      keys[t] = LoadRow8<kBf16>(k, base + static_cast<size_t>(t) * dim + c);
    }
    for (int j = 0; j < kL; ++j) {
      __m256 qj = _mm256_load_ps(q + static_cast<size_t>(j) * dim + c);
      // Keep q in a register: folded into each FMA it would be loaded kT times.
      if constexpr (kT > 1) __asm__("" : "+x"(qj));
      for (int t = 0; t < kT; ++t) acc[t][j] = _mm256_fmadd_ps(qj, keys[t], acc[t][j]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();
  constexpr int kStride = ScoreStride(kL);
  float* out = s + size_t{row} * kStride;
  if constexpr (kStride == 8) {
    for (int t = 0; t < kT; ++t) {
      __m256 in[8];
      for (int j = 0; j < 8; ++j) in[j] = j < kL ? acc[t][j] : zero;
      _mm256_storeu_ps(out + t * 8, Reduce8(in));
    }
  } else {
    int t = 0;
    for (; t + 1 < kT; t += 2) {  // two tokens' sums in one register
      __m256 in[8];
      for (int j = 0; j < 4; ++j) {
        in[j] = j < kL ? acc[t][j] : zero;
        in[4 + j] = j < kL ? acc[t + 1][j] : zero;
      }
      _mm256_storeu_ps(out + t * 4, Reduce8(in));
    }
    if constexpr (kT % 2 == 1) {
      __m256 in[4];
      for (int j = 0; j < 4; ++j) in[j] = j < kL ? acc[kT - 1][j] : zero;
      _mm_storeu_ps(out + (kT - 1) * 4, Reduce4(in));
    }
  }
}

// Online-softmax update across the lanes: masks, turns s into p = 2^(s − m_new), updates m and l
// and leaves the rescale factor of o in alpha. With kStride 4 each register holds tokens 2i and
// 2i + 1 (lanes 0–3 and 4–7), and the two halves are folded together for the max and the sum.
template <int kStride, bool kMasked>
inline void SoftmaxRows(const TileArgs& args, float* s, float* alpha) {
  constexpr bool kPacked = kStride == 4;
  const __m256 minus_inf = _mm256_set1_ps(-__builtin_inff());
  const uint32_t n = args.tokens;
  if (kPacked && (n & 1) != 0) _mm_storeu_ps(s + size_t{n} * 4, _mm256_castps256_ps128(minus_inf));
  const uint32_t vectors = kPacked ? (n + 1) / 2 : n;
  __m256i limit = _mm256_setzero_si256();
  __m256i token = _mm256_setzero_si256();  // token index of each lane of vector i, from i = 0
  if constexpr (kMasked) {
    if constexpr (kPacked) {
      limit = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(args.limit)));
      token = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    } else {
      limit = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(args.limit));
    }
  }
  __m256 max_even = minus_inf, max_odd = minus_inf;  // two chains: the max is exact either way
  for (uint32_t i = 0; i < vectors; ++i) {
    __m256 scores = _mm256_load_ps(s + size_t{i} * 8);
    if constexpr (kMasked) {
      const __m256i visible = _mm256_cmpgt_epi32(limit, token);
      scores = _mm256_blendv_ps(minus_inf, scores, _mm256_castsi256_ps(visible));
      _mm256_store_ps(s + size_t{i} * 8, scores);
      token = _mm256_add_epi32(token, _mm256_set1_epi32(kPacked ? 2 : 1));
    }
    if (i % 2 == 0) {
      max_even = _mm256_max_ps(max_even, scores);
    } else {
      max_odd = _mm256_max_ps(max_odd, scores);
    }
  }
  __m256 tile_max = _mm256_max_ps(max_even, max_odd);
  __m256 m_old, l_old;
  if constexpr (kPacked) {
    tile_max = _mm256_max_ps(tile_max, _mm256_permute2f128_ps(tile_max, tile_max, 1));
    m_old = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(args.m));
    l_old = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(args.l));
  } else {
    m_old = _mm256_loadu_ps(args.m);
    l_old = _mm256_loadu_ps(args.l);
  }
  const __m256 m_new = _mm256_max_ps(m_old, tile_max);
  // A lane that has seen no token yet keeps m = −inf; subtract 0 there instead (−inf − −inf).
  const __m256 m_use = _mm256_andnot_ps(_mm256_cmp_ps(m_new, minus_inf, _CMP_EQ_OQ), m_new);
  const __m256 rescale = Exp2(_mm256_sub_ps(m_old, m_use));
  _mm256_store_ps(alpha, rescale);
  __m256 sum_even = _mm256_setzero_ps(), sum_odd = _mm256_setzero_ps();
  for (uint32_t i = 0; i < vectors; ++i) {
    const __m256 p = Exp2(_mm256_sub_ps(_mm256_load_ps(s + size_t{i} * 8), m_use));
    _mm256_store_ps(s + size_t{i} * 8, p);
    if (i % 2 == 0) {
      sum_even = _mm256_add_ps(sum_even, p);
    } else {
      sum_odd = _mm256_add_ps(sum_odd, p);
    }
  }
  __m256 sum = _mm256_add_ps(sum_even, sum_odd);
  if constexpr (kPacked) sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(sum, sum, 1));
  const __m256 l_new = _mm256_fmadd_ps(l_old, rescale, sum);
  if constexpr (kPacked) {
    _mm_storeu_ps(args.m, _mm256_castps256_ps128(m_new));
    _mm_storeu_ps(args.l, _mm256_castps256_ps128(l_new));
  } else {
    _mm256_storeu_ps(args.m, m_new);
    _mm256_storeu_ps(args.l, l_new);
  }
}

// o[lane][c..] = o·alpha + Σ_t p[t][lane]·v[t][c..] for column chunks from `col` on, kCb chunks of
// 8 at a time; returns the first column it did not reach.
template <bool kBf16, int kL, int kCb>
inline uint32_t AccumulateValues(const TileArgs& args, const float* p, const float* alpha,
                                 uint32_t col) {
  const uint32_t dim = args.head_dim;
  for (; col + 8 * kCb <= dim; col += 8 * kCb) {
    __m256 acc[kL][kCb];
    for (int j = 0; j < kL; ++j) {
      const __m256 scale = _mm256_broadcast_ss(alpha + j);
      for (int b = 0; b < kCb; ++b) {
        acc[j][b] = _mm256_mul_ps(
            _mm256_load_ps(args.o + static_cast<size_t>(j) * dim + col + 8 * b), scale);
      }
    }
    for (uint32_t t = 0; t < args.tokens; ++t) {
      // One slice of the next tile's V (and of the K after it) per row of this pass, in address
      // order (measured ~15% faster from DRAM than the columns this pass reads, a row apart).
      constexpr size_t kSlice = 8 * kCb * kElemBytes<kBf16>;
      const size_t ahead = (size_t{col} / (8 * kCb) * args.tokens + t) * kSlice;
      PrefetchLines(args.next_v, ahead, ahead + kSlice);
      PrefetchLines(args.after_k, ahead, ahead + kSlice);
      __m256 values[kCb];
      for (int b = 0; b < kCb; ++b) {
        values[b] = LoadRow8<kBf16>(args.v, size_t{t} * dim + col + 8 * b);
      }
      for (int j = 0; j < kL; ++j) {
        const __m256 pj = _mm256_broadcast_ss(p + size_t{t} * ScoreStride(kL) + j);
        for (int b = 0; b < kCb; ++b) acc[j][b] = _mm256_fmadd_ps(pj, values[b], acc[j][b]);
      }
    }
    for (int j = 0; j < kL; ++j) {
      for (int b = 0; b < kCb; ++b) {
        _mm256_store_ps(args.o + static_cast<size_t>(j) * dim + col + 8 * b, acc[j][b]);
      }
    }
  }
  return col;
}

// Register blocking, by lanes: KV rows scored per step (kT·kL accumulators, kT keys and a query
// within 16 ymm registers) and column chunks accumulated per pass (kCb·kL accumulators, kCb values
// and a broadcast p).
constexpr int RowsPerStep(int lanes) {
  constexpr int kRows[kLanes] = {4, 4, 3, 2, 2, 2, 1, 1};
  return kRows[lanes - 1];
}
constexpr int ChunksPerStep(int lanes) {
  constexpr int kChunks[kLanes] = {4, 4, 2, 2, 2, 2, 1, 1};
  return kChunks[lanes - 1];
}

// Scores rows [row, tokens) kT rows at a time, then the rest with smaller steps. Each step also
// prefetches the same rows of this tile's V and of the next tile's K (see TileArgs::next_k).
template <bool kBf16, int kL, int kT>
inline void ScoreRowsFrom(const TileArgs& args, uint32_t row, float* s) {
  const size_t row_bytes = size_t{args.head_dim} * kElemBytes<kBf16>;
  for (; row + kT <= args.tokens; row += kT) {
    PrefetchLines(args.v, row * row_bytes, (row + kT) * row_bytes);
    PrefetchLines(args.next_k, row * row_bytes, (row + kT) * row_bytes);
    ScoreRows<kBf16, kL, kT>(args.q, args.k, row, args.head_dim, s);
  }
  if constexpr (kT > 1) ScoreRowsFrom<kBf16, kL, kT / 2>(args, row, s);
}

template <bool kBf16, int kL, int kCb>
inline void AccumulateValuesFrom(const TileArgs& args, const float* p, const float* alpha,
                                 uint32_t col) {
  col = AccumulateValues<kBf16, kL, kCb>(args, p, alpha, col);
  if constexpr (kCb > 1) AccumulateValuesFrom<kBf16, kL, kCb / 2>(args, p, alpha, col);
}

template <bool kBf16, int kL, bool kMasked>
void TileAvx2(const TileArgs& args) {
  alignas(32) float s[kTileTokens * kLanes];
  alignas(32) float alpha[kLanes];
  ScoreRowsFrom<kBf16, kL, RowsPerStep(kL)>(args, 0, s);
  SoftmaxRows<ScoreStride(kL), kMasked>(args, s, alpha);
  AccumulateValuesFrom<kBf16, kL, ChunksPerStep(kL)>(args, s, alpha, 0);
}

template <bool kBf16, size_t... kI>
constexpr void FillRow(TileFn (&row)[kLanes][2], std::index_sequence<kI...>) {
  ((row[kI][0] = &TileAvx2<kBf16, kI + 1, false>, row[kI][1] = &TileAvx2<kBf16, kI + 1, true>),
   ...);
}

constexpr TileKernels MakeAvx2Kernels() {
  TileKernels kernels{};
  FillRow<false>(kernels.fn[0], std::make_index_sequence<kLanes>());
  FillRow<true>(kernels.fn[1], std::make_index_sequence<kLanes>());
  return kernels;
}

constexpr TileKernels kAvx2Kernels = MakeAvx2Kernels();

}  // namespace

const TileKernels& Avx2TileKernels() { return kAvx2Kernels; }

}  // namespace feather::hw::attention_internal

#else  // not x86: no AVX2; ActiveTileKernels() never asks for it, but keep the symbol.

namespace feather::hw::attention_internal {
const TileKernels& Avx2TileKernels() { return ScalarTileKernels(); }
}  // namespace feather::hw::attention_internal

#endif
