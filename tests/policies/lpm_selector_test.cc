// lpm_selector_test.cc: SGLang's LPM policy, step by step on hand-made prompts (the style of
// TensorRT-LLM's scheduler tests: events per step, then the expected ranking), plus the in-batch
// prefix caching thresholds, the 128-request FCFS fallback and the cache lifecycle.
#include "policies/lpm_selector.h"

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
using Driver = testing::RadixSelectorDriver<LpmSelector, LpmConfig>;

const Tokens kP = Seg(1000, 64);
const Tokens kQ = Seg(2000, 64);
const Tokens kR = Seg(3000, 10);

struct Step {
  const char* what = "";
  std::vector<std::pair<RequestId, Tokens>> arrivals = {};
  Ids finish = {};
  Ids preempt = {};
  Ids expected_order = {};
  Ids expected_deprioritized = {};
  Ids admit = {};               // admitted in this order (each must be the next proposal)
  Ids cancel_after_first = {};  // cancelled after the first admission of the step
};

TEST(LpmSelectorTest, PerStepRankingTable) {
  const std::vector<Step> steps = {
      {.what = "empty cache: all match 0; r2 and r4 share 64 tokens with r0 and r1, examined "
               "before them, so the in-batch check sends them to the back",
       .arrivals = {{0, Cat({kP, Seg(100, 8)})},
                    {1, Cat({kQ, Seg(110, 8)})},
                    {2, Cat({kP, Seg(120, 8)})},
                    {3, Cat({kR, Seg(130, 8)})},
                    {4, Cat({kQ, Seg(140, 8)})},
                    {5, Seg(150, 20)}},
       .expected_order = {0, 1, 3, 5, 2, 4},
       .expected_deprioritized = {2, 4},
       .admit = {0}},
      {.what = "r0 cached: r2 matches 64 (> 32: no in-batch check) and leads; r4 still shares Q "
               "with r1",
       .expected_order = {2, 1, 3, 5, 4},
       .expected_deprioritized = {4},
       .admit = {2, 1}},
      {.what = "r0 finished (still cached); r6 extends r0 (matches r0's 72 tokens); r4, r7, r8 "
               "tie at 64 and keep queue order; r7 is cancelled mid-round and skipped",
       .arrivals = {{6, Cat({kP, Seg(100, 8), Seg(160, 4)})},
                    {7, Cat({kP, Seg(170, 8)})},
                    {8, Cat({kP, Seg(180, 8)})}},
       .finish = {0},
       .expected_order = {6, 4, 7, 8, 3, 5},
       .admit = {6, 4, 8},
       .cancel_after_first = {7}},
      {.what = "r1 preempted: back at the end of the queue, but its whole prompt is cached (the "
               "71 tokens of its key)",
       .preempt = {1},
       .expected_order = {1, 3, 5}},
  };
  Driver d;
  for (const Step& step : steps) {
    SCOPED_TRACE(step.what);
    for (const auto& [id, prompt] : step.arrivals) d.Arrive(id, prompt);
    for (const RequestId id : step.finish) d.selector().OnFinish(id);
    for (const RequestId id : step.preempt) d.selector().OnPreempt(id);
    EXPECT_EQ(d.Round(), step.expected_order);
    Ids deprioritized;
    for (const RequestId id : step.expected_order) {
      if (d.selector().WasDeprioritized(id)) deprioritized.push_back(id);
    }
    EXPECT_EQ(deprioritized, step.expected_deprioritized);
    for (size_t k = 0; k < step.admit.size(); ++k) {
      d.AdmitNext(step.admit[k]);
      if (k == 0) {
        for (const RequestId id : step.cancel_after_first) d.selector().OnCancel(id);
      }
    }
  }
  EXPECT_EQ(d.selector().MatchedPrefixTokens(6), 72u);
  EXPECT_EQ(d.selector().MatchedPrefixTokens(4), 64u);
  EXPECT_EQ(d.selector().MatchedPrefixTokens(1), 71u);
  EXPECT_EQ(d.selector().NumWaiting(), 3u);
}

