// decode_attention_avx512.cc: the AVX-512 tile step of the CPU attention kernels (see
// attention_internal.h): the template of attention_tile_simd.h — the code the AVX2 step runs and
// the tests check — over 16-wide traits, with the 32 zmm registers' larger register blocking.
// fp32 rows load 16 floats at a time; bf16 rows as even/odd pairs (32 elements per load, one
// shift or one AND per 16 of them). Head dims that are not a multiple of 16 (fp32) or 32 (bf16)
// end with the AVX2 traits' 8-column chunks. Compiled with -mavx512f -mavx512vl -mavx2 -mfma
// (VL: the 8-wide code may then use all 32 registers) and reached only through
// ActiveTileKernels(), after a runtime check that the CPU has AVX-512 F and VL.
#include "hw/attention_internal.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__AVX512F__)
#include "hw/attention_tile_simd.h"

namespace feather::hw::attention_internal {
namespace {

struct Avx512Base {
  using Vec = __m512;
  static constexpr uint32_t kWidth = 16;
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

constexpr TileKernels kAvx512Kernels =
    MakeSimdKernels<Avx512Fp32, Avx2Fp32, Avx512Bf16Pairs, Avx2Bf16>();

}  // namespace

const TileKernels& Avx512TileKernels() { return kAvx512Kernels; }

}  // namespace feather::hw::attention_internal

#else  // not compiled for AVX-512: ActiveTileKernels() never asks for it, but keep the symbol.

namespace feather::hw::attention_internal {
const TileKernels& Avx512TileKernels() { return Avx2TileKernels(); }
}  // namespace feather::hw::attention_internal

#endif
