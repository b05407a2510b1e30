// decode_attention_avx2.cc: the AVX2+FMA tile step of the CPU attention kernels (see
// attention_internal.h): the template of attention_tile_simd.h over 8-wide traits. Compiled with
// -mavx2 -mfma and reached only through ActiveTileKernels(), after a runtime check of the CPU.
// fp32 rows load as they are; bf16 rows as even/odd pairs (16 elements per load, one shift or one
// AND per 8 of them), with a natural-order tail when the head dim is not a multiple of 16. Also,
// for the tests only, the AVX-512 BF16 step's logic with each vdpbf16ps emulated by two FMAs.
#include "hw/attention_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include "hw/attention_tile_simd.h"

namespace feather::hw::attention_internal {
namespace {

constexpr TileKernels kAvx2Kernels = MakeSimdKernels<Avx2Fp32, Avx2Fp32, Avx2Bf16Pairs, Avx2Bf16>();
constexpr TileKernels kAvx2EmulatedDotKernels =
    MakeSimdKernels<Avx2Fp32, Avx2Fp32, Avx2Bf16EmulatedDot, Avx2Bf16>();

}  // namespace

const TileKernels& Avx2TileKernels() { return kAvx2Kernels; }
const TileKernels& Avx2EmulatedBf16DotTileKernels() { return kAvx2EmulatedDotKernels; }

}  // namespace feather::hw::attention_internal

#else  // not x86: no AVX2; ActiveTileKernels() never asks for it, but keep the symbol.

namespace feather::hw::attention_internal {
const TileKernels& Avx2TileKernels() { return ScalarTileKernels(); }
const TileKernels& Avx2EmulatedBf16DotTileKernels() { return ScalarTileKernels(); }
}  // namespace feather::hw::attention_internal

#endif
