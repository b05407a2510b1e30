// kv_cache_test.cc: the paged KV cache with vLLM v1 prefix caching — hand-written scenarios for
// each rule (hits, the prompt - 1 cap, LRU eviction order, touch, atomic failure, duplicate
// registration, caching off, common prefix), error paths, and a differential test of random
// operation sequences against a brute-force reference model.
#include "sim/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "policies/block_hash_table.h"
#include "base/rng.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

using Blocks = std::vector<uint32_t>;
const std::vector<PrefixHash> kNoChain;  // a prompt with no full block

Blocks Table(const KvCache& kv, RequestId id) {
  const std::span<const uint32_t> t = kv.BlockTable(id);
  return {t.begin(), t.end()};
}

// --- Hand-written scenarios (chains are literal hashes: only their equality matters) ---------

TEST(KvCache, StartsWithEveryBlockFreeInIdOrder) {
  const KvCache kv(KvCacheConfig{16, 5, true});
  EXPECT_EQ(kv.NumFreeBlocks(), 5u);
  EXPECT_EQ(kv.NumUsedBlocks(), 0u);
  EXPECT_EQ(kv.NumCachedBlocks(), 0u);
  EXPECT_EQ(kv.FreeQueue(), (Blocks{0, 1, 2, 3, 4}));
  EXPECT_FALSE(kv.IsAllocated(0));
  EXPECT_TRUE(kv.BlockTable(7).empty());
  EXPECT_EQ(kv.CachedTokens(7), 0u);
  kv.CheckInvariants();
}

TEST(KvCache, HitAfterFinishedRequest) {
  KvCache kv(KvCacheConfig{16, 10, true});
  const std::vector<PrefixHash> chain = {11, 12, 13, 14};  // 70-token prompt: 4 full blocks
  EXPECT_EQ(kv.LookupCachedTokens(chain, 70), 0u);
  ASSERT_TRUE(kv.Allocate(0, chain, 70, 70));
  EXPECT_EQ(Table(kv, 0), (Blocks{0, 1, 2, 3, 4}));
  EXPECT_EQ(kv.CachedTokens(0), 0u);
  // Computed tokens register only full prompt blocks within them.
  kv.CacheBlocks(0, chain, 40);
  EXPECT_EQ(kv.NumCachedBlocks(), 2u);
  EXPECT_EQ(kv.LookupCachedTokens(chain, 70), 32u);
  kv.CacheBlocks(0, chain, 70);
  EXPECT_EQ(kv.NumCachedBlocks(), 4u);
  EXPECT_FALSE(kv.IsRegistered(4));  // the partial last block is never hashed
  kv.Free(0);
  kv.CheckInvariants();
  EXPECT_EQ(kv.NumFreeBlocks(), 10u);
  EXPECT_EQ(kv.NumCachedBlocks(), 4u);  // freed blocks keep their hash

  EXPECT_EQ(kv.LookupCachedTokens(chain, 70), 64u);
  ASSERT_TRUE(kv.Allocate(1, chain, 70, 70));
  EXPECT_EQ(kv.CachedTokens(1), 64u);
  const Blocks table = Table(kv, 1);
  ASSERT_EQ(table.size(), 5u);
  EXPECT_EQ(Blocks(table.begin(), table.begin() + 4), (Blocks{0, 1, 2, 3}));
  // A prompt sharing only the first two blocks hits two.
  const std::vector<PrefixHash> other = {11, 12, 99};
  EXPECT_EQ(kv.LookupCachedTokens(other, 60), 32u);
  kv.CheckInvariants();
}

TEST(KvCache, HitIsCappedSoThatOneTokenIsComputed) {
  KvCache kv(KvCacheConfig{16, 8, true});
  const std::vector<PrefixHash> chain = {1, 2, 3, 4};
  ASSERT_TRUE(kv.Allocate(0, chain, 64, 64));
  kv.CacheBlocks(0, chain, 64);
  EXPECT_EQ(kv.LookupCachedTokens(chain, 64), 48u);  // (64 - 1) / 16 = 3 blocks
  EXPECT_EQ(kv.LookupCachedTokens(chain, 65), 64u);
  EXPECT_EQ(kv.LookupCachedTokens(chain, 17), 16u);
  EXPECT_EQ(kv.LookupCachedTokens(chain, 16), 0u);
  EXPECT_EQ(kv.LookupCachedTokens(chain, 1), 0u);
  EXPECT_EQ(kv.LookupCachedTokens(chain, 0), 0u);
  // The second identical request shares 3 blocks and gets a fresh 4th.
  ASSERT_TRUE(kv.Allocate(1, chain, 64, 64));
  EXPECT_EQ(kv.CachedTokens(1), 48u);
  EXPECT_EQ(Table(kv, 1), (Blocks{0, 1, 2, 4}));
  EXPECT_EQ(kv.RefCount(2), 2u);
  EXPECT_EQ(kv.RefCount(3), 1u);
  kv.CheckInvariants();
}

