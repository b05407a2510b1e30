// cht_selector_test.cc: the CHT selector's cached working set (retain_cached): a finished
// request's chunks keep counting until the engine reports its KV evicted, the batch's tip does
// not count them, the batch's own group still comes first, and the paper's working set (the
// default) forgets them at once.
#include "policies/cht_selector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "cht/reference_cht.h"

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
  ASSERT_NE(s.cached_tree(), nullptr);
  EXPECT_EQ(s.cached_tree()->NumActive(), 0u);
  EXPECT_EQ(s.cached_tree()->NumRetained(), 1u);
  EXPECT_EQ(s.tree().NumRetained(), 0u);  // the paper's tree forgot it at once
  // The cache evicts turn 1: turn 2 misses everything again, the shorter prompt goes first.
  s.OnCacheEvicted(0);
  EXPECT_EQ(s.cached_tree()->NumRetained(), 0u);
  EXPECT_EQ(s.Next()->id, 2u);
  s.OnCacheEvicted(0);  // a second report of the same request changes nothing
  EXPECT_EQ(s.Next()->id, 2u);
  s.tree().CheckInvariants();
  s.cached_tree()->CheckInvariants();
}

// Two groups' prefixes, 10 chunks each.
struct TwoGroups {
  std::vector<Token> a = Tokens(1, 100);
  std::vector<Token> b = Tokens(10000, 100);
};

// An A request (id 0) and a B request (id 1), each 2 chunks past its prefix, admitted.
void RunBoth(ChtSelector& s, const TwoGroups& g) {
  s.OnArrival({0, Concat(g.a, Tokens(200, 20)), kNoPrefixGroup});
  s.OnArrival({1, Concat(g.b, Tokens(300, 20)), kNoPrefixGroup});
  s.BeginRound();
  for (const RequestId id : {0u, 1u}) {
    ASSERT_TRUE(s.Next().has_value());
    s.Admit(id);
  }
}

// Two groups (prefixes A and B, 10 chunks each); an A request runs, a B request finished and is
// cached. Waiting: an A request with a long own tail (misses 8 chunks from the batch, 8 from the
// cache) and a B request with a short one (misses 12 from the batch, 2 from the cache). The
// batch's group comes first; once no A request waits, the cache ranks the rest.
TEST(ChtSelector, TheBatchsGroupComesBeforeWhatTheCacheHolds) {
  ChtConfig config;
  config.chunk_tokens = kChunk;
  ChtSelector s(config, /*retain_cached=*/true);
  const TwoGroups g;
  ASSERT_NO_FATAL_FAILURE(RunBoth(s, g));
  const std::vector<Token>& a = g.a;
  const std::vector<Token>& b = g.b;
  s.OnFinish(1);  // B's request finishes; its KV stays cached
  s.OnArrival({2, Concat(a, Tokens(400, 80)), kNoPrefixGroup});  // 18 chunks, shares A
  s.OnArrival({3, Concat(b, Tokens(500, 20)), kNoPrefixGroup});  // 12 chunks, B cached
  s.BeginRound();
  std::optional<Candidate> c = s.Next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->id, 2u);
  EXPECT_EQ(c->signal->tip_after_chunks, 10u);
  s.Admit(2);
  c = s.Next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->id, 3u);
  EXPECT_EQ(c->signal->tip_after_chunks, 0u);  // B shares nothing with the running batch
  // Ranked by the cache alone (the cached tree's own FindBest), B would have come first: it
  // misses 2 chunks of the cache against A's 8.
  s.tree().CheckInvariants();
  s.cached_tree()->CheckInvariants();
}

// The cached tree decides when the paper's best shares nothing with the batch beyond what every
// request shares. A runs; waiting are an A request with a long tail (20 chunks missing from the
// batch), a B request whose prefix is cached (13 chunks: 13 missing from the batch, 3 from the
// cache) and an uncached short C prompt (5 and 5). The paper's best is C, which shares nothing
// with the batch, so the cache's best, B, is proposed.
TEST(ChtSelector, AProposalSharingNothingWithTheBatchGivesWayToTheCachesBest) {
  ChtConfig config;
  config.chunk_tokens = kChunk;
  ChtSelector s(config, /*retain_cached=*/true);
  const TwoGroups g;
  ASSERT_NO_FATAL_FAILURE(RunBoth(s, g));
  const std::vector<Token>& a = g.a;
  const std::vector<Token>& b = g.b;
  s.OnFinish(1);
  s.OnArrival({2, Concat(a, Tokens(400, 200)), kNoPrefixGroup});  // A: misses 20 of the batch
  s.OnArrival({3, Concat(b, Tokens(500, 30)), kNoPrefixGroup});   // B: 13 chunks, 3 uncached
  s.OnArrival({4, Tokens(90000, 50), kNoPrefixGroup});            // C: 5 chunks, none cached
  s.BeginRound();
  // The paper's best is C (5 missing from the batch; A's misses 20), which shares nothing with
  // the batch; the cache's best is B (3 missing).
  std::optional<Candidate> c = s.Next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->id, 3u);
  EXPECT_EQ(c->signal->tip_after_chunks, 0u);
  EXPECT_EQ(c->signal->peers, 3u);
  // Skipped, B is parked in both trees: the paper's best is C again, the cache's now C too.
  EXPECT_TRUE(s.Skip(3));
  c = s.Next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->id, 4u);
  s.BeginRound();  // B back in both
  EXPECT_EQ(s.Next()->id, 3u);
  s.tree().CheckInvariants();
  s.cached_tree()->CheckInvariants();
}

