// decode_prefetch_tuning.cc: the lookahead measurement of decode_prefetch_tuning.h.
#include "hw/decode_prefetch_tuning.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>

#include "base/rng.h"
#include "hw/aligned_memory.h"
#include "hw/attention_internal.h"

namespace feather::hw {
namespace {

using Clock = std::chrono::steady_clock;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Pool = std::unique_ptr<char, FreeDeleter>;

constexpr uint32_t kTokensPerRequest = 1024;
constexpr uint32_t kCandidateTiles[] = {1, 2, 4, 8};

// Restores the process's lookahead when the tuning returns or throws.
class SavedPrefetch {
 public:
  SavedPrefetch() : bytes_(DecodePrefetchBytes()) {}
  ~SavedPrefetch() { SetDecodePrefetchBytes(bytes_); }
  SavedPrefetch(const SavedPrefetch&) = delete;
  SavedPrefetch& operator=(const SavedPrefetch&) = delete;

 private:
  size_t bytes_;
};

}  // namespace

DecodePrefetchTuneOptions DecodePrefetchTuneOptions::Quick() {
  DecodePrefetchTuneOptions options;
  options.pool_bytes = size_t{16} << 20;
  options.rounds = 2;
  return options;
}

DecodePrefetchTuning TuneDecodePrefetch(const DecodePrefetchTuneOptions& options) {
  if (options.kv_heads == 0 || options.heads == 0 || options.heads % options.kv_heads != 0 ||
      options.head_dim == 0 || options.head_dim % 8 != 0 || options.block_tokens == 0) {
    throw std::invalid_argument(
        "decode prefetch tuning: heads must be a positive multiple of kv_heads and head_dim a "
        "positive multiple of 8 (got heads " +
        std::to_string(options.heads) + ", kv_heads " + std::to_string(options.kv_heads) +
        ", head_dim " + std::to_string(options.head_dim) + ", block_tokens " +
        std::to_string(options.block_tokens) + ")");
  }
  PagedKvLayout layout{0, options.kv_heads, options.block_tokens, options.head_dim, options.dtype};
  const size_t block_bytes = layout.BlockElems() * KvDtypeBytes(options.dtype);
  const uint32_t blocks_per_request =
      (kTokensPerRequest + options.block_tokens - 1) / options.block_tokens;
  const size_t requests = options.pool_bytes / 2 / (block_bytes * blocks_per_request);
  if (requests == 0) {
    throw std::invalid_argument("decode prefetch tuning: a pool of " +
                                std::to_string(options.pool_bytes) + " bytes holds no request of " +
                                std::to_string(kTokensPerRequest) + " tokens");
  }
  layout.num_blocks = static_cast<uint32_t>(requests * blocks_per_request);
  const size_t pool_bytes = layout.PoolBytes();
  const size_t elems = pool_bytes / KvDtypeBytes(options.dtype);
  Pool k(static_cast<char*>(AllocateLargeArray(pool_bytes)));
  Pool v(static_cast<char*>(AllocateLargeArray(pool_bytes)));
  FillPseudoRandomKv(k.get(), elems, options.dtype, 1);
  FillPseudoRandomKv(v.get(), elems, options.dtype, 2);

  // Every block once, in a seeded random order: requests own consecutive runs of it.
  std::vector<uint32_t> indices(layout.num_blocks);
  std::iota(indices.begin(), indices.end(), 0u);
  Rng rng(11);
  for (size_t i = indices.size(); i > 1; --i) std::swap(indices[i - 1], indices[rng.Uniform(i)]);
  std::vector<uint32_t> indptr(requests + 1), last_page_len(requests);
  for (size_t r = 0; r <= requests; ++r) indptr[r] = static_cast<uint32_t>(r * blocks_per_request);
  for (size_t r = 0; r < requests; ++r) {
    last_page_len[r] = LastPageLen(kTokensPerRequest, options.block_tokens);
  }
  std::vector<float> q(requests * options.heads * options.head_dim);
  for (float& x : q) x = static_cast<float>(rng.NextDouble() * 2 - 1);
  std::vector<float> out(q.size()), first_out(q.size()), lse(requests * options.heads);

  DecodeAttentionParams params;
  params.q = q.data();
  params.out = out.data();
  params.lse = lse.data();
  params.kv = PagedKvView{.k_data = k.get(),
                          .v_data = v.get(),
                          .layout = layout,
                          .batch_size = static_cast<uint32_t>(requests),
                          .indptr = indptr.data(),
                          .indices = indices.data(),
                          .last_page_len = last_page_len.data()};
  params.num_heads = options.heads;
  params.scale = 1.0f / std::sqrt(static_cast<float>(options.head_dim));
  params.num_threads = options.num_threads > 0 ? options.num_threads : UsableThreads();
  DecodeWorkspace workspace;

  DecodePrefetchTuning tuning;
  // The kernels' tile: at most kTileTokens rows of a page (pages of 64 or 128 tokens are walked in
  // 16-row tiles), so the candidates stay 1-8 tiles ahead whatever the page size.
  const uint32_t tile_tokens = std::min(options.block_tokens, attention_internal::kTileTokens);
  tuning.tile_bytes = size_t{tile_tokens} * options.head_dim * KvDtypeBytes(options.dtype);
  tuning.kv_bytes = 2 * requests * size_t{kTokensPerRequest} * options.kv_heads * options.head_dim *
                    KvDtypeBytes(options.dtype);
  tuning.num_threads = params.num_threads;
  tuning.rounds = std::max(1, options.rounds);
  constexpr size_t kCandidates = std::size(kCandidateTiles);
  std::vector<std::vector<double>> rates(kCandidates);
  const SavedPrefetch saved;
  bool same = true;
  // Warm-up pass (first touch of the workspace, the OpenMP team), then verification: every
  // candidate's output must equal the first one's bit for bit.
  SetDecodePrefetchBytes(kCandidateTiles[0] * tuning.tile_bytes);
  PagedDecodeAttention(params, workspace);
  first_out = out;
  for (int round = 0; round < tuning.rounds; ++round) {
    for (size_t i = 0; i < kCandidates; ++i) {
      const size_t c = (i + static_cast<size_t>(round)) % kCandidates;
      SetDecodePrefetchBytes(kCandidateTiles[c] * tuning.tile_bytes);
      const Clock::time_point start = Clock::now();
      PagedDecodeAttention(params, workspace);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      rates[c].push_back(static_cast<double>(tuning.kv_bytes) / std::max(seconds, 1e-9));
      if (round == 0) {
        same = same && std::memcmp(out.data(), first_out.data(), out.size() * sizeof(float)) == 0;
      }
    }
  }
  double best = -1;
  for (size_t c = 0; c < kCandidates; ++c) {
    DecodePrefetchCandidate candidate;
    candidate.tiles = kCandidateTiles[c];
    candidate.bytes = kCandidateTiles[c] * tuning.tile_bytes;
    candidate.bytes_per_s = SpreadOf(rates[c]);
    if (candidate.bytes_per_s.median > best) {
      best = candidate.bytes_per_s.median;
      tuning.best_bytes = candidate.bytes;
    }
    tuning.candidates.push_back(candidate);
  }
  tuning.verification = same ? Verification::kOk : Verification::kVerifyFailed;
  if (!same) tuning.best_bytes = kDefaultDecodePrefetchBytes;
  return tuning;
}

}  // namespace feather::hw
