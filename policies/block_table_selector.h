// block_table_selector.h: the paper's "PAT (vLLM Block Table)" baseline: requests are grouped by
// the vLLM prefix-caching block hashes they share, and groups that reuse the running batch's
// blocks are admitted first.
//
// State: every request's block-hash chain (BlockHashTable::ComputeChain, full blocks only) is
// computed once on arrival and stored in one flat arena; a BlockHashTable counts, per block, the
// waiting and running requests that reference it and keeps finished (and preempted) requests'
// blocks cached in vLLM's LRU free queue (capacity BlockHashConfig::free_capacity_blocks,
// 0 = unbounded).
//
// Ordering rule, computed by BeginRound() over the requests waiting at that moment. For each
// waiting request w with chain h[0..C):
//   cached(w)  = leading blocks of h that are cached (running-referenced or in the free queue);
//   running(w) = leading blocks of h referenced by at least one running request;
//   shared(w)  = leading blocks of h referenced by at least one other waiting or running request
//                (w's own reference excluded); running(w) <= shared(w).
// Requests with shared(w) > 0 are grouped by their deepest shared block hash h[shared(w) - 1]
// (members of a group have identical first shared(w) blocks). A group's cached depth is
// min(cached(w), shared(w)) and its running depth running(w), the same for every member. Order:
//   1. groups with running depth > 0 (they share blocks with the running batch), by cached
//      depth descending, then size descending, then earliest queue position of a member;
//   2. the other groups, by size descending, then earliest queue position;
//   3. requests with shared(w) = 0, in queue order.
// Inside a group, queue order. Queue order is arrival order, except that a preempted request goes
// back to the front (vLLM v1 prepends preempted requests). The order is fixed for the round:
// requests arriving or preempted after BeginRound() wait for the next round, and requests
// cancelled after it are skipped. Results never depend on hash-table iteration order.
//
// Transitions: Admit makes the request's blocks running-referenced (taking cached ones out of the
// free queue); OnFinish drops its references, its blocks going to the free queue tail first;
// OnPreempt returns it to the waiting front and frees its blocks as OnFinish does; OnCancel drops
// its waiting references.
//
// Incremental depths: each waiting request keeps its three depths (cached, running, shared) up
// to date as blocks change, so BeginRound only reads them. The block facts behind them are
// prefix-closed along a chain (block_hash_table.h; up to 64-bit hash collisions, which the
// grouping already ignores), so a depth d changes only when a block at its boundary changes:
// the first block lacking the fact (chain[d]) gains it and d advances, or the last block having
// it (chain[d - 1]) loses it and d retracts. Per depth, a waiting request therefore sits on two
// intrusive lists threaded through the table's record slots: the frontier list of chain[d] and
// the tip list of chain[d - 1]. After every table operation the selector reads the table's
// change log (slots whose facts changed while waiting requests reference them) and walks only
// those slots' lists, moving a depth by scanning the request's own chain of record slots (no
// hash probes). The decisions are those of the former BeginRound, which rescanned every waiting
// chain; the test keeps that algorithm as its reference. CheckInvariants() rescans.
//
// Memory: per chain block a hash and a record slot (12 bytes); per request id six list links;
// per table record slot a list head and a group index (8 bytes).
//
// Complexity (W waiting requests, C blocks per prompt, T prompt tokens, G groups in a round):
//   OnArrival O(T) to hash, O(C) table updates (hash probes) and O(C) to measure the newcomer;
//   Admit, OnFinish, OnPreempt, OnCancel O(C) table updates by slot (amortized, arena
//     compaction included); OnPreempt also O(C) to measure the returning request;
//   plus, for the other waiting requests, O(1) per list node on a block whose facts changed
//     and O(1) per block a depth moves: O(changes), zero when no waiting request's view changes;
//   BeginRound O(W + G log G): reads the depths, groups through the per-slot group index and
//     sorts the groups (G <= W: O(W log W) at worst, every request its own group);
//   Next O(1) amortized.
// Before incremental depths BeginRound was O(W·C) hash probes (the Mooncake conversation
// trace replay at time scale 1 went from about an hour to seconds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "policies/block_hash_table.h"
#include "policies/selector.h"

namespace feather {

// What BeginRound() measured for one waiting request, in blocks (see the header comment).
struct BlockRoundStats {
  uint32_t cached_blocks = 0;
  uint32_t running_blocks = 0;
  uint32_t shared_blocks = 0;
};

class BlockTableSelector final : public CandidateSelector {
 public:
  explicit BlockTableSelector(const BlockHashConfig& config = {});

  [[nodiscard]] std::string_view Name() const override { return "block-table"; }

  void OnArrival(const RequestInfo& request) override;
  void BeginRound() override;
  [[nodiscard]] std::optional<Candidate> Next() override;
  void Admit(RequestId id) override;
  void OnFinish(RequestId id) override;
  void OnPreempt(RequestId id) override;
  void OnCancel(RequestId id) override;

  [[nodiscard]] size_t NumWaiting() const override { return num_waiting_; }
  [[nodiscard]] size_t MemoryBytes() const override;

