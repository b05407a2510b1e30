// attention_kernels.cu: the paged attention kernel, its split-KV merge and the cascade state merge
// (see attention_kernels.h; the algorithm and its host emulation: attention_math.h,
// attention_emulation.h).
//
// Thread mapping of one CTA (kThreads threads, one work item, one KV head): per KV tile,
//   load     thread i converts elements i, i + kThreads, … of the tile's K and V rows (token-major,
//            head_dim contiguous: consecutive threads read consecutive addresses of one row);
//   score    thread i computes scores (lane, token) i, i + kThreads, … of lanes × kTileTokens;
//   softmax  thread ℓ < lanes runs SoftmaxTileUpdate for lane ℓ;
//   output   thread i updates o elements i, i + kThreads, … of lanes × head_dim.
// Every stage ends in __syncthreads. Each thread's arithmetic is the emulation's, in its order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "hw/cuda/attention_kernels.h"
#include "hw/cuda/attention_math.h"
#include "hw/cuda/cuda_check.h"

namespace feather::hw::cuda {
namespace {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }

template <uint32_t kHeadDim, typename KvT>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(PagedAttentionArgs a) {
  extern __shared__ float smem[];
  const AttentionWorkItem item = a.items[blockIdx.x];
  const uint32_t kv_head = blockIdx.y;
  const uint32_t group = a.num_heads / a.kv_heads;
  const uint32_t lanes = item.num_rows * group;
  float* q_s = smem;                          // [lanes][D]
  float* o_s = q_s + lanes * kHeadDim;        // [lanes][D]
  float* k_s = o_s + lanes * kHeadDim;        // [kTileTokens][D]
  float* v_s = k_s + kTileTokens * kHeadDim;  // [kTileTokens][D]
  float* s_s = v_s + kTileTokens * kHeadDim;  // [lanes][kTileTokens]
  float* m_s = s_s + lanes * kTileTokens;     // [lanes]
  float* d_s = m_s + lanes;                   // [lanes]
  float* f_s = d_s + lanes;                   // [lanes]
  const uint32_t tid = threadIdx.x;

  for (uint32_t e = tid; e < lanes * kHeadDim; e += kThreads) {
    const uint32_t l = e / kHeadDim;
    const uint32_t d = e % kHeadDim;
    const uint32_t row = a.row_list[item.row_begin + l / group];
    const uint32_t head = kv_head * group + l % group;
    q_s[e] = a.q[(size_t{row} * a.num_heads + head) * kHeadDim + d] * a.scale;
    o_s[e] = 0.0F;
  }
  if (tid < lanes) {
    const SoftmaxState empty = EmptySoftmaxState();
    m_s[tid] = empty.m;
    d_s[tid] = empty.d;
  }
  const auto* k_pool = static_cast<const KvT*>(a.k_pool);
  const auto* v_pool = static_cast<const KvT*>(a.v_pool);
  const uint32_t* pages = a.kv_indices + a.kv_indptr[item.entry];
  __syncthreads();

  for (uint32_t t0 = item.kv_begin; t0 < item.kv_end; t0 += kTileTokens) {
    const uint32_t n = item.kv_end - t0 < kTileTokens ? item.kv_end - t0 : kTileTokens;
    for (uint32_t e = tid; e < n * kHeadDim; e += kThreads) {
      const uint32_t tok = e / kHeadDim;
      const uint32_t d = e % kHeadDim;
      const uint32_t t = t0 + tok;
      const size_t at = pages[t / a.page_size] * a.stride_page + kv_head * a.stride_head +
                        size_t{t % a.page_size} * kHeadDim + d;
      k_s[e] = ToFloat(k_pool[at]);
      v_s[e] = ToFloat(v_pool[at]);
    }
    __syncthreads();
    for (uint32_t e = tid; e < lanes * kTileTokens; e += kThreads) {
      const uint32_t l = e / kTileTokens;
      const uint32_t tok = e % kTileTokens;
      const int64_t position =
          item.first_position < 0 ? -1 : int64_t{item.first_position} + l / group;
      float score = NegativeInfinity();
      if (tok < n && (position < 0 || int64_t{t0} + tok <= position)) {
        score = 0.0F;
        const float* q = q_s + l * kHeadDim;
        const float* k = k_s + tok * kHeadDim;
#pragma unroll 8
        for (uint32_t d = 0; d < kHeadDim; ++d) score += q[d] * k[d];
      }
      s_s[e] = score;
    }
    __syncthreads();
    if (tid < lanes) {
      SoftmaxState state{m_s[tid], d_s[tid]};
      f_s[tid] = SoftmaxTileUpdate(state, s_s + tid * kTileTokens, kTileTokens);
      m_s[tid] = state.m;
      d_s[tid] = state.d;
    }
    __syncthreads();
    for (uint32_t e = tid; e < lanes * kHeadDim; e += kThreads) {
      const uint32_t l = e / kHeadDim;
      const uint32_t d = e % kHeadDim;
      float acc = o_s[e] * f_s[l];
      for (uint32_t tok = 0; tok < n; ++tok)
        acc += s_s[l * kTileTokens + tok] * v_s[tok * kHeadDim + d];
      o_s[e] = acc;
    }
    __syncthreads();
  }

  for (uint32_t e = tid; e < lanes * kHeadDim; e += kThreads) {
    const uint32_t l = e / kHeadDim;
    const uint32_t d = e % kHeadDim;
    const uint32_t i = l / group;
    const uint32_t head = kv_head * group + l % group;
    const SoftmaxState state{m_s[l], d_s[l]};
    const float value = o_s[e] * FinalScale(state);
    const bool first = d == 0;
    if (item.slot == kNoSlot) {
      const uint32_t row = a.row_list[item.row_begin + i];
      a.out[(size_t{row} * a.num_heads + head) * kHeadDim + d] = value;
      if (first && a.lse != nullptr) a.lse[size_t{row} * a.num_heads + head] = FinalLse(state);
    } else {
      const size_t slot = item.slot + i;
      a.partial_out[(slot * a.num_heads + head) * kHeadDim + d] = value;
      if (first) a.partial_lse[slot * a.num_heads + head] = FinalLse(state);
    }
  }
}

// One CTA per merged row, thread d of head h (kHeadDim threads, heads in a loop): folds the row's
// partial slots in order, as EmulatePagedAttention does.
template <uint32_t kHeadDim>
__global__ void __launch_bounds__(kHeadDim) MergeSlotsKernel(PagedAttentionArgs a) {
  const uint32_t m = blockIdx.x;
  const uint32_t d = threadIdx.x;
  const uint32_t row = a.merge_rows[m];
  for (uint32_t h = 0; h < a.num_heads; ++h) {
    float lse = NegativeInfinity();
    float acc = 0.0F;
    for (uint32_t j = a.merge_indptr[m]; j < a.merge_indptr[m + 1]; ++j) {
      const size_t slot = a.merge_slots[j];
      const MergeWeights w = StateMergeWeights(lse, a.partial_lse[slot * a.num_heads + h]);
      acc = w.a * acc + w.b * a.partial_out[(slot * a.num_heads + h) * kHeadDim + d];
      lse = w.lse;
    }
    a.out[(size_t{row} * a.num_heads + h) * kHeadDim + d] = acc;
    if (d == 0 && a.lse != nullptr) a.lse[size_t{row} * a.num_heads + h] = lse;
  }
}

__global__ void MergeStatesKernel(float* out_a, float* lse_a, const float* out_b,
                                  const float* lse_b, uint32_t heads_total, uint32_t head_dim) {
  const size_t e = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (e >= size_t{heads_total} * head_dim) return;
  const size_t rh = e / head_dim;
  const MergeWeights w = StateMergeWeights(lse_a[rh], lse_b[rh]);
  out_a[e] = w.a * out_a[e] + w.b * out_b[e];
  // lse_a is updated by MergeLseKernel afterwards: every thread of the head reads lse_a[rh]
  // here, so none of them may write it.
}

__global__ void MergeLseKernel(float* lse_a, const float* lse_b, uint32_t heads_total) {
  const size_t rh = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (rh >= heads_total) return;
  lse_a[rh] = StateMergeWeights(lse_a[rh], lse_b[rh]).lse;
}

template <uint32_t kHeadDim, typename KvT>
void Launch(const PagedAttentionArgs& a, const AttentionGeometry& g, cudaStream_t stream) {
  if (a.num_items > 0) {
    const dim3 grid(a.num_items, a.kv_heads);
    PagedAttentionKernel<kHeadDim, KvT><<<grid, kThreads, g.shared_bytes, stream>>>(a);
    FEATHER_CUDA_CHECK(cudaGetLastError());
  }
  if (a.num_merge_rows > 0) {
    MergeSlotsKernel<kHeadDim><<<a.num_merge_rows, kHeadDim, 0, stream>>>(a);
    FEATHER_CUDA_CHECK(cudaGetLastError());
  }
}

template <uint32_t kHeadDim>
void LaunchDtype(const PagedAttentionArgs& a, const AttentionGeometry& g, cudaStream_t stream) {
  switch (a.dtype) {
    case KvElement::kFp32:
      return Launch<kHeadDim, float>(a, g, stream);
    case KvElement::kBf16:
      return Launch<kHeadDim, __nv_bfloat16>(a, g, stream);
    case KvElement::kFp16:
      return Launch<kHeadDim, __half>(a, g, stream);
  }
  throw std::invalid_argument("paged attention: unknown KV dtype " +
                              std::to_string(static_cast<int>(a.dtype)));
}

}  // namespace

