// block_hash_table_test.cc: vLLM-style chained block hashes, reference counts, and the LRU free
// queue of cached blocks.
#include "policies/block_hash_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "base/rng.h"
#include "sim/workload/synthetic_prompts.h"

namespace feather {
namespace {

// Naive reference: the chains of `a` and `b` must agree at block k exactly when the prompts agree
// on their first (k + 1) * block tokens.
void ExpectChainsMatchPrefixes(const BlockHashTable& table, std::span<const Token> a,
                               std::span<const Token> b) {
  const size_t block = table.config().block_tokens;
  const std::vector<PrefixHash> ca = table.ComputeChain(a);
  const std::vector<PrefixHash> cb = table.ComputeChain(b);
  ASSERT_EQ(ca.size(), a.size() / block);
  ASSERT_EQ(cb.size(), b.size() / block);
  for (size_t k = 0; k < std::min(ca.size(), cb.size()); ++k) {
    const size_t n = (k + 1) * block;
    const bool same_tokens =
        std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin());
    ASSERT_EQ(ca[k] == cb[k], same_tokens) << "block " << k;
  }
}

TEST(BlockHashTable, ChainsAgreeExactlyOnEqualLeadingBlocksOfRadixPrompts) {
  uint64_t seed = 1;
  for (const uint32_t block : {16u, 5u}) {
    for (const uint32_t tokens_per_level : {7u, 16u, 24u, 40u}) {
      for (const uint32_t levels : {1u, 3u}) {
        const RadixShape shape{levels, 3, tokens_per_level, static_cast<uint32_t>(seed % 3) * 9};
        const PromptSet prompts = MakeRadixPrompts(shape, 24, seed++);
        const BlockHashTable table(BlockHashConfig{block, 0, seed});
        for (size_t i = 0; i < prompts.size(); ++i) {
          for (size_t j = 0; j < prompts.size(); ++j) {
            SCOPED_TRACE(testing::Message() << "block " << block << " level tokens "
                                            << tokens_per_level << " prompts " << i << "," << j);
            ExpectChainsMatchPrefixes(table, prompts.Prompt(i), prompts.Prompt(j));
          }
        }
      }
    }
  }
}

// Over a two-letter alphabet equal blocks behind different prefixes are common: a hash of the
// block's tokens alone (no parent) fails here.
TEST(BlockHashTable, ChainsAgreeExactlyOnEqualLeadingBlocksOfBinaryPrompts) {
  Rng rng(7);
  const BlockHashTable table(BlockHashConfig{2, 0, 11});
  std::vector<std::vector<Token>> prompts(64);
  for (auto& p : prompts) {
    const size_t size = 1 + rng.Uniform(9);
    for (size_t t = 0; t < size; ++t) p.push_back(static_cast<Token>(rng.Uniform(2)));
  }
  for (const auto& a : prompts) {
    for (const auto& b : prompts) ExpectChainsMatchPrefixes(table, a, b);
  }
  // The same block after different parents: different hashes.
  const std::vector<Token> x = {1, 2, 7, 7};
  const std::vector<Token> y = {3, 4, 7, 7};
  EXPECT_NE(table.ComputeChain(x)[1], table.ComputeChain(y)[1]);
}

TEST(BlockHashTable, PartialLastBlockIsNotHashed) {
  const BlockHashTable table;  // 16-token blocks
  std::vector<Token> prompt(47);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<Token>(100 + i);
  const std::vector<PrefixHash> chain = table.ComputeChain(prompt);
  ASSERT_EQ(chain.size(), 2u);
  std::vector<Token> changed_tail = prompt;
  changed_tail[32] = -1;
  changed_tail[46] = -1;
  EXPECT_EQ(table.ComputeChain(changed_tail), chain);
  std::vector<Token> changed_block = prompt;
  changed_block[31] = -1;
  EXPECT_EQ(table.ComputeChain(changed_block)[0], chain[0]);
  EXPECT_NE(table.ComputeChain(changed_block)[1], chain[1]);
  prompt.push_back(0);  // 48 tokens: the third block is now full
  EXPECT_EQ(table.ComputeChain(prompt).size(), 3u);
  EXPECT_TRUE(table.ComputeChain(std::span<const Token>(prompt.data(), 15)).empty());
  EXPECT_TRUE(table.ComputeChain(std::span<const Token>{}).empty());
}

TEST(BlockHashTable, ChainStartsFromTheSeedAndAppends) {
  std::vector<Token> prompt(32, 5);
  const BlockHashTable a(BlockHashConfig{16, 0, 1});
  const BlockHashTable b(BlockHashConfig{16, 0, 2});
  EXPECT_NE(a.ComputeChain(prompt)[0], b.ComputeChain(prompt)[0]);
  EXPECT_EQ(a.ComputeChain(prompt)[0],
            BlockHashTable::HashBlock(1, std::span<const Token>(prompt.data(), 16)));
  std::vector<PrefixHash> out = {42};
  EXPECT_EQ(a.ComputeChain(prompt, out), 2u);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], 42u);
  EXPECT_EQ(out[2], a.ComputeChain(prompt)[1]);
}

