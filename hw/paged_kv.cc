// paged_kv.cc: AppendKv — writes new tokens' K and V into a paged KV cache (paged_kv.h), converting
// to the pool's dtype.
#include "hw/paged_kv.h"

#include <cstdint>
#include <cstring>

#include "base/check.h"

namespace feather::hw {
namespace {

// One token's head_dim values of one kv head into the pool at element `offset`.
void StoreRow(void* pool, KvDtype dtype, size_t offset, const float* row, uint32_t head_dim) {
  if (dtype == KvDtype::kFp32) {
    std::memcpy(static_cast<float*>(pool) + offset, row, head_dim * sizeof(float));
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(pool) + offset;
  for (uint32_t d = 0; d < head_dim; ++d) out[d] = FloatToBf16(row[d]);
}

}  // namespace

void AppendKv(const PagedKvView& kv, uint32_t entry, uint32_t start, uint32_t count,
              const float* k_new, const float* v_new) {
  FEATHER_CHECK(entry < kv.batch_size && uint64_t{start} + count <= kv.SeqLen(entry),
                "AppendKv writes past its entry's pages");
  const PagedKvLayout& layout = kv.layout;
  const uint32_t* block_table = kv.Pages(entry);
  void* k_pool = kv.k_data;
  void* v_pool = kv.v_data;
  const uint32_t dim = layout.head_dim;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t position = start + i;
    const uint32_t block = block_table[position / layout.block_tokens];
    const uint32_t token = position % layout.block_tokens;
    for (uint32_t h = 0; h < layout.kv_heads; ++h) {
      const size_t source = (size_t{i} * layout.kv_heads + h) * dim;
      const size_t offset = layout.Offset(block, h, token);
      StoreRow(k_pool, layout.dtype, offset, k_new + source, dim);
      StoreRow(v_pool, layout.dtype, offset, v_new + source, dim);
    }
  }
}

void FillPseudoRandomKv(void* pool, size_t elems, KvDtype dtype, uint64_t seed) {
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < elems; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const float value =
        static_cast<float>(static_cast<int32_t>(state >> 40) - (1 << 23)) * (1.0f / (1 << 23));
    if (dtype == KvDtype::kFp32) {
      static_cast<float*>(pool)[i] = value;
    } else {
      static_cast<uint16_t*>(pool)[i] = FloatToBf16(value);
    }
  }
}

}  // namespace feather::hw
