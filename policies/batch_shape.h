// batch_shape.h: the batch's decode shape as a stop policy sees it (StopContext's batch fields,
// read by policies whose WantsBatchShape() is true: mpc, converge), computed in one place for
// every caller: feather's simulator and the vLLM plugin (python/feather/vllm/scheduler.py, through
// the `feather.BatchShapeTracker` binding).
//
// A round of BuildBatch sees a batch (the running requests, then those admitted this round, in
// admission order) and one candidate at a time. The shape is:
//   - batch_kv_tokens: Σ sequence tokens of the batch (the KV a decode step reads);
//   - batch_unique_kv_tokens: KV blocks in use × block size (the caller's KV pool tells);
//   - batch_common_prefix_tokens: leading tokens every batch request shares. At the round's start
//     the caller's KV cache tells (vLLM's num_common_prefix_blocks rule: leading blocks of the
//     first request held by every running request); after each admission it shrinks to what the
//     admitted request shares with the first one, up to its prefix-cache hit (the blocks it holds
//     physically in common with the batch);
//   - kv_block_tokens, the block size;
//   - for the candidate: its sequence tokens, its prefix-cache hit, and the common prefix the
//     batch would keep with it admitted (as above);
//   - the largest prefix group at each depth of StopContext::kPrefixGroupDepths: requests are
//     keyed by the chain hash that covers their first `depth` tokens; the group that first reached
//     the largest count (in admission order) is the largest. Its shared prefix: when it becomes
//     the largest, the leading blocks of its newest member that at least `count` batch requests
//     hold (Source::HeldPrefixBlocks); each later member shrinks it to what that member's chain
//     shares with the group's. candidate_in: the candidate's key at that depth is the group's.
//     `waiting`: requests waiting with the group's key, counted at every depth across rounds
//     from the caller's Waiting(+1/-1) calls (arrival, preemption / admission, cancel; the
//     simulator and the vLLM plugin's queue make them); 0 for a caller that does not. `nested`:
//     the group lies within the first depth's largest group (its members' first-depth key is
//     that group's; always true at the first depth).
//
// Requests are read through a block-hash chain (hash i covers blocks [0, i]; equal hashes name
// equal prefixes) and a Source that says which leading blocks are physically shared.
// `BatchShape` is the bookkeeping alone: the simulator rebuilds it each round from its running
// requests with its own KV cache as the Source (Simulator::ShapeSource: reference counts of its
// paged blocks). `BatchShapeTracker` owns the chains itself, for a caller whose KV cache feather
// cannot read block by block (the vLLM plugin): requests enter when they start running and leave
// when they finish or are preempted.
//
// Where the tracker can differ from the simulator on the same batch (everything else is the same
// code on the same inputs):
//   - HeldPrefixBlocks counts requests whose chain holds the same hash (logical sharing), where
//     the simulator counts holders of the same physical block. They differ when two requests hold
//     equal-hash blocks in different physical blocks (a request admitted while another with the
//     same prompt was still prefilling it in chunks allocates its own copies of the blocks not yet
//     cached), and the simulator also stops at the end of the blocks allocated so far (a request
//     part-way through a chunked prefill), which the tracker does not.
//   - The chains are what the caller gives. The plugin gives vLLM's hashes of the full blocks of
//     a request's tokens (`Request.block_hashes`); the simulator's prompt chains also hash a
//     prompt's trailing partial block, so on prompts whose length is not a multiple of the block
//     size the simulator's group keys and shared prefixes can reach one block further.
//   - The round's starting common prefix and the candidate's cache hit come from the caller's KV
//     cache (the plugin reads vLLM's block reference counts and its prefix-cache lookup).
//
// Complexity: Add/Admit O(depths + blocks compared), with O(1) expected hash probes; Fill
// O(depths + blocks compared); BatchShapeTracker::Enter/Leave O(chain blocks), BeginRound
// O(batch × depths + blocks compared). No allocation once the maps have grown (the tracker's
// Enter copies the chain).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/flat_hash_map.h"
#include "base/prompt_view.h"
#include "base/types.h"
#include "policies/stop_policy.h"

namespace feather {

class BatchShape {
 public:
  // What BatchShape reads about a batch request.
  class Source {
   public:
    virtual ~Source() = default;
    // The request's block-hash chain; must stay valid through the round.
    [[nodiscard]] virtual ChainView ChainOf(RequestId id) const = 0;
    // Leading blocks of `id`'s chain whose KV at least `holders` batch requests hold.
    [[nodiscard]] virtual uint32_t HeldPrefixBlocks(RequestId id, uint32_t holders) const = 0;
  };

  static constexpr size_t kDepths = StopContext::kPrefixGroupDepths.size();

  explicit BatchShape(uint32_t block_tokens) : block_tokens_(block_tokens) {}