TEST(KvCache, FreedBlocksGoToTheTailDeepestFirstAndAreEvictedInThatOrder) {
  KvCache kv(KvCacheConfig{16, 6, true});
  const std::vector<PrefixHash> a = {1, 2, 3, 4};
  ASSERT_TRUE(kv.Allocate(0, a, 64, 64));
  kv.CacheBlocks(0, a, 64);
  kv.Free(0);
  // Last block first: deep blocks sit nearer the head, so they are evicted first.
  EXPECT_EQ(kv.FreeQueue(), (Blocks{4, 5, 3, 2, 1, 0}));
  const std::vector<PrefixHash> b = {7, 8, 9};
  ASSERT_TRUE(kv.Allocate(1, b, 48, 48));
  EXPECT_EQ(Table(kv, 1), (Blocks{4, 5, 3}));
  EXPECT_EQ(kv.evictions(), 1u);  // block 3 held a's deepest block
  EXPECT_EQ(kv.FindCachedBlock(4), KvCache::kNoBlock);
  EXPECT_EQ(kv.FindCachedBlock(3), 2u);
  EXPECT_EQ(kv.LookupCachedTokens(a, 80), 48u);
  EXPECT_EQ(kv.NumCachedBlocks(), 3u);
  kv.CheckInvariants();
}

TEST(KvCache, ReportsTheRequestThatLastFreedEachEvictedBlock) {
  KvCache kv(KvCacheConfig{16, 8, true});
  kv.ReportEvictedOwners();
  const std::vector<PrefixHash> a = {1, 2, 3, 4};
  ASSERT_TRUE(kv.Allocate(0, a, 64, 64));
  kv.CacheBlocks(0, a, 64);
  // Request 1 shares a's first two blocks and frees them after a: it released them last.
  const std::vector<PrefixHash> b = {1, 2, 5};
  ASSERT_TRUE(kv.Allocate(1, b, 48, 48));
  kv.CacheBlocks(1, b, 48);
  kv.Free(0);
  kv.Free(1);
  EXPECT_TRUE(kv.EvictedOwners().empty());  // the empty blocks go first, with no owner
  const std::vector<PrefixHash> c = {7, 8, 9};
  ASSERT_TRUE(kv.Allocate(2, c, 48, 48));  // takes the 3 empty blocks
  EXPECT_TRUE(kv.EvictedOwners().empty());
  const std::vector<PrefixHash> d = {10, 11};
  ASSERT_TRUE(kv.Allocate(3, d, 32, 32));  // evicts a's deepest two (4, 3): a owns no more
  EXPECT_EQ(kv.evictions(), 2u);
  EXPECT_EQ(std::vector<RequestId>(kv.EvictedOwners().begin(), kv.EvictedOwners().end()),
            (std::vector<RequestId>{0, 0, 0}));
  kv.ClearEvictedOwners();
  const std::vector<PrefixHash> e = {12, 13, 14};
  ASSERT_TRUE(kv.Allocate(4, e, 48, 48));  // then b's own block 5, then 2 and 1, freed by b
  EXPECT_EQ(std::vector<RequestId>(kv.EvictedOwners().begin(), kv.EvictedOwners().end()),
            (std::vector<RequestId>{1, 1, 1, 1}));  // the last of b's blocks: b owns none
  kv.CheckInvariants();
}

TEST(KvCache, ReportsARequestWhoseBlocksOthersTookOver) {
  KvCache kv(KvCacheConfig{16, 8, true});
  kv.ReportEvictedOwners();
  const std::vector<PrefixHash> a = {1, 2};
  ASSERT_TRUE(kv.Allocate(0, a, 40, 40));  // 3 blocks: two full, one partial
  kv.CacheBlocks(0, a, 40);
  kv.Free(0);
  // b hits both of a's cached blocks, then releases them itself: a owns nothing now.
  const std::vector<PrefixHash> b = {1, 2, 3};
  ASSERT_TRUE(kv.Allocate(1, b, 48, 48));
  EXPECT_TRUE(kv.EvictedOwners().empty());
  kv.Free(1);
  EXPECT_EQ(std::vector<RequestId>(kv.EvictedOwners().begin(), kv.EvictedOwners().end()),
            (std::vector<RequestId>{0}));
  kv.ClearEvictedOwners();
  // c hits both blocks and is still running when d, which hit them too, is released: d owns
  // nothing of its own and is named at once.
  ASSERT_TRUE(kv.Allocate(2, b, 48, 48));
  ASSERT_TRUE(kv.Allocate(3, b, 48, 48));
  kv.Free(3);
  EXPECT_EQ(std::vector<RequestId>(kv.EvictedOwners().begin(), kv.EvictedOwners().end()),
            (std::vector<RequestId>{3}));
  kv.CheckInvariants();
}

TEST(KvCache, HitBlocksAreTouchedOutOfTheFreeQueue) {
  KvCache kv(KvCacheConfig{16, 6, true});
  const std::vector<PrefixHash> a = {1, 2, 3};
  ASSERT_TRUE(kv.Allocate(0, a, 48, 48));
  kv.CacheBlocks(0, a, 48);
  kv.Free(0);
  EXPECT_EQ(kv.FreeQueue(), (Blocks{3, 4, 5, 2, 1, 0}));
  // A request sharing the first two blocks touches them (out of the queue, ref 1), then takes
  // one new block from the head.
  const std::vector<PrefixHash> b = {1, 2, 50};
  ASSERT_TRUE(kv.Allocate(1, b, 48, 48));
  EXPECT_EQ(Table(kv, 1), (Blocks{0, 1, 3}));
  EXPECT_EQ(kv.FreeQueue(), (Blocks{4, 5, 2}));
  EXPECT_EQ(kv.RefCount(0), 1u);
  EXPECT_EQ(kv.RefCount(1), 1u);
  EXPECT_EQ(kv.NumUsedBlocks(), 3u);
  EXPECT_EQ(kv.evictions(), 0u);
  // A running holder's blocks are shared without leaving anything: ref 2.
  ASSERT_TRUE(kv.Allocate(2, b, 40, 40));
  EXPECT_EQ(Table(kv, 2), (Blocks{0, 1, 4}));
  EXPECT_EQ(kv.RefCount(0), 2u);
  kv.CheckInvariants();
}

