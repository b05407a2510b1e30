// cascade_attention.h: shared-prefix (cascade) decode attention on the CPU, as vLLM's
// FlashAttention backend and FlashInfer's cascade kernels do it on a GPU.
//
// Requests whose block tables start with the same P physical tokens attend to that prefix in one
// pass that reads each prefix KV tile once for all of their queries (a small GEMM per tile:
// queries × tile), then each attends to its own suffix [P, len) with PagedDecodeAttention
// (kv_begin = P), and the two partial states are merged by log-sum-exp:
//   m = max(lse_a, lse_b);  out = (e^(lse_a−m)·out_a + e^(lse_b−m)·out_b) / (e^(lse_a−m) + e^(lse_b−m))
//   lse = m + log(e^(lse_a−m) + e^(lse_b−m)).
// Batch-wide cascade (vLLM) is one group holding every request; the multi-level form runs one
// shared pass per prefix group (FlashInfer's multi-level cascade over a batch sorted by prefix).
// Both levels are paged-KV views (hw/paged_kv.h) over the same pools: the batch's, one entry per
// request, and the prefixes', one entry per group (its shared pages, SeqLen = P); which
// requests belong to group g is a CSR too, group_rows[group_indptr[g] .. group_indptr[g+1]).
// KV bytes read by the prefix pass = P · kv_heads · head_dim · 2 · dtype bytes per group, however
// many requests the group has.
#pragma once

#include <cstdint>
#include <vector>

#include "hw/decode_attention.h"
#include "hw/paged_kv.h"

namespace feather::hw {

struct SharedPrefixParams {
  const float* q = nullptr;  // rows of [num_heads][head_dim]; row i of this pass is q_rows[i]
  float* out = nullptr;      // same row indexing as q
  float* lse = nullptr;      // [rows][num_heads], same row indexing
  PagedKvView kv;            // one entry: the shared pages; prefix tokens = kv.SeqLen(0)
  const uint32_t* q_rows = nullptr;  // which rows of q/out/lse belong to the group; null = 0..n−1
  uint32_t num_queries = 0;          // requests of the group
  uint32_t num_heads = 0;
  float scale = 0;
  int num_threads = 1;
};

// One non-causal pass of the group's queries over the shared prefix. Writes out and lse.
void SharedPrefixAttention(const SharedPrefixParams& params);

// Merges state b into state a in place (formula above), rows × num_heads heads of head_dim.
// Rows where one side is empty (lse = −inf) take the other side unchanged.
void MergeAttentionStates(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                          uint32_t rows, uint32_t num_heads, uint32_t head_dim, int num_threads);

// A cascade step: group g's requests (indices into the batch) share the first
// prefix_kv.SeqLen(g) tokens, held in prefix_kv's entry g.
struct CascadeDecodeParams {
  DecodeAttentionParams decode;  // the whole batch; decode.kv_begin must be null (set internally)
  PagedKvView prefix_kv;         // one entry per group, over decode.kv's pools and layout
  const uint32_t* group_indptr = nullptr;  // [prefix_kv.batch_size + 1]
  const uint32_t* group_rows = nullptr;    // disjoint; requests in no group get plain decode
};

struct CascadeWorkspace {
  DecodeWorkspace decode;
  std::vector<uint32_t> kv_begin;
  std::vector<float> suffix_out;
  std::vector<float> suffix_lse;
};

// Prefix pass per group, suffix pass for the whole batch, merge. Output in params.decode.out
// (and .lse when not null), equal (up to rounding) to PagedDecodeAttention over the full range.
void CascadeDecodeAttention(const CascadeDecodeParams& params, CascadeWorkspace& workspace);

}  // namespace feather::hw
