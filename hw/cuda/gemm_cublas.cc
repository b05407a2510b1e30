// gemm_cublas.cc: CublasGemm (see gemm_cublas.h).
#include "hw/cuda/gemm_cublas.h"

#include <stdexcept>
#include <string>

#include "hw/cuda/cuda_check.h"

namespace feather::hw::cuda {
namespace {

// cuBLASLt's descriptors, destroyed on every path.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

CublasGemm::CublasGemm(cudaStream_t stream, size_t lt_workspace_bytes)
    : stream_(stream), workspace_bytes_(lt_workspace_bytes) {
  FEATHER_CUBLAS_CHECK(cublasCreate(&handle_));
  FEATHER_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
  FEATHER_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  FEATHER_CUBLAS_CHECK(cublasLtCreate(&lt_));
  FEATHER_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasGemm::~CublasGemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void CublasGemm::Sgemm(int m, int n, int k, const float* a, const float* b, float* c) {
  const float alpha = 1.0F;
  const float beta = 0.0F;
  // Column-major Cᵀ[n×m] = Bᵀ[n×k] · Aᵀ[k×m]: B is n×k with ld n, A is k×m with ld k.
  FEATHER_CUBLAS_CHECK(
      cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, n, a, k, &beta, c, n));
}

void CublasGemm::Bf16Gemm(int m, int n, int k, const void* a, const void* b, void* c) {
  LtDescriptors d;
  FEATHER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  FEATHER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_16BF, static_cast<uint64_t>(n),
                                                  static_cast<uint64_t>(k), n));
  FEATHER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_16BF, static_cast<uint64_t>(k),
                                                  static_cast<uint64_t>(m), k));
  FEATHER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_16BF, static_cast<uint64_t>(n),
                                                  static_cast<uint64_t>(m), n));
  FEATHER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
  FEATHER_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes_, sizeof workspace_bytes_));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FEATHER_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, d.op, d.a, d.b, d.c, d.c, d.preference,
                                                      1, &heuristic, &found));
  if (found == 0) {
    throw std::runtime_error("cuBLASLt found no bf16 algorithm for " + std::to_string(m) + "x" +
                             std::to_string(n) + "x" + std::to_string(k));
  }
  const float alpha = 1.0F;
  const float beta = 0.0F;
  FEATHER_CUBLAS_CHECK(cublasLtMatmul(lt_, d.op, &alpha, b, d.a, a, d.b, &beta, c, d.c, c, d.c,
                                      &heuristic.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace feather::hw::cuda
