// chunked_hash_tree.h: the Chunked Hash Tree (CHT) of the paper, with a path-compressed layout.
//
// What it provides. The scheduler's prefix detector: waiting and active ("in the batch") requests
// represented by cumulative chunk-hash vectors; the working set of (level, hash) pairs covered by
// active requests; each waiting request's missing count (chunks absent from the working set) in a
// lazy min-heap; the shared prefix tip (deepest level common to all active requests); and
// FindBest, which proposes the waiting request with the fewest missing chunks together with the
// tip depth before/after admitting it and its peers (waiting requests sharing its prefix at the
// new depth). Semantics are exactly those of the paper's Appendix "Operations of Chunked Hash
// Tree"; ReferenceCht (reference_cht.h) is the brute-force statement of them and the
// differential tests hold the two equal after every operation.
//
// How it goes further than the paper. Cumulative hashes make the (level, hash) pairs a trie, and
// every chunk on a non-branching stretch of that trie has the same set of requests through it, so
// the same reference count, working-set membership and waiting set. The tree therefore stores
// maximal non-branching stretches as one node (like a radix tree over chunks): a 20K-token shared
// prefix is one node, not 400. AddToBatch and Finish touch O(D) nodes, D = compressed depth (2
// for N groups with unique suffixes), instead of O(C) chunks. Nodes split when a new request
// branches or ends inside one and merge back when the branch leaves.
//
// When to use it. One tree per scheduler; request ids are dense integers chosen by the caller
// (recycle them: per-request state is a flat array indexed by id). All prompts of one tree must
// use the same chunk size and hash scheme; InsertHashes takes precomputed cumulative hashes (trace
// block ids), which must be prefix-consistent (equal h_c implies equal h_1..h_{c-1}).
//
// Complexity (T tokens, C = ceil(T/K) chunks, D = compressed depth <= C, W waiting requests,
// W_n = waiting requests through a node that enters or leaves the working set):
//   Insert            O(T) hashing + O(log C) table probes + O(C) for the new leaf's chunks
//                     + O(D) + O(log W) heap push (+ O(W_n) when it splits a node)
//   InsertHashes      as Insert without the hashing
//   FindBest          O(1) when cached; else O(s log W) for s stale heap entries + O(D)
//   AddToBatch        O(D + sum W_n + u log W), u = requests whose missing count changed
//   Finish            O(D + sum W_n + u log W) + O(C) table erases for chunks no request keeps
//   Remove / Requeue  like Finish
// No operation allocates after warm-up (tables and per-id vectors keep their capacity).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/flat_hash_map.h"
#include "cht/prefix_hash.h"
#include "base/types.h"

namespace feather {

struct ChtConfig {
  uint32_t chunk_tokens = 50;  // the authors' value for the heuristic and bandit policies
  HashScheme hash_scheme = HashScheme::kStreaming;
  uint32_t expected_requests = 1024;  // capacity reserved up front (grows if exceeded)
  uint32_t expected_chunks = 1 << 16;
  // At least this many requests re-priced by one operation go into the sorted run instead of
  // one heap push each (a tuning knob; tests set it low to exercise both paths).
  uint32_t sorted_run_threshold = 64;
};

// FindBest's answer. Depths are in chunks. peers counts the waiting requests (the candidate
// included) whose hash at level tip_after equals the candidate's; at level 0 that is all of them.
struct ChtCandidate {
  RequestId request = kNoRequest;
  uint32_t tip_before = 0;
  uint32_t tip_after = 0;
  uint32_t peers = 0;
  uint32_t missing = 0;  // the candidate's missing count (the minimum over waiting requests)
  friend bool operator==(const ChtCandidate&, const ChtCandidate&) = default;
};

class ChunkedHashTree {
 public:
  explicit ChunkedHashTree(const ChtConfig& config = {});

  [[nodiscard]] const ChtConfig& config() const { return config_; }

  // Registers a waiting request from its prompt tokens. Precondition: `id` is not present.
  void Insert(RequestId id, std::span<const Token> tokens);
  // Registers a waiting request from its cumulative chunk hashes (e.g. a trace's block ids).
  void InsertHashes(RequestId id, std::span<const PrefixHash> hashes);

  // The waiting request with the minimum missing count (ties: earliest inserted), or nullopt when
  // none waits. Cached until the next mutation.
  [[nodiscard]] std::optional<ChtCandidate> FindBest();

  // Waiting -> active. Any waiting request may be admitted, not only FindBest's proposal.
  void AddToBatch(RequestId id);
  // Active -> gone (the request completed): updates the working set and tip, then forgets it.
  void Finish(RequestId id);
  // Waiting -> gone (cancelled before admission).
  void Remove(RequestId id);
  // Active -> waiting (preempted): keeps its original insertion order for tie-breaking.
  void Requeue(RequestId id);

  // Observers.
  [[nodiscard]] uint32_t TipLevel() const { return tip_level_; }
  [[nodiscard]] size_t NumWaiting() const { return num_waiting_; }
  [[nodiscard]] size_t NumActive() const { return active_ids_.size(); }
  [[nodiscard]] bool IsWaiting(RequestId id) const;
  [[nodiscard]] bool IsActive(RequestId id) const;
  [[nodiscard]] uint32_t MissingCount(RequestId id) const;  // precondition: waiting
  [[nodiscard]] uint32_t NumChunksOf(RequestId id) const;
  [[nodiscard]] size_t NumNodes() const { return nodes_.size() - free_nodes_.size(); }
  [[nodiscard]] size_t MemoryBytes() const;

