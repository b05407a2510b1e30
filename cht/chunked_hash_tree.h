// chunked_hash_tree.h: the Chunked Hash Tree (CHT) of the paper, with a path-compressed layout
// and a tournament over the trie for FindBest.
//
// What it provides. The scheduler's prefix detector: waiting and active ("in the batch") requests
// represented by cumulative chunk-hash vectors; the working set of (level, hash) pairs covered by
// active requests; each waiting request's missing count (chunks absent from the working set); the
// shared prefix tip (deepest level common to all active requests); and FindBest, which proposes
// the waiting request with the fewest missing chunks together with the tip depth before/after
// admitting it and its peers (waiting requests sharing its prefix at the new depth). Semantics are
// exactly those of the paper's Appendix "Operations of Chunked Hash Tree"; ReferenceCht
// (reference_cht.h) is the brute-force statement of them and the differential tests hold the two
// equal after every operation.
//
// Beyond the paper: retained requests. A completed request may be Retain()ed instead of
// Finish()ed: it leaves the batch but stays in the working set until Forget(), for a scheduler
// whose engine still caches its KV (policies/cht_selector.h), so that a waiting request that
// continues it misses only what the cache lost. The tip and peers are the batch's alone. In the
// text below "active" nodes are those of the working set (batch and retained requests); each node
// also counts the batch's requests through it (Node::batch), which the tip reads. Without
// retained requests the two coincide and the paper's semantics are unchanged.
//
// Path compression. Cumulative hashes make the (level, hash) pairs a trie, and every chunk on a
// non-branching stretch of that trie has the same set of requests through it, so the same
// reference count, working-set membership and waiting set. The tree therefore stores maximal
// non-branching stretches as one node (like a radix tree over chunks): a 20K-token shared prefix
// is one node, not 400. Nodes split when a new request branches or ends inside one and merge back
// when the branch leaves.
//
// The tournament (why no missing count is ever updated). A node is active (in the working set)
// iff an active request passes through it, so the active nodes are closed upwards: every path
// is an active top part and an inactive bottom part, and a waiting request r with c(r) chunks
// whose deepest active ancestor-or-self is node a misses exactly c(r) - end(a) chunks. Call a
// the request's owner and the waiting requests a node owns its domain: its own terminals plus
// everything below its inactive children (for an inactive node: its whole waiting subtree). The
// order inside one domain is by the static key (c(r), insertion order), which no working-set
// change alters; only which node owns a request changes. So each node n keeps
//   best(n)  = the minimum static key over its domain (none when empty), and
//   queue(n) = a lazy priority queue holding one entry per terminal waiting at n and one per
//              inactive child c with a best (key best(c)),
// and a global heap holds, for every active node a (the root counts as active) with a best, the
// key best(a) - end(a) << 40, which is (missing count, insertion order). FindBest is the global
// heap's top. Invariants, checked by CheckInvariants():
//   I1 best(n) = the minimum over queue(n)'s current entries = the brute-force domain minimum;
//   I2 every node n with a best has exactly one current entry: in queue(parent) if n is inactive,
//      in the global heap if n is active or the root; entries are current while the node's
//      stamp (bumped whenever its best, activity or parent changes) equals the entry's;
//   I3 a terminal entry is current while its request waits in the same epoch.
// An operation changes queues and activity only along one request's path, and best(n) depends
// only on queue(n), so it repairs bottom-up along that path and stops at the first node whose
// best and activity did not change (or that stayed active: only the global heap saw it). When a
// node with W waiters enters the working set nothing is re-priced: its entry moves from its
// parent's queue to the global heap, O(log) once, where a per-request structure pays O(W).
// Queues are two sorted runs (pushes in key order append; pops advance a head: O(1)) beside a
// 4-ary heap for pushes that fit neither run (the second run takes an ascending sequence that
// starts below the first run's back, e.g. preempted requests requeued in admission order); stale
// entries are skipped when they reach a front and the queue is rebuilt once stale entries
// outnumber live ones.
//
// When to use it. One tree per scheduler; request ids are dense integers below 2^31 chosen by
// the caller (recycle them: per-request state is a flat array indexed by id). All prompts of one
// tree must use the same chunk size and hash scheme; InsertHashes takes precomputed cumulative
// hashes (trace block ids), which must be prefix-consistent (equal h_c implies equal h_1..h_{c-1}).
//
// Complexity (T tokens, C = ceil(T/K) chunks, D = compressed depth <= C, q = queue size along
// the path, which is O(children + terminals) of a node; a pop from a run is O(1)):
//   Insert            O(T) hashing + O(log C) table probes + O(C) for the new leaf's chunks
//                     + O(D) counts + O(log q) per node whose best improves (usually none)
//   InsertHashes      as Insert without the hashing
//   FindBest          O(1) when cached; else O(s log A) for s stale global entries, A = active
//                     nodes with a best (the deepest active ancestor is the top's node: no walk)
//   AddToBatch        O(D) counts + O(log q) per repaired node: O(1) amortized per admission when
//                     keys arrive in order, whatever the number of waiters
//   Finish            O(D + log q) per repaired node + O(C) erases of chunks no request keeps
//   Remove / Requeue  like Finish
//   MissingCount      O(D) (computed on demand: chunks minus the deepest active ancestor's end)
// No operation allocates after warm-up (tables, queues and per-id vectors keep their capacity).
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
namespace cht_internal {
// Tournament keys are (chunks or missing count) << kSeqBits | insertion order.
inline constexpr int kSeqBits = 40;
}  // namespace cht_internal

