// cuda_engine.h: `engine: cuda` — the Engine over a CudaBackend (hw/cuda/cuda_backend.h), the GPU
// twin of hw::CpuEngine: shape the step (ShapeStep, with the device's SM count as the "SMs" of
// vLLM's cascade rule), lay the plan out on the host (hw/plan_layout.h), run the layer loop
// (hw/layer_loop.h), time the step. Per-term times are wall-clock between stream
// synchronisations (TermTimer), so each term holds the GPU work it issued. CUDA builds only;
// run on an H100 once (results/cuda-h100/), never in CI (no GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hw/cuda/cuda_backend.h"
#include "hw/plan_layout.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::hw::cuda {

struct CudaEngineOptions {
  bool cascade_attention = true;  // scenario serving.cascade_attention
  CudaBackendOptions backend;
};

class CudaEngine final : public Engine {
 public:
  // Throws std::runtime_error without a CUDA device (the reason in one line), and as
  // CudaBackend's constructor does for a model it cannot run.
  CudaEngine(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
             CudaEngineOptions options = {});

  [[nodiscard]] std::string_view Name() const override { return "cuda"; }
  [[nodiscard]] StepTiming Execute(const BatchPlan& plan) override;

  // vLLM's cascade switch for the steps that follow. The calibration and the experiments measure
  // both settings on one engine (CudaEngineCascadeView): two engines would hold the weights and
  // the KV pool twice, which an 8B model's experiments do not fit on an 80 GB GPU.
  void set_cascade_attention(bool on) { options_.cascade_attention = on; }
  [[nodiscard]] bool cascade_attention() const { return options_.cascade_attention; }

  [[nodiscard]] const StepShape& last_shape() const { return last_shape_; }
  [[nodiscard]] int sm_count() const { return backend_.sm_count(); }
  // The last step's logits [requests][vocab] and argmax, copied from the device.
  [[nodiscard]] std::span<const float> last_logits();
  [[nodiscard]] std::span<const uint32_t> last_argmax();

 private:
  ModelConfig model_;
  CudaEngineOptions options_;
  CudaBackend backend_;
  StepLayout layout_;
  StepShape last_shape_;
  uint32_t last_requests_ = 0;
};

// One CudaEngine seen as an engine with cascade on or off: Execute sets the engine's switch,
// then runs the step. Two views of one engine share its weights and KV pool.
class CudaEngineCascadeView final : public Engine {
 public:
  CudaEngineCascadeView(CudaEngine& engine, bool cascade_attention)
      : engine_(&engine), cascade_attention_(cascade_attention) {}

  [[nodiscard]] std::string_view Name() const override { return "cuda"; }
  [[nodiscard]] StepTiming Execute(const BatchPlan& plan) override {
    engine_->set_cascade_attention(cascade_attention_);
    return engine_->Execute(plan);
  }

 private:
  CudaEngine* engine_;
  bool cascade_attention_;
};

}  // namespace feather::hw::cuda