// Hit blocks at the head of the queue must be touched before new blocks are popped, or the
// allocation would evict its own hit.
TEST(KvCache, HitBlockAtTheQueueHeadIsNotEvictedByItsOwnAllocation) {
  KvCache kv(KvCacheConfig{16, 2, true});
  const std::vector<PrefixHash> a = {1};
  ASSERT_TRUE(kv.Allocate(0, a, 20, 20));
  kv.CacheBlocks(0, a, 20);
  kv.Free(0);
  EXPECT_EQ(kv.FreeQueue(), (Blocks{1, 0}));
  ASSERT_TRUE(kv.Allocate(1, kNoChain, 16, 16));  // takes block 1: block 0 is now the head
  kv.CacheBlocks(1, kNoChain, 16);  // a full block: hashed, so freed to the tail
  kv.Free(1);
  EXPECT_EQ(kv.FreeQueue(), (Blocks{0, 1}));
  ASSERT_TRUE(kv.Allocate(2, a, 20, 20));
  EXPECT_EQ(Table(kv, 2), (Blocks{0, 1}));
  EXPECT_EQ(kv.CachedTokens(2), 16u);
  EXPECT_EQ(kv.evictions(), 0u);
  kv.CheckInvariants();
}

TEST(KvCache, AllocateFailureChangesNothing) {
  KvCache kv(KvCacheConfig{16, 4, true});
  const std::vector<PrefixHash> a = {1, 2};
  ASSERT_TRUE(kv.Allocate(0, a, 40, 40));  // 3 blocks
  kv.CacheBlocks(0, a, 40);
  kv.Free(0);
  const Blocks queue = kv.FreeQueue();
  // Needs 2 hits + 3 new = 5 blocks; the two hits are in the queue, so 5 > 4.
  EXPECT_EQ(kv.LookupCachedTokens(a, 80), 32u);
  EXPECT_FALSE(kv.Allocate(1, a, 80, 80));
  EXPECT_FALSE(kv.IsAllocated(1));
  EXPECT_EQ(kv.CachedTokens(1), 0u);
  EXPECT_EQ(kv.FreeQueue(), queue);
  EXPECT_EQ(kv.NumCachedBlocks(), 2u);
  EXPECT_EQ(kv.evictions(), 0u);
  kv.CheckInvariants();
  // 2 hits + 2 new fit exactly.
  ASSERT_TRUE(kv.Allocate(1, a, 64, 64));
  EXPECT_EQ(kv.NumFreeBlocks(), 0u);
  // A later call that cannot grow changes nothing either.
  EXPECT_FALSE(kv.Allocate(1, a, 64, 65));
  EXPECT_EQ(Table(kv, 1).size(), 4u);
  EXPECT_EQ(kv.FreeQueue(), Blocks{});
  kv.CheckInvariants();
}

TEST(KvCache, RunningHitsDoNotCountAgainstTheFreeQueue) {
  KvCache kv(KvCacheConfig{16, 5, true});
  const std::vector<PrefixHash> a = {1, 2};
  ASSERT_TRUE(kv.Allocate(0, a, 40, 40));  // blocks 0,1,2
  kv.CacheBlocks(0, a, 40);
  EXPECT_EQ(kv.NumFreeBlocks(), 2u);
  ASSERT_TRUE(kv.Allocate(1, a, 64, 64));  // 2 shared + 2 new = exactly the queue
  EXPECT_EQ(kv.NumFreeBlocks(), 0u);
  EXPECT_EQ(Table(kv, 1), (Blocks{0, 1, 3, 4}));
  kv.CheckInvariants();
}

TEST(KvCache, DecodeGrowsOneBlockPerBlockOfTokens) {
  KvCache kv(KvCacheConfig{16, 8, true});
  const std::vector<PrefixHash> a = {1};
  ASSERT_TRUE(kv.Allocate(0, a, 20, 20));
  EXPECT_EQ(Table(kv, 0).size(), 2u);
  for (uint32_t total = 21; total <= 32; ++total) ASSERT_TRUE(kv.Allocate(0, a, 20, total));
  EXPECT_EQ(Table(kv, 0).size(), 2u);
  ASSERT_TRUE(kv.Allocate(0, a, 20, 33));
  EXPECT_EQ(Table(kv, 0).size(), 3u);
  ASSERT_TRUE(kv.Allocate(0, a, 20, 10));  // smaller totals never shrink the table
  EXPECT_EQ(Table(kv, 0).size(), 3u);
  kv.CheckInvariants();
}