struct ChtConfig {
  uint32_t chunk_tokens = 50;  // the authors' value for the heuristic and bandit policies
  // kAes where the CPU has AES instructions, else kStriped: every token read once, at about
  // half and about 1.3x XXH3's time (cht/prefix_hash.h); kStreaming is the paper's Alg.
  // ComputeHashes. Decisions do not depend on the scheme (up to 64-bit collisions).
  HashScheme hash_scheme = DefaultHashScheme();
  uint32_t expected_requests = 1024;  // capacity reserved up front (grows if exceeded)
  uint32_t expected_chunks = 1 << 16;
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

  // Registers a waiting request from its prompt tokens (a view: a shared head and the request's
  // own tail, or any contiguous span). Precondition: `id` is not present.
  void Insert(RequestId id, PromptView tokens);
  // Registers a waiting request from its cumulative chunk hashes (e.g. a trace's block ids).
  void InsertHashes(RequestId id, std::span<const PrefixHash> hashes);

  // The waiting request with the minimum missing count (ties: earliest inserted), or nullopt when
  // none waits. Cached until the next mutation. Defined below, inline: a scheduling round calls
  // it once per admission, and inlined its answer stays in registers (returned through memory,
  // it was read back by wider loads than it was stored with, which stalls store forwarding).
  [[nodiscard]] std::optional<ChtCandidate> FindBest();

  // Waiting -> active. Any waiting request may be admitted, not only FindBest's proposal.
  void AddToBatch(RequestId id);
  // Active -> gone (the request completed): updates the working set and tip, then forgets it.
  void Finish(RequestId id);
  // Active -> retained (the request completed, and its KV stays in the engine's prefix cache):
  // out of the batch (the tip and peers count the batch alone) but still in the working set, so
  // waiting requests that continue its prompt miss only what the cache does not hold. O(D) plus
  // the tip's re-extension; no tournament entry changes.
  void Retain(RequestId id);
  // Retained -> gone (the cache evicted the request's KV): like Finish for the working set.
  void Forget(RequestId id);
  // Waiting -> gone (cancelled before admission).
  void Remove(RequestId id);
  // Active -> waiting (preempted): keeps its original insertion order for tie-breaking.
  void Requeue(RequestId id);
  // Waiting -> parked: out of FindBest's reach (and of the waiting and peer counts) until
  // Unpark, but still in the tree: a scheduling round that passes over a proposal parks it, so
  // that FindBest names the next one, and unparks it when the round ends. Unpark restores it
  // with its original insertion order. Both O(D + log q) per repaired node, like Requeue.
  // Remove also takes a parked request; AddToBatch does not.
  void Park(RequestId id);
  void Unpark(RequestId id);

  // Observers.
  [[nodiscard]] uint32_t TipLevel() const { return tip_level_; }
  [[nodiscard]] size_t NumWaiting() const { return num_waiting_; }
  [[nodiscard]] size_t NumActive() const { return active_ids_.size(); }  // the batch
  [[nodiscard]] size_t NumRetained() const { return num_retained_; }
  [[nodiscard]] bool IsWaiting(RequestId id) const;
  [[nodiscard]] bool IsActive(RequestId id) const;
  [[nodiscard]] bool IsParked(RequestId id) const;
  [[nodiscard]] bool IsRetained(RequestId id) const;
  [[nodiscard]] uint32_t MissingCount(RequestId id) const;  // precondition: waiting
  [[nodiscard]] uint32_t NumChunksOf(RequestId id) const;
  // The deepest level through which every present request passes (waiting, parked, in the batch
  // or retained): the prefix all of them share, 0 when none is common. O(1): stretches are
  // maximal, so it is the end of the root's only child when the root has one and no request
  // ends at the root.
  [[nodiscard]] uint32_t LevelSharedByAll() const;
  [[nodiscard]] size_t NumNodes() const { return nodes_.size() - free_nodes_.size(); }
  [[nodiscard]] size_t MemoryBytes() const;

