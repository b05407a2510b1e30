// attention_math.h: the arithmetic of the CUDA attention kernels, in FEATHER_HOST_DEVICE functions
// so that the kernels (hw/cuda/attention_kernels.cu) and the CPU tests run the same code.
//
// Online softmax (Milakov & Gimelshein 2018; FlashAttention): a query head keeps a running state
// (m, d) — the largest scaled score seen and Σ exp(score − m) — next to an unnormalised output
// o = Σ exp(score − m)·V. A tile of scores s_t (masked ones −inf) is folded in by
//   m' = max(m, max_t s_t);  factor = exp(m − m');  p_t = exp(s_t − m');
//   d' = d·factor + Σ_t p_t;  o' = o·factor + Σ_t p_t·V_t,
// SoftmaxTileUpdate doing the scalar part (it returns the factor and turns the scores into p_t);
// at the end out = o / d and lse = m + log d (natural log; −inf and out = 0 when nothing was seen).
//
// State merge (FlashInfer's merge_state, vLLM's merge_attn_states): two normalised partial
// results (out_a, lse_a), (out_b, lse_b) of the same query over disjoint KV ranges combine into
//   w_a = e^(lse_a − m) / (e^(lse_a − m) + e^(lse_b − m)), w_b likewise, m = max(lse_a, lse_b),
//   out = w_a·out_a + w_b·out_b,  lse = m + log(e^(lse_a − m) + e^(lse_b − m)),
// an empty side (lse = −inf) leaving the other unchanged — the rule of the CPU's
// MergeAttentionStates (hw/cascade_attention.h). Split-KV partials and cascade levels both merge
// through StateMergeWeights.
//
// Tile geometry: a CTA of kThreads threads runs one work item of the plan
// (hw/cuda/attention_plan.h) for one KV head: `lanes` = rows × group query vectors (rows of the
// item × the query heads of the KV head's group, ≤ kMaxLanes) over KV tiles of kTileTokens tokens
// staged in shared memory as fp32. ChooseAttentionGeometry gives the rows per item and the dynamic
// shared memory, or says why a shape is unsupported.
//
// Cost: SoftmaxTileUpdate O(n), StateMergeWeights O(1), no allocation.
#pragma once

#include <math.h>  // expf, logf, fmaxf in the global namespace for both g++ and nvcc

#include <cstdint>

#include "hw/host_device.h"

