// decode_attention.h: paged decode attention on the CPU (one query token per request).
//
// For every request r and query head h (kv head g = h / (num_heads / kv_heads), grouped-query
// attention), over the KV tokens [kv_begin[r], kv_end[r]) of the request's block table:
//   out[r][h] = Σ_t softmax_t(scale · q[r][h]·K[t]) · V[t],   lse[r][h] = log Σ_t exp(scale·q·K[t])
// with an online (streaming) softmax, fp32 accumulation, AVX2/FMA (AVX-512 when compiled for it)
// and `num_threads` OpenMP threads. The lse output (natural log) is what cascade attention merges
// (MergeAttentionStates); an empty range gives out = 0 and lse = −inf.
//
// Work: each (request, kv head) pair is one task that reads its KV tiles once and serves all
// num_heads / kv_heads query heads of the group from registers, so KV bytes read = Σ_r
// (kv_end − kv_begin) · kv_heads · head_dim · 2 · dtype bytes — the quantity the cost model's
// decode_attention term prices. Long sequences are split into chunks (flash-decoding style) so
// that a small batch still keeps every thread busy; the partial states are merged by LSE.
// Allocation: none per call beyond a per-thread scratch sized on first use (DecodeWorkspace).
#pragma once

#include <cstdint>
#include <vector>

#include "hw/paged_kv.h"

namespace feather::hw {

struct DecodeAttentionParams {
  const float* q = nullptr;  // [num_requests][num_heads][head_dim]
  float* out = nullptr;      // [num_requests][num_heads][head_dim]
  float* lse = nullptr;      // [num_requests][num_heads]; may be null when not needed
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  PagedKvLayout layout;
  const uint32_t* const* block_tables = nullptr;  // per request: physical blocks in token order
  const uint32_t* kv_end = nullptr;               // per request: tokens to attend, exclusive end
  const uint32_t* kv_begin = nullptr;  // per request: first token (cascade's suffix); null = 0
  uint32_t num_requests = 0;
  uint32_t num_heads = 0;  // query heads; a multiple of layout.kv_heads
  float scale = 0;         // usually 1 / sqrt(head_dim)
  int num_threads = 1;
};

// Scratch the kernel reuses across calls (split-KV partial states); one per caller thread.
struct DecodeWorkspace {
  std::vector<float> partial_out;
  std::vector<float> partial_lse;
};

void PagedDecodeAttention(const DecodeAttentionParams& params, DecodeWorkspace& workspace);

}  // namespace feather::hw
