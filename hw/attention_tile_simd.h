// attention_tile_simd.h: the vectorized tile step of the CPU attention kernels
// (attention_internal.h), written once over a small vector-traits struct and instantiated per
// instruction set: AVX2+FMA (decode_attention_avx2.cc), AVX-512 (decode_attention_avx512.cc) and
// AVX-512 BF16 (decode_attention_avx512bf16.cc: bf16 math by vdpbf16ps, see the dot traits).
// Private to those translation units, each compiled with its own target flags; everything here
// sits in an unnamed namespace on purpose, so that each includes its own copy: an inline function
// shared by name could otherwise be emitted with AVX-512 code and kept by the linker for the AVX2
// path too. The instantiations differ only in their traits; the AVX2 one is what the tests run on
// an AVX2 machine, and the AVX-512 one reuses every line of it apart from the traits; the dot
// path of the AVX-512 BF16 one runs on AVX2 in the tests with emulated dot products.
//
// A tile step for a batch of kL query vectors and n ≤ 16 KV rows:
//   scores: rows × lanes dot products, kT rows at a time so each query load feeds kT FMAs; the
//     kL accumulators of a row fold to 8 floats and reduce (hadd tree) into one register, one lane
//     per query (two rows per register when kL ≤ 4);
//   softmax: vectorized across the lanes (max, base-2 exp, running sum), always 8 wide;
//   values: o[lane] = o·alpha + Σ_rows p·v, kCb column chunks at a time held in registers.
// Query and output rows stay in L1 (a batch is ≤ 8 × head_dim × 4 bytes each), the KV tile is
// read once per batch from L1/L2, once per kernel from memory, and while it is processed the
// next tile is prefetched at the pace of the reads (TileArgs::next_k). Measured on the Zen 3 VM
// this was written on: ~70 cycles per token for 4 lanes at head dim 64 with the KV in L2 (the
// FMAs alone need 32), ~23 GB/s per core for fp32 — well above a core's share of DRAM bandwidth.
//
// Traits. A traits struct V describes one way of turning a chunk of KV elements into fp32
// vectors and of doing arithmetic on them:
//   Vec, kWidth (floats per Vec), kElemBytes (KV element size), kParts, kChunk = kWidth · kParts;
//   LoadKv<part>(base, index): part `part` (< kParts) of the chunk of kChunk KV elements at
//     base[index];
//   Zero, Set1, Load / Store (q and o rows in the lane scratch), Fma, Mul, Pin (keep a value in
//     a register), ToYmm (the sum of a Vec's 8-float halves: what the 8-wide reduction takes);
//   RowsPerStep / ChunksPerStep: register blocking by lanes, within the ISA's register file.
// kParts = 1: a chunk widens to one Vec in natural order (fp32 rows; bf16 by zero-extension).
// kParts = 2 ("pairs", bf16 only): one load of 2·kWidth bf16 is kWidth 32-bit words, each an
// (even, odd) element pair; the odd elements as fp32 are the words with the low half cleared
// (one AND), the even ones the words shifted left by 16 (one shift), so every kWidth elements
// cost one integer op before their FMA instead of a zero-extension and a shift. The dot product
// does not care about element order, but q and the output accumulator o must be stored in the
// same order: within each group of kChunk columns, the even columns first, then the odd ones
// (InitLane / FinishLane apply and undo it; TileKernels::pair_group says the group size).
// Head dims that are not a multiple of kChunk end with a natural-order tail of 8-column chunks
// done with the 8-wide traits T (the tile's second traits argument).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "hw/attention_internal.h"

namespace feather::hw::attention_internal {
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces): one copy per ISA, see above

// --- 8-wide traits (AVX2 + FMA) ------------------------------------------------------------

