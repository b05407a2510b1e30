// backend_kernels.cu: the CUDA backend's row kernels (see backend_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "hw/cuda/backend_kernels.h"
#include "hw/cuda/cuda_check.h"
#include "hw/weight_init.h"

namespace feather::hw::cuda {
namespace {

constexpr unsigned kBlock = 256;

unsigned Blocks(size_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

__global__ void FillWeightsKernel(float* p, size_t n, uint64_t key, float bound) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) p[i] = UniformWeight(key, i, bound);
}

__global__ void FillConstantKernel(float* p, size_t n, float value) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

__global__ void ToBf16Kernel(const float* in, __nv_bfloat16* out, size_t n) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void EmbedKernel(float* x, const uint32_t* row_request, const uint32_t* row_position,
                            const float* embedding, const float* lm_head, uint32_t hidden,
                            uint32_t vocab, bool tied) {
  const uint32_t row = blockIdx.x;
  const uint32_t token = TokenOf(row_request[row], row_position[row], vocab);
  float* dst = x + size_t{row} * hidden;
  for (uint32_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    dst[j] = tied ? lm_head[size_t{j} * vocab + token] : embedding[size_t{token} * hidden + j];
  }
}

// One block per row; the sum in the CPU's order would serialise the row, so it is a tree sum
// (results differ from the CPU's in the last bits, within the self-check's model tolerance).
__global__ void RmsNormKernel(const float* in, const float* w, float* out, uint32_t width,
                              float eps) {
  __shared__ float partial[kBlock];
  const float* x = in + size_t{blockIdx.x} * width;
  float* y = out + size_t{blockIdx.x} * width;
  float sum = 0.0F;
  for (uint32_t j = threadIdx.x; j < width; j += blockDim.x) sum += x[j] * x[j];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.0F / sqrtf(partial[0] / static_cast<float>(width) + eps);
  for (uint32_t j = threadIdx.x; j < width; j += blockDim.x) y[j] = x[j] * inv * w[j];
}

__global__ void RopeSplitKernel(const float* qkv, float* q, float* k_new, float* v_new,
                                const uint32_t* row_position, uint32_t heads, uint32_t kv_heads,
                                uint32_t head_dim, double theta) {
  const uint32_t row = blockIdx.x;
  const uint32_t q_width = heads * head_dim;
  const uint32_t kv_width = kv_heads * head_dim;
  const float* in = qkv + size_t{row} * (q_width + 2 * kv_width);
  const uint32_t half = head_dim / 2;
  const double position = row_position[row];
  for (uint32_t e = threadIdx.x; e < (heads + kv_heads) * half; e += blockDim.x) {
    const uint32_t h = e / half;
    const uint32_t i = e % half;
    const double angle = position * pow(theta, -2.0 * i / head_dim);
    const auto c = static_cast<float>(cos(angle));
    const auto s = static_cast<float>(sin(angle));
    const float* src = in + size_t{h} * head_dim;  // q heads, then k heads
    float* dst = h < heads ? q + size_t{row} * q_width + size_t{h} * head_dim
                           : k_new + size_t{row} * kv_width + size_t{h - heads} * head_dim;
    const float a = src[i];
    const float b = src[i + half];
    dst[i] = a * c - b * s;
    dst[i + half] = b * c + a * s;
  }
  for (uint32_t j = threadIdx.x; j < kv_width; j += blockDim.x) {
    v_new[size_t{row} * kv_width + j] = in[q_width + kv_width + j];
  }
}

__global__ void AddKernel(float* x, const float* y, size_t n) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void SiluMulKernel(const float* gate_up, float* act, uint32_t rows, uint32_t inter) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= size_t{rows} * inter) return;
  const size_t r = i / inter;
  const size_t j = i % inter;
  const float g = gate_up[r * 2 * inter + j];
  act[i] = g / (1.0F + expf(-g)) * gate_up[r * 2 * inter + inter + j];
}

__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }

template <typename KvT>
__global__ void AppendKvKernel(const float* k_new, const float* v_new, uint32_t row_begin,
                               const uint32_t* row_entry, const uint32_t* row_position,
                               const uint32_t* kv_indptr, const uint32_t* kv_indices, KvT* k_pool,
                               KvT* v_pool, size_t stride_page, size_t stride_head,
                               uint32_t page_size, uint32_t kv_heads, uint32_t head_dim) {
  const uint32_t row = row_begin + blockIdx.x;
  const uint32_t position = row_position[row];
  const uint32_t page = kv_indices[kv_indptr[row_entry[row]] + position / page_size];
  const uint32_t kv_width = kv_heads * head_dim;
  for (uint32_t e = threadIdx.x; e < kv_width; e += blockDim.x) {
    const uint32_t h = e / head_dim;
    const uint32_t d = e % head_dim;
    const size_t at =
        page * stride_page + h * stride_head + size_t{position % page_size} * head_dim + d;
    Store(k_pool + at, k_new[size_t{row} * kv_width + e]);
    Store(v_pool + at, v_new[size_t{row} * kv_width + e]);
  }
}

__global__ void GatherKernel(float* sampled, const float* x, const uint32_t* sampled_row,
                             uint32_t hidden) {
  const float* src = x + size_t{sampled_row[blockIdx.x]} * hidden;
  float* dst = sampled + size_t{blockIdx.x} * hidden;
  for (uint32_t j = threadIdx.x; j < hidden; j += blockDim.x) dst[j] = src[j];
}

