// cpu_backend.h: the Backend (hw/backend.h) of this CPU: weights, KV pools and activations in
// host memory, and the hw/ CPU kernels (Eigen or OpenBLAS GEMM, the paged attention kernels, and
// OpenMP elementwise loops) on `threads` OpenMP threads.
//
// Memory: fp32 weights whatever model.dtype_bytes says (only the KV pools follow the model's
// dtype, fp32 or bf16), one K and one V pool per layer of kv_cache_blocks pages (hw/paged_kv.h),
// all touched at construction so no step pays a first-touch fault. QKV is fused as one
// [hidden][(heads + 2·kv_heads)·head_dim] matrix and gate|up as one [hidden][2·intermediate], so
// each is one GEMM. Values are uniform in ±sqrt(3/fan_in) (variance 1/fan_in: activations stay O(1)
// through the layers), from a counter-based hash of (seed, matrix, index), so they do not depend
// on the thread count; RMSNorm weights are 1. The embedding is [vocab][hidden] with unit-variance
// rows and the LM head [hidden][vocab]; with tied embeddings there is only the LM head and a
// token's embedding is its column. A row's token is a hash of (request id, position).
//
// With packed_weights (the engine's default where the packed kernel runs) the linear layers'
// matrices (QKV, O, gate|up, down, LM head) are also held as column panels (hw/gemm.h PackedB),
// packed once here, and every linear layer multiplies by them (GemmPackedB): about twice those
// matrices' memory, no per-call packing. The row-major copies stay (the tied embedding reads the
// LM head's columns; the OpenBLAS backend and the checks use them).
//
// Buffers are 64-byte aligned arrays that only grow: once they have reached the largest step,
// a step allocates nothing (the kernels' own scratch is per thread and grows the same way).
// Operations are synchronous (Synchronize is a no-op). Not thread-safe: one step at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "hw/backend.h"
#include "hw/gemm.h"
#include "hw/paged_kv.h"
#include "sim/engine/model_config.h"

namespace feather::hw {

struct CpuBackendOptions {
  int num_threads = 1;  // ≥ 1
  GemmBackend gemm_backend = DefaultGemmBackend();
  uint64_t weight_seed = 1;
  // Also hold the linear layers' weights packed (hw/gemm.h PackedB) and run every linear layer
  // by GemmPackedB. Taken only where GemmPackedB runs (kEigen with AVX2 + FMA).
  bool packed_weights = false;
};

class CpuBackend final : public Backend {
 public:
  // Allocates and fills the weights and kv_cache_blocks pages of block_tokens tokens per layer.
  // Throws std::invalid_argument naming the problem for a model the kernels cannot run (a zero
  // dimension, heads not a multiple of kv_heads, head_dim not a multiple of 8, a dtype other than
  // 2 or 4 bytes), a pool outside [1, 2^32 − 1] pages, block_tokens 0, or weights + KV over half
  // of this machine's physical memory.
  CpuBackend(const ModelConfig& model, uint64_t kv_cache_blocks, uint32_t block_tokens,
             CpuBackendOptions options);
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

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
  void Synchronize() override {}

  [[nodiscard]] const PagedKvLayout& kv_layout() const;
  [[nodiscard]] int num_threads() const;
  [[nodiscard]] size_t weight_bytes() const;
  // Whether the linear layers run on packed weights (CpuBackendOptions::packed_weights, where
  // possible), and the bytes of those packed copies (0 without).
  [[nodiscard]] bool packed_weights() const;
  [[nodiscard]] size_t packed_weight_bytes() const;
  [[nodiscard]] size_t kv_bytes() const;
  // The last step's logits [requests][vocab] and argmax per row (empty before a step).
  [[nodiscard]] std::span<const float> logits() const;
  [[nodiscard]] std::span<const uint32_t> argmax() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Bytes a CpuBackend for this model and pool allocates for weights and KV.
[[nodiscard]] size_t CpuWeightBytes(const ModelConfig& model);
// Bytes of the packed copies of the linear matrices (CpuBackendOptions::packed_weights).
[[nodiscard]] size_t CpuPackedWeightBytes(const ModelConfig& model);
[[nodiscard]] size_t CpuKvBytes(const ModelConfig& model, uint64_t kv_cache_blocks,
                                uint32_t block_tokens);

}  // namespace feather::hw