struct Avx2Base {
  using Vec = __m256;
  static constexpr uint32_t kWidth = 8;
  static constexpr uint32_t kQTerms = 0;  // scores by FMAs on fp32 (see the dot traits below)
  static constexpr bool kValuesDot = false;  // values by FMAs on fp32 p
  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Set1(float x) { return _mm256_set1_ps(x); }
  static Vec Load(const float* p) { return _mm256_load_ps(p); }  // lane scratch: 32-byte aligned
  static void Store(float* p, Vec v) { _mm256_store_ps(p, v); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static void Pin(Vec& v) { __asm__("" : "+x"(v)); }
  static __m256 ToYmm(Vec v) { return v; }
  // kT·kL accumulators, kT keys and a query within 16 ymm registers; kCb·kL accumulators, kCb
  // values and a broadcast p.
  static constexpr int RowsPerStep(int lanes) {
    constexpr int kRows[kLanes] = {4, 4, 3, 2, 2, 2, 1, 1};
    return kRows[lanes - 1];
  }
  static constexpr int ChunksPerStep(int lanes) {
    constexpr int kChunks[kLanes] = {4, 4, 2, 2, 2, 2, 1, 1};
    return kChunks[lanes - 1];
  }
};

struct Avx2Fp32 : Avx2Base {
  static constexpr uint32_t kElemBytes = 4;
  static constexpr uint32_t kParts = 1;
  static constexpr uint32_t kChunk = kWidth;
  template <uint32_t kPart>
  static Vec LoadKv(const void* base, size_t index) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + index);
  }
};

// bf16 in natural order: zero-extend 8 elements to 32 bits, shift into the high half.
struct Avx2Bf16 : Avx2Base {
  static constexpr uint32_t kElemBytes = 2;
  static constexpr uint32_t kParts = 1;
  static constexpr uint32_t kChunk = kWidth;
  template <uint32_t kPart>
  static Vec LoadKv(const void* base, size_t index) {
    const __m128i half = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + index));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  }
};

// bf16 pairs: 16 elements per load, even ones by a shift, odd ones by an AND.
struct Avx2Bf16Pairs : Avx2Base {
  static constexpr uint32_t kElemBytes = 2;
  static constexpr uint32_t kParts = 2;
  static constexpr uint32_t kChunk = 2 * kWidth;
  template <uint32_t kPart>
  static Vec LoadKv(const void* base, size_t index) {
    const auto* words = static_cast<const uint16_t*>(base) + index;
    if constexpr (kPart == 0) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words));
      return _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    } else {
      const __m256 high = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
      return _mm256_and_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(words)), high);
    }
  }
};

// bf16 math by dot products (kQTerms > 0, kValuesDot): a dot-product instruction takes kWidth
// 32-bit words of bf16 pairs from each operand and adds each pair's two products into one fp32
// lane.
//   scores: 2·kWidth bf16 of K as they lie in memory — kWidth (even, odd) column pairs — against
//     the same pairs of q, rounded to kQTerms bf16 terms (TileArgs::q_pairs; one term: q in
//     bf16, ~2^-9 relative; three would give fp32-exact scores at 1.5x the instructions of the
//     FMA path, measured slower on Zen 4, hw/README.md).
//   values: o[c] += p[t]·v[t][c] + p[t+1]·v[t+1][c]: the pairs are (row t, row t + 1) of one
//     column, built by 16-bit unpacks of the two rows (Interleave; part 0 the columns c mod 8 < 4,
//     part 1 the rest, ColumnOrder::kQuads), against (p[t], p[t+1]) rounded to bf16 (as GPU
//     kernels round P before P·V); the running sum l keeps the fp32 p, so the output's error is
//     at most 2^-9·max|v|.
// Per 32 columns, two rows and four lanes that is 4 dot products and 2 unpacks for the values
// where the pairs path issues 8 FMAs and 4 integer ops, and 4 dot products for the scores
// where it issues 8 FMAs and 2 integer ops.
// Traits add: Raw (the integer vector), LoadRaw(base, index), LoadPairs(words),
// Dot(acc, a_pairs, b_pairs), ZeroRaw(), Set1Raw(word), Interleave<part>(row0, row1).
//
// This one does on AVX2 what vdpbf16ps does, to test that logic where no AVX-512 BF16 CPU is at
// hand: per 32-bit lane, acc + k_odd·q_odd, then + k_even·q_even, each product exact in fp32 (8-
// by 8-bit significands) and each sum rounded to nearest — the steps of the instruction's
// pseudo-code in Intel's SDM, which also flushes denormal inputs and outputs (these FMAs do not).
struct Avx2Bf16EmulatedDot : Avx2Bf16Pairs {
  static constexpr uint32_t kQTerms = 1;
  static constexpr bool kValuesDot = true;
  using Raw = __m256i;
  static Raw ZeroRaw() { return _mm256_setzero_si256(); }
  static Raw Set1Raw(uint32_t word) { return _mm256_set1_epi32(static_cast<int>(word)); }
  template <uint32_t kPart>
  static Raw Interleave(Raw row0, Raw row1) {
    return kPart == 0 ? _mm256_unpacklo_epi16(row0, row1) : _mm256_unpackhi_epi16(row0, row1);
  }
  static Raw LoadRaw(const void* base, size_t index) {
    return _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + index));
  }
  static Raw LoadPairs(const uint32_t* words) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words));
  }
  static Vec Dot(Vec acc, Raw k, Raw q) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(k, high)),
                          _mm256_castsi256_ps(_mm256_and_si256(q, high)), acc);
    return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(k, 16)),
                           _mm256_castsi256_ps(_mm256_slli_epi32(q, 16)), acc);
  }
};

