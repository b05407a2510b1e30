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

#include <cstdint>
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

// --- The decode kernel: one query row per work item (decode, cascade suffix) ---------------------
//
// The general kernel above stages every KV tile in shared memory as fp32 and reads it back per
// score and per output element; on an H100 that ran at 96 % of the L1/shared-memory pipe and
// moved Llama-3-8B's decode KV at 16 % of the copy probe's bandwidth (results/cuda-h100/). Decode
// has one query row per item, so its query heads fit in registers and the KV can stream straight
// from global memory:
//
//   a sub-group of kTpt threads holds one token's K and V row, each thread kVec contiguous
//   elements (one 16-byte load each); the warp covers 32 / kTpt tokens at a time and the CTA's
//   four warps interleave over the item's range;
//   per token, each thread's partial dot products for the kGroup query heads are summed over the
//   sub-group with shuffles, and every thread folds the score into its own running (m, d) and
//   its kVec elements of o (the online update of attention_math.h with one score per tile);
//   at the end the CTA's parts (warps × sub-groups) are merged through shared memory with the
//   state-merge rule and written exactly as the general kernel writes them.
//
// Arithmetic differs from the emulation only in the order of the sums (the self-check compares
// both kernels against the double-precision reference). kGroup (query heads per KV head) is a
// template parameter so that q and o stay in registers: 1, 2, 4 or 8; other groups take the
// general kernel.