TEST(LpmSelectorTest, InBatchThresholdsAreInclusiveAt32) {
  Driver d;
  // Cached prefixes of exactly 32 and 33 tokens.
  d.Arrive(100, Cat({Seg(6000, 32), Seg(240, 4)}));
  d.Arrive(101, Cat({Seg(7000, 33), Seg(270, 4)}));
  EXPECT_EQ(d.Round(), (Ids{100, 101}));
  d.AdmitNext(100);
  d.AdmitNext(101);
  d.selector().OnFinish(100);
  d.selector().OnFinish(101);

  d.Arrive(0, Cat({Seg(4000, 32), Seg(200, 5)}));   // a
  d.Arrive(1, Cat({Seg(4000, 32), Seg(210, 5)}));   // b: in-batch match 32 with a -> back
  d.Arrive(2, Cat({Seg(5000, 31), Seg(220, 5)}));   // c
  d.Arrive(3, Cat({Seg(5000, 31), Seg(230, 5)}));   // d: in-batch match 31 with c -> stays
  d.Arrive(4, Cat({Seg(6000, 32), Seg(250, 40)}));  // e: cache match 32: checked
  d.Arrive(5, Cat({Seg(6000, 32), Seg(250, 40), Seg(260, 3)}));  // f: shares 71 with e -> back
  d.Arrive(6, Cat({Seg(7000, 33), Seg(280, 40)}));               // g: cache match 33: unchecked
  d.Arrive(7, Cat({Seg(7000, 33), Seg(280, 40), Seg(290, 3)}));  // h: unchecked, not moved
  EXPECT_EQ(d.Round(), (Ids{6, 7, 4, 0, 2, 3, 1, 5}));
  EXPECT_TRUE(d.selector().WasDeprioritized(1));
  EXPECT_TRUE(d.selector().WasDeprioritized(5));
  EXPECT_FALSE(d.selector().WasDeprioritized(3));
  EXPECT_FALSE(d.selector().WasDeprioritized(7));
  EXPECT_EQ(d.selector().MatchedPrefixTokens(4), 32u);
  EXPECT_EQ(d.selector().MatchedPrefixTokens(7), 33u);
}

// 129 waiting requests: odd ones extend a cached 40-token prefix, even ones match nothing.
void FillFallbackQueue(Driver& d) {
  d.Arrive(1000, Cat({Seg(9000, 40), Seg(1, 3)}));
  (void)d.Round();
  d.AdmitNext(1000);
  d.selector().OnFinish(1000);
  for (RequestId i = 0; i < 129; ++i) {
    const Token base = static_cast<Token>(100000 + 100 * i);
    d.Arrive(i, i % 2 == 1 ? Cat({Seg(9000, 40), Seg(base, 10)}) : Seg(base, 50));
  }
}
Ids LpmOrder(RequestId n) {
  Ids order;
  for (RequestId i = 1; i < n; i += 2) order.push_back(i);
  for (RequestId i = 0; i < n; i += 2) order.push_back(i);
  return order;
}
Ids ArrivalOrder(RequestId n) {
  Ids order;
  for (RequestId i = 0; i < n; ++i) order.push_back(i);
  return order;
}

TEST(LpmSelectorTest, FcfsFallbackAboveQueueLength128WhenEnabled) {
  Driver d(LpmConfig{1, 0, /*fcfs_fallback=*/true});
  FillFallbackQueue(d);
  EXPECT_EQ(d.Round(), ArrivalOrder(129));
  EXPECT_TRUE(d.selector().LastRoundWasFcfs());
  EXPECT_EQ(d.selector().MatchedPrefixTokens(1), 0u);  // nothing was matched
  d.selector().OnCancel(128);  // 128 waiting: not more than 128, so LPM again
  EXPECT_EQ(d.Round(), LpmOrder(128));
  EXPECT_FALSE(d.selector().LastRoundWasFcfs());
  EXPECT_EQ(d.selector().MatchedPrefixTokens(1), 40u);
}

TEST(LpmSelectorTest, NoFallbackByDefault) {
  Driver d;
  FillFallbackQueue(d);
  EXPECT_EQ(d.Round(), LpmOrder(129));
  EXPECT_FALSE(d.selector().LastRoundWasFcfs());
}

