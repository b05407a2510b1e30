// gemm_cublas.cc: CublasGemm (see gemm_cublas.h).
//
// cuBLAS and cuBLASLt are opened with dlopen on first use, not linked: libcublasLt's load-time
// initialisation costs ~140 ms per process (measured: an empty program linked to it starts in
// 143 ms against 3.5 ms), which every `feather` invocation and every test process would pay,
// GPU or not — it doubled the test suite's time. The few entry points used are resolved into
// one table (Api()), by their exported names (cublas_v2.h maps cublasCreate to cublasCreate_v2,
// and so on), with the types of their declarations.
#include "hw/cuda/gemm_cublas.h"

#include <dlfcn.h>

#include <array>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hw/cuda/cuda_check.h"

namespace feather::hw::cuda {
namespace {

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasGetStatusString) status_string;
  decltype(&cublasLtCreate) lt_create;
  decltype(&cublasLtDestroy) lt_destroy;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};

// dlopen by soname (the binary's RUNPATH holds the toolkit's library folder), else by the
// toolkit's absolute path at build time.
void* OpenLibrary(const char* soname, const char* absolute) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) handle = dlopen(absolute, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    throw std::runtime_error(std::string("cannot load ") + soname + " (nor " + absolute +
                             "): " + dlerror());
  }
  return handle;
}

template <typename Fn>
void Resolve(void* handle, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr) throw std::runtime_error(std::string("cuBLAS has no symbol ") + name);
}

const CublasApi& Api() {
  static CublasApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    // cuBLASLt first: libcublas needs it.
    void* lt = OpenLibrary(FEATHER_CUBLASLT_SONAME, FEATHER_CUBLASLT_PATH);
    void* blas = OpenLibrary(FEATHER_CUBLAS_SONAME, FEATHER_CUBLAS_PATH);
    Resolve(blas, "cublasCreate_v2", api.create);
    Resolve(blas, "cublasDestroy_v2", api.destroy);
    Resolve(blas, "cublasSetStream_v2", api.set_stream);
    Resolve(blas, "cublasSetMathMode", api.set_math_mode);
    Resolve(blas, "cublasSgemm_v2", api.sgemm);
    Resolve(blas, "cublasGetStatusString", api.status_string);
    Resolve(lt, "cublasLtCreate", api.lt_create);
    Resolve(lt, "cublasLtDestroy", api.lt_destroy);
    Resolve(lt, "cublasLtMatmulDescCreate", api.desc_create);
    Resolve(lt, "cublasLtMatmulDescDestroy", api.desc_destroy);
    Resolve(lt, "cublasLtMatrixLayoutCreate", api.layout_create);
    Resolve(lt, "cublasLtMatrixLayoutDestroy", api.layout_destroy);
    Resolve(lt, "cublasLtMatmulPreferenceCreate", api.preference_create);
    Resolve(lt, "cublasLtMatmulPreferenceSetAttribute", api.preference_set);
    Resolve(lt, "cublasLtMatmulPreferenceDestroy", api.preference_destroy);
    Resolve(lt, "cublasLtMatmulAlgoGetHeuristic", api.heuristic);
    Resolve(lt, "cublasLtMatmul", api.matmul);
  });
  return api;
}

// cuBLASLt's descriptors, destroyed on every path.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (preference != nullptr) Api().preference_destroy(preference);
    if (c != nullptr) Api().layout_destroy(c);
    if (b != nullptr) Api().layout_destroy(b);
    if (a != nullptr) Api().layout_destroy(a);
    if (op != nullptr) Api().desc_destroy(op);
  }
};