TEST(BlockHashTable, ReferenceCountsAndRecordLifetime) {
  BlockHashTable table;
  const std::vector<PrefixHash> a = {1, 2, 3};
  const std::vector<PrefixHash> b = {1, 2, 4};
  table.AddWaiting(a);
  table.AddWaiting(b);
  EXPECT_EQ(table.NumRecords(), 4u);
  EXPECT_EQ(table.Find(1)->waiting_refs, 2u);
  EXPECT_EQ(table.Find(3)->waiting_refs, 1u);
  EXPECT_FALSE(table.IsCached(1));
  table.RemoveWaiting(b);  // never cached: block 4 disappears
  EXPECT_EQ(table.Find(4), nullptr);
  EXPECT_EQ(table.Find(1)->waiting_refs, 1u);
  table.Admit(a);
  EXPECT_EQ(table.Find(1)->waiting_refs, 0u);
  EXPECT_EQ(table.Find(1)->running_refs, 1u);
  EXPECT_EQ(table.CountCachedPrefix(a), 3u);
  EXPECT_EQ(table.CountCachedPrefix(b), 2u);
  EXPECT_EQ(table.NumFreeQueueBlocks(), 0u);
  table.Release(a);  // freed tail first
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{3, 2, 1}));
  EXPECT_EQ(table.CountCachedPrefix(a), 3u);  // still cached after the request finished
  EXPECT_EQ(table.NumRecords(), 3u);
  table.CheckInvariants();
}

TEST(BlockHashTable, EvictsTheLeastRecentlyFreedBlockOverCapacity) {
  BlockHashTable table(BlockHashConfig{16, 4, 0});
  const std::vector<PrefixHash> a = {10, 11, 12};
  const std::vector<PrefixHash> b = {10, 21};
  const std::vector<PrefixHash> c = {30, 31};
  table.AddWaiting(a);
  table.AddWaiting(b);
  table.Admit(a);
  table.Admit(b);
  table.Release(a);  // 10 is still running for b
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{12, 11}));
  table.Release(b);
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{12, 11, 21, 10}));
  EXPECT_EQ(table.evictions(), 0u);
  table.AddWaiting(c);
  table.Admit(c);
  table.Release(c);  // 6 free blocks > 4: the two least recently freed go
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{21, 10, 31, 30}));
  EXPECT_EQ(table.evictions(), 2u);
  EXPECT_EQ(table.Find(12), nullptr);
  EXPECT_EQ(table.Find(11), nullptr);
  EXPECT_EQ(table.CountCachedPrefix(a), 1u);

  // Reusing cached blocks takes them out of the queue; freeing them again makes them the most
  // recently freed.
  const std::vector<PrefixHash> d = {10, 21};
  table.AddWaiting(d);
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{21, 10, 31, 30}));  // waiting: no touch
  table.Admit(d);
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{31, 30}));
  table.Release(d);
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{31, 30, 21, 10}));

  // An evicted block that a waiting request references keeps its record, uncached.
  const std::vector<PrefixHash> e = {31};
  table.AddWaiting(e);
  const std::vector<PrefixHash> f = {40, 41};
  table.AddWaiting(f);
  table.Admit(f);
  table.Release(f);
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{21, 10, 41, 40}));
  EXPECT_EQ(table.evictions(), 4u);
  ASSERT_NE(table.Find(31), nullptr);
  EXPECT_FALSE(table.Find(31)->cached);
  EXPECT_EQ(table.Find(31)->waiting_refs, 1u);
  EXPECT_EQ(table.Find(30), nullptr);
  table.CheckInvariants();
  table.RemoveWaiting(e);
  EXPECT_EQ(table.Find(31), nullptr);
  table.CheckInvariants();
}

TEST(BlockHashTable, PreemptFreesBlocksButKeepsWaitingReferences) {
  BlockHashTable table(BlockHashConfig{16, 1, 0});
  const std::vector<PrefixHash> a = {1, 2};
  table.AddWaiting(a);
  table.Admit(a);
  table.Preempt(a);  // 2 then 1 freed; capacity 1 evicts 2
  EXPECT_EQ(table.FreeQueue(), (std::vector<PrefixHash>{1}));
  EXPECT_EQ(table.evictions(), 1u);
  EXPECT_EQ(table.Find(2)->waiting_refs, 1u);
  EXPECT_FALSE(table.IsCached(2));
  EXPECT_EQ(table.CountCachedPrefix(a), 1u);
  table.Admit(a);  // 1 is a hit, 2 is recomputed
  EXPECT_EQ(table.NumFreeQueueBlocks(), 0u);
  EXPECT_EQ(table.CountCachedPrefix(a), 2u);
  table.CheckInvariants();
}

TEST(BlockHashTable, UnboundedQueueNeverEvicts) {
  BlockHashTable table;
  std::vector<PrefixHash> chain;
  for (PrefixHash h = 1; h <= 1000; ++h) {
    chain.assign(1, h);
    table.AddWaiting(chain);
    table.Admit(chain);
    table.Release(chain);
  }
  EXPECT_EQ(table.NumFreeQueueBlocks(), 1000u);
  EXPECT_EQ(table.evictions(), 0u);
  EXPECT_GT(table.MemoryBytes(), 1000 * sizeof(BlockRecord));
  table.CheckInvariants();
}

TEST(BlockHashTableDeathTest, RejectsUnbalancedReferences) {
  BlockHashTable table;
  const std::vector<PrefixHash> a = {1};
  EXPECT_DEATH(table.RemoveWaiting(a), "not in the table");
  table.AddWaiting(a);
  EXPECT_DEATH(table.Release(a), "underflow");
  EXPECT_DEATH({ const BlockHashTable bad(BlockHashConfig{0, 0, 0}); }, "block_tokens");
}

}  // namespace
}  // namespace feather