TEST(KvCache, DuplicateRegistrationKeepsTheExistingBlock) {
  KvCache kv(KvCacheConfig{16, 8, true});
  const std::vector<PrefixHash> a = {1, 2};
  // Both start before either computes: no hits, distinct blocks.
  ASSERT_TRUE(kv.Allocate(0, a, 40, 40));
  ASSERT_TRUE(kv.Allocate(1, a, 40, 40));
  EXPECT_EQ(Table(kv, 0), (Blocks{0, 1, 2}));
  EXPECT_EQ(Table(kv, 1), (Blocks{3, 4, 5}));
  kv.CacheBlocks(1, a, 40);
  kv.CacheBlocks(0, a, 40);
  EXPECT_EQ(kv.FindCachedBlock(1), 3u);
  EXPECT_EQ(kv.FindCachedBlock(2), 4u);
  EXPECT_FALSE(kv.IsRegistered(0));
  EXPECT_FALSE(kv.IsRegistered(1));
  EXPECT_EQ(kv.NumCachedBlocks(), 2u);
  kv.CheckInvariants();
  // The duplicate is considered once: even after the registered copy is evicted, request 0's
  // blocks are not registered by a repeated CacheBlocks (vLLM's per-request cursor).
  kv.Free(1);
  ASSERT_TRUE(kv.Allocate(2, kNoChain, 80, 80));  // takes every free block: evicts 3 and 4
  EXPECT_EQ(kv.evictions(), 2u);
  EXPECT_EQ(kv.NumCachedBlocks(), 0u);
  kv.CacheBlocks(0, a, 40);
  EXPECT_EQ(kv.NumCachedBlocks(), 0u);
  // Freed unregistered blocks are plain free blocks: reusing them evicts nothing.
  kv.Free(0);
  kv.Free(2);
  ASSERT_TRUE(kv.Allocate(3, kNoChain, 128, 128));
  EXPECT_EQ(kv.evictions(), 2u);
  kv.CheckInvariants();
}

TEST(KvCache, PrefixCachingOffNeverHits) {
  KvCache kv(KvCacheConfig{16, 8, false});
  const std::vector<PrefixHash> a = {1, 2, 3};
  ASSERT_TRUE(kv.Allocate(0, a, 50, 50));
  kv.CacheBlocks(0, a, 50);
  EXPECT_EQ(kv.NumCachedBlocks(), 0u);
  EXPECT_EQ(kv.LookupCachedTokens(a, 50), 0u);
  kv.Free(0);
  ASSERT_TRUE(kv.Allocate(1, a, 50, 50));
  EXPECT_EQ(kv.CachedTokens(1), 0u);
  // None reused as a hit; without hashes every freed block went to the queue's head, the last
  // first, and is reused first (vLLM's LIFO reuse of uncached blocks).
  EXPECT_EQ(Table(kv, 1), (Blocks{3, 2, 1, 0}));
  EXPECT_EQ(kv.evictions(), 0u);
  kv.CheckInvariants();
}

TEST(KvCache, CommonPrefixBlocksHomogeneousAndMixed) {
  KvCache kv(KvCacheConfig{16, 32, true});
  const std::vector<PrefixHash> shared = {1, 2, 3, 4};
  ASSERT_TRUE(kv.Allocate(0, shared, 80, 80));
  kv.CacheBlocks(0, shared, 80);
  ASSERT_TRUE(kv.Allocate(1, shared, 80, 80));
  ASSERT_TRUE(kv.Allocate(2, shared, 80, 80));
  // All three share 4 blocks (hit cap: 79 / 16 = 4); their 5th blocks are private.
  for (RequestId id = 0; id < 3; ++id) EXPECT_EQ(kv.CommonPrefixBlocks(id, 3), 4u) << id;
  // A request sharing only the first two blocks: the batch-wide common prefix shrinks to 2.
  const std::vector<PrefixHash> partial = {1, 2, 9};
  ASSERT_TRUE(kv.Allocate(3, partial, 60, 60));
  for (RequestId id = 0; id < 4; ++id) EXPECT_EQ(kv.CommonPrefixBlocks(id, 4), 2u) << id;
  // An unrelated request: nothing is common to all five.
  const std::vector<PrefixHash> other = {77};
  ASSERT_TRUE(kv.Allocate(4, other, 20, 20));
  for (RequestId id = 0; id < 5; ++id) EXPECT_EQ(kv.CommonPrefixBlocks(id, 5), 0u) << id;
  EXPECT_EQ(kv.CommonPrefixBlocks(9, 5), 0u);  // no blocks
  kv.CheckInvariants();
}

TEST(KvCache, PreemptedRequestHitsItsOwnBlocksOnReadmission) {
  KvCache kv(KvCacheConfig{16, 8, true});
  const std::vector<PrefixHash> a = {1, 2};
  ASSERT_TRUE(kv.Allocate(5, a, 40, 40));
  kv.CacheBlocks(5, a, 40);
  kv.Free(5);  // preemption by recompute
  EXPECT_FALSE(kv.IsAllocated(5));
  EXPECT_EQ(kv.CachedTokens(5), 0u);
  kv.Free(5);  // freeing again is harmless
  ASSERT_TRUE(kv.Allocate(5, a, 40, 45));
  EXPECT_EQ(kv.CachedTokens(5), 32u);
  // The partial block 2 held no hash: freed to the head, it is the first new block again.
  EXPECT_EQ(Table(kv, 5), (Blocks{0, 1, 2}));
  kv.CheckInvariants();
}

