// cuda_engine.cc: CudaEngine (see cuda_engine.h).
#include "hw/cuda/cuda_engine.h"

#include "base/check.h"
#include "hw/layer_loop.h"

namespace feather::hw::cuda {

CudaEngine::CudaEngine(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
                       CudaEngineOptions options)
    : model_(model),
      options_(options),
      backend_(model, kv_cache_blocks, block_tokens, options.backend) {}

StepTiming CudaEngine::Execute(const BatchPlan& plan) {
  const int64_t start_ns = SteadyNowNs();
  StepTiming timing;
  last_shape_ = ShapeStep(plan, model_, options_.cascade_attention,
                          static_cast<uint32_t>(backend_.sm_count()));
  timing.cascade_used = last_shape_.cascade();
  last_requests_ = plan.num_requests();
  if (last_requests_ > 0) {
    FEATHER_CHECK(plan.block_tokens == backend_.kv_layout().block_tokens,
                  "plan.block_tokens differs from the engine's KV block size");
    LayOutPlan(plan, static_cast<uint32_t>(last_shape_.cascade_prefix_tokens),
               backend_.kv_layout().num_blocks, layout_);
    RunLayerLoop(backend_, layout_, model_.layers, timing);
    backend_.Synchronize();
  }
  timing.total_ns = SteadyNowNs() - start_ns;
  SetOverheadFromTotal(timing);
  return timing;
}

std::span<const float> CudaEngine::last_logits() {
  return last_requests_ == 0 ? std::span<const float>{} : backend_.logits();
}

std::span<const uint32_t> CudaEngine::last_argmax() {
  return last_requests_ == 0 ? std::span<const uint32_t>{} : backend_.argmax();
}

}  // namespace feather::hw::cuda
