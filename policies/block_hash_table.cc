// block_hash_table.cc: chained block hashes and the reference-counted block table (see header).
#include "policies/block_hash_table.h"

#include <xxhash.h>

#include "base/check.h"

namespace feather {

BlockHashTable::BlockHashTable(const BlockHashConfig& config) : config_(config) {
  FEATHER_CHECK(config_.block_tokens > 0, "block_tokens must be positive");
}

PrefixHash BlockHashTable::HashBlock(PrefixHash parent, std::span<const Token> block) {
  return XXH3_64bits_withSeed(block.data(), block.size_bytes(), parent);
}

size_t BlockHashTable::ExtendChain(PrefixHash parent, PromptView tokens, uint32_t block_tokens,
                                   std::vector<PrefixHash>& out) {
  thread_local std::vector<Token> straddle;
  const size_t block = block_tokens;
  const size_t blocks = tokens.size() / block;
  for (size_t i = 0; i < blocks; ++i) {
    const PromptView b = tokens.subview(i * block, block);
    if (b.contiguous()) {
      parent = HashBlock(parent, b.head());
    } else {
      straddle.resize(block);
      b.CopyTo(straddle.data());
      parent = HashBlock(parent, straddle);
    }
    out.push_back(parent);
  }
  return blocks;
}

size_t BlockHashTable::ComputeChain(PromptView prompt, std::vector<PrefixHash>& out) const {
  return ExtendChain(config_.seed, prompt, config_.block_tokens, out);
}

std::vector<PrefixHash> BlockHashTable::ComputeChain(PromptView prompt) const {
  std::vector<PrefixHash> chain;
  chain.reserve(prompt.size() / config_.block_tokens);
  ComputeChain(prompt, chain);
  return chain;
}

uint32_t BlockHashTable::SlotOf(PrefixHash hash) const {
  const uint32_t* slot = index_.Find(hash);
  FEATHER_CHECK(slot != nullptr, "block hash is not in the table");
  return *slot;
}

void BlockHashTable::QueuePushBack(uint32_t slot) {
  BlockRecord& r = records_[slot];
  r.lru_prev = queue_tail_;
  r.lru_next = kNil;
  if (queue_tail_ == kNil) {
    queue_head_ = slot;
  } else {
    records_[queue_tail_].lru_next = slot;
  }
  queue_tail_ = slot;
  ++free_queue_size_;
}

void BlockHashTable::QueueUnlink(uint32_t slot) {
  const BlockRecord& r = records_[slot];
  if (r.lru_prev == kNil) {
    queue_head_ = r.lru_next;
  } else {
    records_[r.lru_prev].lru_next = r.lru_next;
  }
  if (r.lru_next == kNil) {
    queue_tail_ = r.lru_prev;
  } else {
    records_[r.lru_next].lru_prev = r.lru_prev;
  }
  --free_queue_size_;
}

void BlockHashTable::DropIfDead(uint32_t slot) {
  const BlockRecord& r = records_[slot];
  if (r.waiting_refs != 0 || r.running_refs != 0 || r.cached) return;
  index_.Erase(r.hash);
  free_records_.push_back(slot);
}

void BlockHashTable::EvictOverCapacity() {
  if (config_.free_capacity_blocks == 0) return;
  while (free_queue_size_ > config_.free_capacity_blocks) {
    const uint32_t victim = queue_head_;
    QueueUnlink(victim);
    const uint8_t before = records_[victim].Flags();
    records_[victim].cached = false;
    ++evictions_;
    NoteChange(victim, before);
    DropIfDead(victim);
  }
}

void BlockHashTable::AddWaiting(std::span<const PrefixHash> chain) {
  AddWaitingImpl(chain, nullptr);
}

void BlockHashTable::AddWaiting(std::span<const PrefixHash> chain, std::vector<uint32_t>& slots) {
  AddWaitingImpl(chain, &slots);
}

void BlockHashTable::AddWaitingImpl(std::span<const PrefixHash> chain,
                                    std::vector<uint32_t>* slots) {
  for (const PrefixHash hash : chain) {
    uint32_t slot;
    if (!free_records_.empty()) {
      slot = free_records_.back();
    } else {
      slot = static_cast<uint32_t>(records_.size());
    }
    const auto [stored, inserted] = index_.Insert(hash, slot);
    if (inserted) {
      if (slot == records_.size()) {
        records_.emplace_back();
      } else {
        free_records_.pop_back();
      }
      records_[slot] = BlockRecord{};
      records_[slot].hash = hash;
    }
    const uint8_t before = records_[*stored].Flags();
    ++records_[*stored].waiting_refs;
    NoteChange(*stored, before);
    if (slots != nullptr) slots->push_back(*stored);
  }
}

void BlockHashTable::RemoveWaitingAt(uint32_t slot) {
  FEATHER_DCHECK(slot < records_.size(), "slot out of range");
  FEATHER_CHECK(records_[slot].waiting_refs > 0, "waiting reference underflow");
  const uint8_t before = records_[slot].Flags();
  --records_[slot].waiting_refs;
  NoteChange(slot, before);
  DropIfDead(slot);
}

void BlockHashTable::AdmitAt(uint32_t slot) {
  FEATHER_DCHECK(slot < records_.size(), "slot out of range");
  BlockRecord& r = records_[slot];
  FEATHER_CHECK(r.waiting_refs > 0, "admitted block has no waiting reference");
  const uint8_t before = r.Flags();
  --r.waiting_refs;
  if (r.InFreeQueue()) QueueUnlink(slot);  // reuse of a cached free block
  r.cached = true;                         // hit, or computed now
  ++r.running_refs;
  NoteChange(slot, before);
}

void BlockHashTable::ReleaseAt(uint32_t slot, bool preempt) {
  FEATHER_DCHECK(slot < records_.size(), "slot out of range");
  BlockRecord& r = records_[slot];
  FEATHER_CHECK(r.running_refs > 0, "running reference underflow");
  const uint8_t before = r.Flags();
  if (preempt) ++r.waiting_refs;
  if (--r.running_refs == 0) QueuePushBack(slot);
  NoteChange(slot, before);
}

void BlockHashTable::RemoveWaiting(std::span<const PrefixHash> chain) {
  for (const PrefixHash hash : chain) RemoveWaitingAt(SlotOf(hash));
}

void BlockHashTable::Admit(std::span<const PrefixHash> chain) {
  for (const PrefixHash hash : chain) AdmitAt(SlotOf(hash));
}

// Release and Preempt go tail first, so that the deepest blocks are the first to be evicted
// (vLLM frees in reverse).
void BlockHashTable::Release(std::span<const PrefixHash> chain) {
  for (size_t i = chain.size(); i-- > 0;) ReleaseAt(SlotOf(chain[i]), false);
  EvictOverCapacity();
}

void BlockHashTable::Preempt(std::span<const PrefixHash> chain) {
  for (size_t i = chain.size(); i-- > 0;) ReleaseAt(SlotOf(chain[i]), true);
  EvictOverCapacity();
}

void BlockHashTable::RemoveWaitingSlots(std::span<const uint32_t> slots) {
  for (const uint32_t slot : slots) RemoveWaitingAt(slot);
}

void BlockHashTable::AdmitSlots(std::span<const uint32_t> slots) {
  for (const uint32_t slot : slots) AdmitAt(slot);
}

void BlockHashTable::ReleaseSlots(std::span<const uint32_t> slots) {
  for (size_t i = slots.size(); i-- > 0;) ReleaseAt(slots[i], false);
  EvictOverCapacity();
}

void BlockHashTable::PreemptSlots(std::span<const uint32_t> slots) {
  for (size_t i = slots.size(); i-- > 0;) ReleaseAt(slots[i], true);
  EvictOverCapacity();
}

const BlockRecord* BlockHashTable::Find(PrefixHash hash) const {
  const uint32_t* slot = index_.Find(hash);
  return slot == nullptr ? nullptr : &records_[*slot];
}

bool BlockHashTable::IsCached(PrefixHash hash) const {
  const BlockRecord* r = Find(hash);
  return r != nullptr && r->cached;
}

size_t BlockHashTable::CountCachedPrefix(std::span<const PrefixHash> chain) const {
  size_t n = 0;
  while (n < chain.size() && IsCached(chain[n])) ++n;
  return n;
}

std::vector<PrefixHash> BlockHashTable::FreeQueue() const {
  std::vector<PrefixHash> queue;
  queue.reserve(free_queue_size_);
  for (uint32_t slot = queue_head_; slot != kNil; slot = records_[slot].lru_next) {
    queue.push_back(records_[slot].hash);
  }
  return queue;
}

size_t BlockHashTable::MemoryBytes() const {
  return sizeof(*this) + records_.capacity() * sizeof(BlockRecord) +
         free_records_.capacity() * sizeof(uint32_t) + index_.MemoryBytes() +
         changed_slots_.capacity() * sizeof(uint32_t);
}

void BlockHashTable::CheckInvariants() const {
  std::vector<uint8_t> is_free(records_.size(), 0);
  for (const uint32_t slot : free_records_) {
    FEATHER_CHECK(slot < records_.size() && !is_free[slot], "free record list");
    is_free[slot] = 1;
  }
  FEATHER_CHECK(index_.size() + free_records_.size() == records_.size(), "record count");
  size_t live = 0;
  size_t in_queue = 0;
  for (uint32_t slot = 0; slot < records_.size(); ++slot) {
    if (is_free[slot]) continue;
    ++live;
    const BlockRecord& r = records_[slot];
    const uint32_t* indexed = index_.Find(r.hash);
    FEATHER_CHECK(indexed != nullptr && *indexed == slot, "index does not point at record");
    FEATHER_CHECK(r.waiting_refs + r.running_refs > 0 || r.cached, "dead record kept");
    FEATHER_CHECK(r.running_refs == 0 || r.cached, "running block not cached");
    if (r.InFreeQueue()) ++in_queue;
  }
  FEATHER_CHECK(live == index_.size(), "live records");
  FEATHER_CHECK(in_queue == free_queue_size_, "free queue size");
  size_t walked = 0;
  uint32_t prev = kNil;
  for (uint32_t slot = queue_head_; slot != kNil; slot = records_[slot].lru_next) {
    FEATHER_CHECK(records_[slot].InFreeQueue() && records_[slot].lru_prev == prev, "queue links");
    prev = slot;
    ++walked;
  }
  FEATHER_CHECK(prev == queue_tail_ && walked == free_queue_size_, "queue walk");
  if (config_.free_capacity_blocks != 0) {
    FEATHER_CHECK(free_queue_size_ <= config_.free_capacity_blocks, "free queue over capacity");
  }
}

}  // namespace feather