#if defined(__AVX512F__)
// --- 16-wide traits (AVX-512 F + VL; the translation units built with -mavx512f) -------------

struct Avx512Base {
  using Vec = __m512;
  static constexpr uint32_t kWidth = 16;
  static constexpr uint32_t kQTerms = 0;
  static constexpr bool kValuesDot = false;
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Set1(float x) { return _mm512_set1_ps(x); }
  // Lane rows start at multiples of 8 floats (head_dim), so only 32-byte alignment is certain.
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static void Pin(Vec& v) { __asm__("" : "+v"(v)); }
  // The masked forms (all lanes selected) spell out the pass-through operand: GCC 12's unmasked
  // extract (also behind _mm512_castps512_ps256) passes an "undefined" vector that
  // -Wuninitialized reports.
  static __m256 ToYmm(Vec v) {
    const __m512d wide = _mm512_castps_pd(v);
    const __m256d low = _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, wide, 0);
    const __m256d high = _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, wide, 1);
    return _mm256_add_ps(_mm256_castpd_ps(low), _mm256_castpd_ps(high));
  }
  // 32 zmm registers: kT·kL accumulators + kT keys + a query ≤ 31; kCb·kL accumulators + kCb
  // values + a broadcast p ≤ 25.
  static constexpr int RowsPerStep(int lanes) {
    constexpr int kRows[kLanes] = {8, 8, 6, 6, 4, 4, 3, 3};
    return kRows[lanes - 1];
  }
  static constexpr int ChunksPerStep(int lanes) {
    constexpr int kChunks[kLanes] = {8, 8, 4, 4, 4, 4, 2, 2};
    return kChunks[lanes - 1];
  }
};

struct Avx512Fp32 : Avx512Base {
  static constexpr uint32_t kElemBytes = 4;
  static constexpr uint32_t kParts = 1;
  static constexpr uint32_t kChunk = kWidth;
  template <uint32_t kPart>
  static Vec LoadKv(const void* base, size_t index) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + index);
  }
};

struct Avx512Bf16Pairs : Avx512Base {
  static constexpr uint32_t kElemBytes = 2;
  static constexpr uint32_t kParts = 2;
  static constexpr uint32_t kChunk = 2 * kWidth;
  template <uint32_t kPart>
  static Vec LoadKv(const void* base, size_t index) {
    const __m512i raw = _mm512_loadu_si512(static_cast<const uint16_t*>(base) + index);
    if constexpr (kPart == 0) {
      return _mm512_castsi512_ps(_mm512_mask_slli_epi32(raw, 0xFFFF, raw, 16));
    } else {
      return _mm512_castsi512_ps(
          _mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    }
  }
};

#if defined(__AVX512BF16__)
// bf16 math by vdpbf16ps (_mm512_dpbf16_ps), 32 products per instruction: the dot traits above
// at 16 lanes (the unpacks need AVX-512 BW).
struct Avx512Bf16Dot : Avx512Bf16Pairs {
  static constexpr uint32_t kQTerms = 1;
  static constexpr bool kValuesDot = true;
  using Raw = __m512i;
  static Raw ZeroRaw() { return _mm512_setzero_si512(); }
  static Raw Set1Raw(uint32_t word) { return _mm512_set1_epi32(static_cast<int>(word)); }
  template <uint32_t kPart>
  static Raw Interleave(Raw row0, Raw row1) {
    return kPart == 0 ? _mm512_unpacklo_epi16(row0, row1) : _mm512_unpackhi_epi16(row0, row1);
  }
  static Raw LoadRaw(const void* base, size_t index) {
    return _mm512_loadu_si512(static_cast<const uint16_t*>(base) + index);
  }
  static Raw LoadPairs(const uint32_t* words) { return _mm512_loadu_si512(words); }
  static Vec Dot(Vec acc, Raw k, Raw q) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh&>(k), reinterpret_cast<__m512bh&>(q));
  }
};
#endif  // __AVX512BF16__
#endif  // __AVX512F__

