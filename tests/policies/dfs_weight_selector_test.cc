// dfs_weight_selector_test.cc: SGLang's DFS-weight policy on small hand-made trees: heavier
// subtrees first, a node's own requests after its subtrees (post-order), ties in child-insertion
// order, no FCFS fallback, and the cache lifecycle it shares with LPM.
#include "policies/dfs_weight_selector.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "tests/policies/radix_selector_test_support.h"

namespace feather {
namespace {

using testing::Cat;
using testing::Ids;
using testing::Seg;
using testing::Tokens;
using Driver = testing::RadixSelectorDriver<DfsWeightSelector, DfsWeightConfig>;

const Tokens kA = Seg(1000, 10);
const Tokens kB = Seg(2000, 10);

// Cached tree: root -> A (10 tokens) -> {A2 (10), A3 (10)}; root -> B+B5 (20 tokens, one edge).
TEST(DfsWeightSelectorTest, HeavierSubtreeFirstAndNodeRequestsInPostOrder) {
  Driver d;
  d.Cache(100, {Cat({kA, Seg(1200, 10)}), Cat({kA, Seg(1300, 10)}), Cat({kB, Seg(2500, 10)})});
  d.Arrive(0, Cat({kB, Seg(2500, 10), Seg(9000, 3)}));  // last node B+B5
  d.Arrive(1, Cat({kA, Seg(1200, 10), Seg(9100, 3)}));  // last node A2
  d.Arrive(2, Cat({kA, Seg(1300, 10), Seg(9200, 3)}));  // last node A3
  d.Arrive(3, Cat({kA, Seg(1200, 10), Seg(9300, 3)}));  // last node A2
  d.Arrive(4, Seg(9900, 5));                            // no match: hangs off the root
  d.Arrive(5, Cat({kA, Seg(9400, 3)}));                 // last node A (internal)
  // Weights: A2 2, A3 1, A 4, B+B5 1. Root's children: A (4) before B+B5 (1); inside A: A2 (2)
  // before A3 (1); A's own request after both; the root's request last.
  EXPECT_EQ(d.Round(), (Ids{1, 3, 2, 5, 0, 4}));
  EXPECT_EQ(d.selector().MatchedPrefixTokens(0), 20u);
  EXPECT_EQ(d.selector().MatchedPrefixTokens(5), 10u);
  EXPECT_EQ(d.selector().MatchedPrefixTokens(4), 0u);

  // Two more requests under B+B5 and one whose match ends inside that edge (splitting B off as
  // its own node) bring B's subtree to 4, level with A's: the tie goes to A, the older key.
  d.Arrive(6, Cat({kB, Seg(2500, 10), Seg(9500, 3)}));
  d.Arrive(7, Cat({kB, Seg(2500, 10), Seg(9600, 3)}));
  d.Arrive(8, Cat({kB, Seg(9700, 3)}));  // match ends inside B+B5: splits it, last node B
  EXPECT_EQ(d.Round(), (Ids{1, 3, 2, 5, 0, 6, 7, 8, 4}));
  d.Arrive(9, Cat({kB, Seg(2500, 10), Seg(9800, 3)}));
  EXPECT_EQ(d.Round(), (Ids{0, 6, 7, 9, 8, 1, 3, 2, 5, 4}));  // B (5) now outweighs A (4)
}

TEST(DfsWeightSelectorTest, EqualWeightsFollowChildInsertionOrderEvenAfterSplits) {
  Driver d;
  const Tokens c = Seg(100, 10);
  const Tokens dd = Seg(200, 10);
  // C+x first, then D, then C+y, which splits C+x: the new head C keeps C+x's place.
  d.Cache(100, {Cat({c, Seg(110, 5)}), Cat({dd, Seg(210, 5)}), Cat({c, Seg(120, 5)})});
  d.Arrive(0, Cat({dd, Seg(210, 5), Seg(900, 2)}));  // under D, arrived first
  d.Arrive(1, Cat({c, Seg(120, 5), Seg(910, 2)}));   // under C
  EXPECT_EQ(d.Round(), (Ids{1, 0}));
  d.Arrive(2, Cat({dd, Seg(920, 3)}));  // D's subtree now weighs 2
  EXPECT_EQ(d.Round(), (Ids{0, 2, 1}));
}

TEST(DfsWeightSelectorTest, WeightsAccumulateOverSeveralLevels) {
  Driver d;
  const Tokens x = Seg(100, 10);
  const Tokens x1 = Seg(200, 10);
  const Tokens y = Seg(300, 10);
  // Y first (the older key), then X -> X1 -> X11 as three nodes (two later inserts split it).
  d.Cache(100, {Cat({y, Seg(310, 5)}), Cat({x, x1, Seg(210, 10)}), Cat({x, Seg(120, 5)}),
                Cat({x, x1, Seg(220, 5)})});
  d.Arrive(0, Cat({y, Seg(310, 5), Seg(900, 2)}));       // under Y
  d.Arrive(1, Cat({y, Seg(310, 5), Seg(910, 2)}));       // under Y
  d.Arrive(2, Cat({x, x1, Seg(210, 10), Seg(920, 2)}));  // under X11, two levels below X
  d.Arrive(3, Cat({x, x1, Seg(210, 10), Seg(930, 2)}));
  d.Arrive(4, Cat({x, x1, Seg(210, 10), Seg(940, 2)}));
  // X carries no request itself; its weight 3 comes from its grandchild and beats Y's 2.
  EXPECT_EQ(d.Round(), (Ids{2, 3, 4, 0, 1}));
}

TEST(DfsWeightSelectorTest, NoFcfsFallbackForLongQueues) {
  Driver d;
  d.Cache(1000, {Cat({Seg(5000, 40), Seg(1, 3)})});
  Ids expected_cached;
  Ids expected_uncached;
  for (RequestId i = 0; i < 200; ++i) {
    const Token base = static_cast<Token>(100000 + 100 * i);
    if (i % 2 == 1) {
      d.Arrive(i, Cat({Seg(5000, 40), Seg(base, 10)}));
      expected_cached.push_back(i);
    } else {
      d.Arrive(i, Seg(base, 50));
      expected_uncached.push_back(i);
    }
  }
  Ids expected = expected_cached;
  expected.insert(expected.end(), expected_uncached.begin(), expected_uncached.end());
  EXPECT_EQ(d.Round(), expected);
}

TEST(DfsWeightSelectorTest, LifecycleLocksWhileRunningAndReranksEachRound) {
  Driver d;
  d.Arrive(0, Cat({kA, Seg(1200, 10)}));
  d.Arrive(1, Cat({kB, Seg(2200, 10)}));
  d.Arrive(2, Cat({kB, Seg(2300, 10)}));
  EXPECT_EQ(d.Round(), (Ids{0, 1, 2}));  // nothing cached: all at the root, queue order
  d.AdmitNext(0);
  EXPECT_EQ(d.selector().cache().ProtectedTokens(), 20u);
  EXPECT_EQ(d.selector().Name(), "dfs-weight");
  d.Arrive(3, Cat({kA, Seg(1200, 10), Seg(7, 2)}));
  EXPECT_EQ(d.Round(), (Ids{3, 1, 2}));  // r3 now sits under r0's cached prompt
  d.AdmitNext(3);
  d.selector().OnPreempt(0);
  d.selector().OnFinish(3);
  EXPECT_EQ(d.selector().cache().ProtectedTokens(), 0u);
  EXPECT_EQ(d.selector().NumWaiting(), 3u);
  EXPECT_EQ(d.Round(), (Ids{0, 1, 2}));
  d.selector().OnCancel(1);
  EXPECT_EQ(d.Round(), (Ids{0, 2}));
  EXPECT_GT(d.selector().MemoryBytes(), 0u);
}

TEST(DfsWeightSelectorTest, EmptyQueueProposesNothing) {
  Driver d;
  EXPECT_EQ(d.Round(), Ids{});
  EXPECT_FALSE(d.selector().Next().has_value());
}

TEST(DfsWeightSelectorDeathTest, PreemptingAWaitingRequestIsABug) {
  Driver d;
  d.Arrive(0, Seg(1, 4));
  EXPECT_DEATH(d.selector().OnPreempt(0), "not running");
}

}  // namespace
}  // namespace feather