  // Recomputes every count from scratch and aborts on any mismatch (tests and debug builds).
  void CheckInvariants() const;

 private:
  enum class State : uint8_t { kAbsent, kWaiting, kActive, kParked, kRetained };

  // Hot per-request state (24 bytes); the hash vectors live apart in hashes_.
  struct RequestSlot {
    uint64_t seq = 0;    // insertion order, the FindBest tie-break
    uint32_t leaf = 0;   // node where the request's path ends (root when empty)
    uint32_t epoch = 0;  // bumped whenever the request leaves the waiting state (I3)
    State state = State::kAbsent;
  };

  // A maximal stretch of chunk levels [start, end] through which the same requests pass, with its
  // tournament state. 64 bytes: one cache line.
  struct Node {
    uint32_t parent = 0;
    uint32_t first_child = kNoNode;
    uint32_t next_sibling = kNoNode;
    uint32_t prev_sibling = kNoNode;
    uint32_t start = 1;
    uint32_t end = 0;
    uint32_t members = 0;    // requests (waiting or active) through the node
    uint32_t active = 0;     // active or retained requests through it: in the working set iff > 0
    uint32_t waiting = 0;    // waiting requests through it
    uint32_t terminals = 0;  // requests whose path ends at `end`
    uint32_t children = 0;
    uint32_t stamp = 0;           // see I2 in the header comment; survives the node's reuse
    uint64_t best_key = kNoKey;   // best(n): chunks << 40 | insertion order, or kNoKey
    RequestId best = kNoRequest;  // the request holding best_key
    uint32_t batch = 0;  // active requests through it (retained ones excluded): the tip's count
    [[nodiscard]] uint32_t Length() const { return end + 1 - start; }
  };
  static_assert(sizeof(Node) == 64, "a node is one cache line");

  // An entry of a node's queue or of the global heap. `ref` is a node, or a request id with
  // kRequestBit set (a terminal); `stamp` is the node's stamp or the request's epoch when pushed.
  struct Entry {
    uint64_t key;
    uint32_t ref;
    uint32_t stamp;
  };

  // A sorted run of entries; the live part is entries[head, end), pops advance head (O(1)).
  struct Run {
    std::vector<Entry> entries;
    uint32_t head = 0;
    [[nodiscard]] bool TryAppend(const Entry& entry);
    [[nodiscard]] size_t Live() const { return entries.size() - head; }
    void Clear() {
      entries.clear();
      head = 0;
    }
  };

  // queue(n): two sorted runs beside a 4-ary heap (one cache line of children per level) for
  // pushes that fit neither run's key order.
  struct Queue {
    Run run;
    Run run2;
    std::vector<Entry> heap;
    void Clear() {
      run.Clear();
      run2.Clear();
      heap.clear();
    }
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
  static constexpr uint64_t kNoKey = ~uint64_t{0};
  static constexpr uint32_t kRequestBit = 0x80000000u;

  void InsertPrepared(RequestId id);
  void ReleaseHashes(RequestId id);
  [[nodiscard]] uint32_t DeepestExistingLevel(ChainView hashes) const;
  uint32_t SplitNode(uint32_t node, uint32_t cut_level, ChainView hashes);
  void AttachAsWaiting(RequestId id, uint32_t segment_top);
  [[nodiscard]] uint32_t DetachFromTree(RequestId id, uint32_t* segment_top);
  void FreeNode(uint32_t node, ChainView hashes);
  void MergeIntoOnlyChild(uint32_t node, ChainView hashes);
  [[nodiscard]] uint32_t LeaveActive(RequestId id);
  void DetachAndRepair(RequestId id, uint32_t segment_top);
  void RemoveFromActiveList(RequestId id);
  void LeaveWaiting(RequestId id, State to);
  void ExtendTip();
  [[nodiscard]] uint32_t DeepestActiveAncestor(uint32_t node) const;
  [[nodiscard]] RequestSlot& SlotFor(RequestId id);
  uint32_t NewNode();
  void LinkChild(uint32_t parent, uint32_t child);
  void UnlinkChild(uint32_t child);
  void ReplaceChild(uint32_t old_child, uint32_t new_child);

  // The tournament.
  [[nodiscard]] uint64_t TerminalKey(RequestId id) const;
  // The tournament's per-step helpers are forced inline (chunked_hash_tree.cc): an admission
  // runs each once or twice, and calls cost as much as their bodies.
  [[nodiscard]] bool IsCurrent(const Entry& entry) const;
  // IsCurrent of a node's entry (the global heap holds only those).
  [[nodiscard]] bool IsCurrentNode(const Entry& entry) const {
    return nodes_[entry.ref].stamp == entry.stamp;
  }
  uint32_t DropStaleFront(Run& run) const;
  void PushQueue(uint32_t node, const Entry& entry);
  void CompactQueue(uint32_t node);
  [[nodiscard]] bool RefreshBest(uint32_t node);
  void Publish(uint32_t node);
  void PushGlobal(const Entry& entry);
  void Repair(uint32_t from, uint32_t segment_top);
  [[gnu::noinline]] void AddToBatchGeneral(RequestId id);
  void DropStaleGlobalTops();

