// gemm_cublas.h: the GEMMs of the CUDA target, through cuBLAS and cuBLASLt (CUDA builds only).
//
// Row-major C[m×n] = A[m×k]·B[k×n], as hw/gemm.h on the CPU, computed as the column-major
// Cᵀ = Bᵀ·Aᵀ so no operand is transposed in memory:
//   Sgemm     fp32 in and out through cublasSgemm with CUBLAS_DEFAULT_MATH (no TF32: the model's
//             layers stay comparable with the CPU engine's fp32 GEMMs);
//   Bf16Gemm  bf16 in, fp32 accumulation, bf16 out (the FLOP probe) or fp32 out (the layers of a
//             backend with bf16 weights), through cublasLtMatmul with the heuristic's first
//             algorithm; descriptors and algorithm are kept per shape, so a model step's
//             repeated shapes query the heuristic once.
// Asynchronous on the stream given at construction. Every call checked (cuda_check.h). The
// libraries are opened with dlopen on first use (gemm_cublas.cc says why).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

namespace feather::hw::cuda {

// Loads cuBLAS and cuBLASLt (dlopen, once per process) and resolves every entry point used;
// "" on success, else why not. Needs no GPU: the CPU tests call it.
[[nodiscard]] std::string CheckCublasLoadable();

class CublasGemm {
 public:
  explicit CublasGemm(cudaStream_t stream, size_t lt_workspace_bytes = size_t{32} << 20);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  void Sgemm(int m, int n, int k, const float* a, const float* b, float* c);
  void Bf16Gemm(int m, int n, int k, const void* a, const void* b, void* c, bool fp32_out = false);

 private:
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  struct LtPlans;  // cuBLASLt descriptors and algorithm per (m, n, k, output type)
  std::unique_ptr<LtPlans> plans_;
};

}  // namespace feather::hw::cuda
