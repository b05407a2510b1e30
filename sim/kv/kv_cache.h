// kv_cache.h: the engine-side paged KV cache with vLLM v1 automatic prefix caching.
//
// A pool of `num_blocks` physical blocks of `block_tokens` tokens. Each running request owns a
// block table (physical block ids, in token order). Prefix caching follows vLLM v1's
// KVCacheManager / BlockPool:
//   - a full block of prompt tokens is identified by its parent-chained hash (the caller passes
//     the prompt's chain, BlockHashTable::ComputeChain, as a ChainView: base/prompt_view.h, the
//     shared head's hashes stored once per distinct prefix, then the request's own); once its
//     tokens are scheduled the block is registered under that hash (vLLM v1 caches full blocks in
//     allocate_slots, so a request scheduled later in the same step already hits them);
//   - a new request first looks up its chain: the leading blocks already registered are shared
//     (reference count +1) instead of recomputed; the hit is capped so that at least one prompt
//     token is computed (vLLM recomputes the last token to get logits);
//   - a block whose reference count drops to 0 goes to the tail of the free queue but keeps its
//     hash (it is still a cache hit until reused); a request's blocks are freed last block first,
//     so deep blocks are evicted before shallow ones; a block that holds no hash (a partial last
//     block) goes to the head instead and is reused first (vLLM >= 0.32);
//   - a new block is taken from the head of the free queue; if it still carried a hash, that
//     cache entry is evicted (counted in evictions()).
// Reference counts also give vLLM's batch-wide common prefix: the leading blocks of any running
// request whose reference count equals the number of running requests.
//
// Complexity: Lookup O(hit blocks); Allocate O(new blocks + hit blocks); CacheBlocks
// O(newly registered blocks); Free O(blocks of the request); CommonPrefixBlocks O(common
// blocks); all with O(1) expected hash probes. No allocation at steady state once the hash
// index, the request array and the recycled per-request tables have grown to their peak.
//
// Block tables and spans returned by BlockTable() stay valid until the next mutating call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/flat_hash_map.h"
#include "base/prompt_view.h"
#include "base/types.h"

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
  [[nodiscard]] uint32_t LookupCachedTokens(ChainView chain, uint32_t prompt_tokens) const;

  // Makes request `id` hold enough blocks for `total_tokens` tokens. On the request's first
  // call, its leading cached blocks (as LookupCachedTokens with `chain` and `prompt_tokens`)
  // are shared first (all of them, even if `total_tokens` needs fewer). Returns false, changing
  // nothing, when the free queue cannot supply the new blocks. `chain` must stay the same across
  // calls for one request (a preempted request's chain may grow: see CacheBlocks).
  // `must_fit_tokens` (first call only; 0 = none) is vLLM's full-sequence admission gate
  // (allocate_slots' full_sequence_must_fit): the call also fails unless the blocks of that many
  // tokens, less the hit, fit in the free queue, although only `total_tokens` are allocated.
  [[nodiscard]] bool Allocate(RequestId id, ChainView chain, uint32_t prompt_tokens,
                              uint32_t total_tokens, uint32_t must_fit_tokens = 0);
  // Tokens the request's first Allocate found cached (0 before it).
  [[nodiscard]] uint32_t CachedTokens(RequestId id) const;
  // vLLM v1's cache_blocks: the request's full blocks among its first `through_tokens` tokens
  // now hold a block hash. Call when those tokens are scheduled, as vLLM's allocate_slots does:
  // the simulator passes the tokens computed by the end of the step being scheduled, so a request
  // admitted later in that step already hits them. Two effects:
  //   - the blocks that `chain` covers are registered under their chain hashes, so later
  //     lookups hit them: the prompt's blocks, and for a preempted request its output blocks too
  //     (the simulator extends its chain over them, as vLLM hashes generated tokens like prompt
  //     ones, so a resumed request hits its own output while those blocks survive);
  //   - every full block counts as hashed for Free, even past the chain (output blocks of a
  //     request that is never preempted: no one can hit them, but vLLM keeps them as cache
  //     entries at the free queue's tail, not at its head).
  // Each block is registered once (a per-request cursor, as vLLM's num_cached_block): a block
  // whose hash another block already holds (two requests computed the same prefix concurrently)
  // stays unregistered, the existing registration wins, so NumCachedBlocks counts distinct
  // hashes. (vLLM's BlockPool does not de-duplicate: it keeps both copies under the hash, hits
  // the older, counts both as cached and their reuse as evictions, and the hash stays a hit while
  // either survives; both copies go to the free queue's tail, as here.) `through_tokens` must not
  // exceed the tokens the request's table covers.
  void CacheBlocks(RequestId id, ChainView chain, uint32_t through_tokens);
  // Releases every block of the request (finish, or preemption by recompute), last block
  // first, as vLLM >= 0.32's BlockPool.free_blocks: blocks that hold a hash (hits and full blocks
  // passed to CacheBlocks; none without prefix caching) go to the free queue's tail, where they
  // stay cache hits longest and the shallow ones are evicted last; the others (a partial last
  // block, blocks allocated ahead of their tokens) go to its head, to be reused first.
  void Free(RequestId id);

  [[nodiscard]] std::span<const uint32_t> BlockTable(RequestId id) const;
  [[nodiscard]] uint32_t RefCount(uint32_t block) const;
  // Leading blocks of `id`'s table shared by all `running_requests` holders (vLLM's
  // num_common_prefix_blocks; 0 if `id` holds no blocks).
  [[nodiscard]] uint32_t CommonPrefixBlocks(RequestId id, uint32_t running_requests) const;

  [[nodiscard]] uint64_t num_blocks() const { return config_.num_blocks; }
  [[nodiscard]] uint64_t NumUsedBlocks() const;    // reference count > 0
  [[nodiscard]] uint64_t NumFreeBlocks() const;    // in the free queue (cached or empty)
  [[nodiscard]] uint64_t NumCachedBlocks() const;  // registered under a hash
  [[nodiscard]] uint64_t evictions() const;        // cached blocks reused for new content
  // Who lost a cache entry (for a selector that tracks what the cache holds, cht_selector.h).
  // Once enabled, a cached block's owner is the request that released it last (Free); the log
  // names a request when one of the blocks it owns is evicted (its deepest goes first), and when
  // it owns none any more because others took them over (hit them, then released them
  // themselves) or never owned one (Free found every block still held), until
  // ClearEvictedOwners. A request may be logged more than once.
  void ReportEvictedOwners() { report_owners_ = true; freed_by_.assign(config_.num_blocks, kNoRequest); }
  [[nodiscard]] std::span<const RequestId> EvictedOwners() const { return evicted_owners_; }
  void ClearEvictedOwners() { evicted_owners_.clear(); }
  [[nodiscard]] size_t MemoryBytes() const;
  // Exhaustive consistency check, O(blocks + requests); aborts on a violation.
  void CheckInvariants() const;

  // Introspection (tests, metrics).
  static constexpr uint32_t kNoBlock = 0xffffffffu;
  // Whether `id` holds a block table (its first Allocate succeeded and it was not freed since).
  [[nodiscard]] bool IsAllocated(RequestId id) const;
  // The block registered under `hash`, or kNoBlock. O(1) expected.
  [[nodiscard]] uint32_t FindCachedBlock(PrefixHash hash) const;
  // Whether `block` is registered under a hash (its hash in *hash when non-null).
  [[nodiscard]] bool IsRegistered(uint32_t block, PrefixHash* hash = nullptr) const;
  // The free queue from head (next to allocate) to tail; O(free blocks).
  [[nodiscard]] std::vector<uint32_t> FreeQueue() const;

 private:
  // Per-request record, indexed by RequestId (grown on demand).
  struct RequestState {
    uint32_t table = kNoBlock;   // index into tables_, kNoBlock when not allocated
    uint32_t cached_tokens = 0;  // hit found by the first Allocate
    uint32_t marked_blocks = 0;  // leading blocks already considered for registration
    uint32_t hashed_blocks = 0;  // leading blocks vLLM would hold a block hash for
  };
  // Free-queue links of one block (kNoBlock = none); meaningful only while its ref count is 0.
  struct Links {
    uint32_t prev = kNoBlock;
    uint32_t next = kNoBlock;
  };

  [[nodiscard]] const RequestState* Find(RequestId id) const {
    return id < requests_.size() ? &requests_[id] : nullptr;
  }
  [[nodiscard]] uint32_t HitBlocks(ChainView chain, uint32_t prompt_tokens) const;
  void QueueUnlink(uint32_t block);
  void QueuePushBack(uint32_t block);
  void QueuePushFront(uint32_t block);
  [[nodiscard]] uint32_t QueuePopFront();

  KvCacheConfig config_;
  // Per block: hot fields (reference count, free-queue links) apart from the cold hash.
  std::vector<uint32_t> ref_count_;
  std::vector<Links> links_;
  std::vector<PrefixHash> block_hash_;  // valid where registered_[block]
  std::vector<uint8_t> registered_;
  FlatHashMap<PrefixHash, uint32_t> index_;  // registered hash -> block
  uint32_t queue_head_ = kNoBlock;           // next block to allocate
  uint32_t queue_tail_ = kNoBlock;           // most recently freed
  uint64_t free_blocks_ = 0;
  uint64_t evictions_ = 0;
  bool report_owners_ = false;
  std::vector<RequestId> freed_by_;        // per block, when reporting: the last request to free it
  std::vector<RequestId> evicted_owners_;  // since the last ClearEvictedOwners
  std::vector<uint32_t> owned_blocks_;     // per request, when reporting: blocks it owns
  void NoteEviction(uint32_t block) {
    if (!report_owners_ || freed_by_[block] == kNoRequest) return;
    evicted_owners_.push_back(freed_by_[block]);
    Disown(block);
  }
  void Disown(uint32_t block) {
    const RequestId owner = freed_by_[block];
    freed_by_[block] = kNoRequest;
    if (--owned_blocks_[owner] == 0) evicted_owners_.push_back(owner);
  }
  // Requests, and their block tables: a pool of vectors recycled through a free list, so a
  // table's capacity survives its request and steady-state allocation/growth does not allocate.
  std::vector<RequestState> requests_;
  std::vector<std::vector<uint32_t>> tables_;
  std::vector<uint32_t> free_tables_;
  std::vector<uint32_t> hit_scratch_;  // Allocate: the hit blocks of a first call
};

}  // namespace feather
