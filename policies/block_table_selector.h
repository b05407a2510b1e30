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
// Complexity (W waiting requests, C blocks per prompt, T prompt tokens): OnArrival O(T) to hash
// plus O(C) table updates; Admit, OnFinish, OnPreempt, OnCancel O(C) expected (amortized, arena
// compaction included); BeginRound O(W·C + W log W) — one hash probe per block until the
// request's cached/running/shared prefixes all end, plus sorting the groups; Next O(1) amortized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/flat_hash_map.h"
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

 private:
  enum class State : uint8_t { kAbsent, kWaiting, kRunning };

  struct Request {
    uint64_t chain_offset = 0;  // into arena_
    uint32_t chain_blocks = 0;
    RequestId prev = kNoRequest;  // waiting list, queue order
    RequestId next = kNoRequest;
    uint64_t round = 0;        // round whose order holds it (0 = none)
    BlockRoundStats stats;     // valid when round == round_
    uint32_t round_group = 0;  // BeginRound scratch: group index, or kNoGroup
    State state = State::kAbsent;
  };
  struct RoundGroup {
    uint32_t size = 0;
    uint32_t cached_blocks = 0;
    uint32_t running_blocks = 0;
    uint32_t first_index = 0;  // queue index of its first member (queue order = arrival order)
    uint32_t fill = 0;         // placement cursor into order_
  };

  [[nodiscard]] std::span<const PrefixHash> ChainOf(const Request& r) const {
    return {arena_.data() + r.chain_offset, r.chain_blocks};
  }
  void PushBack(RequestId id);
  void PushFront(RequestId id);
  void Unlink(RequestId id);
  void ReleaseChain(RequestId id);
  [[nodiscard]] BlockRoundStats Measure(std::span<const PrefixHash> chain) const;

  BlockHashTable table_;
  std::vector<Request> requests_;  // indexed by request id
  std::vector<PrefixHash> arena_;  // chains back to back
  std::vector<PrefixHash> arena_scratch_;
  uint64_t arena_garbage_ = 0;  // hashes of departed requests still in arena_
  RequestId head_ = kNoRequest;
  RequestId tail_ = kNoRequest;
  size_t num_waiting_ = 0;

  // Round state (buffers reused across rounds: no allocation at steady state).
  uint64_t round_ = 0;
  std::vector<RequestId> order_;
  size_t cursor_ = 0;
  std::vector<RequestId> queue_scratch_;
  std::vector<RoundGroup> groups_;
  std::vector<uint32_t> group_rank_;
  FlatHashMap<PrefixHash, uint32_t> group_of_hash_;
};

}  // namespace feather
