// radix_cache.cc: SGLang-semantics radix tree over a flat node vector and one token arena.
#include "policies/radix_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/check.h"

namespace feather {
namespace {

// Index of the first position where a and b differ, or n. Equal runs (the common case: a
// cached prefix) cost one libc memcmp (vectorized) per 4 KiB; only the differing chunk is
// narrowed down, by 64-byte blocks and then token by token.
[[nodiscard]] size_t FirstMismatch(const Token* a, const Token* b, size_t n) {
  constexpr size_t kChunk = 1024;
  constexpr size_t kBlock = 16;
  size_t i = 0;
  while (i + kChunk <= n && std::memcmp(a + i, b + i, kChunk * sizeof(Token)) == 0) i += kChunk;
  const size_t rest = std::min(n - i, kChunk);
  if (rest == n - i && std::memcmp(a + i, b + i, rest * sizeof(Token)) == 0) return n;
  while (i + kBlock <= n && std::memcmp(a + i, b + i, kBlock * sizeof(Token)) == 0) i += kBlock;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

struct LaterTick {
  template <typename Entry>
  bool operator()(const Entry& x, const Entry& y) const {
    return x.tick > y.tick;
  }
};

}  // namespace

RadixCache::RadixCache(const RadixCacheConfig& config) : config_(config) {
  FEATHER_CHECK(config_.page_size >= 1, "RadixCache page_size must be at least 1");
  Reset();
}

void RadixCache::Reset() {
  nodes_.clear();
  nodes_.emplace_back();
  nodes_[kRoot].lock_ref = 1;  // as SGLang: the root is never evictable
  free_nodes_.clear();
  children_.Clear();
  arena_.clear();
  heap_.clear();
  clock_ = 0;
  next_rank_ = 0;
  evictable_tokens_ = 0;
  protected_tokens_ = 0;
  garbage_tokens_ = 0;
  evicted_tokens_total_ = 0;
}

RadixNodeId RadixCache::FindChild(RadixNodeId parent, const Token* key) const {
  const RadixNodeId* head = children_.Find(ChildKey(parent, key[0]));
  if (head == nullptr) return kNoRadixNode;
  RadixNodeId child = *head;
  if (config_.page_size == 1) return child;
  const size_t page_bytes = size_t{config_.page_size} * sizeof(Token);
  while (child != kNoRadixNode &&
         std::memcmp(arena_.data() + nodes_[child].key_begin, key, page_bytes) != 0) {
    child = nodes_[child].next_same_first;
  }
  return child;
}

void RadixCache::Touch(RadixNodeId node) {
  nodes_[node].last_access = ++clock_;
  if (IsEvictionCandidate(node)) PushCandidate(node);
}

void RadixCache::PushCandidate(RadixNodeId node) {
  const size_t limit = 2 * NodeCount() + 1024;  // beyond it, stale entries dominate: rebuild
  // Reserve for the whole stale-entry cycle at once, so that once the tree stops growing,
  // matching (which pushes the touched leaf) never allocates.
  if (heap_.capacity() <= limit) heap_.reserve(std::max(limit + 1, 2 * heap_.capacity()));
  heap_.push_back(HeapEntry{nodes_[node].last_access, node});
  std::push_heap(heap_.begin(), heap_.end(), LaterTick{});
  if (heap_.size() > limit) RebuildHeap();
}

void RadixCache::RebuildHeap() {
  heap_.clear();
  for (RadixNodeId id = 1; id < nodes_.size(); ++id) {
    if (nodes_[id].parent != kFreeNode && IsEvictionCandidate(id)) {
      heap_.push_back(HeapEntry{nodes_[id].last_access, id});
    }
  }
  std::make_heap(heap_.begin(), heap_.end(), LaterTick{});
}

RadixNodeId RadixCache::AllocateNode() {
  if (!free_nodes_.empty()) {
    const RadixNodeId id = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[id] = Node{};
    return id;
  }
  FEATHER_CHECK(nodes_.size() < kFreeNode, "RadixCache node ids exhausted");
  nodes_.emplace_back();
  return static_cast<RadixNodeId>(nodes_.size() - 1);
}

void RadixCache::LinkChild(RadixNodeId parent, RadixNodeId child) {
  const Token first = arena_[nodes_[child].key_begin];
  auto [head, inserted] = children_.Insert(ChildKey(parent, first), child);
  if (!inserted) {  // another sibling starts with the same token (page_size > 1 only)
    nodes_[child].next_same_first = *head;
    *head = child;
  }
  ++nodes_[parent].num_children;
}

void RadixCache::ReplaceChild(RadixNodeId parent, RadixNodeId old_child, RadixNodeId new_child) {
  const Token first = arena_[nodes_[old_child].key_begin];
  RadixNodeId* head = children_.Find(ChildKey(parent, first));
  FEATHER_DCHECK(head != nullptr, "ReplaceChild: child not linked");
  nodes_[new_child].next_same_first = nodes_[old_child].next_same_first;
  nodes_[old_child].next_same_first = kNoRadixNode;
  if (*head == old_child) {
    *head = new_child;
    return;
  }
  RadixNodeId prev = *head;
  while (nodes_[prev].next_same_first != old_child) prev = nodes_[prev].next_same_first;
  nodes_[prev].next_same_first = new_child;
}

void RadixCache::UnlinkChild(RadixNodeId parent, RadixNodeId child) {
  const uint64_t key = ChildKey(parent, arena_[nodes_[child].key_begin]);
  RadixNodeId* head = children_.Find(key);
  FEATHER_DCHECK(head != nullptr, "UnlinkChild: child not linked");
  const RadixNodeId next = nodes_[child].next_same_first;
  if (*head == child) {
    if (next == kNoRadixNode) {
      children_.Erase(key);
    } else {
      *head = next;
    }
  } else {
    RadixNodeId prev = *head;
    while (nodes_[prev].next_same_first != child) prev = nodes_[prev].next_same_first;
    nodes_[prev].next_same_first = next;
  }
  nodes_[child].next_same_first = kNoRadixNode;
  --nodes_[parent].num_children;
}

// SGLang's _split_node: a new head node takes `child`'s place under its parent and owns the
// first head_len tokens; `child` keeps its id (and its touch) as the tail below the head.
RadixNodeId RadixCache::SplitNode(RadixNodeId child, uint32_t head_len) {
  const RadixNodeId head = AllocateNode();  // may move nodes_: take references afterwards
  Node& c = nodes_[child];
  Node& h = nodes_[head];
  h.key_begin = c.key_begin;
  h.key_len = head_len;
  h.parent = c.parent;
  h.lock_ref = c.lock_ref;
  h.end_depth = c.end_depth - (c.key_len - head_len);
  h.rank = c.rank;
  h.last_access = ++clock_;  // SGLang's new TreeNode() reads the clock after the child's touch
  ReplaceChild(c.parent, child, head);
  c.key_begin += head_len;
  c.key_len -= head_len;
  c.parent = head;
  LinkChild(head, child);
  return head;
}

RadixMatch RadixCache::MatchPrefix(std::span<const Token> key) {
  const uint64_t n = RoundToPage(key.size());
  RadixNodeId node = kRoot;
  uint64_t pos = 0;
  while (pos < n) {
    const RadixNodeId child = FindChild(node, key.data() + pos);
    if (child == kNoRadixNode) break;
    Touch(child);
    const Node& c = nodes_[child];
    const uint64_t limit = std::min<uint64_t>(c.key_len, n - pos);
    const uint64_t same =
        RoundToPage(FirstMismatch(arena_.data() + c.key_begin, key.data() + pos, limit));
    pos += same;
    if (same < c.key_len) {
      node = SplitNode(child, static_cast<uint32_t>(same));
      break;
    }
    node = child;
  }
  return RadixMatch{pos, node};
}

uint64_t RadixCache::PeekMatchTokens(std::span<const Token> key) const {
  const uint64_t n = RoundToPage(key.size());
  RadixNodeId node = kRoot;
  uint64_t pos = 0;
  while (pos < n) {
    const RadixNodeId child = FindChild(node, key.data() + pos);
    if (child == kNoRadixNode) break;
    const Node& c = nodes_[child];
    const uint64_t limit = std::min<uint64_t>(c.key_len, n - pos);
    const uint64_t same =
        RoundToPage(FirstMismatch(arena_.data() + c.key_begin, key.data() + pos, limit));
    pos += same;
    if (same < c.key_len) break;
    node = child;
  }
  return pos;
}

RadixInsert RadixCache::Insert(std::span<const Token> key) {
  const uint64_t n = RoundToPage(key.size());
  if (n == 0) return RadixInsert{0, kRoot};
  const RadixMatch match = MatchPrefix(key.first(n));
  if (match.matched_tokens == n) return RadixInsert{n, match.node};
  const uint64_t new_tokens = n - match.matched_tokens;
  FEATHER_CHECK(new_tokens <= std::numeric_limits<uint32_t>::max(), "RadixCache key too long");
  if (config_.capacity_tokens != 0 && TotalTokens() + new_tokens > config_.capacity_tokens) {
    IncLockRef(match.node);  // the path we extend must survive the eviction
    Evict(TotalTokens() + new_tokens - config_.capacity_tokens);
    DecLockRef(match.node);
  }
  MaybeCompactArena();
  FEATHER_CHECK(arena_.size() + new_tokens <= std::numeric_limits<uint32_t>::max(),
                "RadixCache token arena exceeds 2^32 tokens");
  const RadixNodeId leaf = AllocateNode();
  Node& l = nodes_[leaf];
  l.key_begin = static_cast<uint32_t>(arena_.size());
  l.key_len = static_cast<uint32_t>(new_tokens);
  l.parent = match.node;
  l.end_depth = n;
  l.rank = ++next_rank_;
  l.last_access = ++clock_;
  arena_.insert(arena_.end(), key.begin() + static_cast<std::ptrdiff_t>(match.matched_tokens),
                key.begin() + static_cast<std::ptrdiff_t>(n));
  LinkChild(match.node, leaf);
  evictable_tokens_ += new_tokens;
  PushCandidate(leaf);
  return RadixInsert{match.matched_tokens, leaf};
}

void RadixCache::IncLockRef(RadixNodeId node) {
  FEATHER_DCHECK(node < nodes_.size() && nodes_[node].parent != kFreeNode,
                 "IncLockRef on a freed node");
  while (node != kRoot) {
    Node& n = nodes_[node];
    if (n.lock_ref == 0) {
      evictable_tokens_ -= n.key_len;
      protected_tokens_ += n.key_len;
    }
    ++n.lock_ref;
    node = n.parent;
  }
}

void RadixCache::DecLockRef(RadixNodeId node) {
  FEATHER_DCHECK(node < nodes_.size() && nodes_[node].parent != kFreeNode,
                 "DecLockRef on a freed node");
  while (node != kRoot) {
    Node& n = nodes_[node];
    FEATHER_CHECK(n.lock_ref > 0, "DecLockRef below zero");
    const RadixNodeId parent = n.parent;
    if (--n.lock_ref == 0) {
      evictable_tokens_ += n.key_len;
      protected_tokens_ -= n.key_len;
      if (n.num_children == 0) PushCandidate(node);
    }
    node = parent;
  }
}

uint64_t RadixCache::Evict(uint64_t num_tokens) {
  uint64_t freed = 0;
  while (freed < num_tokens && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), LaterTick{});
    const HeapEntry entry = heap_.back();
    heap_.pop_back();
    const Node& n = nodes_[entry.node];
    // Stale entries: the node was freed (its id possibly reused: every new node gets a fresh
    // tick), touched again (a newer entry exists), locked, or grew a child.
    if (n.parent == kFreeNode || n.last_access != entry.tick || !IsEvictionCandidate(entry.node)) {
      continue;
    }
    freed += n.key_len;
    DeleteLeaf(entry.node);
  }
  return freed;
}

