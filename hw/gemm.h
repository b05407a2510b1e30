// gemm.h: the dense fp32 matrix products of the linear layers (QKV, O, gate/up, down, LM head).
//
// C[m×n] = A[m×k] · B[k×n], all row-major and contiguous: A holds one row per token, B is a
// weight matrix stored input-major. Two backends, chosen at run time so a microbenchmark can
// compare them on the same machine: Eigen (compiled here, vectorized for this CPU) and a CBLAS
// (Debian's OpenBLAS). `num_threads` caps the threads the product may use.
#pragma once

#include <cstdint>
#include <string_view>

namespace feather::hw {

enum class GemmBackend : uint8_t { kEigen, kBlas };

[[nodiscard]] std::string_view GemmBackendName(GemmBackend backend);  // "eigen" | "blas"
// The backend the engine uses by default: the faster one on this machine (see hw/README.md for
// the measurement behind the choice).
[[nodiscard]] GemmBackend DefaultGemmBackend();

void Gemm(GemmBackend backend, uint32_t m, uint32_t n, uint32_t k, const float* a,
          const float* b, float* c, int num_threads);

}  // namespace feather::hw
