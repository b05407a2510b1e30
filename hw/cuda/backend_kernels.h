// backend_kernels.h: the elementwise and row kernels of the CUDA backend (hw/cuda/cuda_backend.h)
// — weight fill, embedding, RMSNorm, RoPE + QKV split, residual add, SiLU·up, KV append, sampled
// row gather, argmax — each the GPU twin of a loop of hw/cpu_backend.cc with the same arithmetic
// (same weight rule, same RoPE angles computed in double, same eps). Raw device pointers and
// sizes; asynchronous on `stream`; launch errors checked. CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "hw/cuda/paged_attention_args.h"

namespace feather::hw::cuda {

// p[i] = UniformWeight(key, i, bound) (hw/weight_init.h).
void LaunchFillWeights(float* p, size_t n, uint64_t key, float bound, cudaStream_t stream);
void LaunchFillConstant(float* p, size_t n, float value, cudaStream_t stream);
// out[i] = in[i] rounded to the nearest bf16 (ties to even), as raw bf16 bits.
void LaunchToBf16(const float* in, uint16_t* out, size_t n, cudaStream_t stream);

// x[r] = embedding row of TokenOf(request[r], position[r], vocab); tied: column of lm_head
// [hidden][vocab].
void LaunchEmbed(float* x, const uint32_t* row_request, const uint32_t* row_position, uint32_t rows,
                 const float* embedding, const float* lm_head, uint32_t hidden, uint32_t vocab,
                 bool tied, cudaStream_t stream);

// out[r] = in[r] / sqrt(mean(in[r]²) + eps) · w, rows of `width`.
void LaunchRmsNorm(const float* in, const float* w, float* out, uint32_t rows, uint32_t width,
                   float eps, cudaStream_t stream);

// qkv rows [q | k | v] → q, k_new, v_new, rotating q and k heads (rotate-half, θ = theta).
void LaunchRopeSplit(const float* qkv, float* q, float* k_new, float* v_new,
                     const uint32_t* row_position, uint32_t rows, uint32_t heads, uint32_t kv_heads,
                     uint32_t head_dim, double theta, cudaStream_t stream);

void LaunchAdd(float* x, const float* y, size_t n, cudaStream_t stream);

// act[r][j] = g / (1 + e^−g) · up, g = gate_up[r][j], up = gate_up[r][inter + j].
void LaunchSiluMul(const float* gate_up, float* act, uint32_t rows, uint32_t inter,
                   cudaStream_t stream);

// Writes rows [row_begin, row_end) of k_new / v_new ([rows][kv_heads·head_dim]) into the pools
// at their position (row_position) through their entry's pages (row_entry, kv CSR).
void LaunchAppendKv(const float* k_new, const float* v_new, uint32_t row_begin, uint32_t row_end,
                    const uint32_t* row_entry, const uint32_t* row_position,
                    const uint32_t* kv_indptr, const uint32_t* kv_indices, void* k_pool,
                    void* v_pool, KvElement dtype, size_t stride_page, size_t stride_head,
                    uint32_t page_size, uint32_t kv_heads, uint32_t head_dim, cudaStream_t stream);

// sampled[i] = x[sampled_row[i]], rows of hidden.
void LaunchGather(float* sampled, const float* x, const uint32_t* sampled_row, uint32_t requests,
                  uint32_t hidden, cudaStream_t stream);

// out[i] = the first index of the largest value of logits row i (std::max_element's choice).
void LaunchArgmax(const float* logits, uint32_t* out, uint32_t requests, uint32_t vocab,
                  cudaStream_t stream);

}  // namespace feather::hw::cuda
