// cht_selector.h: the Chunked Hash Tree as a CandidateSelector (Feather's selector).
//
// Proposals are FindBest's: the waiting request missing the fewest chunks from the working set
// of the running batch, with the prefix signal (tip before/after, peers) the stop policies read.
// Per-round cost: O(b) FindBest/AddToBatch calls for a batch of b admissions, each O(D) plus
// O(log q) per tournament node it repairs (O(1) when keys arrive in order), independent of how
// many requests wait below a node entering the working set (chunked_hash_tree.h); a round that
// skips s proposals (StopDecision::kSkip) adds s parks and, at the next round's start, s unparks,
// each O(D + log q). NumWaiting() counts the parked requests: they wait, only not this round.
// With retain_cached, a completion is a Retain (O(D)) and each eviction report of a retained
// request a Forget (as a Finish); the tree then holds the cached requests too, at most one per
// cached block (sim/kv/kv_cache.h: a retained request is reported once it owns no block).
// Retention trades the paper's homogeneity signal for cache reuse: where every group's prefix
// stays cached, requests of other groups miss as few chunks as the batch's own, and the stop
// policies see heterogeneous proposals (results/policy-suite/2026-12-07-trace-load/README.md).
#pragma once

#include <vector>

#include "cht/chunked_hash_tree.h"
#include "policies/selector.h"

namespace feather {

class ChtSelector final : public CandidateSelector {
 public:
  // retain_cached: a finished request stays in the working set (ChunkedHashTree::Retain) until
  // the engine's prefix cache evicts one of its blocks (OnCacheEvicted), so a waiting request
  // that continues it (a conversation's next turn) misses only what the cache lost. Off: the
  // paper's working set, the running batch alone.
  explicit ChtSelector(const ChtConfig& config = {}, bool retain_cached = false)
      : tree_(config), retain_cached_(retain_cached) {}

  [[nodiscard]] std::string_view Name() const override { return "cht"; }
  void OnArrival(const RequestInfo& request) override {
    if (tree_.IsRetained(request.id)) tree_.Forget(request.id);  // a recycled id
    tree_.Insert(request.id, request.prompt_tokens);
  }
  // Unparks the requests the last round skipped (their insertion order kept).
  void BeginRound() override;
  [[nodiscard]] std::optional<Candidate> Next() override;
  void Admit(RequestId id) override { tree_.AddToBatch(id); }
  // Parks the proposal in the tree until the next BeginRound (ChunkedHashTree::Park).
  bool Skip(RequestId id) override;
  void OnFinish(RequestId id) override {
    if (retain_cached_) {
      tree_.Retain(id);
    } else {
      tree_.Finish(id);
    }
  }
  [[nodiscard]] bool WantsCacheEvictions() const override { return retain_cached_; }
  void OnCacheEvicted(RequestId id) override {
    if (tree_.IsRetained(id)) tree_.Forget(id);
  }
  void OnPreempt(RequestId id) override { tree_.Requeue(id); }
  void OnCancel(RequestId id) override;
  [[nodiscard]] size_t NumWaiting() const override { return tree_.NumWaiting() + parked_.size(); }
  [[nodiscard]] size_t MemoryBytes() const override { return tree_.MemoryBytes(); }

  [[nodiscard]] const ChunkedHashTree& tree() const { return tree_; }

 private:
  ChunkedHashTree tree_;
  bool retain_cached_ = false;
  std::vector<RequestId> parked_;  // skipped this round (a cancelled one may have left since)
};

}  // namespace feather