  ChtConfig config_;
  std::vector<RequestSlot> requests_;
  // Hash vectors, per id while present (for table maintenance): a request's hashes are its
  // shared head's (shared_[shared_of_[id]], when it has one) followed by its own (hashes_[id]).
  // A prompt view whose head carries a key (base/prompt_view.h: the workload's prompt store sets
  // it) has the hashes of its head's full chunks computed once per (key, chunks) and shared by
  // every present request with that head; the state after them (PrefixHashResume) lets each
  // request hash only its own chunks. An entry lives while a present request uses it.
  struct SharedHashes {
    std::vector<PrefixHash> hashes;
    PrefixHashResume resume;
    uint64_t memo_key = 0;
    uint32_t refs = 0;
  };
  static constexpr uint32_t kNoShared = 0xffffffffu;
  [[nodiscard]] ChainView HashesOf(RequestId id) const {
    const uint32_t shared = shared_of_[id];
    return shared == kNoShared ? ChainView(hashes_[id])
                               : ChainView(shared_[shared].hashes, hashes_[id]);
  }
  std::vector<std::vector<PrefixHash>> hashes_;  // per id: own hashes
  std::vector<uint32_t> shared_of_;              // per id: shared_ slot, or kNoShared
  std::vector<SharedHashes> shared_;
  std::vector<uint32_t> free_shared_;
  FlatHashMap<uint64_t, uint32_t> shared_index_;  // (head key, chunks) -> shared_ slot
  std::vector<Node> nodes_;
  std::vector<Queue> queues_;  // per node
  std::vector<uint32_t> free_nodes_;
  FlatHashMap<ChunkKey, uint32_t, ChunkKeyHash> chunk_to_node_;
  std::vector<Entry> global_;  // 4-ary min-heap of active nodes' bests, keyed by missing count
  std::vector<RequestId> active_ids_;
  std::vector<uint32_t> active_position_;  // per id: index in active_ids_
  std::vector<uint32_t> path_;              // scratch for ExtendTip
  size_t num_waiting_ = 0;
  size_t num_retained_ = 0;
  uint64_t next_seq_ = 0;
  uint32_t active_nodes_ = 0;  // nodes with active > 0 (the root excluded): bounds global_
  uint32_t tip_level_ = 0;
  uint32_t tip_node_ = kRoot;
  std::optional<ChtCandidate> cached_best_;
  bool cache_valid_ = false;
};

// The global heap's top names the owner of the best waiting request: its deepest active ancestor
// (or the root), so the candidate is read off that node without a walk.
inline std::optional<ChtCandidate> ChunkedHashTree::FindBest() {
  if (num_waiting_ == 0) return std::nullopt;
  if (cache_valid_) return cached_best_;
  if (!IsCurrentNode(global_.front())) DropStaleGlobalTops();
  const Entry& top = global_.front();
  const uint32_t owner = top.ref;
  const Node& node = nodes_[owner];
  ChtCandidate result;
  result.request = node.best;
  result.tip_before = tip_level_;
  result.missing = static_cast<uint32_t>(top.key >> cht_internal::kSeqBits);
  if (!active_ids_.empty()) {
    // The batch's part of the candidate's path is prefix-closed; at levels <= tip it can only be
    // the tip chain, so the new tip is min(tip, deepest batch level on the path). Without
    // retained requests the owner is that level's node; with them, the owner may lie below it,
    // on a retained-only stretch.
    uint32_t in_batch = owner;
    while (in_batch != kRoot && nodes_[in_batch].batch == 0) in_batch = nodes_[in_batch].parent;
    const Node& b = nodes_[in_batch];
    const uint32_t batch_end = b.end;  // 0 for the root
    if (batch_end <= tip_level_) {
      result.tip_after = batch_end;
      result.peers = in_batch == kRoot ? static_cast<uint32_t>(num_waiting_) : b.waiting;
    } else {
      result.tip_after = tip_level_;
      result.peers =
          tip_node_ == kRoot ? static_cast<uint32_t>(num_waiting_) : nodes_[tip_node_].waiting;
    }
  } else {
    result.peers = static_cast<uint32_t>(num_waiting_);
  }
  cached_best_ = result;
  cache_valid_ = true;
  return result;
}

}  // namespace feather
