// attention_emulation.h: the general CUDA attention kernel's algorithm run on the host, work item
// by work item, with the same arithmetic (hw/cuda/attention_math.h) in the same order: KV tiles of
// kTileTokens converted to fp32, scores q·k summed over head_dim in order, SoftmaxTileUpdate,
// o = o·factor + Σ p·V, then the split-KV merge with StateMergeWeights.
//
// It exists so that the plan (hw/cuda/attention_plan.h) and the tile math are tested on a machine
// without a GPU against the double-precision CPU references (hw/attention_reference.h): what the
// GPU adds beyond it is the thread mapping of the kernel, which only `feather selfcheck --target
// cuda` on a GPU can check. The decode kernel (attention_kernels.h) runs the same plan with the
// same online-softmax and merge rules but sums in another order (one token at a time per thread
// slice, then a merge of the CTA's partial states); the self-check compares both kernels with the
// double-precision references. Every pointer of `args` is a host pointer here.
//
// Cost: O(Σ items · kv_heads · lanes · tokens · head_dim), single-threaded: tests only.
#pragma once

#include "hw/cuda/paged_attention_args.h"

namespace feather::hw::cuda {

// Runs every work item, then the merge (args.items .. num_merge_rows as the plan laid them out).
void EmulatePagedAttention(const PagedAttentionArgs& args);

// Merges state b into a for `rows` × num_heads heads (the cascade merge kernel's arithmetic).
void EmulateMergeStates(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                        uint32_t rows, uint32_t num_heads, uint32_t head_dim);

}  // namespace feather::hw::cuda