TEST(KvCache, FreeSendsHashedBlocksToTheTailAndOthersToTheHead) {
  KvCache kv(KvCacheConfig{16, 6, true});
  const std::vector<PrefixHash> a = {1, 2};
  ASSERT_TRUE(kv.Allocate(0, a, 40, 60));  // blocks 0-3: 2 prompt blocks, a partial, one ahead
  kv.CacheBlocks(0, a, 40);                 // blocks 0, 1 hashed
  kv.Free(0);
  // Unhashed 3, 2 prepended last first; hashed 1, 0 appended last first.
  EXPECT_EQ(kv.FreeQueue(), (Blocks{3, 2, 4, 5, 1, 0}));
  // A full output block past the chain counts as hashed although nothing can hit it.
  ASSERT_TRUE(kv.Allocate(1, a, 40, 48));  // hits 0, 1; takes the head, 3
  EXPECT_EQ(Table(kv, 1), (Blocks{0, 1, 3}));
  kv.CacheBlocks(1, a, 48);
  EXPECT_EQ(kv.NumCachedBlocks(), 2u);
  kv.Free(1);
  EXPECT_EQ(kv.FreeQueue(), (Blocks{2, 4, 5, 3, 1, 0}));
  kv.CheckInvariants();
}

TEST(KvCache, FullSequenceGateRefusesWhatOnlyTheFirstChunkWouldFit) {
  KvCache kv(KvCacheConfig{16, 4, true});
  const std::vector<PrefixHash> a = {1, 2, 3, 4};
  // A 64-token prompt's first 16-token chunk fits, the whole sequence plus one block does not.
  EXPECT_FALSE(kv.Allocate(0, a, 64, 16, 80));
  EXPECT_FALSE(kv.IsAllocated(0));
  EXPECT_EQ(kv.NumFreeBlocks(), 4u);
  ASSERT_TRUE(kv.Allocate(0, a, 64, 16, 64));  // exactly fits: one block taken now
  EXPECT_EQ(Table(kv, 0).size(), 1u);
  kv.CacheBlocks(0, a, 16);
  kv.Free(0);
  // With its first block a hit, the gate counts the hit as free-queue capacity it removes.
  EXPECT_EQ(kv.LookupCachedTokens(a, 64), 16u);
  EXPECT_TRUE(kv.Allocate(1, a, 64, 32, 64));
  kv.CheckInvariants();
}

TEST(KvCache, LargeSparseRequestIds) {
  KvCache kv(KvCacheConfig{16, 4, true});
  ASSERT_TRUE(kv.Allocate(100000, kNoChain, 16, 16));
  EXPECT_TRUE(kv.IsAllocated(100000));
  EXPECT_FALSE(kv.IsAllocated(99999));
  EXPECT_EQ(Table(kv, 100000), (Blocks{0}));
  kv.Free(100000);
  kv.CheckInvariants();
}

TEST(KvCache, RealChainsOfGroupedPromptsShareTheirPrefixBlocks) {
  const BlockHashTable hasher(BlockHashConfig{16, 0, 3});
  // 4 prompts in 2 groups: 100 shared tokens (6 full blocks), then 30 unique.
  const PromptSet prompts = MakeGroupedPrompts(4, 2, 100, 30, 5);
  KvCache kv(KvCacheConfig{16, 64, true});
  std::vector<std::vector<PrefixHash>> chains;
  for (size_t i = 0; i < prompts.size(); ++i)
    chains.push_back(hasher.ComputeChain(prompts.Prompt(i)));
  ASSERT_TRUE(kv.Allocate(0, chains[0], 130, 130));
  kv.CacheBlocks(0, chains[0], 130);
  EXPECT_EQ(kv.LookupCachedTokens(chains[2], 130), 96u);  // same group
  EXPECT_EQ(kv.LookupCachedTokens(chains[1], 130), 0u);   // other group
  ASSERT_TRUE(kv.Allocate(2, chains[2], 130, 130));
  EXPECT_EQ(kv.CommonPrefixBlocks(2, 2), 6u);
  kv.CheckInvariants();
}

TEST(KvCache, SteadyChurnDoesNotGrowMemory) {
  KvCache kv(KvCacheConfig{16, 256, true});
  const std::vector<PrefixHash> a = {1, 2, 3, 4, 5, 6, 7, 8};
  size_t warm_bytes = 0;
  for (uint32_t round = 0; round < 200; ++round) {
    const RequestId id = round % 16;
    kv.Free(id);
    ASSERT_TRUE(kv.Allocate(id, a, 130, 130));
    kv.CacheBlocks(id, a, 130);
    for (uint32_t total = 131; total <= 300; ++total) ASSERT_TRUE(kv.Allocate(id, a, 130, total));
    if (round == 50) warm_bytes = kv.MemoryBytes();
  }
  EXPECT_GT(warm_bytes, 0u);
  EXPECT_EQ(kv.MemoryBytes(), warm_bytes);
  kv.CheckInvariants();
}

TEST(KvCacheDeathTest, CacheBlocksWithoutBlocksAborts) {
  KvCache kv(KvCacheConfig{16, 4, true});
  const std::vector<PrefixHash> a = {1};
  EXPECT_DEATH(kv.CacheBlocks(0, a, 16), "without blocks");
}

