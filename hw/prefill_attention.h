// prefill_attention.h: causal attention of prefill chunks against a paged KV cache on the CPU.
//
// Request r computes chunk_len[r] new tokens at positions context[r] .. context[r]+chunk_len[r]−1
// (chunked prefill: context[r] tokens are already cached, prefix hits included). Their K and V
// must already be appended to the pools (AppendKv). New token i attends to every token at a
// position ≤ context[r] + i (causal), through the request's block table:
//   out[row_offset[r] + i][h] = Σ_{t ≤ context+i} softmax(scale · q·K[t]) · V[t]   (GQA as in decode)
// Work is tiled (query tile × KV tile, online softmax) so that each KV tile loaded serves a tile of
// queries and all heads of its group; parallel over (request, kv head, query tile) with OpenMP.
#pragma once

#include <cstdint>

#include "hw/paged_kv.h"

namespace feather::hw {

struct PrefillAttentionParams {
  const float* q = nullptr;  // [total rows][num_heads][head_dim]; request r's chunk starts at
                             // row row_offset[r]
  float* out = nullptr;      // same shape as q
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  PagedKvLayout layout;
  const uint32_t* const* block_tables = nullptr;
  const uint32_t* context = nullptr;     // per request: tokens cached before the chunk
  const uint32_t* chunk_len = nullptr;   // per request: new tokens this step (≥ 1)
  const uint32_t* row_offset = nullptr;  // per request: first row of its chunk in q/out
  uint32_t num_requests = 0;
  uint32_t num_heads = 0;
  float scale = 0;
  int num_threads = 1;
};

void PrefillAttention(const PrefillAttentionParams& params);

}  // namespace feather::hw