// --- Lane-wise pieces, always 8 wide ---------------------------------------------------------

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

// The hot helpers below are forced inline: left to itself GCC 12 calls the score step of a row
// pair as a function (eight calls per tile, each saving and restoring six registers and
// recomputing its addresses), which cost ~10 % of the bf16 tile's instructions (callgrind).
#define FEATHER_TILE_INLINE inline __attribute__((always_inline))

// Prefetches the cache lines of base[begin, end) into L2 (see TileArgs::next_k). Branch-free: a
// tile with nothing to fetch (TileArgs::next_k null) passes a line it already holds
// (PrefetchSource), whose prefetch is an L1 hit, instead of a null pointer the loop would test on
// every row.
FEATHER_TILE_INLINE void PrefetchLines(const char* base, size_t begin, size_t end) {
  for (size_t offset = begin & ~size_t{63}; offset < end; offset += 64) {
    _mm_prefetch(base + offset, _MM_HINT_T1);
  }
}
// The same for a slice of compile-time size: one prefetch per 64 bytes from its start, so that
// slices laid end to end touch every line of their range whatever the alignment.
template <size_t kBytes>
FEATHER_TILE_INLINE void PrefetchSlice(const char* base, size_t begin) {
  for (size_t offset = 0; offset < kBytes; offset += 64) {
    _mm_prefetch(base + begin + offset, _MM_HINT_T1);
  }
}
FEATHER_TILE_INLINE const char* PrefetchSource(const void* wanted, const void* held) {
  return static_cast<const char*>(wanted != nullptr ? wanted : held);
}

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

// Scores of KV rows [row, row + kT) against the kL queries for the columns [c, c + V::kChunk):
// one part at a time, so that a part's keys and one query fill the registers.
template <class V, int kL, int kT, uint32_t kPart>
FEATHER_TILE_INLINE void ScorePart(const float* q, const void* k, size_t base, uint32_t dim,
                                   uint32_t c, typename V::Vec (&acc)[kT][kL]) {
  typename V::Vec keys[kT];
  for (int t = 0; t < kT; ++t) {
    keys[t] = V::template LoadKv<kPart>(k, base + static_cast<size_t>(t) * dim + c);
  }
  for (int j = 0; j < kL; ++j) {
    typename V::Vec qj = V::Load(q + static_cast<size_t>(j) * dim + c + kPart * V::kWidth);
    // Keep q in a register: folded into each FMA it would be loaded kT times.
    if constexpr (kT > 1) V::Pin(qj);
    for (int t = 0; t < kT; ++t) acc[t][j] = V::Fma(qj, keys[t], acc[t][j]);
  }
}

// The same by dot products (V::kQTerms > 0): rows as raw pairs, q as its bf16 terms.
template <class V, int kL, int kT>
FEATHER_TILE_INLINE void ScoreDot(const uint32_t* q_pairs, const void* k, size_t base, uint32_t dim,
                                  uint32_t c, typename V::Vec (&acc)[kT][kL]) {
  typename V::Raw keys[kT];
  for (int t = 0; t < kT; ++t) keys[t] = V::LoadRaw(k, base + static_cast<size_t>(t) * dim + c);
  const size_t term_words = dim / 2;
  for (int j = 0; j < kL; ++j) {
    const uint32_t* lane = q_pairs + static_cast<size_t>(j) * V::kQTerms * term_words + c / 2;
    for (uint32_t term = 0; term < V::kQTerms; ++term) {
      const typename V::Raw qj = V::LoadPairs(lane + term * term_words);
      for (int t = 0; t < kT; ++t) acc[t][j] = V::Dot(acc[t][j], keys[t], qj);
    }
  }
}