  // Introspection for tests, logs and the simulator's cache accounting.
  [[nodiscard]] const BlockHashTable& table() const { return table_; }
  // The request's block-hash chain (valid until the next mutating call).
  [[nodiscard]] std::span<const PrefixHash> Chain(RequestId id) const;
  // The order the last BeginRound() computed (entries may since have been admitted/cancelled).
  [[nodiscard]] std::span<const RequestId> RoundOrder() const { return order_; }
  // Stats of a request that was waiting at the last BeginRound(); nullopt otherwise.
  [[nodiscard]] std::optional<BlockRoundStats> RoundStats(RequestId id) const;
  // Checks every waiting request's depths against a rescan of its chain and the depth lists
  // against the depths (O(waiting chain blocks + record slots)); aborts on a violation.
  void CheckInvariants() const;

 private:
  enum class State : uint8_t { kAbsent, kWaiting, kRunning };
  // The three depths, in BlockRoundStats order; facts as BlockRecord names them.
  static constexpr int kCached = 0;
  static constexpr int kRunning = 1;
  static constexpr int kShared = 2;
  static constexpr int kDepths = 3;
  // List nodes per request: per depth, its frontier node (on chain[d]) and its tip node (on
  // chain[d - 1]). Node id = request id * kNodesPerRequest + depth * 2 + (tip ? 1 : 0).
  static constexpr uint32_t kNodesPerRequest = 2 * kDepths;

  struct Request {
    uint64_t chain_offset = 0;  // into arena_ and arena_slots_
    uint32_t chain_blocks = 0;
    RequestId prev = kNoRequest;  // waiting list, queue order
    RequestId next = kNoRequest;
    uint32_t depth[kDepths] = {};  // live while waiting
    uint64_t round = 0;            // round whose order holds it (0 = none)
    BlockRoundStats stats;         // valid when round == round_
    uint32_t round_group = 0;      // BeginRound scratch: group index, or kNoGroup
    State state = State::kAbsent;
  };
  struct Link {
    uint32_t prev = 0;
    uint32_t next = 0;
  };
  struct RoundGroup {
    uint32_t key_slot = 0;  // record slot of the group's deepest shared block
    uint32_t size = 0;
    uint32_t cached_blocks = 0;
    uint32_t running_blocks = 0;
    uint32_t first_index = 0;  // queue index of its first member (queue order = arrival order)
    uint32_t fill = 0;         // placement cursor into order_
  };

  [[nodiscard]] std::span<const PrefixHash> ChainOf(const Request& r) const {
    return {arena_.data() + r.chain_offset, r.chain_blocks};
  }
  [[nodiscard]] const uint32_t* SlotsOf(const Request& r) const {
    return arena_slots_.data() + r.chain_offset;
  }
  [[nodiscard]] std::span<const uint32_t> SlotSpan(const Request& r) const {
    return {SlotsOf(r), r.chain_blocks};
  }
  void PushBack(RequestId id);
  void PushFront(RequestId id);
  void Unlink(RequestId id);
  void ReleaseChain(RequestId id);

  // Depth maintenance (see the header comment).
  [[nodiscard]] static bool Holds(int depth, const BlockRecord& block);
  [[nodiscard]] uint32_t RescanDepth(const Request& r, int depth) const;
  // The slot whose list holds `node`, or kNil when the node is off every list (d = 0 or d = C).
  [[nodiscard]] uint32_t NodeSlot(uint32_t node) const;
  void LinkNode(uint32_t node);
  void UnlinkNode(uint32_t node);
  void SetDepth(RequestId id, int depth, uint32_t value);
  void MeasureAndLink(RequestId id);  // a request entering the waiting queue
  void UnlinkAll(RequestId id);       // a request leaving it
  void ApplyTableChanges();           // after every table operation

  BlockHashTable table_;
  std::vector<Request> requests_;      // indexed by request id
  std::vector<PrefixHash> arena_;      // chains back to back
  std::vector<uint32_t> arena_slots_;  // the table record slot of each arena_ hash
  std::vector<PrefixHash> arena_scratch_;
  std::vector<uint32_t> arena_slots_scratch_;
  uint64_t arena_garbage_ = 0;  // hashes of departed requests still in arena_
  RequestId head_ = kNoRequest;
  RequestId tail_ = kNoRequest;
  size_t num_waiting_ = 0;

  // Depth lists: list head per table record slot, links per node.
  std::vector<uint32_t> list_head_;
  std::vector<Link> links_;
  std::vector<uint32_t> visit_scratch_;

  // Round state (buffers reused across rounds: no allocation at steady state).
  uint64_t round_ = 0;
  std::vector<RequestId> order_;
  size_t cursor_ = 0;
  std::vector<RequestId> queue_scratch_;
  std::vector<RoundGroup> groups_;
  std::vector<uint32_t> group_rank_;
  // Record slot -> group index of this round; an entry counts only when that group's key_slot
  // is the slot, so the array is never cleared.
  std::vector<uint32_t> group_of_slot_;
};

}  // namespace feather