void RadixCache::DeleteLeaf(RadixNodeId leaf) {
  const RadixNodeId parent = nodes_[leaf].parent;
  const uint32_t len = nodes_[leaf].key_len;
  UnlinkChild(parent, leaf);
  evictable_tokens_ -= len;
  garbage_tokens_ += len;
  evicted_tokens_total_ += len;
  nodes_[leaf] = Node{};
  nodes_[leaf].parent = kFreeNode;
  free_nodes_.push_back(leaf);
  if (IsEvictionCandidate(parent)) PushCandidate(parent);
}

void RadixCache::MaybeCompactArena() {
  constexpr uint64_t kMinGarbageTokens = 4096;
  if (garbage_tokens_ < kMinGarbageTokens || garbage_tokens_ * 2 < arena_.size()) return;
  scratch_arena_.clear();
  for (RadixNodeId id = 1; id < nodes_.size(); ++id) {
    Node& n = nodes_[id];
    if (n.parent == kFreeNode) continue;
    const uint32_t begin = static_cast<uint32_t>(scratch_arena_.size());
    scratch_arena_.insert(scratch_arena_.end(), arena_.begin() + n.key_begin,
                          arena_.begin() + n.key_begin + n.key_len);
    n.key_begin = begin;
  }
  arena_.swap(scratch_arena_);
  garbage_tokens_ = 0;
}

