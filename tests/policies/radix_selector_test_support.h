// radix_selector_test_support.h: hand-made token segments and a driver that owns prompts for the
// radix-cache and radix-selector tests (LPM, DFS-weight).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <map>
#include <optional>
#include <vector>

#include "policies/selector.h"

namespace feather::testing {

using Tokens = std::vector<Token>;
using Ids = std::vector<RequestId>;

// Tokens base, base+1, ..., base+len-1: disjoint, readable segments for hand-made cases.
inline Tokens Seg(Token base, int len) {
  Tokens t;
  for (int i = 0; i < len; ++i) t.push_back(base + i);
  return t;
}

inline Tokens Cat(std::initializer_list<Tokens> parts) {
  Tokens t;
  for (const Tokens& p : parts) t.insert(t.end(), p.begin(), p.end());
  return t;
}

// Owns the prompts (selectors keep spans into them) and drives a round-ranked selector.
template <typename Selector, typename Config>
class RadixSelectorDriver {
 public:
  explicit RadixSelectorDriver(const Config& config = {}) : selector_(config) {}

  void Arrive(RequestId id, Tokens prompt) {
    const Tokens& stored = prompts_[id] = std::move(prompt);
    selector_.OnArrival(RequestInfo{id, stored, kNoPrefixGroup});
  }
  // BeginRound, then the whole ranking.
  Ids Round() {
    selector_.BeginRound();
    return selector_.PendingOrder();
  }
  // Admits the next proposal, which must be `expected`.
  void AdmitNext(RequestId expected) {
    const std::optional<Candidate> c = selector_.Next();
    ASSERT_TRUE(c.has_value());
    ASSERT_EQ(c->id, expected);
    EXPECT_FALSE(c->signal.has_value());
    selector_.Admit(c->id);
  }
  // Caches `prompts` (in this order) by running and finishing them as requests.
  void Cache(RequestId first_id, const std::vector<Tokens>& prompts) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      Arrive(first_id + static_cast<RequestId>(i), prompts[i]);
    }
    (void)Round();
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::optional<Candidate> c = selector_.Next();
      ASSERT_TRUE(c.has_value());
      selector_.Admit(c->id);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      selector_.OnFinish(first_id + static_cast<RequestId>(i));
    }
  }
  Selector& selector() { return selector_; }

 private:
  std::map<RequestId, Tokens> prompts_;
  Selector selector_;
};

}  // namespace feather::testing