template <class V, int kL, int kT>
FEATHER_TILE_INLINE void ScoreChunk(const float* q, const uint32_t* q_pairs, const void* k,
                                    size_t base, uint32_t dim, uint32_t c,
                                    typename V::Vec (&acc)[kT][kL]) {
  if constexpr (V::kQTerms > 0) {
    ScoreDot<V, kL, kT>(q_pairs, k, base, dim, c, acc);
  } else {
    ScorePart<V, kL, kT, 0>(q, k, base, dim, c, acc);
    if constexpr (V::kParts == 2) ScorePart<V, kL, kT, 1>(q, k, base, dim, c, acc);
  }
}

// Scores of KV rows [row, row + kT) against the kL queries, into s[row · stride ..]: columns
// [0, main) with the traits M, the natural-order tail with T (8 wide).
template <class M, class T, int kL, int kT>
FEATHER_TILE_INLINE void ScoreRows(const float* q, const uint32_t* q_pairs, const void* k,
                                   uint32_t row, uint32_t dim, float* s) {
  const uint32_t main = dim / M::kChunk * M::kChunk;
  const size_t base = size_t{row} * dim;
  typename M::Vec wide[kT][kL];
  for (int t = 0; t < kT; ++t) {
    for (int j = 0; j < kL; ++j) wide[t][j] = M::Zero();
  }
  for (uint32_t c = 0; c < main; c += M::kChunk) {
    ScoreChunk<M, kL, kT>(q, q_pairs, k, base, dim, c, wide);
  }
  __m256 acc[kT][kL];
  for (int t = 0; t < kT; ++t) {
    for (int j = 0; j < kL; ++j) acc[t][j] = M::ToYmm(wide[t][j]);
  }
  for (uint32_t c = main; c < dim; c += T::kChunk) {
    ScoreChunk<T, kL, kT>(q, nullptr, k, base, dim, c, acc);
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

// Scores rows [row, tokens) kT rows at a time, then the rest with smaller steps. Each step also
// prefetches the same rows of this tile's V and of the next tile's K (see TileArgs::next_k).
template <class M, class T, int kL, int kT>
FEATHER_TILE_INLINE void ScoreRowsFrom(const TileArgs& args, uint32_t row, float* s) {
  const size_t row_bytes = size_t{args.head_dim} * M::kElemBytes;
  const auto* this_v = static_cast<const char*>(args.v);
  const char* next_k = PrefetchSource(args.next_k, args.k);
  for (; row + kT <= args.tokens; row += kT) {
    PrefetchLines(this_v, row * row_bytes, (row + kT) * row_bytes);
    PrefetchLines(next_k, row * row_bytes, (row + kT) * row_bytes);
    ScoreRows<M, T, kL, kT>(args.q, args.q_pairs, args.k, row, args.head_dim, s);
  }
  if constexpr (kT > 1) ScoreRowsFrom<M, T, kL, kT / 2>(args, row, s);
}

// The output accumulators of one part of kCb chunks from column `col`: o·alpha in, o out.
template <class V, int kL, int kCb, uint32_t kPart>
FEATHER_TILE_INLINE void LoadScaledOutput(const TileArgs& args, const float* alpha, uint32_t col,
                                          typename V::Vec (&acc)[kL][kCb]) {
  for (int j = 0; j < kL; ++j) {
    const typename V::Vec scale = V::Set1(alpha[j]);
    for (int b = 0; b < kCb; ++b) {
      acc[j][b] = V::Mul(V::Load(args.o + static_cast<size_t>(j) * args.head_dim + col +
                                 b * V::kChunk + kPart * V::kWidth),
                         scale);
    }
  }
}
template <class V, int kL, int kCb, uint32_t kPart>
FEATHER_TILE_INLINE void StoreOutput(const TileArgs& args, uint32_t col,
                                     const typename V::Vec (&acc)[kL][kCb]) {
  for (int j = 0; j < kL; ++j) {
    for (int b = 0; b < kCb; ++b) {
      V::Store(
          args.o + static_cast<size_t>(j) * args.head_dim + col + b * V::kChunk + kPart * V::kWidth,
          acc[j][b]);
    }
  }
}

// The values pass's prefetch for kRows rows from row t of the part-0 pass over the kCb chunks
// from column `col`: one slice of the next tile's V (and of the K after it) per row, in address
// order (measured ~15% faster from DRAM than the columns this pass reads, a row apart).
template <class V, int kCb, uint32_t kRows>
FEATHER_TILE_INLINE void PrefetchValuesAhead(const char* next_v, const char* after_k, uint32_t col,
                                             uint32_t tokens, uint32_t t) {
  constexpr size_t kSlice = size_t{V::kChunk} * kCb * V::kElemBytes;
  const size_t ahead = (size_t{col} / (V::kChunk * kCb) * tokens + t) * kSlice;
  PrefetchSlice<kRows * kSlice>(next_v, ahead);
  PrefetchSlice<kRows * kSlice>(after_k, ahead);
}

// One part of kCb chunks from column `col`: o[lane][..] = o·alpha + Σ_t p[t][lane]·v[t][..].
template <class V, int kL, int kCb, uint32_t kPart>
FEATHER_TILE_INLINE void AccumulatePart(const TileArgs& args, const float* p, const float* alpha,
                                        uint32_t col) {
  const uint32_t dim = args.head_dim;
  const char* next_v = PrefetchSource(args.next_v, args.v);
  const char* after_k = PrefetchSource(args.after_k, args.k);
  typename V::Vec acc[kL][kCb];
  LoadScaledOutput<V, kL, kCb, kPart>(args, alpha, col, acc);
  for (uint32_t t = 0; t < args.tokens; ++t) {
    if constexpr (kPart == 0) PrefetchValuesAhead<V, kCb, 1>(next_v, after_k, col, args.tokens, t);
    typename V::Vec values[kCb];
    for (int b = 0; b < kCb; ++b) {
      values[b] = V::template LoadKv<kPart>(args.v, size_t{t} * dim + col + b * V::kChunk);
    }
    for (int j = 0; j < kL; ++j) {
      const typename V::Vec pj = V::Set1(p[size_t{t} * ScoreStride(kL) + j]);
      for (int b = 0; b < kCb; ++b) acc[j][b] = V::Fma(pj, values[b], acc[j][b]);
    }
  }
  StoreOutput<V, kL, kCb, kPart>(args, col, acc);
}

// bf16 of 8 non-negative finite floats, rounded to nearest even, each in the low half of its
// 32-bit lane (the softmax weights p: no NaN, no infinity, no sign to keep).
inline __m256i RoundToBf16(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))),
                           16);
}

