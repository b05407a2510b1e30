// decode_prefetch_tuning.h: measuring which prefetch lookahead (decode_attention.h,
// SetDecodePrefetchBytes) reads KV fastest on this machine.
//
// Why a measurement. The tile step prefetches the tiles some bytes ahead of the one it
// computes. How far ahead pays is a property of the memory system and its prefetchers, not of
// the code: on a 2-core Zen 4 VM fp32 decode from DRAM ran 1.2x faster four 4 KiB tiles ahead
// than one, and on a 2-core Zen 5 VM the AVX-512 steps ran 1.08x (fp32) and 1.2x (bf16) faster
// one tile ahead than at the Zen 4 choice (hw/README.md has the sweeps). A constant fits one of
// them. So `feather calibrate --target cpu` runs this first, sets the winner, and records it in
// the profile (measured_on.decode_prefetch_bytes), which the CPU engine then applies: the
// profile's fit and the engine runs it validates measure the same kernels.
//
// Method. One decode batch of the model's KV shape (kv heads, head dim, dtype), 1,024 tokens per
// request, physical blocks in a seeded random order over a pool of `pool_bytes` (≫ the LLC), is
// decoded with each candidate lookahead in turn, `rounds` times, the candidates' order rotating
// each round so that a machine drifting over seconds reaches all of them alike. Candidates are
// whole tiles ahead (1, 2, 4, 8 tiles of min(block_tokens, 16) × head_dim × dtype bytes, the
// kernels' tile: a longer page is walked in 16-row tiles; the kernel rounds
// any setting up to whole tiles, so other values add nothing). The winner is the candidate with
// the highest median rate. Every candidate's output is also compared with the first one's: a
// prefetch changes timing only, so any difference is a kernel bug (verification kVerifyFailed,
// and the default is kept).
//
// Cost (defaults): filling the pool (~0.3 s per 512 MiB) plus rounds × candidates decode passes
// (~20 ms each on a 30 GB/s machine): ~1 s. Quick(): a 16 MiB pool, 2 rounds, < 0.1 s, for
// tests (its figures come from the caches and mean nothing). The setting in force before the
// call is restored on return.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hw/decode_attention.h"
#include "hw/paged_kv.h"
#include "hw/probes.h"

namespace feather::hw {

struct DecodePrefetchTuneOptions {
  uint32_t kv_heads = 4;
  uint32_t heads = 16;  // query heads, a multiple of kv_heads
  uint32_t head_dim = 64;
  KvDtype dtype = KvDtype::kFp32;
  uint32_t block_tokens = 16;
  size_t pool_bytes = size_t{512} << 20;  // K and V together; keep ≫ the last-level cache
  int num_threads = 0;                    // 0: every CPU this process may use
  int rounds = 9;
  [[nodiscard]] static DecodePrefetchTuneOptions Quick();
};

struct DecodePrefetchCandidate {
  size_t bytes = 0;    // the lookahead (whole tiles)
  uint32_t tiles = 0;  // bytes / tile bytes
  Spread bytes_per_s;  // KV bytes read per second over the rounds
};

struct DecodePrefetchTuning {
  size_t best_bytes = kDefaultDecodePrefetchBytes;  // the candidate with the best median
  std::vector<DecodePrefetchCandidate> candidates;
  size_t tile_bytes = 0;
  size_t kv_bytes = 0;  // KV bytes one pass reads
  int num_threads = 0;
  int rounds = 0;
  Verification verification = Verification::kSkipped;
};

// Throws std::invalid_argument for a shape the kernels cannot run (heads not a multiple of
// kv_heads, head_dim not a multiple of 8, a zero field) or a pool smaller than one request.
[[nodiscard]] DecodePrefetchTuning TuneDecodePrefetch(
    const DecodePrefetchTuneOptions& options = {});

}  // namespace feather::hw
