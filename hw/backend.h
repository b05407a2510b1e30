// backend.h: what a device must provide to run one model step, one layer operation at a time.
//
// The layer loop (hw/layer_loop.h) is the model: per layer RMSNorm → QKV GEMM → RoPE → KV append →
// attention (decode, cascade prefix + suffix + merge, prefill) → O GEMM → residual → RMSNorm →
// gate/up GEMM → SiLU·up → down GEMM → residual, then the LM head. It calls a Backend for every
// operation and times each cost-model term between the calls. A Backend owns the weights, the KV
// pools, the activation buffers and the kernels of one device (hw/cpu_backend.h for this CPU; a
// CUDA backend under hw/cuda/ next), and the loop never sees a pointer: operands are named by
// Buffer and Weight. So the model is written once, and a backend is its kernels plus the memory
// they run on.
//
// Calls are per layer operation, never per head or page: about 16 virtual calls per layer, next to
// kernels of tens of µs or more. Operations may run asynchronously (a GPU stream); Synchronize
// waits until every issued operation has finished, and the term timer calls it before reading the
// clock, so wall-clock term times are right on any backend (CPU kernels are synchronous: a no-op).
//
// Rows: BeginStep receives the step's host layout (hw/plan_layout.h): the activation buffers have
// layout.num_rows rows in batch order (decode entries, then prefill chunks); kSampled and kLogits
// have one row per plan request. Buffer widths follow the model (ModelConfig): kHidden, kNormed,
// kTmp hidden; kQkv (heads + 2·kv_heads)·head_dim; kQ and kAttn heads·head_dim; kGateUp
// 2·intermediate; kAct intermediate; kLogits vocab.
#pragma once

#include <cstdint>

#include "hw/plan_layout.h"

namespace feather::hw {

enum class Buffer : uint8_t {
  kHidden,   // the residual stream x
  kNormed,   // RMSNorm output
  kQkv,      // fused QKV projection
  kQ,        // queries after RoPE (K and V go to the pools' staging rows, then the pools)
  kAttn,     // attention output
  kTmp,      // projection output before the residual add
  kGateUp,   // fused gate | up projection
  kAct,      // SiLU(gate) · up
  kSampled,  // the LM head's input rows, one per plan request
  kLogits,   // [requests][vocab]
};

enum class Weight : uint8_t {
  kAttnNorm,   // per layer, [hidden]
  kQkv,        // per layer, [hidden][(heads + 2·kv_heads)·head_dim]
  kO,          // per layer, [heads·head_dim][hidden]
  kMlpNorm,    // per layer, [hidden]
  kGateUp,     // per layer, [hidden][2·intermediate]
  kDown,       // per layer, [intermediate][hidden]
  kFinalNorm,  // [hidden] (layer ignored)
  kLmHead,     // [hidden][vocab] (layer ignored)
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Takes the step's layout (valid until the next BeginStep: a GPU backend copies its arrays to
  // the device here), grows the buffers to its rows and embeds every row's token into kHidden.
  virtual void BeginStep(const StepLayout& layout) = 0;

  // out = in / rms(in) · w over `rows` rows (in may equal out).
  virtual void RmsNorm(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) = 0;
  // out = in · W over `rows` rows, the shapes of W (Weight's comment).
  virtual void Linear(Buffer in, Weight w, uint32_t layer, Buffer out, uint32_t rows) = 0;
  // kQkv → kQ and the new K and V rows, rotating q and k (rotate-half RoPE at each row's position).
  virtual void RopeSplitQkv() = 0;
  // x += y over the step's rows.
  virtual void AddInPlace(Buffer x, Buffer y) = 0;
  // kAct = SiLU(gate) · up from kGateUp.
  virtual void SiluMul() = 0;

  // Writes the new K and V rows of batch entries [first, first + count) into `layer`'s pools.
  virtual void AppendKv(uint32_t layer, uint32_t first, uint32_t count) = 0;
  // Decode attention of the decode entries into kAttn: over the whole KV, or with `suffix_only`
  // over [P, len) of a cascade step, keeping the lse for the merge.
  virtual void DecodeAttention(uint32_t layer, bool suffix_only) = 0;
  // Cascade: the shared-prefix pass of every decode query over the layout's prefix pages, and
  // the log-sum-exp merge of its state into kAttn (after the suffix pass).
  virtual void CascadePrefix(uint32_t layer) = 0;
  virtual void CascadeMerge() = 0;
  // Causal attention of the prefill chunks into their kAttn rows (their K and V appended).
  virtual void PrefillAttention(uint32_t layer) = 0;

  // kSampled = the sampled row of each plan request from kHidden (layout.sampled_row).
  virtual void GatherSampledRows() = 0;
  // The argmax of every kLogits row (the sampled token ids).
  virtual void Argmax() = 0;

  // Waits for every issued operation (file comment).
  virtual void Synchronize() = 0;
};

}  // namespace feather::hw
