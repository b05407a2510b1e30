// attention_reference.cc: the naive double-precision attention references (attention_reference.h).
#include "hw/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hw/paged_kv.h"

namespace feather::hw {
namespace {

double LoadElem(const void* pool, KvDtype dtype, size_t index) {
  if (dtype == KvDtype::kFp32) return static_cast<const float*>(pool)[index];
  return Bf16ToFloat(static_cast<const uint16_t*>(pool)[index]);
}

// The KV of one kv head of one request, and where to write one query head's answer.
struct ReferenceKv {
  const void* k_pool;
  const void* v_pool;
  const PagedKvLayout& layout;
  const uint32_t* block_table;
  uint32_t kv_head;
};

// softmax(scale · q·K[t]) · V[t] over t in [begin, end), in double.
void AttendOne(const ReferenceKv& kv, const float* q, double scale, uint32_t begin, uint32_t end,
               float* out, float* lse) {
  const uint32_t dim = kv.layout.head_dim;
  if (end <= begin) {
    std::fill_n(out, dim, 0.0f);
    if (lse != nullptr) *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  // Reused between calls: a prefill reference calls this once per query row and head.
  thread_local std::vector<double> scores, acc;
  thread_local std::vector<size_t> rows;
  scores.resize(end - begin);
  rows.resize(end - begin);
  double max_score = -std::numeric_limits<double>::infinity();
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t block = kv.block_table[t / kv.layout.block_tokens];
    const size_t row = kv.layout.Offset(block, kv.kv_head, t % kv.layout.block_tokens);
    double dot = 0;
    for (uint32_t d = 0; d < dim; ++d)
      dot += double{q[d]} * LoadElem(kv.k_pool, kv.layout.dtype, row + d);
    rows[t - begin] = row;
    scores[t - begin] = scale * dot;
    max_score = std::max(max_score, scores[t - begin]);
  }
  acc.assign(dim, 0.0);
  double sum = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    const double weight = std::exp(scores[i] - max_score);
    sum += weight;
    for (uint32_t d = 0; d < dim; ++d) {
      acc[d] += weight * LoadElem(kv.v_pool, kv.layout.dtype, rows[i] + d);
    }
  }
  for (uint32_t d = 0; d < dim; ++d) out[d] = static_cast<float>(acc[d] / sum);
  if (lse != nullptr) *lse = static_cast<float>(max_score + std::log(sum));
}

}  // namespace

void ReferenceDecodeAttention(const DecodeAttentionParams& p) {
  const uint32_t dim = p.kv.layout.head_dim;
  const uint32_t group = p.num_heads / p.kv.layout.kv_heads;
  for (uint32_t r = 0; r < p.kv.batch_size; ++r) {
    const uint32_t begin = p.kv_begin == nullptr ? 0 : p.kv_begin[r];
    for (uint32_t h = 0; h < p.num_heads; ++h) {
      const size_t head = size_t{r} * p.num_heads + h;
      const ReferenceKv kv{p.kv.k_data, p.kv.v_data, p.kv.layout, p.kv.Pages(r), h / group};
      AttendOne(kv, p.q + head * dim, p.scale, begin, p.kv.SeqLen(r), p.out + head * dim,
                p.lse == nullptr ? nullptr : p.lse + head);
    }
  }
}

void ReferenceSharedPrefixAttention(const SharedPrefixParams& p) {
  const uint32_t dim = p.kv.layout.head_dim;
  const uint32_t group = p.num_heads / p.kv.layout.kv_heads;
  for (uint32_t i = 0; i < p.num_queries; ++i) {
    const uint32_t row = p.q_rows == nullptr ? i : p.q_rows[i];
    for (uint32_t h = 0; h < p.num_heads; ++h) {
      const size_t head = size_t{row} * p.num_heads + h;
      const ReferenceKv kv{p.kv.k_data, p.kv.v_data, p.kv.layout, p.kv.Pages(0), h / group};
      AttendOne(kv, p.q + head * dim, p.scale, 0, p.kv.SeqLen(0), p.out + head * dim,
                p.lse + head);
    }
  }
}

void ReferencePrefillAttention(const PrefillAttentionParams& p) {
  const uint32_t dim = p.kv.layout.head_dim;
  const uint32_t group = p.num_heads / p.kv.layout.kv_heads;
  for (uint32_t r = 0; r < p.kv.batch_size; ++r) {
    const uint32_t chunk = p.qo_indptr[r + 1] - p.qo_indptr[r];
    const uint32_t context = p.kv.SeqLen(r) - chunk;
    for (uint32_t i = 0; i < chunk; ++i) {
      for (uint32_t h = 0; h < p.num_heads; ++h) {
        const size_t head = (size_t{p.qo_indptr[r]} + i) * p.num_heads + h;
        const ReferenceKv kv{p.kv.k_data, p.kv.v_data, p.kv.layout, p.kv.Pages(r), h / group};
        AttendOne(kv, p.q + head * dim, p.scale, 0, context + i + 1, p.out + head * dim,
                  nullptr);
      }
    }
  }
}

}  // namespace feather::hw