TEST(KvCacheDeathTest, CacheBlocksBeyondTheTableAborts) {
  KvCache kv(KvCacheConfig{16, 4, true});
  const std::vector<PrefixHash> a = {1, 2};
  ASSERT_TRUE(kv.Allocate(0, a, 32, 16));
  EXPECT_DEATH(kv.CacheBlocks(0, a, 32), "exceed");
}

TEST(KvCacheDeathTest, BadConfigAndBlockIdsAbort) {
  EXPECT_DEATH(KvCache(KvCacheConfig{0, 4, true}), "block_tokens");
  EXPECT_DEATH(KvCache(KvCacheConfig{16, uint64_t{1} << 32, true}), "32-bit");
  const KvCache kv(KvCacheConfig{16, 4, true});
  EXPECT_DEATH(static_cast<void>(kv.RefCount(4)), "out of range");
}

// --- Differential test against a brute-force reference ---------------------------------------

// The same rules written the obvious way: vectors, linear searches, std::map of requests.
class ReferenceKv {
 public:
  ReferenceKv(uint32_t block_tokens, uint32_t num_blocks, bool prefix_caching)
      : block_tokens_(block_tokens), prefix_caching_(prefix_caching), blocks_(num_blocks) {
    for (uint32_t b = 0; b < num_blocks; ++b) queue_.push_back(b);
  }

  [[nodiscard]] uint32_t Lookup(const std::vector<PrefixHash>& chain, uint32_t prompt) const {
    if (!prefix_caching_ || prompt == 0) return 0;
    const size_t cap = std::min<size_t>(chain.size(), (prompt - 1) / block_tokens_);
    uint32_t hits = 0;
    while (hits < cap && FindRegistered(chain[hits]) != kNone) ++hits;
    return hits * block_tokens_;
  }

  bool Allocate(RequestId id, const std::vector<PrefixHash>& chain, uint32_t prompt,
                uint32_t total, uint32_t must_fit = 0) {
    const size_t required = (size_t{total} + block_tokens_ - 1) / block_tokens_;
    const size_t gate = (size_t{must_fit} + block_tokens_ - 1) / block_tokens_;
    auto it = requests_.find(id);
    if (it != requests_.end()) {
      Request& r = it->second;
      if (required <= r.table.size()) return true;
      if (required - r.table.size() > queue_.size()) return false;
      while (r.table.size() < required) r.table.push_back(TakeHead());
      return true;
    }
    const uint32_t hits = Lookup(chain, prompt) / block_tokens_;
    std::vector<uint32_t> hit_blocks;
    size_t in_queue = 0;
    for (uint32_t i = 0; i < hits; ++i) {
      hit_blocks.push_back(FindRegistered(chain[i]));
      if (blocks_[hit_blocks.back()].ref == 0) ++in_queue;
    }
    const size_t fresh = required > hits ? required - hits : 0;
    const size_t gated = std::max(required, gate) > hits ? std::max(required, gate) - hits : 0;
    if (gated + in_queue > queue_.size()) return false;
    Request& r = requests_[id];
    for (const uint32_t b : hit_blocks) {
      if (blocks_[b].ref == 0) queue_.erase(std::find(queue_.begin(), queue_.end(), b));
      ++blocks_[b].ref;
      r.table.push_back(b);
    }
    for (size_t i = 0; i < fresh; ++i) r.table.push_back(TakeHead());
    r.cached = hits * block_tokens_;
    r.cursor = hits;
    r.hashed = hits;
    return true;
  }

  void CacheBlocks(RequestId id, const std::vector<PrefixHash>& chain, uint32_t computed) {
    Request& r = requests_.at(id);
    if (!prefix_caching_) return;
    r.hashed = std::max<size_t>(r.hashed, computed / block_tokens_);
    const size_t limit = std::min<size_t>(computed / block_tokens_, chain.size());
    for (size_t i = r.cursor; i < limit; ++i) {
      Block& blk = blocks_[r.table[i]];
      if (!blk.registered && FindRegistered(chain[i]) == kNone) {
        blk.registered = true;
        blk.hash = chain[i];
      }
    }
    r.cursor = std::max(r.cursor, limit);
  }

  void Free(RequestId id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    // vLLM's free_blocks: walk the table last block first; blocks without a hash go to the
    // front (in walk order), hashed ones to the back.
    const std::vector<uint32_t>& table = it->second.table;
    std::vector<uint32_t> front;
    for (size_t i = table.size(); i-- > 0;) {
      if (--blocks_[table[i]].ref != 0) continue;
      if (i < it->second.hashed) {
        queue_.push_back(table[i]);
      } else {
        front.push_back(table[i]);
      }
    }
    queue_.insert(queue_.begin(), front.begin(), front.end());
    requests_.erase(it);
  }

