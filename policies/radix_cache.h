// radix_cache.h: a token-level radix tree of cached KV prefixes with SGLang's RadixCache semantics.
//
// Provides RadixCache: MatchPrefix (longest cached prefix of a token sequence; a match that ends
// inside an edge splits that edge, so the returned node covers exactly the matched prefix, as
// SGLang's _match_prefix_helper does), Insert (with the same split on a partial edge match),
// IncLockRef / DecLockRef along the path to the root (SGLang's lock_ref: locked tokens are
// "protected", the rest "evictable"), and Evict, which frees least-recently-used unlocked leaves
// (a parent that becomes an unlocked leaf is eligible next). With page_size > 1 keys are cut to a
// whole number of pages and matched page by page, and children are keyed by their first page.
//
// Use it as the KV-cache model of the SGLang baselines (LpmSelector, DfsWeightSelector) or for any
// "how much of this prompt is cached" question that must follow SGLang's eviction behaviour.
//
// Recency is a logical clock, never wall time: every node touched by an operation (root excluded)
// gets the next tick, in the order SGLang touches them (path order; on a split the tail keeps the
// touch and the new head gets the following tick; a new leaf gets a tick). Ticks are unique, so
// LRU order has no ties and results are deterministic.
//
// Layout: nodes live in one flat vector addressed by 32-bit ids with a free list; an edge is a
// span of one shared token arena (compacted when evicted garbage outweighs live tokens); a child
// is found through one FlatHashMap keyed by (parent id, first token), with the rare siblings that
// share a first token (page_size > 1 only) chained. Evict pops a lazily validated min-heap of
// (tick, leaf) entries instead of rescanning the tree.
//
// Complexity (T = key length in tokens, P = page size, D = nodes on the matched path):
//   MatchPrefix, PeekMatchTokens  O(T + D·P): one token compare per matched token, one hash
//                                 probe per node; at most one split. No allocation after warm-up.
//   Insert                        O(T) plus eviction when a capacity is set; amortized O(1) per
//                                 new token for arena growth and compaction.
//   IncLockRef / DecLockRef       O(D).
//   Evict(n)                      O((k + s) log H): k leaves freed, s stale heap entries skipped,
//                                 H heap entries (H <= 2 nodes + 1024, else rebuilt in O(nodes)).
//   EvictableTokens, ProtectedTokens, TotalTokens  O(1).
//
// Node ids stay valid until the node is evicted; a split keeps the id on the tail half, so a
// locked node (a running request's last node) keeps its id and end depth for as long as it is
// locked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/flat_hash_map.h"
#include "base/types.h"

namespace feather {

using RadixNodeId = uint32_t;
inline constexpr RadixNodeId kNoRadixNode = 0xffffffffu;

struct RadixCacheConfig {
  uint32_t page_size = 1;        // tokens per KV page; SGLang uses 1 (default) or 16
  uint64_t capacity_tokens = 0;  // Insert evicts to stay within it; 0 = unbounded
};

struct RadixMatch {
  uint64_t matched_tokens = 0;      // a multiple of the page size
  RadixNodeId node = kNoRadixNode;  // the node ending exactly at matched_tokens (the root for 0)
};

struct RadixInsert {
  uint64_t prefix_tokens = 0;       // tokens of the key that were already cached (SGLang's return)
  RadixNodeId node = kNoRadixNode;  // the node ending at the (page-rounded) end of the key
};

class RadixCache {
 public:
  explicit RadixCache(const RadixCacheConfig& config = {});

  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;
  RadixCache(RadixCache&&) = default;
  RadixCache& operator=(RadixCache&&) = default;

  // Removes every node; keeps the allocated storage (for per-round scratch trees).
  void Reset();

  // Longest cached prefix of `key` (cut to whole pages). Touches the matched path and splits the
  // last edge when the match ends inside it.
  [[nodiscard]] RadixMatch MatchPrefix(std::span<const Token> key);
  // The same length without touching or splitting anything (for reports and checks).
  [[nodiscard]] uint64_t PeekMatchTokens(std::span<const Token> key) const;

  // Caches `key` (cut to whole pages): matches it (touch and split as above), then hangs the
  // uncached rest below the matched node as one new leaf. With a capacity, first evicts LRU
  // leaves (never the matched path) so the new tokens fit; if locked tokens leave no room the
  // cache goes over capacity rather than refuse.
  RadixInsert Insert(std::span<const Token> key);

  // Lock (unlock) every node from `node` up to the root. A locked node is never evicted.
  void IncLockRef(RadixNodeId node);
  void DecLockRef(RadixNodeId node);

  // Frees least-recently-used unlocked leaves until at least `num_tokens` tokens are freed or no
  // unlocked leaf is left. Returns the tokens freed.
  uint64_t Evict(uint64_t num_tokens);

