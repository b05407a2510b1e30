// gemm_eigen_avx2.cc: the Eigen backend of hw/gemm.h built for AVX2 + FMA (the *_avx2.cc rule of
// hw/CMakeLists.txt); its body and the reason for the `Eigen` macro: gemm_eigen_body.h.
#define Eigen FeatherEigenAvx2
#include "hw/gemm_eigen_body.h"

namespace feather::hw::internal {

void GemmEigenAvx2(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
                   int num_threads, uint32_t skinny_rows) {
  EigenGemm(m, n, k, a, b, c, num_threads, skinny_rows);
}

void GemmPackedAvx2(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads) {
  PackedGemm(m, a, b, c, num_threads);
}

}  // namespace feather::hw::internal