  [[nodiscard]] std::vector<uint32_t> Table(RequestId id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? std::vector<uint32_t>{} : it->second.table;
  }
  [[nodiscard]] uint32_t Cached(RequestId id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? 0 : it->second.cached;
  }
  [[nodiscard]] bool Allocated(RequestId id) const { return requests_.contains(id); }
  [[nodiscard]] uint32_t CommonPrefix(RequestId id, uint32_t running) const {
    uint32_t n = 0;
    for (const uint32_t b : Table(id)) {
      if (blocks_[b].ref != running) break;
      ++n;
    }
    return n;
  }
  [[nodiscard]] uint32_t Ref(uint32_t b) const { return blocks_[b].ref; }
  [[nodiscard]] const std::vector<uint32_t>& Queue() const { return queue_; }
  [[nodiscard]] uint64_t Cached() const {
    return static_cast<uint64_t>(
        std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.registered; }));
  }
  [[nodiscard]] uint64_t Used() const { return blocks_.size() - queue_.size(); }
  [[nodiscard]] uint64_t evictions() const { return evictions_; }
  [[nodiscard]] uint32_t FindRegistered(PrefixHash h) const {
    for (uint32_t b = 0; b < blocks_.size(); ++b) {
      if (blocks_[b].registered && blocks_[b].hash == h) return b;
    }
    return kNone;
  }
  [[nodiscard]] size_t NumRequests() const { return requests_.size(); }

  static constexpr uint32_t kNone = KvCache::kNoBlock;

 private:
  struct Block {
    uint32_t ref = 0;
    bool registered = false;
    PrefixHash hash = 0;
  };
  struct Request {
    std::vector<uint32_t> table;
    uint32_t cached = 0;
    size_t cursor = 0;
    size_t hashed = 0;  // leading blocks holding a hash
  };

  uint32_t TakeHead() {
    const uint32_t b = queue_.front();
    queue_.erase(queue_.begin());
    if (blocks_[b].registered) {
      blocks_[b].registered = false;
      ++evictions_;
    }
    blocks_[b].ref = 1;
    return b;
  }

  uint32_t block_tokens_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<uint32_t> queue_;  // front = next to allocate
  std::map<RequestId, Request> requests_;
  uint64_t evictions_ = 0;
};

struct DriverRequest {
  std::vector<PrefixHash> chain;
  uint32_t prompt_tokens = 0;
  uint32_t total_tokens = 0;  // last total asked for
};

struct DifferentialStats {
  uint64_t ops = 0;
  uint64_t allocations = 0;
  uint64_t failed_allocations = 0;
  uint64_t hits = 0;
  uint64_t evictions = 0;
};

void ExpectSameState(const KvCache& kv, const ReferenceKv& ref, uint32_t num_blocks,
                     const std::vector<RequestId>& ids) {
  kv.CheckInvariants();
  ASSERT_EQ(kv.NumUsedBlocks(), ref.Used());
  ASSERT_EQ(kv.NumFreeBlocks(), ref.Queue().size());
  ASSERT_EQ(kv.NumCachedBlocks(), ref.Cached());
  ASSERT_EQ(kv.evictions(), ref.evictions());
  ASSERT_EQ(kv.FreeQueue(), ref.Queue());
  for (uint32_t b = 0; b < num_blocks; ++b) ASSERT_EQ(kv.RefCount(b), ref.Ref(b)) << "block " << b;
  const auto running = static_cast<uint32_t>(ref.NumRequests());
  for (const RequestId id : ids) {
    ASSERT_EQ(kv.IsAllocated(id), ref.Allocated(id)) << "request " << id;
    ASSERT_EQ(Table(kv, id), ref.Table(id)) << "request " << id;
    ASSERT_EQ(kv.CachedTokens(id), ref.Cached(id)) << "request " << id;
    ASSERT_EQ(kv.CommonPrefixBlocks(id, running), ref.CommonPrefix(id, running));
    ASSERT_EQ(kv.CommonPrefixBlocks(id, 1), ref.CommonPrefix(id, 1));
  }
}

