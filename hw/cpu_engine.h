// cpu_engine.h: the real CPU engine, an Engine that executes every step of a BatchPlan on this
// machine and reports the wall-clock time of each cost-model term.
//
// The engine holds a decoder-only transformer with the scenario's ModelConfig dimensions (random
// fp32 weights, seeded; meant for models scaled down so a step takes milliseconds) and a real
// paged KV cache in memory, one K and one V pool per layer (hw/paged_kv.h), with exactly the
// physical blocks the serving loop's KvCache hands out: requests that share a cached prefix read
// the same memory. A step embeds each new token, runs per layer RMSNorm → QKV GEMM → RoPE →
// KV append → attention (decode, batch-wide cascade when vLLM's rule says so, prefill) → O GEMM
// → residual → RMSNorm → gate/up GEMM → SiLU·up → down GEMM → residual, then the LM head for the
// sampled rows (decode requests and prefill chunks). The cascade decision is ShapeStep's (with
// sm_count = threads), so the model engine priced with a CPU profile decides the same way.
//
// Structure (issue 14): ShapeStep decides the step's shape (and cascade); LayOutPlan
// (hw/plan_layout.h) turns the plan into host CSR arrays; RunLayerLoop (hw/layer_loop.h) runs the
// model over a CpuBackend (hw/cpu_backend.h), which holds weights, pools and the CPU kernels. A
// CUDA engine is the same three steps over another Backend.
//
// Timing (the layer loop's sections): term_ns[kGemm] = linear layers with their elementwise work
// and the LM head; kDecodeAttention = decode attention (plain, or cascade's per-request suffix
// pass) with the decode requests' KV appends; kCascadePrefix = the shared-prefix pass and the
// merge; kPrefillAttention = prefill attention with the chunks' KV appends; kKvReuse = 0 (reuse
// cannot be told apart from DRAM reads on a CPU; it is inside kDecodeAttention); kOverhead = the
// rest of the step's wall time (shaping, the plan layout, embedding, the denormal switch).
// total_ns is the wall time of Execute. Execute does not allocate once buffers have grown to the
// largest step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "hw/cpu_backend.h"
#include "hw/gemm.h"
#include "hw/plan_layout.h"
#include "sim/engine/engine.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::hw {

struct CpuEngineOptions {
  int num_threads = 0;            // 0 = the CPUs this process may run on
  bool cascade_attention = true;  // scenario serving.cascade_attention
  GemmBackend gemm_backend = DefaultGemmBackend();
  uint64_t weight_seed = 1;
  // > 0: the kernels' prefetch lookahead, set at construction (SetDecodePrefetchBytes; one
  // setting per process, decode_attention.h); 0 leaves it. `feather run` passes the profile's
  // measured_on.decode_prefetch_bytes, the lookahead calibration measured with.
  size_t decode_prefetch_bytes = 0;
  // Set: the skinny GEMM kernel's row limit, set at construction (SetGemmSkinnyRows, one setting
  // per process, gemm.h; 0 = Eigen's product always); unset leaves it. `feather run` passes a
  // calibrated profile's gemm_skinny_max_tokens, the kernels its GEMM rows were measured with.
  std::optional<uint32_t> gemm_skinny_rows = std::nullopt;
  // Hold the linear weights packed and run every linear layer on them (CpuBackendOptions::
  // packed_weights); unset = DefaultPackedWeights(gemm_backend). `feather run` passes a
  // calibrated profile's measured_on.gemm_weights (absent: row-major, as profiles before it).
  std::optional<bool> packed_weights = std::nullopt;
};

// `options` with the kernel settings a calibrated profile records (measured_on present): its
// prefetch lookahead (measured_on.decode_prefetch_bytes), how it held the linear weights
// (measured_on.gemm_weights: packed, or row-major when absent) and its skinny GEMM rows
// (gemm_skinny_max_tokens, for row-major weights; 0 = Eigen's product always, as every profile
// calibrated before the kernel was measured). `feather run`'s cpu engine and `validate`'s step
// probe use it, so that the engine runs the kernels the profile's rows were measured with. Other
// profiles leave all three.
[[nodiscard]] CpuEngineOptions WithProfileKernels(CpuEngineOptions options,
                                                  const DeviceProfile& profile);

class CpuEngine final : public Engine {
 public:
  // Allocates weights and kv_cache_blocks blocks of block_tokens tokens per layer. The KV dtype
  // follows model.dtype_bytes (4: fp32, 2: bf16). Throws std::invalid_argument naming the sizes
  // when weights + KV would exceed half of this machine's physical memory.
  CpuEngine(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
            CpuEngineOptions options = {});
  ~CpuEngine() override;
  CpuEngine(const CpuEngine&) = delete;
  CpuEngine& operator=(const CpuEngine&) = delete;

  [[nodiscard]] std::string_view Name() const override { return "cpu"; }
  [[nodiscard]] StepTiming Execute(const BatchPlan& plan) override;

  // The shape (ShapeStep) of the last executed step: what calibration records beside its timing.
  [[nodiscard]] const StepShape& last_shape() const { return last_shape_; }
  [[nodiscard]] int num_threads() const { return backend_.num_threads(); }
  [[nodiscard]] size_t weight_bytes() const { return backend_.weight_bytes(); }
  [[nodiscard]] bool packed_weights() const { return backend_.packed_weights(); }
  [[nodiscard]] size_t packed_weight_bytes() const { return backend_.packed_weight_bytes(); }
  [[nodiscard]] size_t kv_bytes() const { return backend_.kv_bytes(); }

  // For tests and verification: the last step's LM-head output, one sampled row per request of
  // its plan, in plan order (a decode request's token; a prefill chunk's last token). Logits are
  // [requests][vocab]; the argmax is per row. Valid until the next Execute.
  [[nodiscard]] std::span<const float> last_logits() const;
  [[nodiscard]] std::span<const uint32_t> last_argmax() const;

 private:
  ModelConfig model_;
  CpuEngineOptions options_;
  CpuBackend backend_;
  StepLayout layout_;
  StepShape last_shape_;
  uint32_t last_requests_ = 0;
};

// Bytes a CpuEngine for this model and pool would allocate for weights and KV (for up-front
// checks and messages).
[[nodiscard]] size_t CpuEngineWeightBytes(const ModelConfig& model);
[[nodiscard]] size_t CpuEngineKvBytes(const ModelConfig& model, uint64_t kv_cache_blocks,
                                      uint32_t block_tokens);

}  // namespace feather::hw
