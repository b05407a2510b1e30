// paged_attention_args.h: the raw-pointer parameters of one paged attention call on the GPU (or
// of its host emulation, hw/cuda/attention_emulation.h), FlashInfer's params struct: the query,
// output and partial-state buffers, the KV pools and their strides, the CSR page table and the
// plan's arrays (hw/cuda/attention_plan.h). On the device every pointer is a device pointer.
//
// KV elements are fp32, bf16 or fp16 (storage; the kernel converts to fp32 in shared memory);
// queries, outputs and states are fp32, as on the CPU (hw/paged_kv.h). Pools are HND per page:
// element (page, kv_head, token, d) at page·stride_page + kv_head·stride_head + token·head_dim + d.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hw/cuda/attention_plan.h"

namespace feather::hw::cuda {

enum class KvElement : uint8_t { kFp32, kBf16, kFp16 };

[[nodiscard]] constexpr size_t KvElementBytes(KvElement e) { return e == KvElement::kFp32 ? 4 : 2; }
[[nodiscard]] constexpr const char* KvElementName(KvElement e) {
  return e == KvElement::kFp32 ? "fp32" : e == KvElement::kBf16 ? "bf16" : "fp16";
}

struct PagedAttentionArgs {
  const float* q = nullptr;  // [rows][num_heads][head_dim]
  float* out = nullptr;      // [rows][num_heads][head_dim]
  float* lse = nullptr;      // [rows][num_heads] or null
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  KvElement dtype = KvElement::kBf16;
  size_t stride_page = 0;  // elements
  size_t stride_head = 0;  // elements
  uint32_t page_size = 16;
  uint32_t head_dim = 0;
  uint32_t num_heads = 0;
  uint32_t kv_heads = 0;
  const uint32_t* kv_indptr = nullptr;
  const uint32_t* kv_indices = nullptr;
  float scale = 0;
  // A plan of one row per item (decode, cascade suffix) runs the decode kernel when its query
  // heads per KV head are 1, 2, 4 or 8 (attention_kernels.cu); false: always the general kernel.
  bool decode_kernel = true;
  float* partial_out = nullptr;  // [plan.num_slots][num_heads][head_dim]
  float* partial_lse = nullptr;  // [plan.num_slots][num_heads]

  // The plan's arrays (host or device copies of AttentionPlan's vectors).
  const AttentionWorkItem* items = nullptr;
  uint32_t num_items = 0;
  const uint32_t* row_list = nullptr;
  const uint32_t* merge_rows = nullptr;
  const uint32_t* merge_indptr = nullptr;
  const uint32_t* merge_slots = nullptr;
  uint32_t num_merge_rows = 0;
};

}  // namespace feather::hw::cuda