template <typename KvT>
struct KvVector;
template <>
struct KvVector<float> {
  static constexpr uint32_t kVec = 4;
  __device__ static void Load(const float* p, float (&x)[kVec]) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x;
    x[1] = v.y;
    x[2] = v.z;
    x[3] = v.w;
  }
};
template <>
struct KvVector<__nv_bfloat16> {
  static constexpr uint32_t kVec = 8;
  __device__ static void Load(const __nv_bfloat16* p, float (&x)[kVec]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (uint32_t i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  }
};
template <>
struct KvVector<__half> {
  static constexpr uint32_t kVec = 8;
  __device__ static void Load(const __half* p, float (&x)[kVec]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const auto* pairs = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (uint32_t i = 0; i < 4; ++i) {
      const float2 f = __half22float2(pairs[i]);
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  }
};

template <uint32_t kHeadDim, typename KvT>
struct DecodeShape {
  static constexpr uint32_t kVec = KvVector<KvT>::kVec;
  static constexpr uint32_t kTpt = kHeadDim / kVec;  // threads per token
  static constexpr uint32_t kTokensPerWarp = 32 / kTpt;
  static constexpr uint32_t kWarps = kThreads / 32;
  static constexpr uint32_t kParts = kWarps * kTokensPerWarp;  // tokens in flight per CTA
  static_assert(kTpt >= 1 && kTpt <= 32 && 32 % kTpt == 0, "a token's row within one warp");
};

template <uint32_t kHeadDim, typename KvT, uint32_t kGroup>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(PagedAttentionArgs a) {
  using Shape = DecodeShape<kHeadDim, KvT>;
  constexpr uint32_t kVec = Shape::kVec;
  constexpr uint32_t kTpt = Shape::kTpt;
  constexpr uint32_t kParts = Shape::kParts;
  extern __shared__ float smem[];
  float* part_o = smem;                                 // [kParts][kGroup][kHeadDim]
  float* part_m = part_o + kParts * kGroup * kHeadDim;  // [kParts][kGroup]
  float* part_d = part_m + kParts * kGroup;             // [kParts][kGroup]

  const AttentionWorkItem item = a.items[blockIdx.x];
  if (item.num_rows == 0) return;
  const uint32_t kv_head = blockIdx.y;
  const uint32_t tid = threadIdx.x;
  const uint32_t sub = tid % kTpt;   // which kVec slice of the row
  const uint32_t part = tid / kTpt;  // which token of the CTA's kParts in flight
  const uint32_t d0 = sub * kVec;
  const uint32_t row = a.row_list[item.row_begin];

  float q[kGroup][kVec];
  float o[kGroup][kVec];
  float m[kGroup];
  float d[kGroup];
#pragma unroll
  for (uint32_t h = 0; h < kGroup; ++h) {
    const float* qh = a.q + (size_t{row} * a.num_heads + kv_head * kGroup + h) * kHeadDim + d0;
#pragma unroll
    for (uint32_t j = 0; j < kVec; ++j) {
      q[h][j] = qh[j] * a.scale;
      o[h][j] = 0.0F;
    }
    m[h] = NegativeInfinity();
    d[h] = 0.0F;
  }
  const auto* k_pool = static_cast<const KvT*>(a.k_pool);
  const auto* v_pool = static_cast<const KvT*>(a.v_pool);
  const uint32_t* pages = a.kv_indices + a.kv_indptr[item.entry];
  const int64_t position = item.first_position;  // the row's position; < 0: no mask
  auto address = [&](uint32_t t) {
    return pages[t / a.page_size] * a.stride_page + kv_head * a.stride_head +
           size_t{t % a.page_size} * kHeadDim + d0;
  };

  // Software pipelining: the next token's K and V are loaded before this one's are used.
  // A thread past the range keeps zeros: its sub-group's score is computed but never used.
  float k_cur[kVec] = {}, v_cur[kVec] = {}, k_next[kVec] = {}, v_next[kVec] = {};
  uint32_t t = item.kv_begin + part;
  if (t < item.kv_end) {
    const size_t at = address(t);
    KvVector<KvT>::Load(k_pool + at, k_cur);
    KvVector<KvT>::Load(v_pool + at, v_cur);
  }
  // The loop's trip count is the same for every thread of a warp (the shuffles need all 32).
  for (uint32_t base = item.kv_begin; base < item.kv_end; base += kParts) {
    const uint32_t next = t + kParts;
    if (next < item.kv_end) {
      const size_t at = address(next);
      KvVector<KvT>::Load(k_pool + at, k_next);
      KvVector<KvT>::Load(v_pool + at, v_next);
    }
    const bool visible = t < item.kv_end && (position < 0 || int64_t{t} <= position);
#pragma unroll
    for (uint32_t h = 0; h < kGroup; ++h) {
      float s = 0.0F;
#pragma unroll
      for (uint32_t j = 0; j < kVec; ++j) s += q[h][j] * k_cur[j];
#pragma unroll
      for (uint32_t offset = kTpt / 2; offset > 0; offset /= 2) {
        s += __shfl_xor_sync(0xffffffffU, s, offset);
      }
      if (visible) {
        const float m_new = fmaxf(m[h], s);
        const float factor = expf(m[h] - m_new);  // 0 while m is −inf
        const float p = expf(s - m_new);
        d[h] = d[h] * factor + p;
#pragma unroll
        for (uint32_t j = 0; j < kVec; ++j) o[h][j] = o[h][j] * factor + p * v_cur[j];
        m[h] = m_new;
      }
    }
    t = next;
#pragma unroll
    for (uint32_t j = 0; j < kVec; ++j) {
      k_cur[j] = k_next[j];
      v_cur[j] = v_next[j];
    }
  }

#pragma unroll
  for (uint32_t h = 0; h < kGroup; ++h) {
#pragma unroll
    for (uint32_t j = 0; j < kVec; ++j) part_o[(part * kGroup + h) * kHeadDim + d0 + j] = o[h][j];
    if (sub == 0) {
      part_m[part * kGroup + h] = m[h];
      part_d[part * kGroup + h] = d[h];
    }
  }
  __syncthreads();

  // Merge the parts: out = Σ_p e^(m_p − M)·o_p / Σ_p e^(m_p − M)·d_p, lse = M + log of the
  // denominator; a part that saw nothing has m = −inf and d = 0 and adds nothing.
  for (uint32_t e = tid; e < kGroup * kHeadDim; e += kThreads) {
    const uint32_t h = e / kHeadDim;
    const uint32_t dim = e % kHeadDim;
    float big = NegativeInfinity();
    for (uint32_t p = 0; p < kParts; ++p) big = fmaxf(big, part_m[p * kGroup + h]);
    float numerator = 0.0F;
    float denominator = 0.0F;
    if (big != NegativeInfinity()) {
      for (uint32_t p = 0; p < kParts; ++p) {
        const float w = expf(part_m[p * kGroup + h] - big);
        numerator += w * part_o[(p * kGroup + h) * kHeadDim + dim];
        denominator += w * part_d[p * kGroup + h];
      }
    }
    const SoftmaxState state{big, denominator};
    const float value = numerator * FinalScale(state);
    const uint32_t head = kv_head * kGroup + h;
    if (item.slot == kNoSlot) {
      a.out[(size_t{row} * a.num_heads + head) * kHeadDim + dim] = value;
      if (dim == 0 && a.lse != nullptr) a.lse[size_t{row} * a.num_heads + head] = FinalLse(state);
    } else {
      a.partial_out[(size_t{item.slot} * a.num_heads + head) * kHeadDim + dim] = value;
      if (dim == 0) a.partial_lse[size_t{item.slot} * a.num_heads + head] = FinalLse(state);
    }
  }
}

template <uint32_t kHeadDim, typename KvT, uint32_t kGroup>
void LaunchDecode(const PagedAttentionArgs& a, cudaStream_t stream) {
  using Shape = DecodeShape<kHeadDim, KvT>;
  constexpr uint32_t kShared =
      static_cast<uint32_t>(sizeof(float)) * Shape::kParts * kGroup * (kHeadDim + 2);
  static_assert(kShared <= kMaxSharedBytes, "decode parts fit the default shared memory");
  const dim3 grid(a.num_items, a.kv_heads);
  DecodeAttentionKernel<kHeadDim, KvT, kGroup><<<grid, kThreads, kShared, stream>>>(a);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

// The decode kernel when the plan has one row per item and the group is one it is built for;
// false: the general kernel runs (also when args.decode_kernel is false: the self-check runs
// both, FEATHER_CUDA_ATTENTION=general forces the general one for side-by-side timing).
template <uint32_t kHeadDim, typename KvT>
bool TryLaunchDecode(const PagedAttentionArgs& a, const AttentionGeometry& g, cudaStream_t stream) {
  if (g.rows_per_item != 1 || !a.decode_kernel) return false;
  // Its 16-byte loads need 16-byte aligned rows: pools from cudaMalloc with whole-row strides.
  const size_t elem = sizeof(KvT);
  const auto pools = reinterpret_cast<uintptr_t>(a.k_pool) | reinterpret_cast<uintptr_t>(a.v_pool);
  if (pools % 16 != 0 || a.stride_page * elem % 16 != 0 || a.stride_head * elem % 16 != 0) {
    return false;
  }
  switch (a.num_heads / a.kv_heads) {
    case 1:
      LaunchDecode<kHeadDim, KvT, 1>(a, stream);
      return true;
    case 2:
      LaunchDecode<kHeadDim, KvT, 2>(a, stream);
      return true;
    case 4:
      LaunchDecode<kHeadDim, KvT, 4>(a, stream);
      return true;
    case 8:
      LaunchDecode<kHeadDim, KvT, 8>(a, stream);
      return true;
    default:
      return false;
  }
}

// One CTA per (merged row, head), thread d of the head (kHeadDim threads): folds the row's partial
// slots in order, as EmulatePagedAttention does. Heads were once a loop inside one CTA per row:
// at batch 1 that made one SM walk heads × slots (32 × 33 for Llama-3-8B) dependent loads per
// layer, the likely cause of the ~300 µs per layer the attention term kept at batch 1 on an
// H100 (results/cuda-h100/; this form has not yet run on a GPU).
template <uint32_t kHeadDim>
__global__ void __launch_bounds__(kHeadDim) MergeSlotsKernel(PagedAttentionArgs a) {
  const uint32_t m = blockIdx.x;
  const uint32_t h = blockIdx.y;
  const uint32_t d = threadIdx.x;
  const uint32_t row = a.merge_rows[m];
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
  if (a.num_items > 0 && !TryLaunchDecode<kHeadDim, KvT>(a, g, stream)) {
    const dim3 grid(a.num_items, a.kv_heads);
    PagedAttentionKernel<kHeadDim, KvT><<<grid, kThreads, g.shared_bytes, stream>>>(a);
    FEATHER_CUDA_CHECK(cudaGetLastError());
  }
  if (a.num_merge_rows > 0) {
    const dim3 grid(a.num_merge_rows, a.num_heads);
    MergeSlotsKernel<kHeadDim><<<grid, kHeadDim, 0, stream>>>(a);
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
