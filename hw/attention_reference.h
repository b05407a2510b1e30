// attention_reference.h: naive double-precision references of the CPU attention kernels, for the
// differential tests (kept in the library so any tool can verify a kernel run before timing it).
//
// Each takes the kernel's own parameter struct and writes its outputs (out, and lse where the
// kernel has one) as floats rounded from double arithmetic: softmax over the scores computed in
// double from the pool's stored values (bf16 widened exactly). Single-threaded, O(tokens ·
// head_dim) per query head, no tiling, no online softmax: slow by design and easy to trust.
#pragma once

#include "hw/cascade_attention.h"
#include "hw/decode_attention.h"
#include "hw/prefill_attention.h"

namespace feather::hw {

// Decode over [kv_begin (or 0), kv_end) of each request; empty range: out = 0, lse = −inf.
void ReferenceDecodeAttention(const DecodeAttentionParams& params);

// One group's queries over the shared prefix (writes the rows q_rows names).
void ReferenceSharedPrefixAttention(const SharedPrefixParams& params);

// Causal chunked prefill: token i of request r sees positions ≤ context[r] + i.
void ReferencePrefillAttention(const PrefillAttentionParams& params);

}  // namespace feather::hw