__global__ void ArgmaxKernel(const float* logits, uint32_t* out, uint32_t vocab) {
  __shared__ float best_value[kBlock];
  __shared__ uint32_t best_index[kBlock];
  const float* row = logits + size_t{blockIdx.x} * vocab;
  float value = -HUGE_VALF;
  uint32_t index = 0xffffffffu;
  for (uint32_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    if (row[j] > value || index == 0xffffffffu) {  // the first of equal values in this stride
      value = row[j];
      index = j;
    }
  }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const float v = best_value[threadIdx.x + s];
      const uint32_t i = best_index[threadIdx.x + s];
      if (i != 0xffffffffu && (v > best_value[threadIdx.x] ||
                               (v == best_value[threadIdx.x] && i < best_index[threadIdx.x]))) {
        best_value[threadIdx.x] = v;
        best_index[threadIdx.x] = i;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_index[0];
}

}  // namespace

void LaunchFillWeights(float* p, size_t n, uint64_t key, float bound, cudaStream_t stream) {
  if (n == 0) return;
  FillWeightsKernel<<<Blocks(n), kBlock, 0, stream>>>(p, n, key, bound);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchFillConstant(float* p, size_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  FillConstantKernel<<<Blocks(n), kBlock, 0, stream>>>(p, n, value);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchToBf16(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  ToBf16Kernel<<<Blocks(n), kBlock, 0, stream>>>(in, reinterpret_cast<__nv_bfloat16*>(out), n);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchEmbed(float* x, const uint32_t* row_request, const uint32_t* row_position, uint32_t rows,
                 const float* embedding, const float* lm_head, uint32_t hidden, uint32_t vocab,
                 bool tied, cudaStream_t stream) {
  if (rows == 0) return;
  EmbedKernel<<<rows, kBlock, 0, stream>>>(x, row_request, row_position, embedding, lm_head, hidden,
                                           vocab, tied);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchRmsNorm(const float* in, const float* w, float* out, uint32_t rows, uint32_t width,
                   float eps, cudaStream_t stream) {
  if (rows == 0) return;
  RmsNormKernel<<<rows, kBlock, 0, stream>>>(in, w, out, width, eps);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchRopeSplit(const float* qkv, float* q, float* k_new, float* v_new,
                     const uint32_t* row_position, uint32_t rows, uint32_t heads, uint32_t kv_heads,
                     uint32_t head_dim, double theta, cudaStream_t stream) {
  if (rows == 0) return;
  RopeSplitKernel<<<rows, kBlock, 0, stream>>>(qkv, q, k_new, v_new, row_position, heads, kv_heads,
                                               head_dim, theta);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchAdd(float* x, const float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  AddKernel<<<Blocks(n), kBlock, 0, stream>>>(x, y, n);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchSiluMul(const float* gate_up, float* act, uint32_t rows, uint32_t inter,
                   cudaStream_t stream) {
  const size_t n = size_t{rows} * inter;
  if (n == 0) return;
  SiluMulKernel<<<Blocks(n), kBlock, 0, stream>>>(gate_up, act, rows, inter);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchAppendKv(const float* k_new, const float* v_new, uint32_t row_begin, uint32_t row_end,
                    const uint32_t* row_entry, const uint32_t* row_position,
                    const uint32_t* kv_indptr, const uint32_t* kv_indices, void* k_pool,
                    void* v_pool, KvElement dtype, size_t stride_page, size_t stride_head,
                    uint32_t page_size, uint32_t kv_heads, uint32_t head_dim, cudaStream_t stream) {
  if (row_end <= row_begin) return;
  const unsigned grid = row_end - row_begin;
  switch (dtype) {
    case KvElement::kFp32:
      AppendKvKernel<<<grid, kBlock, 0, stream>>>(
          k_new, v_new, row_begin, row_entry, row_position, kv_indptr, kv_indices,
          static_cast<float*>(k_pool), static_cast<float*>(v_pool), stride_page, stride_head,
          page_size, kv_heads, head_dim);
      break;
    case KvElement::kBf16:
      AppendKvKernel<<<grid, kBlock, 0, stream>>>(
          k_new, v_new, row_begin, row_entry, row_position, kv_indptr, kv_indices,
          static_cast<__nv_bfloat16*>(k_pool), static_cast<__nv_bfloat16*>(v_pool), stride_page,
          stride_head, page_size, kv_heads, head_dim);
      break;
    case KvElement::kFp16:
      AppendKvKernel<<<grid, kBlock, 0, stream>>>(
          k_new, v_new, row_begin, row_entry, row_position, kv_indptr, kv_indices,
          static_cast<__half*>(k_pool), static_cast<__half*>(v_pool), stride_page, stride_head,
          page_size, kv_heads, head_dim);
      break;
  }
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchGather(float* sampled, const float* x, const uint32_t* sampled_row, uint32_t requests,
                  uint32_t hidden, cudaStream_t stream) {
  if (requests == 0) return;
  GatherKernel<<<requests, kBlock, 0, stream>>>(sampled, x, sampled_row, hidden);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

void LaunchArgmax(const float* logits, uint32_t* out, uint32_t requests, uint32_t vocab,
                  cudaStream_t stream) {
  if (requests == 0) return;
  ArgmaxKernel<<<requests, kBlock, 0, stream>>>(logits, out, vocab);
  FEATHER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace feather::hw::cuda