void RunDifferential(uint64_t seed, uint32_t ops, DifferentialStats& stats) {
  Rng rng(seed);
  const uint32_t block_tokens = std::vector<uint32_t>{1, 4, 16}[rng.Uniform(3)];
  const auto num_blocks = static_cast<uint32_t>(block_tokens == 1   ? 40 + rng.Uniform(120)
                                                : block_tokens == 4 ? 6 + rng.Uniform(40)
                                                                    : 3 + rng.Uniform(14));
  const bool prefix_caching = rng.Uniform(8) != 0;
  SCOPED_TRACE(testing::Message() << "seed " << seed << " block_tokens " << block_tokens
                                  << " blocks " << num_blocks << " caching " << prefix_caching);
  // A few groups with shared prefixes, some not block-aligned; prompts are truncated at random
  // lengths, so one prompt is often a prefix of another (and identical prompts are common).
  const uint32_t prefix_tokens =
      block_tokens == 1
          ? 20
          : block_tokens * 2 + static_cast<uint32_t>(rng.Uniform(uint64_t{block_tokens} * 3));
  const PromptSet prompts = MakeGroupedPrompts(12, 3, prefix_tokens, 2 * block_tokens + 3, seed);
  const BlockHashTable hasher(BlockHashConfig{block_tokens, 0, seed});

  KvCache kv(KvCacheConfig{block_tokens, num_blocks, prefix_caching});
  ReferenceKv ref(block_tokens, num_blocks, prefix_caching);
  // Dense small ids plus a larger one (per-request arrays grow on demand); a very large id only
  // in a few seeds, as CheckInvariants scans the whole request array.
  std::vector<RequestId> ids;
  for (RequestId id = 0; id < 10; ++id) ids.push_back(id);
  ids.push_back(100 + static_cast<RequestId>(rng.Uniform(100)));
  if (seed % 100 == 0) ids.push_back(70000);
  std::map<RequestId, DriverRequest> live;

  for (uint32_t op = 0; op < ops; ++op) {
    SCOPED_TRACE(testing::Message() << "op " << op);
    const RequestId id = ids[rng.Uniform(ids.size())];
    const uint64_t kind = rng.Uniform(100);
    auto it = live.find(id);
    if (it == live.end()) {
      if (kind < 30) {
        // Free of an idle id is a no-op on both.
        kv.Free(id);
        ref.Free(id);
      } else {
        // Start: first Allocate (whole prompt, a first prefill chunk, or rarely nothing).
        const size_t p = rng.Uniform(prompts.size());
        const std::span<const Token> full = prompts.Prompt(p);
        const auto len = static_cast<uint32_t>(1 + rng.Uniform(full.size()));
        DriverRequest r;
        r.chain = hasher.ComputeChain(full.first(len));
        r.prompt_tokens = len;
        const uint32_t cached = kv.LookupCachedTokens(r.chain, len);
        ASSERT_EQ(cached, ref.Lookup(r.chain, len));
        const uint64_t how = rng.Uniform(10);
        r.total_tokens = how < 6   ? len
                         : how < 9 ? cached + static_cast<uint32_t>(1 + rng.Uniform(len - cached))
                                   : 0;
        // Half the starts pass vLLM's full-sequence gate: the prompt plus up to 3 blocks.
        const uint32_t must_fit =
            rng.Uniform(2) == 0
                ? 0
                : len + static_cast<uint32_t>(rng.Uniform(uint64_t{block_tokens} * 3 + 1));
        const bool ok = kv.Allocate(id, r.chain, len, r.total_tokens, must_fit);
        ASSERT_EQ(ok, ref.Allocate(id, r.chain, len, r.total_tokens, must_fit));
        ++stats.allocations;
        if (ok) {
          stats.hits += cached > 0 ? 1 : 0;
          live.emplace(id, std::move(r));
        } else {
          ++stats.failed_allocations;
        }
      }
    } else {
      DriverRequest& r = it->second;
      if (kind < 35) {
        // Grow: the rest of the prefill or a few decode tokens.
        const uint32_t total =
            r.total_tokens + static_cast<uint32_t>(1 + rng.Uniform(uint64_t{block_tokens} * 2));
        const bool ok = kv.Allocate(id, r.chain, r.prompt_tokens, total);
        ASSERT_EQ(ok, ref.Allocate(id, r.chain, r.prompt_tokens, total));
        ++stats.allocations;
        if (ok) {
          r.total_tokens = total;
        } else {
          ++stats.failed_allocations;
        }
      } else if (kind < 75) {
        // Mark computed: any amount the table covers (usually all of it).
        const auto covered = static_cast<uint32_t>(kv.BlockTable(id).size()) * block_tokens;
        const uint32_t computed =
            rng.Uniform(3) == 0 ? static_cast<uint32_t>(rng.Uniform(covered + 1)) : covered;
        kv.CacheBlocks(id, r.chain, computed);
        ref.CacheBlocks(id, r.chain, computed);
      } else {
        kv.Free(id);
        ref.Free(id);
        live.erase(it);
      }
    }
    ++stats.ops;
    ExpectSameState(kv, ref, num_blocks, ids);
    if (testing::Test::HasFatalFailure()) return;
    // Lookups of random prompts (and prefixes of them) agree.
    for (int probe = 0; probe < 2; ++probe) {
      const std::span<const Token> full = prompts.Prompt(rng.Uniform(prompts.size()));
      const auto len = static_cast<uint32_t>(rng.Uniform(full.size() + 1));
      const std::vector<PrefixHash> chain = hasher.ComputeChain(full.first(len));
      ASSERT_EQ(kv.LookupCachedTokens(chain, len), ref.Lookup(chain, len));
    }
  }
  stats.evictions += kv.evictions();
}

TEST(KvCacheDifferential, RandomOperationSequencesMatchTheReference) {
  constexpr uint64_t kSeeds = 400;
  constexpr uint32_t kOps = 1500;
  DifferentialStats stats;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    RunDifferential(seed, kOps, stats);
    if (HasFatalFailure()) return;
  }
  // The sequences must exercise every path, not just agree on trivial states.
  EXPECT_GT(stats.failed_allocations, stats.allocations / 50);
  EXPECT_GT(stats.hits, stats.allocations / 50);
  EXPECT_GT(stats.evictions, 1000u);
  RecordProperty("ops", static_cast<int>(stats.ops));
  std::printf(
      "differential: %llu sequences, %llu ops, %llu allocations (%llu failed), %llu "
      "first allocations with hits, %llu evictions\n",
      static_cast<unsigned long long>(kSeeds), static_cast<unsigned long long>(stats.ops),
      static_cast<unsigned long long>(stats.allocations),
      static_cast<unsigned long long>(stats.failed_allocations),
      static_cast<unsigned long long>(stats.hits),
      static_cast<unsigned long long>(stats.evictions));
}

}  // namespace
}  // namespace feather
