// gemm_eigen_avx512.cc: the Eigen backend of hw/gemm.h built for AVX-512 F + VL (the *_avx512.cc
// rule of hw/CMakeLists.txt: Eigen then uses its 16-float packets and 32 registers); its body and
// the reason for the `Eigen` macro: gemm_eigen_body.h.
#if (defined(__x86_64__) || defined(__i386__)) && defined(__AVX512F__)
// Eigen's AVX-512 packets call intrinsics whose GCC 12 definitions pass _mm512_undefined_*()
// vectors, which -Wmaybe-uninitialized reports at every inlined use (in avx512fintrin.h, so the
// warning state must be set before Eigen includes it). Those operands are don't-care by design.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define Eigen FeatherEigenAvx512
#include "hw/gemm_eigen_body.h"

namespace feather::hw::internal {

void GemmEigenAvx512(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
                     int num_threads, uint32_t skinny_rows) {
  EigenGemm(m, n, k, a, b, c, num_threads, skinny_rows);
}

void GemmPackedAvx512(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads) {
  PackedGemm(m, a, b, c, num_threads);
}

}  // namespace feather::hw::internal

#else  // not compiled for AVX-512: gemm.cc never asks for it, but keep the symbol.

#include <cstdint>

#include "hw/gemm.h"

namespace feather::hw::internal {
void GemmEigenAvx2(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
                   int num_threads, uint32_t skinny_rows);
void GemmEigenAvx512(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
                     int num_threads, uint32_t skinny_rows) {
  GemmEigenAvx2(m, n, k, a, b, c, num_threads, skinny_rows);
}
void GemmPackedAvx2(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads);
void GemmPackedAvx512(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads) {
  GemmPackedAvx2(m, a, b, c, num_threads);
}
}  // namespace feather::hw::internal

#endif