void LaunchPagedAttention(const PagedAttentionArgs& args, const AttentionGeometry& geometry,
                          cudaStream_t stream) {
  if (geometry.unsupported != nullptr) {
    throw std::invalid_argument(std::string("paged attention: ") + geometry.unsupported);
  }
  if (geometry.shared_bytes > kMaxSharedBytes) {
    throw std::invalid_argument("paged attention: " + std::to_string(geometry.shared_bytes) +
                                " bytes of shared memory per CTA, over " +
                                std::to_string(kMaxSharedBytes));
  }
  switch (args.head_dim) {
    case 64:
      return LaunchDtype<64>(args, geometry, stream);
    case 128:
      return LaunchDtype<128>(args, geometry, stream);
    default:
      throw std::invalid_argument("paged attention: head_dim " + std::to_string(args.head_dim) +
                                  " unsupported (64 or 128)");
  }
}

void LaunchMergeStates(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                       uint32_t rows, uint32_t num_heads, uint32_t head_dim, cudaStream_t stream) {
  const uint32_t heads_total = rows * num_heads;
  if (heads_total == 0) return;
  constexpr uint32_t kBlock = 256;
  const size_t elems = size_t{heads_total} * head_dim;
  MergeStatesKernel<<<static_cast<unsigned>((elems + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      out_a, lse_a, out_b, lse_b, heads_total, head_dim);
  FEATHER_CUDA_CHECK(cudaGetLastError());
  MergeLseKernel<<<(heads_total + kBlock - 1) / kBlock, kBlock, 0, stream>>>(lse_a, lse_b,
                                                                             heads_total);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace feather::hw::cuda