// The values pass by dot products (V::kValuesDot) takes p as bf16 pairs of adjacent rows:
// word[i · kStride + lane] = bf16(p[2i][lane]) | bf16(p[2i + 1][lane]) << 16, for i < ⌈tokens/2⌉,
// with a row past `tokens` weighing 0. kStride 4: vector i of s already holds rows 2i and 2i + 1
// (and SoftmaxRows made the missing one of an odd count 0); kStride 8: one row per vector.
template <int kStride>
FEATHER_TILE_INLINE void PackWeightPairs(const float* s, uint32_t tokens, uint32_t* words) {
  const uint32_t pairs = (tokens + 1) / 2;
  for (uint32_t i = 0; i < pairs; ++i) {
    if constexpr (kStride == 4) {
      const __m256i rows = RoundToBf16(_mm256_load_ps(s + size_t{i} * 8));
      const __m128i pair = _mm_or_si128(_mm256_castsi256_si128(rows),
                                        _mm_slli_epi32(_mm256_extracti128_si256(rows, 1), 16));
      _mm_store_si128(reinterpret_cast<__m128i*>(words + size_t{i} * 4), pair);
    } else {
      const __m256i even = RoundToBf16(_mm256_load_ps(s + size_t{2 * i} * 8));
      const __m256i odd = 2 * i + 1 < tokens
                              ? RoundToBf16(_mm256_load_ps(s + size_t{2 * i + 1} * 8))
                              : _mm256_setzero_si256();
      _mm256_store_si256(reinterpret_cast<__m256i*>(words + size_t{i} * 8),
                         _mm256_or_si256(even, _mm256_slli_epi32(odd, 16)));
    }
  }
}