TEST(ChtSelector, ARecycledIdOfARetainedRequestIsForgottenFirst) {
  const Prompts p;
  ChtConfig config;
  config.chunk_tokens = kChunk;
  ChtSelector s(config, /*retain_cached=*/true);
  (void)AfterTurnOneFinished(s, p);
  s.OnArrival({0, p.other, kNoPrefixGroup});  // id 0 again: turn 1's chunks leave
  EXPECT_EQ(s.cached_tree()->NumRetained(), 0u);
  EXPECT_EQ(s.NumWaiting(), 3u);
  s.tree().CheckInvariants();
  s.cached_tree()->CheckInvariants();
}

// The selector's proposals against its rule stated with two brute-force trees (the paper's and
// one that retains finished requests), over random arrivals from a few groups, admissions,
// skips, finishes, preemptions, cancellations and eviction reports.
TEST(ChtSelector, ProposalsMatchTheRuleOverTwoReferenceTrees) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    ChtConfig config;
    config.chunk_tokens = kChunk;
    config.hash_scheme = HashScheme::kStreaming;
    ChtSelector s(config, /*retain_cached=*/true);
    ReferenceCht paper;
    ReferenceCht cached;
    std::vector<std::vector<Token>> prompts;
    std::vector<size_t> chunk_counts;
    std::vector<RequestId> waiting, parked, active, retained;
    const auto pick = [&rng](std::vector<RequestId>& v) {
      const size_t i = rng() % v.size();
      const RequestId id = v[i];
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
      return id;
    };
    for (int op = 0; op < 400; ++op) {
      const uint64_t r = rng() % 100;
      if (r < 25 || waiting.empty()) {
        // A group's prefix (4 groups, a common system prompt in half the seeds), a tail that
        // may continue an earlier prompt of the group.
        const auto id = static_cast<RequestId>(prompts.size());
        std::vector<Token> tokens;
        if (seed % 2 == 0) tokens = Tokens(1, 20);
        const Token group = static_cast<Token>(rng() % 4);
        const std::vector<Token> head = Tokens(1000 + 1000 * group, 30 + 10 * (rng() % 3));
        tokens.insert(tokens.end(), head.begin(), head.end());
        if (!prompts.empty() && rng() % 3 == 0) tokens = prompts[rng() % prompts.size()];
        const std::vector<Token> tail = Tokens(100000 + 100 * id, rng() % 40);
        tokens.insert(tokens.end(), tail.begin(), tail.end());
        prompts.push_back(tokens);
        s.OnArrival({id, prompts.back(), kNoPrefixGroup});
        std::vector<PrefixHash> hashes;
        ComputeStreamingHashes(prompts.back(), kChunk, hashes);
        chunk_counts.push_back(hashes.size());
        paper.InsertHashes(id, hashes);
        cached.InsertHashes(id, hashes);
        waiting.push_back(id);
      } else if (r < 50) {
        const std::optional<Candidate> c = s.Next();
        // The rule: the paper's best, unless it shares with the batch no more than every
        // present request shares; then the cached tree's best.
        std::optional<ChtCandidate> want = paper.FindBest();
        ASSERT_EQ(c.has_value(), want.has_value());
        const auto chunks = static_cast<uint32_t>(chunk_counts[want->request]);
        if (chunks - want->missing <= paper.LevelSharedByAll()) want = cached.FindBest();
        ASSERT_EQ(c->id, want->request) << "seed " << seed << " op " << op;
        ASSERT_EQ(c->signal->tip_before_chunks, want->tip_before);
        ASSERT_EQ(c->signal->tip_after_chunks, want->tip_after);
        ASSERT_EQ(c->signal->peers, want->peers);
        if (rng() % 4 == 0) {
          s.Skip(c->id);
          paper.Park(c->id);
          cached.Park(c->id);
          waiting.erase(std::find(waiting.begin(), waiting.end(), c->id));
          parked.push_back(c->id);
        } else {
          s.Admit(c->id);
          paper.AddToBatch(c->id);
          cached.AddToBatch(c->id);
          waiting.erase(std::find(waiting.begin(), waiting.end(), c->id));
          active.push_back(c->id);
        }
      } else if (r < 65 && !active.empty()) {
        const RequestId id = pick(active);
        s.OnFinish(id);
        paper.Finish(id);
        cached.Retain(id);
        retained.push_back(id);
      } else if (r < 75 && !retained.empty()) {
        const RequestId id = pick(retained);
        s.OnCacheEvicted(id);
        cached.Forget(id);
      } else if (r < 80 && !active.empty()) {
        const RequestId id = pick(active);
        s.OnPreempt(id);
        paper.Requeue(id);
        cached.Requeue(id);
        waiting.push_back(id);
      } else if (r < 85) {
        const RequestId id = pick(waiting);
        s.OnCancel(id);
        paper.Remove(id);
        cached.Remove(id);
      } else if (r < 95) {
        s.BeginRound();
        for (const RequestId id : parked) {
          paper.Unpark(id);
          cached.Unpark(id);
          waiting.push_back(id);
        }
        parked.clear();
      }
      ASSERT_EQ(s.NumWaiting(), waiting.size() + parked.size());
    }
    s.tree().CheckInvariants();
    s.cached_tree()->CheckInvariants();
  }
}

}  // namespace
}  // namespace feather