  // Recomputes every count from scratch and aborts on any mismatch (tests and debug builds).
  void CheckInvariants() const;

 private:
  enum class State : uint8_t { kAbsent, kWaiting, kActive };

  // Hot per-request state (24 bytes); the hash vectors live apart in hashes_.
  struct RequestSlot {
    uint64_t seq = 0;                // insertion order, the FindBest tie-break
    uint32_t leaf = 0;               // node where the request's path ends (root when empty)
    uint32_t miss = 0;
    uint32_t epoch = 0;  // bumped whenever the request leaves the waiting state
    State state = State::kAbsent;
    bool dirty = false;  // missing count changed during the current operation
  };

  // A maximal stretch of chunk levels [start, end] through which the same requests pass.
  struct Node {
    uint32_t parent = 0;
    uint32_t first_child = kNoNode;
    uint32_t next_sibling = kNoNode;
    uint32_t prev_sibling = kNoNode;
    uint32_t start = 1;
    uint32_t end = 0;
    uint32_t members = 0;    // requests (waiting or active) through the node
    uint32_t active = 0;     // active requests through it: in the working set iff > 0
    uint32_t waiting = 0;    // waiting requests through it
    uint32_t terminals = 0;  // requests whose path ends at `end`
    uint32_t children = 0;
    [[nodiscard]] uint32_t Length() const { return end + 1 - start; }
  };

  // An entry of a node's waiting list; stale once the request's epoch moved on.
  struct Waiter {
    RequestId id;
    uint32_t epoch;
  };

  struct HeapEntry {
    uint64_t key;  // missing count << 40 | insertion sequence
    RequestId id;
    uint32_t epoch;
  };

  struct ChunkKey {
    PrefixHash hash;
    uint64_t level;
    friend bool operator==(const ChunkKey&, const ChunkKey&) = default;
  };
  struct ChunkKeyHash {
    uint64_t operator()(const ChunkKey& key) const {
      return MixBits(key.hash ^ (key.level * 0x9e3779b97f4a7c15ULL));
    }
  };

  static constexpr uint32_t kNoNode = 0xffffffffu;
  static constexpr uint32_t kRoot = 0;

  void InsertPrepared(RequestId id);
  [[nodiscard]] uint32_t DeepestExistingLevel(std::span<const PrefixHash> hashes) const;
  uint32_t SplitNode(uint32_t node, uint32_t cut_level, std::span<const PrefixHash> hashes);
  void AttachAsWaiting(RequestId id);
  void DetachFromTree(RequestId id);
  void FreeNode(uint32_t node, std::span<const PrefixHash> hashes);
  void MergeIntoOnlyChild(uint32_t node, std::span<const PrefixHash> hashes);
  void LeaveActive(RequestId id);
  void ExtendTip();
  void RepriceWaiters(uint32_t node, bool entering);
  void AddWaiter(uint32_t node, RequestId id);
  void CompactWaiters(uint32_t node);
  void PushDirty();
  void PushHeap(RequestId id);
  void CompactHeap();
  void AppendSortedRun();
  [[nodiscard]] bool IsCurrent(const HeapEntry& entry) const;
  [[nodiscard]] uint32_t DeepestActiveAncestor(uint32_t node) const;
  [[nodiscard]] RequestSlot& SlotFor(RequestId id);
  uint32_t NewNode();
  void LinkChild(uint32_t parent, uint32_t child);
  void UnlinkChild(uint32_t child);
  void ReplaceChild(uint32_t old_child, uint32_t new_child);

  ChtConfig config_;
  std::vector<RequestSlot> requests_;
  std::vector<std::vector<PrefixHash>> hashes_;  // per id; kept for table maintenance
  std::vector<Node> nodes_;
  std::vector<std::vector<Waiter>> waiters_;  // per node
  std::vector<uint32_t> free_nodes_;
  FlatHashMap<ChunkKey, uint32_t, ChunkKeyHash> chunk_to_node_;
  std::vector<HeapEntry> heap_;  // 4-ary min-heap on key: one cache line of children per level
  // Entries of a mass re-pricing (a node with many waiters entering or leaving the working set),
  // kept as one sorted run beside the heap: FindBest takes the smaller of the two fronts, and
  // popping the run is O(1). Live part: run_[run_head_, end).
  std::vector<HeapEntry> run_;
  std::vector<HeapEntry> run_scratch_;
  std::vector<HeapEntry> fresh_;
  size_t run_head_ = 0;
  std::vector<RequestId> dirty_;
  std::vector<RequestId> active_ids_;
  std::vector<uint32_t> active_position_;  // per id: index in active_ids_
  std::vector<uint32_t> path_;              // scratch for ExtendTip
  size_t num_waiting_ = 0;
  uint64_t next_seq_ = 0;
  uint32_t tip_level_ = 0;
  uint32_t tip_node_ = kRoot;
  std::optional<ChtCandidate> cached_best_;
  bool cache_valid_ = false;
};

}  // namespace feather
