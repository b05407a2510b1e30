// cuda_check.h: FEATHER_CUDA_CHECK / FEATHER_CUBLAS_CHECK, which turn a failed CUDA runtime or
// cuBLAS call into a std::runtime_error naming the call's text, the file, the line and the
// library's error string (STYLE.md: every CUDA/cuBLAS/CUPTI call checked). Exceptions rather than
// aborts: `feather selfcheck` reports a failing kernel as FAIL and goes on. CUDA builds only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace feather::hw::cuda {

// cublasGetStatusString through the dlopen'ed cuBLAS (hw/cuda/gemm_cublas.cc).
[[nodiscard]] const char* CublasStatusText(cublasStatus_t status);

[[noreturn]] inline void ThrowCudaError(const char* call, const char* file, int line,
                                        const std::string& what) {
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                           ": " + what);
}

}  // namespace feather::hw::cuda

#define FEATHER_CUDA_CHECK(call)                                                    \
  do {                                                                              \
    const cudaError_t feather_cuda_status = (call);                                 \
    if (feather_cuda_status != cudaSuccess) {                                       \
      ::feather::hw::cuda::ThrowCudaError(#call, __FILE__, __LINE__,                \
                                          cudaGetErrorString(feather_cuda_status)); \
    }                                                                               \
  } while (0)

#define FEATHER_CUBLAS_CHECK(call)                                       \
  do {                                                                   \
    const cublasStatus_t feather_cublas_status = (call);                 \
    if (feather_cublas_status != CUBLAS_STATUS_SUCCESS) {                \
      ::feather::hw::cuda::ThrowCudaError(                               \
          #call, __FILE__, __LINE__,                                     \
          ::feather::hw::cuda::CublasStatusText(feather_cublas_status)); \
    }                                                                    \
  } while (0)
