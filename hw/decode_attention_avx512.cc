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
