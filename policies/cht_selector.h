// cht_selector.h: the Chunked Hash Tree as a CandidateSelector (Feather's selector).
//
// Proposals are FindBest's: the waiting request missing the fewest chunks from the working set
// of the running batch, with the prefix signal (tip before/after, peers) the stop policies read.
// Per-round cost: O(b) FindBest/AddToBatch calls for a batch of b admissions, each O(D) plus
// O(log q) per tournament node it repairs (O(1) when keys arrive in order), independent of how
// many requests wait below a node entering the working set (chunked_hash_tree.h); a round that
// skips s proposals (StopDecision::kSkip) adds s parks and, at the next round's start, s unparks,
// each O(D + log q). NumWaiting() counts the parked requests: they wait, only not this round.
#pragma once

#include <vector>

#include "cht/chunked_hash_tree.h"
#include "policies/selector.h"

namespace feather {

class ChtSelector final : public CandidateSelector {
 public:
  explicit ChtSelector(const ChtConfig& config = {}) : tree_(config) {}

  [[nodiscard]] std::string_view Name() const override { return "cht"; }
  void OnArrival(const RequestInfo& request) override {
    tree_.Insert(request.id, request.prompt_tokens);
  }
  // Unparks the requests the last round skipped (their insertion order kept).
  void BeginRound() override;
  [[nodiscard]] std::optional<Candidate> Next() override;
  void Admit(RequestId id) override { tree_.AddToBatch(id); }
  // Parks the proposal in the tree until the next BeginRound (ChunkedHashTree::Park).
  bool Skip(RequestId id) override;
  void OnFinish(RequestId id) override { tree_.Finish(id); }
  void OnPreempt(RequestId id) override { tree_.Requeue(id); }
  void OnCancel(RequestId id) override;
  [[nodiscard]] size_t NumWaiting() const override { return tree_.NumWaiting() + parked_.size(); }
  [[nodiscard]] size_t MemoryBytes() const override { return tree_.MemoryBytes(); }

  [[nodiscard]] const ChunkedHashTree& tree() const { return tree_; }

 private:
  ChunkedHashTree tree_;
  std::vector<RequestId> parked_;  // skipped this round (a cancelled one may have left since)
};

}  // namespace feather
