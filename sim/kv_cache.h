// kv_cache.h: the engine-side paged KV cache with vLLM v1 automatic prefix caching.
//
// A pool of `num_blocks` physical blocks of `block_tokens` tokens. Each running request owns a
// block table (physical block ids, in token order). Prefix caching follows vLLM v1's
// KVCacheManager / BlockPool:
//   - a full block of prompt tokens is identified by its parent-chained hash (the caller passes
//     the prompt's chain, BlockHashTable::ComputeChain); once its tokens are computed the block is
//     registered under that hash;
//   - a new request first looks up its chain: the leading blocks already registered are shared
//     (reference count +1) instead of recomputed; the hit is capped so that at least one prompt
//     token is computed (vLLM recomputes the last token to get logits);
//   - a block whose reference count drops to 0 goes to the tail of the free queue but keeps its
//     hash (it is still a cache hit until reused); a request's blocks are freed last block first,
//     so deep blocks are evicted before shallow ones;
//   - a new block is taken from the head of the free queue; if it still carried a hash, that
//     cache entry is evicted (counted in evictions()).
// Reference counts also give vLLM's batch-wide common prefix: the leading blocks of any running
// request whose reference count equals the number of running requests.
//
// Complexity: Lookup O(hit blocks); Allocate O(new blocks + hit blocks); Free O(blocks of the
// request); CommonPrefixBlocks O(common blocks). No allocation at steady state once the pool and
// the per-request tables have grown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cht/types.h"

namespace feather {

struct KvCacheConfig {
  uint32_t block_tokens = 16;
  uint64_t num_blocks = 0;
  bool prefix_caching = true;
};

class KvCache {
 public:
  explicit KvCache(const KvCacheConfig& config);

  [[nodiscard]] const KvCacheConfig& config() const { return config_; }

  // Leading prompt tokens that are cache hits for a request with this chain and prompt length
  // (a multiple of block_tokens, at most prompt_tokens - 1). Does not change state.
  [[nodiscard]] uint32_t LookupCachedTokens(std::span<const PrefixHash> chain,
                                            uint32_t prompt_tokens) const;

  // Makes request `id` hold enough blocks for `total_tokens` tokens. On the request's first
  // call, its leading cached blocks (as LookupCachedTokens with `chain` and `prompt_tokens`)
  // are shared first. Returns false, changing nothing, when the free queue cannot supply the
  // new blocks. `chain` must stay the same across calls for one request.
  [[nodiscard]] bool Allocate(RequestId id, std::span<const PrefixHash> chain,
                              uint32_t prompt_tokens, uint32_t total_tokens);
  // Tokens the request's first Allocate found cached (0 before it).
  [[nodiscard]] uint32_t CachedTokens(RequestId id) const;
  // Registers the request's full prompt blocks among its first `computed_tokens` tokens under
  // their chain hashes (call as prefill progresses).
  void MarkComputed(RequestId id, std::span<const PrefixHash> chain, uint32_t computed_tokens);
  // Releases every block of the request (finish, or preemption by recompute).
  void Free(RequestId id);

  [[nodiscard]] std::span<const uint32_t> BlockTable(RequestId id) const;
  [[nodiscard]] uint32_t RefCount(uint32_t block) const;
  // Leading blocks of `id`'s table shared by all `running_requests` holders (vLLM's
  // num_common_prefix_blocks; 0 if `id` holds no blocks).
  [[nodiscard]] uint32_t CommonPrefixBlocks(RequestId id, uint32_t running_requests) const;

  [[nodiscard]] uint64_t num_blocks() const { return config_.num_blocks; }
  [[nodiscard]] uint64_t NumUsedBlocks() const;   // reference count > 0
  [[nodiscard]] uint64_t NumFreeBlocks() const;   // in the free queue (cached or empty)
  [[nodiscard]] uint64_t NumCachedBlocks() const; // registered under a hash
  [[nodiscard]] uint64_t evictions() const;       // cached blocks reused for new content
  [[nodiscard]] size_t MemoryBytes() const;
  // Exhaustive consistency check, O(blocks + requests); aborts on a violation.
  void CheckInvariants() const;

 private:
  KvCacheConfig config_;
  // Implementation state: flat arrays indexed by block and by request id, an open-addressing
  // hash -> block index, an intrusive doubly linked free queue.
  struct Impl;
  struct ImplDeleter {
    void operator()(Impl* impl) const;
  };
  std::unique_ptr<Impl, ImplDeleter> impl_;
};

}  // namespace feather
