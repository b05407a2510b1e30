// lpm_selector.h: SGLang's "lpm" (longest prefix match) scheduling policy, and the request
// lifecycle it shares with SGLang's other cache-aware policy, DFS-weight.
//
// Provides RadixSelectorBase (waiting queue, running set and the RadixCache that models the KV
// prefix cache: Admit inserts the prompt and locks its path, OnFinish unlocks it so it stays
// cached but evictable, OnPreempt unlocks it and re-queues the request) and LpmSelector, which
// in BeginRound() matches every waiting request against the cache and orders the queue by
// matched prefix length, longest first (stable: ties keep arrival order), after SGLang's
// in-batch prefix caching check: a request whose cache match is <= 32 tokens is matched against
// a scratch tree of the requests examined before it this round; if that match is >= 32 tokens it
// is deprioritized (moved to the end, arrival order among themselves), else it joins the tree.
// Like SGLang, a request is matched on its prompt minus the last token (one token must always be
// computed). Optionally (off by default, as in the paper) more than 128 waiting requests turn
// the round into plain FCFS without any matching, as SGLang's _determine_active_policy does.
//
// Use it as the SGLang LPM baseline. It ranks the whole queue once per round; Next() then walks
// that order, skipping requests cancelled since.
//
// Prompts. A request's prompt arrives as a view of two pieces (selector.h: the shared head the
// workload stores once, then the request's own tail). The radix cache matches and inserts
// contiguous keys, and every round matches every waiting prompt, so the selector keeps a
// contiguous copy of a two-piece prompt from arrival until the request finishes or is
// cancelled, and borrows a one-piece prompt as it is. Walking the two pieces inside the radix
// cache instead would put a piece switch in its innermost compare loop (memcmp of edge labels,
// 91 % of an LPM round) for every match of every round; the copy costs one memcpy per arrival,
// and its memory is bounded by the requests alive at once (waiting + running), which this
// selector's rounds touch in full anyway (O(W·T) per round, below).
//
// Complexity per round, W waiting requests of at most T tokens: O(W·T + W log W) (a cache match
// and at most one scratch-tree match and insert per request, then one sort). Next() amortized
// O(1); Admit O(T) (cache insert and lock); OnFinish / OnPreempt O(path length); OnArrival,
// OnCancel O(1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/types.h"
#include "policies/radix_cache.h"
#include "policies/selector.h"

namespace feather {

// SGLang's literals (schedule_policy.py).
inline constexpr uint64_t kInBatchPrefixCachingCheckThresholdTokens = 32;
inline constexpr uint64_t kInBatchPrefixCachingDeprioritizeThresholdTokens = 32;
inline constexpr size_t kLpmFcfsFallbackQueueLength = 128;

class RadixSelectorBase : public CandidateSelector {
 public:
  void OnArrival(const RequestInfo& request) override;
  // Drops cancelled entries from the queue, then ranks it (ComputeOrder).
  void BeginRound() override;
  [[nodiscard]] std::optional<Candidate> Next() override;
  void Admit(RequestId id) override;
  void OnFinish(RequestId id) override;
  void OnPreempt(RequestId id) override;
  void OnCancel(RequestId id) override;
  [[nodiscard]] size_t NumWaiting() const override { return num_waiting_; }
  [[nodiscard]] RoundWork LastRoundWork() const override { return last_round_work_; }
  [[nodiscard]] size_t MemoryBytes() const override;

  [[nodiscard]] const RadixCache& cache() const { return cache_; }
  // The rest of this round's ranking, from the next proposal on (for logs and golden tests).
  [[nodiscard]] std::vector<RequestId> PendingOrder() const;
  // Cached prefix tokens the last ranking matched for `id` (0 when it was not matched).
  [[nodiscard]] uint64_t MatchedPrefixTokens(RequestId id) const {
    return id < matched_tokens_.size() ? matched_tokens_[id] : 0;
  }

 protected:
  explicit RadixSelectorBase(const RadixCacheConfig& cache_config);

  struct QueueEntry {
    RequestId id;
    uint32_t seq;  // the request's enqueue count when this entry was made
  };

  // Ranks waiting_ (compacted: every entry current, arrival order) into order_ as indices into
  // waiting_, and records matched_tokens_ for the requests it matched.
  virtual void ComputeOrder() = 0;

  // The key SGLang matches: the prompt without its last token.
  [[nodiscard]] std::span<const Token> MatchKey(RequestId id) const {
    const std::span<const Token> prompt = prompts_[id];
    return prompt.empty() ? prompt : prompt.first(prompt.size() - 1);
  }

  RadixCache cache_;
  std::vector<QueueEntry> waiting_;  // arrival (and re-queue) order; stale entries until compacted
  std::vector<uint32_t> order_;      // this round's ranking, indices into waiting_
  std::vector<uint64_t> matched_tokens_;  // by request id

 private:
  enum class State : uint8_t { kUnknown, kWaiting, kRunning };

  [[nodiscard]] bool IsCurrent(const QueueEntry& e) const {
    return states_[e.id] == State::kWaiting && seqs_[e.id] == e.seq;
  }
  void Enqueue(RequestId id);

  void ReleasePrompt(RequestId id);

  std::vector<std::span<const Token>> prompts_;  // by request id: the prompt, borrowed or copies_
  std::vector<std::vector<Token>> copies_;       // by request id: a live two-piece prompt's copy
  size_t copy_tokens_ = 0;                       // Σ copies_[id].size()
  std::vector<State> states_;
  std::vector<uint32_t> seqs_;
  std::vector<RadixNodeId> lock_nodes_;  // a running request's locked last node
  size_t cursor_ = 0;
  size_t num_waiting_ = 0;
  RoundWork last_round_work_;
};

struct LpmConfig {
  uint32_t page_size = 1;
  uint64_t cache_capacity_tokens = 0;  // 0 = unbounded
  bool fcfs_fallback = false;          // SGLang: FCFS when more than 128 requests wait
};

class LpmSelector final : public RadixSelectorBase {
 public:
  explicit LpmSelector(const LpmConfig& config = {});

  [[nodiscard]] std::string_view Name() const override { return "lpm"; }
  [[nodiscard]] size_t MemoryBytes() const override;
  // Whether the last BeginRound() ranked the queue in FCFS order because of the fallback.
  [[nodiscard]] bool LastRoundWasFcfs() const { return last_round_fcfs_; }
  // Whether the last BeginRound() deprioritized `id` by the in-batch prefix caching check.
  [[nodiscard]] bool WasDeprioritized(RequestId id) const;

 private:
  void ComputeOrder() override;

  LpmConfig config_;
  RadixCache in_batch_tree_;  // SGLang's waiting_queue_radix_tree, reset every round
  struct SortKey {
    uint64_t key;  // ascending = longer match first; all ones = deprioritized
    uint32_t index;
  };
  std::vector<SortKey> sort_keys_;
  std::vector<RequestId> deprioritized_;
  bool last_round_fcfs_ = false;
};

}  // namespace feather
