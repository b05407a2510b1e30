// cht_selector.cc: FindBest's answer translated into a selector proposal.
#include "policies/cht_selector.h"

#include <algorithm>

namespace feather {

void ChtSelector::BeginRound() {
  for (const RequestId id : parked_) tree_.Unpark(id);
  parked_.clear();
}

bool ChtSelector::Skip(RequestId id) {
  tree_.Park(id);
  parked_.push_back(id);
  return true;
}

void ChtSelector::OnCancel(RequestId id) {
  if (tree_.IsParked(id)) parked_.erase(std::find(parked_.begin(), parked_.end(), id));
  tree_.Remove(id);
}

std::optional<Candidate> ChtSelector::Next() {
  const auto best = tree_.FindBest();
  if (!best) return std::nullopt;
  PrefixSignal signal;
  signal.tip_before_chunks = best->tip_before;
  signal.tip_after_chunks = best->tip_after;
  signal.peers = best->peers;
  signal.chunk_tokens = tree_.config().chunk_tokens;
  return Candidate{best->request, signal};
}

}  // namespace feather
