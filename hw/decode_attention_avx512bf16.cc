// decode_attention_avx512bf16.cc: the AVX-512 BF16 tile step of the CPU attention kernels (see
// attention_internal.h): the AVX-512 step of decode_attention_avx512.cc, with bf16 pools in bf16
// math by vdpbf16ps (attention_tile_simd.h, Avx512Bf16Dot): scores of K's bf16 pairs as they lie
// in memory against q rounded to bf16 (InitLane, once per query), values as pairs of adjacent
// rows against the softmax weights rounded to bf16. fp32 pools run the AVX-512 step's kernels.
// Compiled with -mavx512f -mavx512vl -mavx512bw -mavx512bf16 -mavx2 -mfma and reached only through
// ActiveTileKernels(), after a runtime check that the CPU reports avx512bf16 (with avx512f, vl and
// bw). Its logic also runs on AVX2 in the tests (Avx2EmulatedBf16DotTileKernels, each vdpbf16ps
// replaced by the two FMAs of its definition); it differs from that only in its traits (16 lanes,
// the intrinsic).
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