TEST(LpmSelectorTest, NextIsIdempotentAndTheOrderRunsOut) {
  Driver d;
  EXPECT_FALSE(d.selector().Next().has_value());  // nothing ranked yet
  d.Arrive(0, Seg(10, 5));
  d.Arrive(1, Seg(20, 5));
  (void)d.Round();
  EXPECT_EQ(d.selector().Next()->id, 0u);
  EXPECT_EQ(d.selector().Next()->id, 0u);
  d.AdmitNext(0);
  d.Arrive(2, Seg(30, 5));  // arrives mid-round: ranked from the next round on
  d.AdmitNext(1);
  EXPECT_FALSE(d.selector().Next().has_value());
  EXPECT_EQ(d.selector().NumWaiting(), 1u);
  EXPECT_EQ(d.Round(), (Ids{2}));
}

TEST(LpmSelectorTest, RunningRequestsHoldTheirKvAndFinishedOnesAreEvictedFirst) {
  Driver d(LpmConfig{1, 100, false});
  d.Arrive(0, Seg(100, 60));
  (void)d.Round();
  d.AdmitNext(0);
  EXPECT_EQ(d.selector().cache().ProtectedTokens(), 60u);
  d.Arrive(1, Seg(200, 60));
  (void)d.Round();
  d.AdmitNext(1);  // r0 runs: its 60 tokens cannot go, the cache exceeds its capacity
  EXPECT_EQ(d.selector().cache().TotalTokens(), 120u);
  d.selector().OnFinish(0);
  EXPECT_EQ(d.selector().cache().ProtectedTokens(), 60u);
  EXPECT_EQ(d.selector().cache().EvictableTokens(), 60u);
  d.Arrive(2, Seg(300, 30));
  (void)d.Round();
  d.AdmitNext(2);  // r0's finished prompt is the LRU unlocked leaf
  EXPECT_EQ(d.selector().cache().TotalTokens(), 90u);
  EXPECT_EQ(d.selector().cache().PeekMatchTokens(Seg(100, 60)), 0u);
  EXPECT_EQ(d.selector().cache().PeekMatchTokens(Seg(200, 60)), 60u);
}

TEST(LpmSelectorTest, PagedCacheMatchesWholePages) {
  Driver d(LpmConfig{16, 0, false});
  d.Arrive(0, Seg(100, 40));
  (void)d.Round();
  d.AdmitNext(0);
  EXPECT_EQ(d.selector().cache().TotalTokens(), 32u);
  d.Arrive(1, Seg(100, 40));  // key 39 tokens -> 2 whole pages
  d.Arrive(2, Cat({Seg(100, 20), Seg(900, 30)}));
  EXPECT_EQ(d.Round(), (Ids{1, 2}));
  EXPECT_EQ(d.selector().MatchedPrefixTokens(1), 32u);
  EXPECT_EQ(d.selector().MatchedPrefixTokens(2), 16u);
}

TEST(LpmSelectorTest, MemoryBytesGrowsWithState) {
  Driver d;
  const size_t empty = d.selector().MemoryBytes();
  for (RequestId i = 0; i < 64; ++i) d.Arrive(i, Seg(static_cast<Token>(1000 * i), 200));
  (void)d.Round();
  for (RequestId i = 0; i < 64; ++i) d.AdmitNext(i);
  EXPECT_GT(d.selector().MemoryBytes(), empty + 64 * 200 * sizeof(Token));
  EXPECT_EQ(d.selector().Name(), "lpm");
}

TEST(LpmSelectorDeathTest, LifecycleMisuseIsABug) {
  Driver d;
  d.Arrive(0, Seg(10, 5));
  d.Arrive(1, Seg(20, 5));
  (void)d.Round();
  EXPECT_DEATH(d.selector().Admit(1), "did not propose");
  EXPECT_DEATH(d.selector().OnFinish(0), "not running");
  EXPECT_DEATH(d.Arrive(0, Seg(10, 5)), "already known");
  d.AdmitNext(0);
  EXPECT_DEATH(d.selector().OnCancel(0), "not waiting");
}

}  // namespace
}  // namespace feather
