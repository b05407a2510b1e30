// cht_selector_test.cc: the CHT selector's cached working set (retain_cached): a finished
// request's chunks keep counting until the engine reports its KV evicted, the batch's tip does
// not count them, and the paper's working set (the default) forgets them at once.
#include "policies/cht_selector.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace feather {
namespace {

constexpr uint32_t kChunk = 10;

std::vector<Token> Tokens(Token first, size_t n) {
  std::vector<Token> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<Token> Concat(const std::vector<Token>& a, const std::vector<Token>& b) {
  std::vector<Token> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

struct Prompts {
  std::vector<Token> turn1 = Tokens(1, 100);                          // 10 chunks
  std::vector<Token> turn2 = Concat(turn1, Tokens(1000, 40));          // continues it: 14 chunks
  std::vector<Token> other = Tokens(5000, 60);                         // unrelated: 6 chunks
};

// Turn 1 runs alone and finishes; then turn 2 and an unrelated, shorter prompt wait.
std::optional<Candidate> AfterTurnOneFinished(ChtSelector& s, const Prompts& p) {
  s.OnArrival({0, p.turn1, kNoPrefixGroup});
  s.BeginRound();
  EXPECT_EQ(s.Next()->id, 0u);
  s.Admit(0);
  s.OnFinish(0);
  s.OnArrival({1, p.turn2, kNoPrefixGroup});
  s.OnArrival({2, p.other, kNoPrefixGroup});
  s.BeginRound();
  return s.Next();
}

TEST(ChtSelector, ThePapersWorkingSetForgetsAFinishedRequest) {
  const Prompts p;
  ChtConfig config;
  config.chunk_tokens = kChunk;
  ChtSelector s(config);
  EXPECT_FALSE(s.WantsCacheEvictions());
  // Turn 2 misses 14 chunks, the unrelated prompt 6: the shorter goes first.
  EXPECT_EQ(AfterTurnOneFinished(s, p)->id, 2u);
}

TEST(ChtSelector, ACachedWorkingSetProposesTheTurnThatContinuesAFinishedOne) {
  const Prompts p;
  ChtConfig config;
  config.chunk_tokens = kChunk;
  ChtSelector s(config, /*retain_cached=*/true);
  EXPECT_TRUE(s.WantsCacheEvictions());
  const std::optional<Candidate> c = AfterTurnOneFinished(s, p);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->id, 1u);  // misses only its 4 new chunks
  // The batch is empty: the retained request is no part of its tip.
  EXPECT_EQ(c->signal->tip_before_chunks, 0u);
  EXPECT_EQ(c->signal->tip_after_chunks, 0u);
  EXPECT_EQ(s.tree().NumActive(), 0u);
  EXPECT_EQ(s.tree().NumRetained(), 1u);
  // The cache evicts turn 1: turn 2 misses everything again, the shorter prompt goes first.
  s.OnCacheEvicted(0);
  EXPECT_EQ(s.tree().NumRetained(), 0u);
  EXPECT_EQ(s.Next()->id, 2u);
  s.OnCacheEvicted(0);  // a second report of the same request changes nothing
  EXPECT_EQ(s.Next()->id, 2u);
  s.tree().CheckInvariants();
}

TEST(ChtSelector, ARecycledIdOfARetainedRequestIsForgottenFirst) {
  const Prompts p;
  ChtConfig config;
  config.chunk_tokens = kChunk;
  ChtSelector s(config, /*retain_cached=*/true);
  (void)AfterTurnOneFinished(s, p);
  s.OnArrival({0, p.other, kNoPrefixGroup});  // id 0 again: turn 1's chunks leave
  EXPECT_EQ(s.tree().NumRetained(), 0u);
  EXPECT_EQ(s.NumWaiting(), 3u);
  s.tree().CheckInvariants();
}

}  // namespace
}  // namespace feather
