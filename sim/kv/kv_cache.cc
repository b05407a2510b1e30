// kv_cache.cc: the paged KV cache with vLLM v1 automatic prefix caching (see header).
//
// State is flat arrays indexed by block id and by request id. The free queue is an intrusive
// doubly linked list through links_ (head = next to allocate, tail = most recently freed); a
// block is in it exactly when its reference count is 0, so NumUsedBlocks is num_blocks minus
// the queue length. The hash index maps each registered hash to its one block; a block carries
// at most one hash, so the index never holds more than num_blocks entries.
#include "sim/kv/kv_cache.h"

#include <algorithm>

#include "base/check.h"

namespace feather {
namespace {

// Blocks needed to hold `tokens` tokens.
[[nodiscard]] uint64_t BlocksFor(uint64_t tokens, uint32_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

// Checked before any member is sized from the config.
[[nodiscard]] const KvCacheConfig& Validated(const KvCacheConfig& config) {
  FEATHER_CHECK(config.block_tokens > 0, "block_tokens must be positive");
  FEATHER_CHECK(config.num_blocks < KvCache::kNoBlock, "num_blocks must fit a 32-bit block id");
  return config;
}

// The index starts at this many entries at most and grows on demand, so a simulated pool of
// millions of blocks does not pay for a full-size index up front.
constexpr uint64_t kInitialIndexEntries = 4096;

}  // namespace

KvCache::KvCache(const KvCacheConfig& config)
    : config_(Validated(config)),
      ref_count_(config.num_blocks, 0),
      links_(config.num_blocks),
      block_hash_(config.num_blocks, 0),
      registered_(config.num_blocks, 0),
      index_(static_cast<size_t>(std::min(config.num_blocks, kInitialIndexEntries))),
      free_blocks_(config.num_blocks) {
  // Every block starts empty in the free queue, in id order (vLLM's FreeKVCacheBlockQueue).
  const auto n = static_cast<uint32_t>(config_.num_blocks);
  for (uint32_t b = 0; b < n; ++b) {
    links_[b].prev = b == 0 ? kNoBlock : b - 1;
    links_[b].next = b + 1 == n ? kNoBlock : b + 1;
  }
  if (n > 0) {
    queue_head_ = 0;
    queue_tail_ = n - 1;
  }
}

uint32_t KvCache::HitBlocks(ChainView chain, uint32_t prompt_tokens) const {
  if (!config_.prefix_caching || prompt_tokens == 0) return 0;
  // vLLM caps the hit at prompt_tokens - 1 so the last prompt token is recomputed for logits.
  const size_t cap = std::min<size_t>(chain.size(), (prompt_tokens - 1) / config_.block_tokens);
  size_t hits = 0;
  while (hits < cap && index_.Contains(chain[hits])) ++hits;
  return static_cast<uint32_t>(hits);
}

uint32_t KvCache::LookupCachedTokens(ChainView chain, uint32_t prompt_tokens) const {
  return HitBlocks(chain, prompt_tokens) * config_.block_tokens;
}

void KvCache::QueueUnlink(uint32_t block) {
  const Links l = links_[block];
  if (l.prev == kNoBlock) {
    queue_head_ = l.next;
  } else {
    links_[l.prev].next = l.next;
  }
  if (l.next == kNoBlock) {
    queue_tail_ = l.prev;
  } else {
    links_[l.next].prev = l.prev;
  }
  links_[block] = Links{};
  --free_blocks_;
}

void KvCache::QueuePushBack(uint32_t block) {
  links_[block] = Links{queue_tail_, kNoBlock};
  if (queue_tail_ == kNoBlock) {
    queue_head_ = block;
  } else {
    links_[queue_tail_].next = block;
  }
  queue_tail_ = block;
  ++free_blocks_;
}

void KvCache::QueuePushFront(uint32_t block) {
  links_[block] = Links{kNoBlock, queue_head_};
  if (queue_head_ == kNoBlock) {
    queue_tail_ = block;
  } else {
    links_[queue_head_].prev = block;
  }
  queue_head_ = block;
  ++free_blocks_;
}

uint32_t KvCache::QueuePopFront() {
  const uint32_t block = queue_head_;
  FEATHER_DCHECK(block != kNoBlock, "pop from an empty free queue");
  QueueUnlink(block);
  return block;
}

bool KvCache::Allocate(RequestId id, ChainView chain, uint32_t prompt_tokens,
                       uint32_t total_tokens, uint32_t must_fit_tokens) {
  const uint64_t required = BlocksFor(total_tokens, config_.block_tokens);
  const RequestState* existing = Find(id);
  if (existing != nullptr && existing->table != kNoBlock) {
    // Later call: append only.
    std::vector<uint32_t>& table = tables_[existing->table];
    if (required <= table.size()) return true;
    const uint64_t needed = required - table.size();
    if (needed > free_blocks_) return false;
    for (uint64_t i = 0; i < needed; ++i) {
      const uint32_t block = QueuePopFront();
      if (registered_[block]) {
        index_.Erase(block_hash_[block]);
        registered_[block] = 0;
        ++evictions_;
        NoteEviction(block);
      }
      ref_count_[block] = 1;
      table.push_back(block);
    }
    return true;
  }

  // First call: the hit blocks are shared, then new blocks appended. Check capacity before
  // touching anything: hit blocks sitting in the free queue (reference count 0) leave it too.
  // One probe per hit block: the blocks found are kept for the passes below.
  hit_scratch_.clear();
  if (config_.prefix_caching && prompt_tokens > 0) {
    const size_t cap = std::min<size_t>(chain.size(), (prompt_tokens - 1) / config_.block_tokens);
    for (size_t i = 0; i < cap; ++i) {
      const uint32_t* block = index_.Find(chain[i]);
      if (block == nullptr) break;
      hit_scratch_.push_back(*block);
    }
  }
  const auto hits = static_cast<uint32_t>(hit_scratch_.size());
  uint64_t evictable_hits = 0;
  for (const uint32_t block : hit_scratch_) evictable_hits += ref_count_[block] == 0 ? 1 : 0;
  const uint64_t needed = required > hits ? required - hits : 0;
  // The gate counts the whole sequence's blocks; only the first `total_tokens` are taken now.
  const uint64_t gated = std::max(required, BlocksFor(must_fit_tokens, config_.block_tokens));
  const uint64_t gated_needed = gated > hits ? gated - hits : 0;
  if (gated_needed + evictable_hits > free_blocks_) return false;

  if (id >= requests_.size()) requests_.resize(static_cast<size_t>(id) + 1);
  RequestState& state = requests_[id];
  if (free_tables_.empty()) {
    state.table = static_cast<uint32_t>(tables_.size());
    tables_.emplace_back();
  } else {
    state.table = free_tables_.back();
    free_tables_.pop_back();
  }
  std::vector<uint32_t>& table = tables_[state.table];
  FEATHER_DCHECK(table.empty(), "recycled block table is not empty");
  table.reserve(hits + needed);
  // Touch the hits before popping new blocks, so a hit block at the queue head is not evicted.
  for (const uint32_t block : hit_scratch_) {
    if (ref_count_[block] == 0) QueueUnlink(block);
    ++ref_count_[block];
    table.push_back(block);
  }
  for (uint64_t i = 0; i < needed; ++i) {
    const uint32_t block = QueuePopFront();
    if (registered_[block]) {
      index_.Erase(block_hash_[block]);
      registered_[block] = 0;
      ++evictions_;
      NoteEviction(block);
    }
    ref_count_[block] = 1;
    table.push_back(block);
  }
  state.cached_tokens = hits * config_.block_tokens;
  state.marked_blocks = hits;  // already registered under chain[0, hits)
  state.hashed_blocks = hits;
  return true;
}

uint32_t KvCache::CachedTokens(RequestId id) const {
  const RequestState* state = Find(id);
  return state == nullptr ? 0 : state->cached_tokens;
}

void KvCache::CacheBlocks(RequestId id, ChainView chain, uint32_t through_tokens) {
  RequestState* state = id < requests_.size() ? &requests_[id] : nullptr;
  FEATHER_CHECK(state != nullptr && state->table != kNoBlock,
                "CacheBlocks on a request without blocks");
  const std::vector<uint32_t>& table = tables_[state->table];
  const uint32_t full_blocks = through_tokens / config_.block_tokens;
  FEATHER_CHECK(full_blocks <= table.size(), "registered tokens exceed the request's blocks");
  if (!config_.prefix_caching) return;
  state->hashed_blocks = std::max(state->hashed_blocks, full_blocks);
  const auto limit = static_cast<uint32_t>(std::min<size_t>(full_blocks, chain.size()));
  for (uint32_t i = state->marked_blocks; i < limit; ++i) {
    const uint32_t block = table[i];
    // Blocks past the cursor were taken fresh from the queue (hits lie below it) and were
    // un-registered then; only this request can have registered them since, below the cursor.
    FEATHER_DCHECK(!registered_[block], "block past the registration cursor is registered");
    // Insert keeps an existing registration of the same hash (another request's copy).
    if (index_.Insert(chain[i], block).second) {
      registered_[block] = 1;
      block_hash_[block] = chain[i];
    }
  }
  state->marked_blocks = std::max(state->marked_blocks, limit);
}

void KvCache::Free(RequestId id) {
  if (id >= requests_.size() || requests_[id].table == kNoBlock) return;
  RequestState& state = requests_[id];
  std::vector<uint32_t>& table = tables_[state.table];
  // Last block first. Unhashed blocks are prepended in that order (vLLM's prepend_n), so the
  // request's last block ends up at the head: pushing each to the front in table order does it.
  const size_t hashed = std::min<size_t>(state.hashed_blocks, table.size());
  for (size_t i = hashed; i < table.size(); ++i) {
    if (--ref_count_[table[i]] == 0) QueuePushFront(table[i]);
  }
  // Hashed blocks are appended, last first: the tail then holds the shallow blocks, which are
  // evicted last.
  for (size_t i = hashed; i-- > 0;) {
    if (--ref_count_[table[i]] == 0) {
      QueuePushBack(table[i]);
      if (report_owners_ && freed_by_[table[i]] != id) {
        if (freed_by_[table[i]] != kNoRequest) Disown(table[i]);
        if (id >= owned_blocks_.size()) owned_blocks_.resize(static_cast<size_t>(id) + 1, 0);
        freed_by_[table[i]] = id;
        ++owned_blocks_[id];
      }
    }
  }
  // Released nothing of its own (others still hold, or own, every cached block of it).
  if (report_owners_ && (id >= owned_blocks_.size() || owned_blocks_[id] == 0)) {
    evicted_owners_.push_back(id);
  }
  table.clear();  // keeps its capacity for the next request
  free_tables_.push_back(state.table);
  state = RequestState{};
}

std::span<const uint32_t> KvCache::BlockTable(RequestId id) const {
  const RequestState* state = Find(id);
  if (state == nullptr || state->table == kNoBlock) return {};
  return tables_[state->table];
}

uint32_t KvCache::RefCount(uint32_t block) const {
  FEATHER_CHECK(block < ref_count_.size(), "block id out of range");
  return ref_count_[block];
}

uint32_t KvCache::CommonPrefixBlocks(RequestId id, uint32_t running_requests) const {
  const std::span<const uint32_t> table = BlockTable(id);
  uint32_t common = 0;
  while (common < table.size() && ref_count_[table[common]] == running_requests) ++common;
  return common;
}

uint64_t KvCache::NumUsedBlocks() const { return config_.num_blocks - free_blocks_; }
uint64_t KvCache::NumFreeBlocks() const { return free_blocks_; }
uint64_t KvCache::NumCachedBlocks() const { return index_.size(); }
uint64_t KvCache::evictions() const { return evictions_; }

size_t KvCache::MemoryBytes() const {
  size_t bytes = ref_count_.capacity() * sizeof(uint32_t) + links_.capacity() * sizeof(Links) +
                 block_hash_.capacity() * sizeof(PrefixHash) + registered_.capacity() +
                 index_.MemoryBytes() + requests_.capacity() * sizeof(RequestState) +
                 tables_.capacity() * sizeof(std::vector<uint32_t>) +
                 free_tables_.capacity() * sizeof(uint32_t);
  for (const std::vector<uint32_t>& table : tables_) bytes += table.capacity() * sizeof(uint32_t);
  return bytes;
}

bool KvCache::IsAllocated(RequestId id) const {
  const RequestState* state = Find(id);
  return state != nullptr && state->table != kNoBlock;
}

uint32_t KvCache::FindCachedBlock(PrefixHash hash) const {
  const uint32_t* block = index_.Find(hash);
  return block == nullptr ? kNoBlock : *block;
}

bool KvCache::IsRegistered(uint32_t block, PrefixHash* hash) const {
  FEATHER_CHECK(block < registered_.size(), "block id out of range");
  if (!registered_[block]) return false;
  if (hash != nullptr) *hash = block_hash_[block];
  return true;
}

std::vector<uint32_t> KvCache::FreeQueue() const {
  std::vector<uint32_t> queue;
  queue.reserve(static_cast<size_t>(free_blocks_));
  for (uint32_t b = queue_head_; b != kNoBlock && queue.size() <= config_.num_blocks;
       b = links_[b].next) {
    queue.push_back(b);
  }
  return queue;
}

void KvCache::CheckInvariants() const {
  const auto n = static_cast<size_t>(config_.num_blocks);
  FEATHER_CHECK(ref_count_.size() == n && links_.size() == n && block_hash_.size() == n &&
                    registered_.size() == n,
                "per-block arrays sized to num_blocks");

  // Reference counts equal the table entries naming each block; a table names a block once.
  std::vector<uint32_t> refs(n, 0);
  std::vector<uint32_t> last_seen(n, kNoBlock);  // table index that last named the block
  std::vector<uint8_t> table_owned(tables_.size(), 0);
  size_t active = 0;
  for (const RequestState& state : requests_) {
    if (state.table == kNoBlock) {
      FEATHER_CHECK(state.cached_tokens == 0 && state.marked_blocks == 0 &&
                        state.hashed_blocks == 0,
                    "unallocated request keeps state");
      continue;
    }
    ++active;
    FEATHER_CHECK(state.table < tables_.size(), "table index out of range");
    FEATHER_CHECK(!table_owned[state.table], "two requests share a block table");
    table_owned[state.table] = 1;
    const std::vector<uint32_t>& table = tables_[state.table];
    FEATHER_CHECK(state.cached_tokens % config_.block_tokens == 0, "cached tokens not aligned");
    const size_t hit_blocks = state.cached_tokens / config_.block_tokens;
    FEATHER_CHECK(hit_blocks <= table.size(), "hit blocks beyond the table");
    FEATHER_CHECK(hit_blocks <= state.marked_blocks && state.marked_blocks <= table.size(),
                  "registration cursor out of range");
    FEATHER_CHECK(state.marked_blocks <= state.hashed_blocks || !config_.prefix_caching,
                  "registered blocks not counted as hashed");
    FEATHER_CHECK(hit_blocks <= state.hashed_blocks && state.hashed_blocks <= table.size(),
                  "hashed blocks out of range");
    for (size_t i = 0; i < table.size(); ++i) {
      const uint32_t b = table[i];
      FEATHER_CHECK(b < n, "block id out of range in a table");
      FEATHER_CHECK(last_seen[b] != state.table, "block twice in one table");
      last_seen[b] = state.table;
      ++refs[b];
      if (i < hit_blocks) FEATHER_CHECK(registered_[b], "hit block lost its registration");
    }
  }
  for (size_t b = 0; b < n; ++b) {
    FEATHER_CHECK(refs[b] == ref_count_[b], "reference count differs from table entries");
  }
  // Recycled tables are empty, distinct and owned by no request.
  for (const uint32_t t : free_tables_) {
    FEATHER_CHECK(t < tables_.size() && !table_owned[t], "free table owned or out of range");
    table_owned[t] = 1;
    FEATHER_CHECK(tables_[t].empty(), "free table not empty");
  }
  FEATHER_CHECK(active + free_tables_.size() == tables_.size(), "a block table leaked");

  // Free queue: exactly the blocks of reference count 0, each once, links consistent.
  std::vector<uint8_t> in_queue(n, 0);
  uint64_t queued = 0;
  uint32_t prev = kNoBlock;
  for (uint32_t b = queue_head_; b != kNoBlock; b = links_[b].next) {
    FEATHER_CHECK(b < n, "free-queue link out of range");
    FEATHER_CHECK(!in_queue[b], "free queue has a cycle");
    in_queue[b] = 1;
    FEATHER_CHECK(links_[b].prev == prev, "free-queue back link broken");
    FEATHER_CHECK(ref_count_[b] == 0, "referenced block in the free queue");
    prev = b;
    ++queued;
  }
  FEATHER_CHECK(queue_tail_ == prev, "free-queue tail broken");
  FEATHER_CHECK(queued == free_blocks_, "free-block counter differs from the queue");
  for (size_t b = 0; b < n; ++b) {
    FEATHER_CHECK(ref_count_[b] != 0 || in_queue[b], "unreferenced block outside the queue");
  }

  // Hash index: every registered block is indexed under its hash and nothing else is.
  size_t registered = 0;
  for (size_t b = 0; b < n; ++b) {
    if (!registered_[b]) continue;
    ++registered;
    const uint32_t* indexed = index_.Find(block_hash_[b]);
    FEATHER_CHECK(indexed != nullptr && *indexed == b, "registered block missing from the index");
  }
  FEATHER_CHECK(registered == index_.size(), "index holds unregistered entries");
  if (!config_.prefix_caching) {
    FEATHER_CHECK(registered == 0 && evictions_ == 0, "registration with prefix caching off");
  }
}

}  // namespace feather