  // Starts a round over an empty batch.
  void Clear();
  // Adds a running request at the round's start (in admission order).
  void AddRunning(RequestId id, uint32_t sequence_tokens, const Source& source) {
    Add(id, sequence_tokens, source);
  }
  // After the running requests: the leading tokens all of them share, as the KV cache says.
  void SetCommonPrefixTokens(uint32_t tokens) { prefix_tokens_ = tokens; }
  // Fills `context`'s batch-shape fields for candidate `id` (cache hit `cached_tokens`; the pool
  // has `used_blocks` in use). Returns the common prefix the batch would keep with it admitted.
  uint32_t Fill(StopContext& context, RequestId id, uint32_t sequence_tokens,
                uint32_t cached_tokens, uint64_t used_blocks, const Source& source) const;
  // The candidate was admitted (its KV blocks allocated); `prefix_after_tokens` is Fill's answer.
  void Admit(RequestId id, uint32_t sequence_tokens, uint32_t prefix_after_tokens,
             const Source& source) {
    Add(id, sequence_tokens, source);
    prefix_tokens_ = prefix_after_tokens;
  }

  [[nodiscard]] uint32_t block_tokens() const { return block_tokens_; }
  [[nodiscard]] uint64_t kv_tokens() const { return kv_tokens_; }

  // Waiting requests by group key at every depth the chain reaches, kept across rounds (Clear
  // keeps them): a request starts waiting (+1: arrival, preemption) or stops (-1: admission,
  // cancellation). O(depths) hash probes.
  void Waiting(ChainView chain, int delta);

 private:
  static constexpr uint32_t kNoPrefix = 0xffffffffu;
  struct Group {
    PrefixHash key = 0;
    uint32_t requests = 0;
    uint32_t prefix_tokens = 0;
    RequestId member = kNoRequest;  // a request of the largest group
  };
  [[nodiscard]] bool GroupKey(ChainView chain, size_t depth, PrefixHash& key) const;
  void Add(RequestId id, uint32_t sequence_tokens, const Source& source);
  [[nodiscard]] uint32_t SharedPrefixTokens(RequestId id, uint32_t cached_tokens,
                                            const Source& source) const;

  uint32_t block_tokens_;
  uint64_t kv_tokens_ = 0;
  uint32_t prefix_tokens_ = kNoPrefix;  // kNoPrefix: empty batch
  RequestId front_ = kNoRequest;        // the batch's first request
  std::array<Group, kDepths> groups_{};
  std::array<FlatHashMap<PrefixHash, uint32_t>, kDepths> counts_;
  // Group key (any depth: a chain hash names its length too) -> waiting requests.
  FlatHashMap<PrefixHash, uint32_t> waiting_;
};

// BatchShape over chains it owns (see the file comment for where it differs from the simulator).
// Ids are the caller's (dense small integers keep its arrays small).
class BatchShapeTracker final : private BatchShape::Source {
 public:
  explicit BatchShapeTracker(uint32_t block_tokens) : shape_(block_tokens) {}

  // `id` starts running, at the end of the batch order, with block-hash chain `chain`. An id
  // already in is moved to the end with its new chain.
  void Enter(RequestId id, std::span<const PrefixHash> chain);
  // `id` finished or was preempted (no-op if it is not in).
  void Leave(RequestId id);
  [[nodiscard]] bool Contains(RequestId id) const {
    return id < entries_.size() && entries_[id].in;
  }
  [[nodiscard]] size_t size() const { return order_.size(); }
  // Requests in, in batch order.
  [[nodiscard]] std::span<const RequestId> members() const { return order_; }

  // Starts a round over the requests in: `sequence_tokens[i]` is the i-th member's sequence
  // length now; `common_prefix_tokens` the leading tokens all of them share as the caller's KV
  // cache says (< 0: the tracker's own HeldPrefixBlocks of the first member).
  void BeginRound(std::span<const uint32_t> sequence_tokens, int64_t common_prefix_tokens = -1);
  // StopContext's batch fields for a candidate (not in the tracker) with chain `chain`.
  uint32_t Fill(StopContext& context, RequestId id, std::span<const PrefixHash> chain,
                uint32_t sequence_tokens, uint32_t cached_tokens, uint64_t used_blocks);
  // The candidate last filled was admitted: it enters, and the round's shape takes it.
  void Admit(RequestId id, std::span<const PrefixHash> chain, uint32_t sequence_tokens);

  // A request with `chain` starts (+1) or stops (-1) waiting: BatchShape::Waiting.
  void Waiting(std::span<const PrefixHash> chain, int delta) {
    shape_.Waiting(ChainView(chain), delta);
  }

  [[nodiscard]] const BatchShape& shape() const { return shape_; }

 private:
  struct Entry {
    bool in = false;
    std::vector<PrefixHash> chain;
  };
  [[nodiscard]] ChainView ChainOf(RequestId id) const override;
  [[nodiscard]] uint32_t HeldPrefixBlocks(RequestId id, uint32_t holders) const override;
  void SetChain(RequestId id, std::span<const PrefixHash> chain);

  BatchShape shape_;
  std::vector<Entry> entries_;                 // by id
  std::vector<RequestId> order_;               // batch order
  FlatHashMap<PrefixHash, uint32_t> holders_;  // chain hash -> requests in holding it
  // The last candidate filled and its prefix after admission (Admit reuses it).
  RequestId last_candidate_ = kNoRequest;
  uint32_t last_prefix_after_ = 0;
  bool round_open_ = false;
};

}  // namespace feather
