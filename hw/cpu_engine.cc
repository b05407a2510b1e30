// cpu_engine.cc: CpuEngine (see cpu_engine.h) — the Engine over a CpuBackend: shape the step,
// lay the plan out on the host, run the layer loop inside a denormal switch, time the step.
#include "hw/cpu_engine.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "base/check.h"
#include "base/cpus.h"
#include "hw/decode_attention.h"
#include "hw/layer_loop.h"

namespace feather::hw {
namespace {

// Flush-to-zero and denormals-are-zero in every thread of an OpenMP team of `threads` (the
// engine's kernels and the Eigen GEMM run on that team; libgomp reuses the same pool threads for
// later teams of that size) for the life of the object; restores each thread's MXCSR after.
// OpenBLAS's own worker threads are out of reach and keep the process default; its sgemm over
// O(1) activations and weights does not produce denormals, softmax's exponentials do.
class DenormalsOff {
 public:
  explicit DenormalsOff(int threads) : threads_(threads) {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp parallel num_threads(threads_)
    {
      saved_csr_ = _mm_getcsr();
      saved_ = true;
      _mm_setcsr(saved_csr_ | kFtzDaz);
    }
#endif
  }
  ~DenormalsOff() {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp parallel num_threads(threads_)
    {
      if (saved_) _mm_setcsr(saved_csr_);
      saved_ = false;
    }
#endif
  }
  DenormalsOff(const DenormalsOff&) = delete;
  DenormalsOff& operator=(const DenormalsOff&) = delete;

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bits 15 (FTZ) and 6 (DAZ)
  static thread_local unsigned saved_csr_;
  static thread_local bool saved_;
  int threads_;
};
thread_local unsigned DenormalsOff::saved_csr_ = 0;
thread_local bool DenormalsOff::saved_ = false;

}  // namespace

size_t CpuEngineWeightBytes(const ModelConfig& model) { return CpuWeightBytes(model); }

size_t CpuEngineKvBytes(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens) {
  return CpuKvBytes(model, kv_cache_blocks, block_tokens);
}

namespace {

CpuBackendOptions BackendOptions(const CpuEngineOptions& options) {
  return CpuBackendOptions{
      .num_threads = options.num_threads > 0 ? options.num_threads : static_cast<int>(UsableCpus()),
      .gemm_backend = options.gemm_backend,
      .weight_seed = options.weight_seed,
      .packed_weights =
          options.packed_weights.value_or(DefaultPackedWeights(options.gemm_backend))};
}

// Sets the process-wide kernel settings `options` asks for (SetDecodePrefetchBytes,
// SetGemmSkinnyRows); the constructor does this first.
void ApplyKernelSettings(const CpuEngineOptions& options) {
  if (options.decode_prefetch_bytes > 0) SetDecodePrefetchBytes(options.decode_prefetch_bytes);
  if (options.gemm_skinny_rows) (void)SetGemmSkinnyRows(*options.gemm_skinny_rows);
}

}  // namespace

CpuEngine::CpuEngine(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
                     CpuEngineOptions options)
    : model_(model),
      options_(options),
      backend_(model, kv_cache_blocks, block_tokens, BackendOptions(options)) {
  ApplyKernelSettings(options);
}

CpuEngineOptions WithProfileKernels(CpuEngineOptions options, const DeviceProfile& profile) {
  if (!profile.measured_on) return options;
  options.decode_prefetch_bytes = profile.measured_on->decode_prefetch_bytes;
  options.gemm_skinny_rows = static_cast<uint32_t>(profile.gemm_skinny_max_tokens);
  options.packed_weights = profile.measured_on->gemm_weights == "packed";
  return options;
}

CpuEngine::~CpuEngine() = default;

StepTiming CpuEngine::Execute(const BatchPlan& plan) {
  const int64_t start_ns = SteadyNowNs();
  StepTiming timing;
  {
    const DenormalsOff denormals_off(backend_.num_threads());
    last_shape_ = ShapeStep(plan, model_, options_.cascade_attention,
                            static_cast<uint32_t>(backend_.num_threads()));
    timing.cascade_used = last_shape_.cascade();
    last_requests_ = plan.num_requests();
    if (last_requests_ > 0) {
      FEATHER_CHECK(plan.block_tokens == backend_.kv_layout().block_tokens,
                    "plan.block_tokens differs from the engine's KV block size");
      LayOutPlan(plan, static_cast<uint32_t>(last_shape_.cascade_prefix_tokens),
                 backend_.kv_layout().num_blocks, layout_);
      RunLayerLoop(backend_, layout_, model_.layers, timing);
    }
  }
  timing.total_ns = SteadyNowNs() - start_ns;
  SetOverheadFromTotal(timing);
  return timing;
}

std::span<const float> CpuEngine::last_logits() const {
  return last_requests_ == 0 ? std::span<const float>{} : backend_.logits();
}

std::span<const uint32_t> CpuEngine::last_argmax() const {
  return last_requests_ == 0 ? std::span<const uint32_t>{} : backend_.argmax();
}

}  // namespace feather::hw
