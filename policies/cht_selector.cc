// cht_selector.cc: FindBest's answer translated into a selector proposal.
#include "policies/cht_selector.h"

namespace feather {

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
