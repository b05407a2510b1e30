// cht_selector.cc: FindBest's answer translated into a selector proposal.
#include "policies/cht_selector.h"

#include <algorithm>

namespace feather {

void ChtSelector::OnArrival(const RequestInfo& request) {
  tree_.Insert(request.id, request.prompt_tokens);
  if (cached_ != nullptr) {
    if (cached_->IsRetained(request.id)) cached_->Forget(request.id);  // a recycled id
    cached_->Insert(request.id, request.prompt_tokens);
  }
}

void ChtSelector::BeginRound() {
  for (const RequestId id : parked_) OnBothTrees([id](ChunkedHashTree& t) { t.Unpark(id); });
  parked_.clear();
}

void ChtSelector::Admit(RequestId id) {
  OnBothTrees([id](ChunkedHashTree& t) { t.AddToBatch(id); });
}

bool ChtSelector::Skip(RequestId id) {
  OnBothTrees([id](ChunkedHashTree& t) { t.Park(id); });
  parked_.push_back(id);
  return true;
}

void ChtSelector::OnFinish(RequestId id) {
  tree_.Finish(id);
  if (cached_ != nullptr) cached_->Retain(id);
}

void ChtSelector::OnPreempt(RequestId id) {
  OnBothTrees([id](ChunkedHashTree& t) { t.Requeue(id); });
}

void ChtSelector::OnCancel(RequestId id) {
  if (tree_.IsParked(id)) parked_.erase(std::find(parked_.begin(), parked_.end(), id));
  OnBothTrees([id](ChunkedHashTree& t) { t.Remove(id); });
}

std::optional<Candidate> ChtSelector::Next() {
  auto best = tree_.FindBest();
  if (!best) return std::nullopt;
  // The header's steps 2 and 3: a proposal that shares with the batch no more than every request
  // shares gives way to the request the cache serves best.
  if (cached_ != nullptr &&
      tree_.NumChunksOf(best->request) - best->missing <= tree_.LevelSharedByAll()) {
    best = cached_->FindBest();
  }
  PrefixSignal signal;
  signal.tip_before_chunks = best->tip_before;
  signal.tip_after_chunks = best->tip_after;
  signal.peers = best->peers;
  signal.chunk_tokens = tree_.config().chunk_tokens;
  return Candidate{best->request, signal};
}

}  // namespace feather
