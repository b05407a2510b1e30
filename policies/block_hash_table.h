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
// an intrusive doubly linked list through the records. A record keeps its slot while it is in
// the table, so a reader that holds a chain's slots (AddWaiting's `slots`) reads records with
// Record(slot) instead of a hash probe.
//
// Change log (off unless enabled, for BlockTableSelector's incremental depths): every operation
// appends the slot of each record whose Flags() it changed while the record has waiting
// references, so a reader learns which blocks a waiting request sees differently without
// rescanning. A slot may appear more than once; the reader clears the log.
//
// Prefix closure: chains are hash chains, so (up to 64-bit collisions) every request that
// references a block references its parent, and a cached block's parent is running or after it
// in the free queue (Release and Preempt free tail first; Admit takes both out). Each Flags() bit
// that holds for a block therefore holds for its parent: along any chain, the blocks with a bit
// set form a prefix.
//
// Complexity (C = blocks in the chain): ComputeChain O(tokens); AddWaiting, RemoveWaiting, Admit,
// Release, Preempt O(C) expected (one hash probe per block) plus O(1) per eviction; their *Slots
// forms O(C) plus O(1) per eviction; Find O(1) expected; Record O(1). No allocation once the
// table, record array and change log have grown to their peak size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/flat_hash_map.h"
#include "base/prompt_view.h"
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
  [[nodiscard]] bool Running() const { return running_refs > 0; }
  // Referenced by two or more requests: for a waiting request that references the block, some
  // other waiting or running request does too.
  [[nodiscard]] bool Shared() const { return waiting_refs + running_refs >= 2; }
  // cached | Running() << 1 | Shared() << 2: the facts BlockTableSelector's depths read.
  [[nodiscard]] uint8_t Flags() const {
    return static_cast<uint8_t>((cached ? 1 : 0) | (Running() ? 2 : 0) | (Shared() ? 4 : 0));
  }
};

class BlockHashTable {
 public:
  explicit BlockHashTable(const BlockHashConfig& config = {});

  [[nodiscard]] const BlockHashConfig& config() const { return config_; }

  // Hash of one block given its parent's hash (or the seed for block 0).
  [[nodiscard]] static PrefixHash HashBlock(PrefixHash parent, std::span<const Token> block);
  // Appends the hashes of the full blocks of `prompt` (floor(size / block_tokens) of them) to
  // `out`; returns how many were appended.
  size_t ComputeChain(PromptView prompt, std::vector<PrefixHash>& out) const;
  [[nodiscard]] std::vector<PrefixHash> ComputeChain(PromptView prompt) const;
  // The chain continued: appends the hashes of the full blocks of `tokens`, the first one's
  // parent being `parent` (the hash of the block before tokens[0], or the seed), to `out`;
  // returns how many. ComputeChain(p) is ExtendChain(seed, p). A block that straddles the view's
  // two pieces is hashed from a copy (thread-local scratch, allocation-free once warm). O(size).
  static size_t ExtendChain(PrefixHash parent, PromptView tokens, uint32_t block_tokens,
                            std::vector<PrefixHash>& out);

  // Reference-count transitions of one request's chain. Waiting: the request is queued;
  // Admit: waiting -> running; Release: running -> gone (finish); Preempt: running -> waiting.
  void AddWaiting(std::span<const PrefixHash> chain);
  // Same, and appends the slot of each block of `chain` to `slots`, in chain order.
  void AddWaiting(std::span<const PrefixHash> chain, std::vector<uint32_t>& slots);
  void RemoveWaiting(std::span<const PrefixHash> chain);
  void Admit(std::span<const PrefixHash> chain);
  void Release(std::span<const PrefixHash> chain);
  void Preempt(std::span<const PrefixHash> chain);
  // The same transitions for a chain given by the slots AddWaiting reported for it (no hash
  // probes). The slots must still hold the chain's records, as they do while it is referenced.
  void RemoveWaitingSlots(std::span<const uint32_t> slots);
  void AdmitSlots(std::span<const uint32_t> slots);
  void ReleaseSlots(std::span<const uint32_t> slots);
  void PreemptSlots(std::span<const uint32_t> slots);

  // The record of `hash`, or nullptr when no request references it and it is not cached.
  // Valid until the next mutating call.
  [[nodiscard]] const BlockRecord* Find(PrefixHash hash) const;
  [[nodiscard]] bool IsCached(PrefixHash hash) const;
  // Number of leading blocks of `chain` that are cached (vLLM's prefix-cache hit, in blocks).
  [[nodiscard]] size_t CountCachedPrefix(std::span<const PrefixHash> chain) const;

  // The record in `slot` (a slot AddWaiting reported, while its block is still in the table).
  [[nodiscard]] const BlockRecord& Record(uint32_t slot) const { return records_[slot]; }
  // One past the largest slot in use: per-slot side arrays of this size cover every record.
  [[nodiscard]] size_t NumSlots() const { return records_.size(); }

  // The change log (see the header comment).
  void EnableChangeLog() { log_changes_ = true; }
  [[nodiscard]] std::span<const uint32_t> ChangedSlots() const { return changed_slots_; }
  void ClearChangedSlots() { changed_slots_.clear(); }

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
  void AddWaitingImpl(std::span<const PrefixHash> chain, std::vector<uint32_t>* slots);
  // One block's step of RemoveWaiting, Admit, and Release (preempt: Preempt).
  void RemoveWaitingAt(uint32_t slot);
  void AdmitAt(uint32_t slot);
  void ReleaseAt(uint32_t slot, bool preempt);
  void QueuePushBack(uint32_t slot);
  void QueueUnlink(uint32_t slot);
  void DropIfDead(uint32_t slot);
  void EvictOverCapacity();
  // Logs `slot` when its flags differ from `before` and waiting requests still reference it.
  void NoteChange(uint32_t slot, uint8_t before) {
    const BlockRecord& r = records_[slot];
    if (log_changes_ && r.waiting_refs > 0 && r.Flags() != before) changed_slots_.push_back(slot);
  }

  BlockHashConfig config_;
  std::vector<BlockRecord> records_;
  std::vector<uint32_t> free_records_;
  FlatHashMap<PrefixHash, uint32_t> index_;  // hash -> index in records_
  uint32_t queue_head_ = kNil;               // least recently freed
  uint32_t queue_tail_ = kNil;
  size_t free_queue_size_ = 0;
  uint64_t evictions_ = 0;
  bool log_changes_ = false;
  std::vector<uint32_t> changed_slots_;
};

}  // namespace feather
