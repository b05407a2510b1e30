// prefill_attention.h: causal attention of prefill chunks against a paged KV cache on the CPU.
//
// Request r (entry r of the paged-KV view, hw/paged_kv.h) computes chunk_len[r] new tokens, the
// query/output rows [qo_indptr[r], qo_indptr[r+1]) (FlashInfer's qo_indptr), at positions
// context[r] .. kv.SeqLen(r) − 1, where chunk_len[r] = qo_indptr[r+1] − qo_indptr[r] and
// context[r] = kv.SeqLen(r) − chunk_len[r] (chunked prefill: context[r] tokens are already cached,
// prefix hits included). Their K and V must already be appended to the pools (AppendKv). New
// token i attends to every token at a position ≤ context[r] + i (causal), through its pages:
//   out[qo_indptr[r] + i][h] = Σ_{t ≤ context+i} softmax(scale · q·K[t]) · V[t]   (GQA as in decode)
// Work is tiled (query tile × KV tile, online softmax) so that each KV tile loaded serves a tile of
// queries and all heads of its group; parallel over (request, kv head, query tile) with OpenMP.
#pragma once

#include <cstdint>

#include "hw/paged_kv.h"

namespace feather::hw {

struct PrefillAttentionParams {
  const float* q = nullptr;  // [qo_indptr[kv.batch_size]][num_heads][head_dim]
  float* out = nullptr;      // same shape as q
  PagedKvView kv;            // one entry per request, covering its context and its chunk
  const uint32_t* qo_indptr = nullptr;  // [kv.batch_size + 1]; every chunk ≥ 1 row
  uint32_t num_heads = 0;
  float scale = 0;
  int num_threads = 1;
};

void PrefillAttention(const PrefillAttentionParams& params);

}  // namespace feather::hw