  [[nodiscard]] uint64_t EvictableTokens() const { return evictable_tokens_; }
  [[nodiscard]] uint64_t ProtectedTokens() const { return protected_tokens_; }
  [[nodiscard]] uint64_t TotalTokens() const { return evictable_tokens_ + protected_tokens_; }
  [[nodiscard]] uint64_t EvictedTokensTotal() const { return evicted_tokens_total_; }
  [[nodiscard]] const RadixCacheConfig& config() const { return config_; }

  [[nodiscard]] RadixNodeId Root() const { return kRoot; }
  [[nodiscard]] size_t NodeCount() const { return nodes_.size() - free_nodes_.size(); }
  // Upper bound on node ids (size side tables indexed by node id with it).
  [[nodiscard]] size_t NodeIdBound() const { return nodes_.size(); }
  [[nodiscard]] RadixNodeId Parent(RadixNodeId node) const { return nodes_[node].parent; }
  // Tokens from the root to the end of `node`.
  [[nodiscard]] uint64_t EndDepthTokens(RadixNodeId node) const { return nodes_[node].end_depth; }
  [[nodiscard]] uint32_t LockRef(RadixNodeId node) const { return nodes_[node].lock_ref; }
  [[nodiscard]] uint64_t LastAccess(RadixNodeId node) const { return nodes_[node].last_access; }
  // Position of `node` among its siblings in SGLang's child-dict order (smaller = older key).
  [[nodiscard]] uint64_t SiblingRank(RadixNodeId node) const { return nodes_[node].rank; }
  [[nodiscard]] std::span<const Token> EdgeTokens(RadixNodeId node) const {
    return {arena_.data() + nodes_[node].key_begin, nodes_[node].key_len};
  }

  [[nodiscard]] size_t MemoryBytes() const;
  // Recomputes every derived quantity from scratch and aborts on a mismatch. O(nodes + tokens).
  void CheckInvariants() const;

 private:
  static constexpr RadixNodeId kRoot = 0;
  static constexpr RadixNodeId kFreeNode = 0xfffffffeu;  // parent of a node on the free list

  struct Node {
    uint32_t key_begin = 0;  // edge tokens: arena_[key_begin, key_begin + key_len)
    uint32_t key_len = 0;
    RadixNodeId parent = kNoRadixNode;
    RadixNodeId next_same_first = kNoRadixNode;  // sibling with the same first token
    uint32_t num_children = 0;
    uint32_t lock_ref = 0;
    uint64_t last_access = 0;
    uint64_t end_depth = 0;
    uint64_t rank = 0;
  };
  struct HeapEntry {
    uint64_t tick;
    RadixNodeId node;
  };

  [[nodiscard]] static uint64_t ChildKey(RadixNodeId parent, Token first) {
    return (uint64_t{parent} << 32) | static_cast<uint32_t>(first);
  }
  [[nodiscard]] uint64_t RoundToPage(uint64_t tokens) const {
    return tokens - tokens % config_.page_size;
  }
  [[nodiscard]] RadixNodeId FindChild(RadixNodeId parent, const Token* key) const;
  [[nodiscard]] bool IsEvictionCandidate(RadixNodeId node) const {
    const Node& n = nodes_[node];
    return node != kRoot && n.num_children == 0 && n.lock_ref == 0;
  }
  void Touch(RadixNodeId node);
  void PushCandidate(RadixNodeId node);
  void RebuildHeap();
  RadixNodeId AllocateNode();
  void LinkChild(RadixNodeId parent, RadixNodeId child);
  void ReplaceChild(RadixNodeId parent, RadixNodeId old_child, RadixNodeId new_child);
  void UnlinkChild(RadixNodeId parent, RadixNodeId child);
  RadixNodeId SplitNode(RadixNodeId child, uint32_t head_len);
  void DeleteLeaf(RadixNodeId leaf);
  void MaybeCompactArena();

  RadixCacheConfig config_;
  std::vector<Node> nodes_;
  std::vector<RadixNodeId> free_nodes_;
  FlatHashMap<uint64_t, RadixNodeId> children_;  // (parent, first token) -> first such child
  std::vector<Token> arena_;
  std::vector<Token> scratch_arena_;  // compaction target, kept to avoid reallocation
  std::vector<HeapEntry> heap_;       // min-heap on tick; entries validated when popped
  uint64_t clock_ = 0;
  uint64_t next_rank_ = 0;
  uint64_t evictable_tokens_ = 0;
  uint64_t protected_tokens_ = 0;
  uint64_t garbage_tokens_ = 0;  // arena tokens no live edge refers to
  uint64_t evicted_tokens_total_ = 0;
};

}  // namespace feather
