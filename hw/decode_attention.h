// decode_attention.h: paged decode attention on the CPU (one query token per request).
//
// For every request r (entry r of the paged-KV view, hw/paged_kv.h) and query head h (kv head
// g = h / (num_heads / kv_heads), grouped-query attention), over its KV tokens
// [kv_begin[r], kv_end[r]) with kv_end[r] = kv.SeqLen(r):
//   out[r][h] = Σ_t softmax_t(scale · q[r][h]·K[t]) · V[t],   lse[r][h] = log Σ_t exp(scale·q·K[t])
// with an online (streaming) softmax, fp32 accumulation, AVX-512, AVX2+FMA or scalar code (the
// widest the CPU has, picked at run time: attention_internal.h) and `num_threads` OpenMP threads.
// The lse output (natural log) is what cascade attention merges (MergeAttentionStates); an empty
// range gives out = 0 and lse = −inf.
//
// The request's sequence length comes from its CSR pages and last_page_len, as in FlashInfer's
// BatchDecodeWithPagedKVCache; kv_begin (cascade's suffix pass) is the one extra per-request
// array.
//
// Work: each (request, kv head) pair is one task that reads its KV tiles once and serves all
// num_heads / kv_heads query heads of the group from registers, so KV bytes read = Σ_r
// (kv_end − kv_begin) · kv_heads · head_dim · 2 · dtype bytes — the quantity the cost model's
// decode_attention term prices. Long sequences are split into chunks (flash-decoding style) so
// that a small batch still keeps every thread busy; the partial states are merged by LSE.
// Allocation: none per call beyond a per-thread scratch sized on first use (DecodeWorkspace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hw/paged_kv.h"

namespace feather::hw {

struct DecodeAttentionParams {
  const float* q = nullptr;  // [kv.batch_size][num_heads][head_dim]
  float* out = nullptr;      // [kv.batch_size][num_heads][head_dim]
  float* lse = nullptr;      // [kv.batch_size][num_heads]; may be null when not needed
  PagedKvView kv;            // one entry per request; kv_end[r] = kv.SeqLen(r)
  const uint32_t* kv_begin = nullptr;  // per request: first token (cascade's suffix); null = 0
  uint32_t num_heads = 0;  // query heads; a multiple of kv.layout.kv_heads
  float scale = 0;         // usually 1 / sqrt(head_dim)
  int num_threads = 1;
};

// Scratch the kernel reuses across calls (split-KV partial states); one per caller thread.
struct DecodeWorkspace {
  std::vector<float> partial_out;
  std::vector<float> partial_lse;
};

void PagedDecodeAttention(const DecodeAttentionParams& params, DecodeWorkspace& workspace);

// The prefetch lookahead of every tile-step kernel (decode, cascade's passes, prefill): while a
// tile of one (block, kv head) is computed, the step asks for the lines of the tile this many
// bytes of KV ahead in the walk (rounded up to whole tiles, at least the next one) and of the K
// after it. How far ahead pays depends on the machine, not on the code: on a Zen 4 VM fp32
// decode from DRAM read 26.9 GB/s one 4 KiB tile ahead and 33.2 GB/s at 16 KiB, while on a Zen 5
// VM the AVX-512 steps read 0.83 / 0.77 of the DRAM probe (fp32) and 0.76 / 0.63 (bf16) one tile
// ahead against 16 KiB (hw/README.md). So `feather calibrate` measures it
// (TuneDecodePrefetch, hw/probes.h), the profile records the choice
// (measured_on.decode_prefetch_bytes), and the CPU engine applies it. Process-wide (one setting
// for every kernel call that starts after it; relaxed atomic); only the speed changes, never a
// result. 0 restores kDefaultDecodePrefetchBytes.
inline constexpr size_t kDefaultDecodePrefetchBytes = 16384;
void SetDecodePrefetchBytes(size_t bytes);
[[nodiscard]] size_t DecodePrefetchBytes();

}  // namespace feather::hw
