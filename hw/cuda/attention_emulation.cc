// attention_emulation.cc: the host run of the kernel's algorithm (see attention_emulation.h).
#include "hw/cuda/attention_emulation.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "hw/cuda/attention_math.h"
#include "hw/cuda/half.h"
#include "hw/paged_kv.h"

namespace feather::hw::cuda {
namespace {

float LoadKv(const void* pool, KvElement dtype, size_t index) {
  switch (dtype) {
    case KvElement::kFp32:
      return static_cast<const float*>(pool)[index];
    case KvElement::kBf16:
      return Bf16ToFloat(static_cast<const uint16_t*>(pool)[index]);
    case KvElement::kFp16:
      return HalfToFloat(static_cast<const uint16_t*>(pool)[index]);
  }
  return 0;
}

void RunItem(const PagedAttentionArgs& a, const AttentionWorkItem& item, uint32_t kv_head) {
  const uint32_t d_len = a.head_dim;
  const uint32_t group = a.num_heads / a.kv_heads;
  const uint32_t lanes = item.num_rows * group;
  std::vector<float> q(size_t{lanes} * d_len), o(size_t{lanes} * d_len, 0.0F);
  std::vector<float> k(size_t{kTileTokens} * d_len), v(size_t{kTileTokens} * d_len);
  std::vector<float> s(size_t{lanes} * kTileTokens);
  std::vector<SoftmaxState> state(lanes, EmptySoftmaxState());
  for (uint32_t l = 0; l < lanes; ++l) {
    const uint32_t row = a.row_list[item.row_begin + l / group];
    const uint32_t head = kv_head * group + l % group;
    const float* src = a.q + (size_t{row} * a.num_heads + head) * d_len;
    for (uint32_t d = 0; d < d_len; ++d) q[size_t{l} * d_len + d] = src[d] * a.scale;
  }
  const uint32_t* pages = a.kv_indices + a.kv_indptr[item.entry];
  for (uint32_t t0 = item.kv_begin; t0 < item.kv_end; t0 += kTileTokens) {
    const uint32_t n = item.kv_end - t0 < kTileTokens ? item.kv_end - t0 : kTileTokens;
    for (uint32_t tok = 0; tok < n; ++tok) {
      const uint32_t t = t0 + tok;
      const size_t base = pages[t / a.page_size] * a.stride_page + kv_head * a.stride_head +
                          size_t{t % a.page_size} * d_len;
      for (uint32_t d = 0; d < d_len; ++d) {
        k[size_t{tok} * d_len + d] = LoadKv(a.k_pool, a.dtype, base + d);
        v[size_t{tok} * d_len + d] = LoadKv(a.v_pool, a.dtype, base + d);
      }
    }
    for (uint32_t l = 0; l < lanes; ++l) {
      const int64_t position =
          item.first_position < 0 ? -1 : int64_t{item.first_position} + l / group;
      for (uint32_t tok = 0; tok < kTileTokens; ++tok) {
        float score = NegativeInfinity();
        if (tok < n && (position < 0 || int64_t{t0} + tok <= position)) {
          score = 0;
          for (uint32_t d = 0; d < d_len; ++d) {
            score += q[size_t{l} * d_len + d] * k[size_t{tok} * d_len + d];
          }
        }
        s[size_t{l} * kTileTokens + tok] = score;
      }
      const float factor = SoftmaxTileUpdate(state[l], &s[size_t{l} * kTileTokens], kTileTokens);
      for (uint32_t d = 0; d < d_len; ++d) {
        float acc = o[size_t{l} * d_len + d] * factor;
        for (uint32_t tok = 0; tok < n; ++tok) {
          acc += s[size_t{l} * kTileTokens + tok] * v[size_t{tok} * d_len + d];
        }
        o[size_t{l} * d_len + d] = acc;
      }
    }
  }
  for (uint32_t l = 0; l < lanes; ++l) {
    const uint32_t i = l / group;
    const uint32_t head = kv_head * group + l % group;
    const float inv = FinalScale(state[l]);
    const float lse = FinalLse(state[l]);
    float* dst;
    if (item.slot == kNoSlot) {
      const uint32_t row = a.row_list[item.row_begin + i];
      dst = a.out + (size_t{row} * a.num_heads + head) * d_len;
      if (a.lse != nullptr) a.lse[size_t{row} * a.num_heads + head] = lse;
    } else {
      const size_t slot = item.slot + i;
      dst = a.partial_out + (slot * a.num_heads + head) * d_len;
      a.partial_lse[slot * a.num_heads + head] = lse;
    }
    for (uint32_t d = 0; d < d_len; ++d) dst[d] = o[size_t{l} * d_len + d] * inv;
  }
}

}  // namespace

void EmulatePagedAttention(const PagedAttentionArgs& a) {
  for (uint32_t it = 0; it < a.num_items; ++it) {
    for (uint32_t g = 0; g < a.kv_heads; ++g) RunItem(a, a.items[it], g);
  }
  const uint32_t d_len = a.head_dim;
  std::vector<float> acc(d_len);
  for (uint32_t m = 0; m < a.num_merge_rows; ++m) {
    const uint32_t row = a.merge_rows[m];
    for (uint32_t h = 0; h < a.num_heads; ++h) {
      float lse = NegativeInfinity();
      std::fill(acc.begin(), acc.end(), 0.0F);
      for (uint32_t j = a.merge_indptr[m]; j < a.merge_indptr[m + 1]; ++j) {
        const size_t slot = a.merge_slots[j];
        const MergeWeights w = StateMergeWeights(lse, a.partial_lse[slot * a.num_heads + h]);
        const float* part = a.partial_out + (slot * a.num_heads + h) * d_len;
        for (uint32_t d = 0; d < d_len; ++d) acc[d] = w.a * acc[d] + w.b * part[d];
        lse = w.lse;
      }
      std::memcpy(a.out + (size_t{row} * a.num_heads + h) * d_len, acc.data(),
                  d_len * sizeof(float));
      if (a.lse != nullptr) a.lse[size_t{row} * a.num_heads + h] = lse;
    }
  }
}

void EmulateMergeStates(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                        uint32_t rows, uint32_t num_heads, uint32_t head_dim) {
  for (size_t rh = 0; rh < size_t{rows} * num_heads; ++rh) {
    const MergeWeights w = StateMergeWeights(lse_a[rh], lse_b[rh]);
    for (uint32_t d = 0; d < head_dim; ++d) {
      out_a[rh * head_dim + d] = w.a * out_a[rh * head_dim + d] + w.b * out_b[rh * head_dim + d];
    }
    lse_a[rh] = w.lse;
  }
}

}  // namespace feather::hw::cuda
