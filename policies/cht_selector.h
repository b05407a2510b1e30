// cht_selector.h: the Chunked Hash Tree as a CandidateSelector (Feather's selector).
//
// Proposals are FindBest's: the waiting request missing the fewest chunks from the working set
// of the running batch, with the prefix signal (tip before/after, peers) the stop policies read.
// Per-round cost: O(b) FindBest/AddToBatch calls for a batch of b admissions, each O(D) plus
// O(log q) per tournament node it repairs (O(1) when keys arrive in order), independent of how
// many requests wait below a node entering the working set (chunked_hash_tree.h); a round that
// skips s proposals (StopDecision::kSkip) adds s parks and, at the next round's start, s unparks,
// each O(D + log q). NumWaiting() counts the parked requests: they wait, only not this round.
// With retain_cached, a second tree holds the engine's cached requests too: a completion is a
// Retain there (O(D)) and each eviction report of a retained request a Forget (as a Finish); it
// then holds at most one retained request per cached block (sim/kv/kv_cache.h: a retained
// request is reported once it owns no cached block). The ranking reads both trees:
//   1. the paper's tree names its best (fewest chunks missing from the batch's working set);
//   2. if that request shares more with the batch than the prefix every present request shares
//      (tree().LevelSharedByAll()), it is the proposal: the batch's group comes first, as in the
//      paper, whatever else the cache holds;
//   3. otherwise nothing waiting continues the batch's group, and the proposal is the cached
//      tree's best: the request missing the fewest chunks from the cache (a conversation's next
//      turn, another group's cached prefix), as SGLang's LPM ranks.
// The prefix signal (tip before/after, peers) counts the batch alone in both trees. Ranking by
// the cache alone (one retained tree) lost the batch's group wherever every group's prefix stays
// cached (results/policy-suite/2026-12-07-trace-load/README.md): other groups' requests missed as
// few chunks as the batch's own. Cost: every operation runs on both trees, and a proposal of
// step 3 reads two FindBests.
#pragma once

#include <memory>
#include <vector>

#include "cht/chunked_hash_tree.h"
#include "policies/selector.h"

namespace feather {

class ChtSelector final : public CandidateSelector {
 public:
  // retain_cached: a finished request stays in the second tree's working set
  // (ChunkedHashTree::Retain) until the engine's prefix cache evicts one of its blocks
  // (OnCacheEvicted), so a waiting request that continues it (a conversation's next turn)
  // misses only what the cache lost; the ranking reads both trees (above). Off: the paper's
  // working set, the running batch alone (scenarios default to on: SelectorOptions).
  explicit ChtSelector(const ChtConfig& config = {}, bool retain_cached = false)
      : tree_(config),
        cached_(retain_cached ? std::make_unique<ChunkedHashTree>(config) : nullptr) {}

  [[nodiscard]] std::string_view Name() const override { return "cht"; }
  void OnArrival(const RequestInfo& request) override;
  // Unparks the requests the last round skipped (their insertion order kept).
  void BeginRound() override;
  [[nodiscard]] std::optional<Candidate> Next() override;
  void Admit(RequestId id) override;
  // Parks the proposal in the tree until the next BeginRound (ChunkedHashTree::Park).
  bool Skip(RequestId id) override;
  void OnFinish(RequestId id) override;
  [[nodiscard]] bool WantsCacheEvictions() const override { return cached_ != nullptr; }
  void OnCacheEvicted(RequestId id) override {
    if (cached_ != nullptr && cached_->IsRetained(id)) cached_->Forget(id);
  }
  void OnPreempt(RequestId id) override;
  void OnCancel(RequestId id) override;
  [[nodiscard]] size_t NumWaiting() const override { return tree_.NumWaiting() + parked_.size(); }
  [[nodiscard]] size_t MemoryBytes() const override {
    return tree_.MemoryBytes() + (cached_ != nullptr ? cached_->MemoryBytes() : 0);
  }

  // The paper's tree: waiting requests and the batch.
  [[nodiscard]] const ChunkedHashTree& tree() const { return tree_; }
  // With retain_cached, the tree that also holds the cached (retained) requests; else null.
  [[nodiscard]] const ChunkedHashTree* cached_tree() const { return cached_.get(); }

 private:
  // Runs `op` on the paper's tree, then on the cached one if there is one: every request
  // operation but a Retain / Forget goes to both, so that they wait and batch the same ids.
  template <typename Op>
  void OnBothTrees(Op&& op) {
    op(tree_);
    if (cached_ != nullptr) op(*cached_);
  }

  ChunkedHashTree tree_;
  std::unique_ptr<ChunkedHashTree> cached_;
  std::vector<RequestId> parked_;  // skipped this round (a cancelled one may have left since)
};

}  // namespace feather
