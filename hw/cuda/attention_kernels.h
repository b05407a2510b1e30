// attention_kernels.h: launchers of the paged attention kernel and the state-merge kernels
// (hw/cuda/attention_kernels.cu). CUDA builds only.
//
// LaunchPagedAttention runs one plan (hw/cuda/attention_plan.h) over device copies of its arrays:
// a grid of items × kv_heads CTAs of kThreads threads, then — when the plan split any KV range — a
// merge kernel of one CTA per (merged row, head). Two kernels: a plan of one row per item (decode,
// cascade suffix) whose group of query heads per KV head is 1, 2, 4 or 8 runs the decode kernel
// (query heads in registers, KV streamed from global memory in 16-byte loads, the CTA's partial
// states merged in shared memory; args.decode_kernel false turns it off); every other plan runs the
// general kernel, which stages KV tiles of kTileTokens tokens in shared memory as fp32 and folds
// them into the online-softmax state of its lanes (hw/cuda/attention_math.h) in the order
// hw/cuda/attention_emulation.h repeats on the host. Dispatch from run-time values to template
// parameters (head_dim 64 / 128; fp32, bf16, fp16 KV) happens here; an unsupported value throws
// std::invalid_argument naming it. LaunchMergeStates merges state b into a (cascade: prefix into
// suffix), one thread per element. Asynchronous on `stream`; launch errors are checked
// (FEATHER_CUDA_CHECK).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hw/cuda/paged_attention_args.h"

namespace feather::hw::cuda {

void LaunchPagedAttention(const PagedAttentionArgs& args, const AttentionGeometry& geometry,
                          cudaStream_t stream);

void LaunchMergeStates(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                       uint32_t rows, uint32_t num_heads, uint32_t head_dim, cudaStream_t stream);

}  // namespace feather::hw::cuda
