// decode_attention_avx512bf16.cc: the AVX-512 BF16 tile step of the CPU attention kernels (see
// attention_internal.h): the AVX-512 step of decode_attention_avx512.cc with bf16 K scored by
// vdpbf16ps (attention_tile_simd.h, Avx512Bf16Dot): 32 products of K's bf16 pairs as they lie
// in memory against q's three bf16 terms, which InitLane prepares once per query. fp32 KV and the
// values pass are the AVX-512 step's. Compiled with -mavx512f -mavx512vl -mavx512bf16 -mavx2
// -mfma and reached only through ActiveTileKernels(), after a runtime check that the CPU reports
// avx512bf16 (with avx512f and avx512vl).
//
// Never run by its authors: no CPU with AVX-512 BF16 was at hand. Its logic — q as bf16 terms,
// the pairs order, the dot step — runs on AVX2 in the tests (Avx2EmulatedBf16DotTileKernels,
// each vdpbf16ps replaced by the two FMAs of its definition), and it differs from that only in
// its traits (16 lanes, the intrinsic).
#include "hw/attention_internal.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__AVX512F__) && defined(__AVX512BF16__)
#include "hw/attention_tile_simd.h"

namespace feather::hw::attention_internal {
namespace {

constexpr TileKernels kAvx512Bf16Kernels =
    MakeSimdKernels<Avx512Fp32, Avx2Fp32, Avx512Bf16Dot, Avx2Bf16>();

}  // namespace

const TileKernels& Avx512Bf16TileKernels() { return kAvx512Bf16Kernels; }

}  // namespace feather::hw::attention_internal

#else  // not compiled for AVX-512 BF16: ActiveTileKernels() never asks for it; keep the symbol.

namespace feather::hw::attention_internal {
const TileKernels& Avx512Bf16TileKernels() { return Avx512TileKernels(); }
}  // namespace feather::hw::attention_internal

#endif