// One row pair (2i, 2i + 1; kSecond false: row 2i alone, the other weighing 0) of one part of
// kCb chunks from column `col`, by dot products: acc[lane][..] += the pair's two products.
template <class V, int kL, int kCb, uint32_t kPart, bool kSecond>
FEATHER_TILE_INLINE void AccumulateRowPair(const TileArgs& args, const uint32_t* words, uint32_t i,
                                           uint32_t col, typename V::Vec (&acc)[kL][kCb]) {
  const uint32_t dim = args.head_dim;
  const size_t first = size_t{2 * i} * dim + col;
  typename V::Raw values[kCb];
  for (int b = 0; b < kCb; ++b) {
    const typename V::Raw row0 = V::LoadRaw(args.v, first + b * V::kChunk);
    const typename V::Raw row1 =
        kSecond ? V::LoadRaw(args.v, first + dim + b * V::kChunk) : V::ZeroRaw();
    values[b] = V::template Interleave<kPart>(row0, row1);
  }
  for (int j = 0; j < kL; ++j) {
    const typename V::Raw pj = V::Set1Raw(words[size_t{i} * ScoreStride(kL) + j]);
    for (int b = 0; b < kCb; ++b) acc[j][b] = V::Dot(acc[j][b], values[b], pj);
  }
}

// AccumulatePart by dot products: rows two at a time, p from PackWeightPairs.
template <class V, int kL, int kCb, uint32_t kPart>
FEATHER_TILE_INLINE void AccumulatePairsPart(const TileArgs& args, const uint32_t* words,
                                             const float* alpha, uint32_t col) {
  const char* next_v = PrefetchSource(args.next_v, args.v);
  const char* after_k = PrefetchSource(args.after_k, args.k);
  typename V::Vec acc[kL][kCb];
  LoadScaledOutput<V, kL, kCb, kPart>(args, alpha, col, acc);
  const uint32_t tokens = args.tokens;
  for (uint32_t i = 0; 2 * i < tokens; ++i) {
    if constexpr (kPart == 0) PrefetchValuesAhead<V, kCb, 2>(next_v, after_k, col, tokens, 2 * i);
    if (2 * i + 1 < tokens) {
      AccumulateRowPair<V, kL, kCb, kPart, true>(args, words, i, col, acc);
    } else {
      AccumulateRowPair<V, kL, kCb, kPart, false>(args, words, i, col, acc);
    }
  }
  StoreOutput<V, kL, kCb, kPart>(args, col, acc);
}

// Columns [col, end) kCb chunks at a time, then the rest with smaller steps; returns the first
// column it did not reach (end minus less than one chunk). p: the weights as s holds them, or
// (V::kValuesDot) as PackWeightPairs wrote them.
template <class V, int kL, int kCb>
FEATHER_TILE_INLINE uint32_t AccumulateValuesFrom(const TileArgs& args, const float* p,
                                                  const uint32_t* words, const float* alpha,
                                                  uint32_t col, uint32_t end) {
  for (; col + V::kChunk * kCb <= end; col += V::kChunk * kCb) {
    if constexpr (V::kValuesDot) {
      AccumulatePairsPart<V, kL, kCb, 0>(args, words, alpha, col);
      AccumulatePairsPart<V, kL, kCb, 1>(args, words, alpha, col);
    } else {
      AccumulatePart<V, kL, kCb, 0>(args, p, alpha, col);
      if constexpr (V::kParts == 2) AccumulatePart<V, kL, kCb, 1>(args, p, alpha, col);
    }
  }
  if constexpr (kCb > 1) {
    return AccumulateValuesFrom<V, kL, kCb / 2>(args, p, words, alpha, col, end);
  }
  return col;
}