// One shape's descriptors and the heuristic's algorithm for it.
struct LtPlan {
  LtDescriptors d;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct CublasGemm::LtPlans {
  // A step runs five shapes (four per layer, the same in every layer, and the LM head) for its
  // row count; a run meets as many row counts as batch sizes: a short list, searched in order.
  std::vector<std::pair<std::array<int, 4>, std::unique_ptr<LtPlan>>> plans;
};

const char* CublasStatusText(cublasStatus_t status) { return Api().status_string(status); }

std::string CheckCublasLoadable() {
  try {
    (void)Api();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

CublasGemm::CublasGemm(cudaStream_t stream, size_t lt_workspace_bytes)
    : stream_(stream), workspace_bytes_(lt_workspace_bytes) {
  FEATHER_CUBLAS_CHECK(Api().create(&handle_));
  FEATHER_CUBLAS_CHECK(Api().set_stream(handle_, stream_));
  FEATHER_CUBLAS_CHECK(Api().set_math_mode(handle_, CUBLAS_DEFAULT_MATH));
  FEATHER_CUBLAS_CHECK(Api().lt_create(&lt_));
  FEATHER_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasGemm::~CublasGemm() {
  plans_.reset();  // their descriptors before the handle
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (lt_ != nullptr) Api().lt_destroy(lt_);
  if (handle_ != nullptr) Api().destroy(handle_);
}

void CublasGemm::Sgemm(int m, int n, int k, const float* a, const float* b, float* c) {
  const float alpha = 1.0F;
  const float beta = 0.0F;
  // Column-major Cᵀ[n×m] = Bᵀ[n×k] · Aᵀ[k×m]: B is n×k with ld n, A is k×m with ld k.
  FEATHER_CUBLAS_CHECK(
      Api().sgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, n, a, k, &beta, c, n));
}

void CublasGemm::Bf16Gemm(int m, int n, int k, const void* a, const void* b, void* c,
                          bool fp32_out) {
  if (!plans_) plans_ = std::make_unique<LtPlans>();
  const std::array<int, 4> key{m, n, k, fp32_out ? 1 : 0};
  LtPlan* plan = nullptr;
  for (auto& [shape, p] : plans_->plans) {
    if (shape == key) plan = p.get();
  }
  if (plan == nullptr) {
    auto fresh = std::make_unique<LtPlan>();
    LtDescriptors& d = fresh->d;
    const cudaDataType_t out_type = fp32_out ? CUDA_R_32F : CUDA_R_16BF;
    FEATHER_CUBLAS_CHECK(Api().desc_create(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    FEATHER_CUBLAS_CHECK(Api().layout_create(&d.a, CUDA_R_16BF, static_cast<uint64_t>(n),
                                             static_cast<uint64_t>(k), n));
    FEATHER_CUBLAS_CHECK(Api().layout_create(&d.b, CUDA_R_16BF, static_cast<uint64_t>(k),
                                             static_cast<uint64_t>(m), k));
    FEATHER_CUBLAS_CHECK(
        Api().layout_create(&d.c, out_type, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n));
    FEATHER_CUBLAS_CHECK(Api().preference_create(&d.preference));
    FEATHER_CUBLAS_CHECK(Api().preference_set(d.preference,
                                              CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace_bytes_, sizeof workspace_bytes_));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    FEATHER_CUBLAS_CHECK(
        Api().heuristic(lt_, d.op, d.a, d.b, d.c, d.c, d.preference, 1, &heuristic, &found));
    if (found == 0) {
      throw std::runtime_error("cuBLASLt found no bf16 algorithm for " + std::to_string(m) + "x" +
                               std::to_string(n) + "x" + std::to_string(k) +
                               (fp32_out ? " with fp32 output" : ""));
    }
    fresh->algo = heuristic.algo;
    plan = fresh.get();
    plans_->plans.emplace_back(key, std::move(fresh));
  }
  const float alpha = 1.0F;
  const float beta = 0.0F;
  // Column-major Cᵀ[n×m] = Bᵀ[n×k] · Aᵀ[k×m], as Sgemm.
  FEATHER_CUBLAS_CHECK(Api().matmul(lt_, plan->d.op, &alpha, b, plan->d.a, a, plan->d.b, &beta, c,
                                    plan->d.c, c, plan->d.c, &plan->algo, workspace_,
                                    workspace_bytes_, stream_));
}

}  // namespace feather::hw::cuda
