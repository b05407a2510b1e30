// cuda_backend.h: the Backend (hw/backend.h) of a CUDA GPU — weights, KV pools and activations in
// device memory, the hw/cuda/ kernels and cuBLAS — so the layer loop (hw/layer_loop.h) runs the
// same BatchPlan on the GPU that CpuBackend runs on the CPU (`engine: cuda`,
// hw/cuda/cuda_engine.h). CUDA builds only; run on an H100 once (results/cuda-h100/), never in
// CI (no GPU in this project's machines).
//
// Memory: fp32 weights filled on the device by the shared rule (hw/weight_init.h: the CPU
// backend's values bit for bit, for the same model and seed; rounded to bf16 with
// CudaBackendOptions::bf16_weights), one K and one V pool per layer of
// kv_cache_blocks pages (fp32 for dtype_bytes 4, bf16 for 2, or fp16 by option), activations that
// only grow. BeginStep copies the step's layout arrays to the device and builds the attention
// plans on the host (hw/cuda/attention_plan.h: decode or cascade suffix, the cascade prefix pass,
// prefill), FlashInfer's plan-then-run. Every operation is asynchronous on the backend's stream;
// Synchronize waits for it. Split-KV budget: SMs × 2 CTAs.
//
// Differences from the CPU backend, by design: GEMMs are cuBLAS fp32 (no TF32), or cuBLASLt bf16
// with bf16 weights; reductions are tree-ordered, so activations match the CPU's to rounding, not
// bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "hw/backend.h"
#include "hw/cuda/cuda_variables.h"
#include "hw/cuda/paged_attention_args.h"
#include "hw/paged_kv.h"
#include "sim/engine/model_config.h"

namespace feather::hw::cuda {

struct CudaBackendOptions {
  uint64_t weight_seed = 1;
  // Weight matrices (QKV, O, gate·up, down, LM head) stored in bf16 and multiplied by cuBLASLt
  // (bf16 inputs, fp32 accumulation and output; activations rounded to bf16 at each product), as
  // a bf16 serving engine runs them: half the weight bytes of the fp32 default. The weights are
  // the fp32 ones rounded, so logits differ from the CPU engine's by bf16 rounding, not bit for
  // bit. Default: FEATHER_CUDA_WEIGHTS=bf16|fp32 (fp32 when unset; another value: exit 2).
  bool bf16_weights = Bf16WeightsFromEnvironment();
  // The decode kernel for plans of one row per item (hw/cuda/attention_kernels.h); false: the
  // general kernel for every plan. Default: FEATHER_CUDA_ATTENTION=auto|general (auto if unset).
  bool decode_kernel = DecodeKernelFromEnvironment();
  bool fp16_kv = false;  // with model.dtype_bytes 2: fp16 instead of bf16 KV
  int ctas_per_sm = 2;   // split-KV grid budget per SM
};

class CudaBackend final : public Backend {
 public:
  // Needs a CUDA device (hw/cuda/device.h); throws std::runtime_error naming why there is none,
  // std::invalid_argument for a model the kernels cannot run (head_dim not 64 or 128, more than
  // 16 query heads per KV head, a dtype other than 2 or 4 bytes) or weights + KV beyond 90 % of
  // the device's memory.
  CudaBackend(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
              CudaBackendOptions options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  void BeginStep(const StepLayout& layout) override;
  void RmsNorm(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) override;
  void Linear(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) override;
  void RopeSplitQkv() override;
  void AddInPlace(Buffer x, Buffer y) override;
  void SiluMul() override;
  void AppendKv(uint32_t layer, uint32_t first, uint32_t count) override;
  void DecodeAttention(uint32_t layer, bool suffix_only) override;
  void CascadePrefix(uint32_t layer) override;
  void CascadeMerge() override;
  void PrefillAttention(uint32_t layer) override;
  void GatherSampledRows() override;
  void Argmax() override;
  void Synchronize() override;

  [[nodiscard]] const PagedKvLayout& kv_layout() const;
  [[nodiscard]] int sm_count() const;
  [[nodiscard]] size_t weight_bytes() const;
  [[nodiscard]] size_t kv_bytes() const;
  // The last step's logits and argmax, copied to the host (synchronises).
  [[nodiscard]] std::span<const float> logits();
  [[nodiscard]] std::span<const uint32_t> argmax();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace feather::hw::cuda
