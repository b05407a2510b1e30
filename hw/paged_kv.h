// paged_kv.h: the layout of a paged KV cache in host memory, shared by every CPU attention kernel.
//
// One pool holds the K (or the V) of one transformer layer for every physical block:
//   pool[block][kv_head][token_in_block][head_dim]      ("HND" per block, as FlashInfer names it)
// so one (block, kv_head) tile of block_tokens × head_dim elements is contiguous and a decode
// kernel streams it with unit stride. A request is a block table (physical block ids, in token
// order) and a length; requests that share a prefix list the same physical blocks, as in vLLM.
// Elements are fp32 or bf16 (storage only: kernels convert bf16 to fp32 on load and accumulate
// in fp32). Queries and outputs are always fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace feather::hw {

enum class KvDtype : uint8_t { kFp32, kBf16 };

[[nodiscard]] constexpr size_t KvDtypeBytes(KvDtype dtype) {
  return dtype == KvDtype::kFp32 ? 4 : 2;
}

struct PagedKvLayout {
  uint32_t num_blocks = 0;
  uint32_t kv_heads = 0;
  uint32_t block_tokens = 16;
  uint32_t head_dim = 0;
  KvDtype dtype = KvDtype::kFp32;

  // Elements of one (block, kv_head) tile and of one block.
  [[nodiscard]] constexpr size_t TileElems() const { return size_t{block_tokens} * head_dim; }
  [[nodiscard]] constexpr size_t BlockElems() const { return TileElems() * kv_heads; }
  [[nodiscard]] constexpr size_t PoolBytes() const {
    return BlockElems() * num_blocks * KvDtypeBytes(dtype);
  }
  // Element offset of (block, kv_head, token_in_block, 0).
  [[nodiscard]] constexpr size_t Offset(uint32_t block, uint32_t kv_head, uint32_t token) const {
    return size_t{block} * BlockElems() + size_t{kv_head} * TileElems() + size_t{token} * head_dim;
  }
};

// bf16 <-> fp32. bf16 is the upper half of an IEEE fp32; conversion to bf16 rounds to nearest
// even (NaN kept quiet), as PyTorch does.
[[nodiscard]] inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}
[[nodiscard]] inline uint16_t FloatToBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((word >> 16) | 0x0040u);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

// Writes `count` new tokens' K and V (each [count][kv_heads][head_dim] fp32, token-major) into
// the pools at token positions start .. start + count − 1 of the request whose blocks are
// `block_table` (which must already cover them). Converts to the pool's dtype.
void AppendKv(void* k_pool, void* v_pool, const PagedKvLayout& layout,
              const uint32_t* block_table, uint32_t start, uint32_t count, const float* k_new,
              const float* v_new);

}  // namespace feather::hw
