// block_hash_table.h: vLLM v1-style prefix-caching block hashes and a reference-counted table of
// the blocks that waiting and running requests use, with vLLM's LRU queue of freed cached blocks.
//
// Hash chain (vLLM v1 `hash_block_tokens`): a prompt is cut into full blocks of `block_tokens`
// tokens (16 by default); block i's hash is H(parent, block i's tokens), the parent of block 0
// being a fixed seed (vLLM's NONE_HASH) and the parent of block i > 0 block i-1's hash. A partial
// last block gets no hash (vLLM does not cache it). H is XXH3-64 of the block's token bytes
// seeded with the parent hash. Two chains therefore agree at block i exactly when the prompts
// agree on their first (i+1)·block_tokens tokens (up to 64-bit collisions).
//
// Table: block hash -> BlockRecord {waiting_refs, running_refs, cached}. A block is cached (its
// KV is resident) while a running request references it or while it sits in the free queue:
// when its last running reference goes away the block is appended to the free queue (a
// request's blocks are freed tail first, as vLLM's KVCacheManager.free does, so a prompt's deep
// blocks are evicted before its shallow ones); when a request is admitted, its blocks that are in
// the free queue are taken out of it ("touched"). With a free-queue capacity of N blocks
// (0 = unbounded) the least recently freed block is evicted whenever the queue exceeds N. A
// record disappears once no request references it and it is not cached.
//
// Records live in a flat array (slots recycled), indexed through a FlatHashMap; the free queue is
// an intrusive doubly linked list through the records.
//
// Complexity (C = blocks in the chain): ComputeChain O(tokens); AddWaiting, RemoveWaiting, Admit,
// Release, Preempt O(C) expected (one hash probe per block) plus O(1) per eviction; Find O(1)
// expected. No allocation once the table and record array have grown to their peak size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/flat_hash_map.h"
#include "base/types.h"

namespace feather {

struct BlockHashConfig {
  uint32_t block_tokens = 16;          // vLLM's default block size
  uint32_t free_capacity_blocks = 0;   // cached-but-unreferenced blocks kept; 0 = unbounded
  uint64_t seed = 0x6665617468657221;  // parent "hash" of block 0 (vLLM's NONE_HASH)
};

struct BlockRecord {
  PrefixHash hash = 0;
  uint32_t waiting_refs = 0;  // waiting requests whose chain contains this block
  uint32_t running_refs = 0;  // running requests whose chain contains this block
  uint32_t lru_prev = 0;      // free-queue links (meaningful only while InFreeQueue())
  uint32_t lru_next = 0;
  bool cached = false;  // KV resident: running_refs > 0 or in the free queue

  [[nodiscard]] bool InFreeQueue() const { return cached && running_refs == 0; }
};

class BlockHashTable {
 public:
  explicit BlockHashTable(const BlockHashConfig& config = {});

  [[nodiscard]] const BlockHashConfig& config() const { return config_; }

  // Hash of one block given its parent's hash (or the seed for block 0).
  [[nodiscard]] static PrefixHash HashBlock(PrefixHash parent, std::span<const Token> block);
  // Appends the hashes of the full blocks of `prompt` (floor(size / block_tokens) of them) to
  // `out`; returns how many were appended.
  size_t ComputeChain(std::span<const Token> prompt, std::vector<PrefixHash>& out) const;
  [[nodiscard]] std::vector<PrefixHash> ComputeChain(std::span<const Token> prompt) const;

  // Reference-count transitions of one request's chain. Waiting: the request is queued;
  // Admit: waiting -> running; Release: running -> gone (finish); Preempt: running -> waiting.
  void AddWaiting(std::span<const PrefixHash> chain);
  void RemoveWaiting(std::span<const PrefixHash> chain);
  void Admit(std::span<const PrefixHash> chain);
  void Release(std::span<const PrefixHash> chain);
  void Preempt(std::span<const PrefixHash> chain);

  // The record of `hash`, or nullptr when no request references it and it is not cached.
  // Valid until the next mutating call.
  [[nodiscard]] const BlockRecord* Find(PrefixHash hash) const;
  [[nodiscard]] bool IsCached(PrefixHash hash) const;
  // Number of leading blocks of `chain` that are cached (vLLM's prefix-cache hit, in blocks).
  [[nodiscard]] size_t CountCachedPrefix(std::span<const PrefixHash> chain) const;

  [[nodiscard]] size_t NumRecords() const { return index_.size(); }
  [[nodiscard]] size_t NumFreeQueueBlocks() const { return free_queue_size_; }
  [[nodiscard]] uint64_t evictions() const { return evictions_; }
  // Free queue from least to most recently freed (next eviction first); O(queue) for tests.
  [[nodiscard]] std::vector<PrefixHash> FreeQueue() const;
  [[nodiscard]] size_t MemoryBytes() const;
  // Exhaustive consistency check (O(records)); aborts on a violation.
  void CheckInvariants() const;

 private:
  static constexpr uint32_t kNil = 0xffffffffu;

  [[nodiscard]] uint32_t SlotOf(PrefixHash hash) const;  // CHECKs presence
  void QueuePushBack(uint32_t slot);
  void QueueUnlink(uint32_t slot);
  void DropIfDead(uint32_t slot);
  void EvictOverCapacity();

  BlockHashConfig config_;
  std::vector<BlockRecord> records_;
  std::vector<uint32_t> free_records_;
  FlatHashMap<PrefixHash, uint32_t> index_;  // hash -> index in records_
  uint32_t queue_head_ = kNil;               // least recently freed
  uint32_t queue_tail_ = kNil;
  size_t free_queue_size_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace feather