namespace feather::hw::cuda {

inline constexpr uint32_t kThreads = 128;    // threads per attention CTA
inline constexpr uint32_t kTileTokens = 16;  // KV tokens per shared-memory tile (one page)
inline constexpr uint32_t kMaxLanes = 16;    // query vectors per CTA (rows × group)
inline constexpr uint32_t kMaxSharedBytes = 48 * 1024;  // without an opt-in attribute

[[nodiscard]] FEATHER_HOST_DEVICE inline float NegativeInfinity() { return -HUGE_VALF; }

// The running (m, d) of one query vector.
struct SoftmaxState {
  float m;  // max scaled score so far (−inf before any)
  float d;  // Σ exp(score − m)
};

[[nodiscard]] FEATHER_HOST_DEVICE inline SoftmaxState EmptySoftmaxState() {
  return SoftmaxState{NegativeInfinity(), 0.0F};
}

// Folds the scaled scores[0, n) (masked ones −inf) into `state`; overwrites them with
// p_t = exp(s_t − m') and returns the factor the unnormalised output must be multiplied by before
// Σ p_t·V_t is added (1 when the tile changes nothing).
FEATHER_HOST_DEVICE inline float SoftmaxTileUpdate(SoftmaxState& state, float* scores, uint32_t n) {
  float tile_max = NegativeInfinity();
  for (uint32_t t = 0; t < n; ++t) tile_max = fmaxf(tile_max, scores[t]);
  const float m_new = fmaxf(state.m, tile_max);
  if (m_new == NegativeInfinity()) {  // nothing visible yet
    for (uint32_t t = 0; t < n; ++t) scores[t] = 0.0F;
    return 1.0F;
  }
  const float factor = expf(state.m - m_new);  // 0 when state.m = −inf
  float sum = 0.0F;
  for (uint32_t t = 0; t < n; ++t) {
    const float p = expf(scores[t] - m_new);  // 0 for a masked token
    scores[t] = p;
    sum += p;
  }
  state.d = state.d * factor + sum;
  state.m = m_new;
  return factor;
}

// 1 / d (0 when nothing was seen), the factor that normalises the output.
[[nodiscard]] FEATHER_HOST_DEVICE inline float FinalScale(const SoftmaxState& state) {
  return state.d > 0.0F ? 1.0F / state.d : 0.0F;
}
// m + log d, −inf when nothing was seen.
[[nodiscard]] FEATHER_HOST_DEVICE inline float FinalLse(const SoftmaxState& state) {
  return state.d > 0.0F ? state.m + logf(state.d) : NegativeInfinity();
}

struct MergeWeights {
  float a;    // weight of out_a
  float b;    // weight of out_b
  float lse;  // lse of the merged state
};

// The weights that merge normalised state b into a (file comment).
[[nodiscard]] FEATHER_HOST_DEVICE inline MergeWeights StateMergeWeights(float lse_a, float lse_b) {
  if (lse_b == NegativeInfinity()) return MergeWeights{1.0F, 0.0F, lse_a};
  if (lse_a == NegativeInfinity()) return MergeWeights{0.0F, 1.0F, lse_b};
  const float m = fmaxf(lse_a, lse_b);
  const float ea = expf(lse_a - m);
  const float eb = expf(lse_b - m);
  const float sum = ea + eb;
  return MergeWeights{ea / sum, eb / sum, m + logf(sum)};
}

// Why a shape cannot run, as a static string (nullptr: it can).
struct AttentionGeometry {
  uint32_t rows_per_item = 0;  // query rows of one work item (1 for decode)
  uint32_t lanes = 0;          // rows_per_item × group
  uint32_t shared_bytes = 0;   // dynamic shared memory of one CTA
  const char* unsupported = nullptr;
};

// Shared memory of a CTA with `lanes` query vectors of head_dim: q and o [lanes][head_dim],
// K and V tiles [kTileTokens][head_dim] in fp32, scores [lanes][kTileTokens], m, d and the
// rescale factor per lane.
[[nodiscard]] FEATHER_HOST_DEVICE constexpr uint32_t AttentionSharedBytes(uint32_t lanes,
                                                                          uint32_t head_dim) {
  return static_cast<uint32_t>(sizeof(float)) *
         (2 * lanes * head_dim + 2 * kTileTokens * head_dim + lanes * kTileTokens + 3 * lanes);
}

// Rows per item and shared memory for query heads grouped `group` per KV head, head_dim, and at
// most `max_rows` rows per item (1 for decode; a prefill chunk's length for prefill). head_dim
// must be 64 or 128, group in [1, kMaxLanes].
[[nodiscard]] FEATHER_HOST_DEVICE constexpr AttentionGeometry ChooseAttentionGeometry(
    uint32_t head_dim, uint32_t group, uint32_t max_rows) {
  AttentionGeometry g;
  if (head_dim != 64 && head_dim != 128) {
    g.unsupported = "head_dim must be 64 or 128";
    return g;
  }
  if (group == 0 || group > kMaxLanes) {
    g.unsupported = "query heads per KV head must be in [1, 16]";
    return g;
  }
  uint32_t rows = kMaxLanes / group;
  if (max_rows >= 1 && rows > max_rows) rows = max_rows;
  g.rows_per_item = rows;
  g.lanes = rows * group;
  g.shared_bytes = AttentionSharedBytes(g.lanes, head_dim);
  return g;
}

}  // namespace feather::hw::cuda