// The tile step: traits M for the columns [0, head_dim / M::kChunk · M::kChunk), T (8 wide,
// natural order) for the rest.
// kDim: 0 for any head dim (args.head_dim), else the head dim compiled in: every helper above is
// inlined into this one function, so its strides and trip counts become constants.
template <class M, class T, int kL, bool kMasked, uint32_t kDim>
void TileSimd(const TileArgs& in) {
  TileArgs args = in;
  if constexpr (kDim != 0) args.head_dim = kDim;
  static_assert(T::kChunk == 8 && T::kParts == 1 && T::kQTerms == 0 && !T::kValuesDot &&
                M::kElemBytes == T::kElemBytes);
  static_assert(!M::kValuesDot || M::kParts == 2);
  alignas(32) float s[kTileTokens * kLanes];
  alignas(32) float alpha[kLanes];
  alignas(32) uint32_t words[M::kValuesDot ? kTileTokens / 2 * kLanes : 1];
  ScoreRowsFrom<M, T, kL, M::RowsPerStep(kL)>(args, 0, s);
  SoftmaxRows<ScoreStride(kL), kMasked>(args, s, alpha);
  if constexpr (M::kValuesDot) PackWeightPairs<ScoreStride(kL)>(s, args.tokens, words);
  const uint32_t main = args.head_dim / M::kChunk * M::kChunk;
  const uint32_t col =
      AccumulateValuesFrom<M, kL, M::ChunksPerStep(kL)>(args, s, words, alpha, 0, main);
  AccumulateValuesFrom<T, kL, T::ChunksPerStep(kL)>(args, s, words, alpha, col, args.head_dim);
}

template <class M, class T, uint32_t kDim, size_t... kI>
constexpr void FillRow(TileFn (&row)[kLanes][2], std::index_sequence<kI...>) {
  ((row[kI][0] = &TileSimd<M, T, kI + 1, false, kDim>,
    row[kI][1] = &TileSimd<M, T, kI + 1, true, kDim>),
   ...);
}

template <class V>
constexpr ColumnOrder OrderOf() {
  if constexpr (V::kValuesDot) return ColumnOrder::kQuads;
  return V::kParts == 2 ? ColumnOrder::kEvenOdd : ColumnOrder::kNatural;
}

// The kernel table of one ISA: fp32 with (Fp32, Fp32Tail), bf16 with (Bf16, Bf16Tail).
template <class Fp32, class Fp32Tail, class Bf16, class Bf16Tail>
constexpr TileKernels MakeSimdKernels() {
  TileKernels kernels{};
  constexpr auto kAll = std::make_index_sequence<kLanes>();
  FillRow<Fp32, Fp32Tail, 0>(kernels.fn[0], kAll);
  FillRow<Bf16, Bf16Tail, 0>(kernels.fn[1], kAll);
#if !(defined(FEATHER_SANITIZED) && FEATHER_SANITIZED)
  // Sanitizer builds leave the fixed-dim tables null (KernelsFor then takes the generic
  // kernels, the same template without constant strides; the release build tests both): at
  // -O1 with ASan the three instantiations took about 250 s per kernel file, a third of CI's
  // ASan build.
  FillRow<Fp32, Fp32Tail, kFixedHeadDims[0]>(kernels.fixed_dim[0][0], kAll);
  FillRow<Bf16, Bf16Tail, kFixedHeadDims[0]>(kernels.fixed_dim[0][1], kAll);
  FillRow<Fp32, Fp32Tail, kFixedHeadDims[1]>(kernels.fixed_dim[1][0], kAll);
  FillRow<Bf16, Bf16Tail, kFixedHeadDims[1]>(kernels.fixed_dim[1][1], kAll);
#endif
  kernels.pair_group[0] = Fp32::kParts == 2 ? Fp32::kChunk : 0;
  kernels.pair_group[1] = Bf16::kParts == 2 ? Bf16::kChunk : 0;
  kernels.order[0] = OrderOf<Fp32>();
  kernels.order[1] = OrderOf<Bf16>();
  kernels.q_terms[0] = Fp32::kQTerms;
  kernels.q_terms[1] = Bf16::kQTerms;
  kernels.bf16_math[0] = Fp32::kValuesDot;
  kernels.bf16_math[1] = Bf16::kValuesDot;
  return kernels;
}

}  // namespace
}  // namespace feather::hw::attention_internal

#undef FEATHER_TILE_INLINE