size_t RadixCache::MemoryBytes() const {
  return nodes_.capacity() * sizeof(Node) + free_nodes_.capacity() * sizeof(RadixNodeId) +
         children_.MemoryBytes() + (arena_.capacity() + scratch_arena_.capacity()) * sizeof(Token) +
         heap_.capacity() * sizeof(HeapEntry);
}

void RadixCache::CheckInvariants() const {
  FEATHER_CHECK(nodes_[kRoot].parent == kNoRadixNode && nodes_[kRoot].key_len == 0,
                "root corrupted");
  std::vector<uint32_t> children_seen(nodes_.size(), 0);
  uint64_t evictable = 0;
  uint64_t protected_tokens = 0;
  uint64_t live_tokens = 0;
  size_t alive = 1;
  for (RadixNodeId id = 1; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (n.parent == kFreeNode) continue;
    ++alive;
    FEATHER_CHECK(n.parent < nodes_.size() && nodes_[n.parent].parent != kFreeNode,
                  "node's parent is not alive");
    FEATHER_CHECK(n.key_len > 0 && n.key_len % config_.page_size == 0,
                  "edge length is not a positive whole number of pages");
    FEATHER_CHECK(uint64_t{n.key_begin} + n.key_len <= arena_.size(), "edge outside the arena");
    FEATHER_CHECK(n.end_depth == nodes_[n.parent].end_depth + n.key_len, "end depth mismatch");
    FEATHER_CHECK(n.parent == kRoot || nodes_[n.parent].lock_ref >= n.lock_ref,
                  "a node is locked more than its parent");
    FEATHER_CHECK(n.last_access <= clock_, "access tick from the future");
    FEATHER_CHECK(FindChild(n.parent, arena_.data() + n.key_begin) == id,
                  "node not reachable from its parent by its first page");
    ++children_seen[n.parent];
    live_tokens += n.key_len;
    if (n.lock_ref == 0) {
      evictable += n.key_len;
    } else {
      protected_tokens += n.key_len;
    }
  }
  FEATHER_CHECK(alive == NodeCount(), "free list and node flags disagree");
  for (RadixNodeId id = 0; id < nodes_.size(); ++id) {
    if (nodes_[id].parent == kFreeNode) continue;
    FEATHER_CHECK(children_seen[id] == nodes_[id].num_children, "child count mismatch");
  }
  size_t chained = 0;
  children_.ForEach([&](uint64_t /*key*/, RadixNodeId head) {
    for (RadixNodeId c = head; c != kNoRadixNode; c = nodes_[c].next_same_first) ++chained;
  });
  FEATHER_CHECK(chained == alive - 1, "child map does not hold exactly the live nodes");
  FEATHER_CHECK(evictable == evictable_tokens_, "evictable token count mismatch");
  FEATHER_CHECK(protected_tokens == protected_tokens_, "protected token count mismatch");
  FEATHER_CHECK(live_tokens + garbage_tokens_ == arena_.size(), "arena accounting mismatch");
  // Every eviction candidate must have a live heap entry, or Evict would never find it.
  std::vector<uint8_t> in_heap(nodes_.size(), 0);
  for (const HeapEntry& e : heap_) {
    if (nodes_[e.node].parent != kFreeNode && nodes_[e.node].last_access == e.tick) {
      in_heap[e.node] = 1;
    }
  }
  for (RadixNodeId id = 1; id < nodes_.size(); ++id) {
    if (nodes_[id].parent != kFreeNode && IsEvictionCandidate(id)) {
      FEATHER_CHECK(in_heap[id], "an unlocked leaf is missing from the eviction heap");
    }
  }
}

}  // namespace feather
