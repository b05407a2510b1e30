// prompt_store_test.cc: the prompt store against the naive per-request copy. Over random seeds
// and every sharing shape (and the trace fixture), every prompt read through its two-piece view
// gives the tokens of its whole copy, its deduplicated block-hash chain gives the chain
// BlockHashTable computes from the copy, and the CHT's prefix hashes of the view equal those of
// the copy; the store holds each shared head once.
#include "sim/workload/prompt_store.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/rng.h"
#include "cht/chunked_hash_tree.h"
#include "cht/prefix_hash.h"
#include "policies/block_hash_table.h"
#include "sim/workload/workload.h"

namespace feather {
namespace {

const std::string kFixture = std::string(FEATHER_SOURCE_DIR) + "/tests/sim/data/small_trace.jsonl";
const std::string kRealTrace =
    std::string(FEATHER_SOURCE_DIR) + "/../shared/traces/conversation_trace.jsonl";

// A random small spec of `kind`: lengths, groups and radix shape drawn from `rng`.
WorkloadSpec RandomSpec(SharingKind kind, Rng& rng) {
  WorkloadSpec spec;
  spec.requests = 20 + rng.Uniform(200);
  spec.sharing.kind = kind;
  spec.sharing.groups = 1 + static_cast<uint32_t>(rng.Uniform(6));
  spec.sharing.prefix_tokens = static_cast<uint32_t>(rng.Uniform(120));
  spec.sharing.levels = 1 + static_cast<uint32_t>(rng.Uniform(3));
  spec.sharing.branching = 1 + static_cast<uint32_t>(rng.Uniform(3));
  spec.sharing.level_tokens = 1 + static_cast<uint32_t>(rng.Uniform(40));
  spec.sharing.shared_fraction = rng.NextDouble();
  spec.prompt_tokens.kind = LengthKind::kUniform;
  spec.prompt_tokens.min = 1 + static_cast<uint32_t>(rng.Uniform(20));
  spec.prompt_tokens.max = spec.prompt_tokens.min + static_cast<uint32_t>(rng.Uniform(80));
  return spec;
}

// Every view against the naive copy: tokens, chains at several block sizes, CHT prefix hashes.
void ExpectViewsMatchCopies(const PromptStore& store, Rng& rng) {
  const PromptSet copy = CopyEachPrompt(store);
  ASSERT_EQ(copy.size(), store.size());
  EXPECT_EQ(copy.group, store.group);
  EXPECT_LE(store.StoredTokens(), store.TotalTokens());
  for (size_t i = 0; i < store.size(); ++i) {
    const PromptView view = store.Prompt(i);
    const std::span<const Token> whole = copy.Prompt(i);
    ASSERT_EQ(view.size(), whole.size()) << i;
    for (size_t t = 0; t < whole.size(); ++t) ASSERT_EQ(view[t], whole[t]) << i << " @" << t;
    std::vector<Token> pieces;
    view.ForEachPiece(
        [&](std::span<const Token> p) { pieces.insert(pieces.end(), p.begin(), p.end()); });
    ASSERT_EQ(pieces, std::vector<Token>(whole.begin(), whole.end())) << i;
    // A random sub-view.
    const size_t begin = rng.Uniform(whole.size() + 1);
    const size_t n = rng.Uniform(whole.size() - begin + 1);
    ASSERT_EQ(view.subview(begin, n).ToVector(),
              std::vector<Token>(whole.begin() + begin, whole.begin() + begin + n));
  }
  for (const uint32_t block_tokens : {1u, 3u, 16u, static_cast<uint32_t>(1 + rng.Uniform(64))}) {
    const PromptChains chains(store, block_tokens);
    const BlockHashTable table(BlockHashConfig{.block_tokens = block_tokens});
    uint64_t total_hashes = 0;
    for (size_t i = 0; i < store.size(); ++i) {
      const std::vector<PrefixHash> expected = table.ComputeChain(copy.Prompt(i));
      const ChainView chain = chains.ChainOf(i);
      ASSERT_EQ(chain.ToVector(), expected) << "prompt " << i << ", blocks of " << block_tokens;
      ASSERT_EQ(table.ComputeChain(store.Prompt(i)), expected) << i;
      total_hashes += expected.size();
    }
    EXPECT_LE(chains.StoredHashes(), total_hashes);
  }
  const uint32_t chunk = 1 + static_cast<uint32_t>(rng.Uniform(50));
  std::vector<PrefixHash> from_view;
  std::vector<PrefixHash> from_copy;
  for (const HashScheme scheme :
       {HashScheme::kStreaming, HashScheme::kChained, HashScheme::kStriped, HashScheme::kAes}) {
    for (size_t i = 0; i < store.size(); ++i) {
      ComputePrefixHashes(scheme, store.Prompt(i), chunk, from_view);
      ComputePrefixHashes(scheme, copy.Prompt(i), chunk, from_copy);
      ASSERT_EQ(from_view, from_copy) << ToString(scheme) << " prompt " << i;
    }
  }
}

TEST(PromptStoreProperty, ViewsAndChainsMatchTheNaiveCopyOverRandomSeeds) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Rng rng(seed);
    for (const SharingKind kind :
         {SharingKind::kGroups, SharingKind::kRadix, SharingKind::kFractional,
          SharingKind::kTwoPrefixes, SharingKind::kNone}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " kind " +
                   std::to_string(static_cast<int>(kind)));
      const Workload w = GenerateWorkload(RandomSpec(kind, rng), seed);
      ExpectViewsMatchCopies(w.prompts, rng);
    }
  }
}

TEST(PromptStoreProperty, TraceViewsAndChainsMatchTheNaiveCopy) {
  WorkloadSpec spec;
  spec.use_trace = true;
  spec.trace.path = kFixture;
  spec.trace.block_tokens = 4;
  Rng rng(4);
  ExpectViewsMatchCopies(GenerateWorkload(spec, 1).prompts, rng);
}

TEST(PromptStoreProperty, RealTraceViewsAndChainsMatchTheNaiveCopy) {
  if (!std::filesystem::exists(kRealTrace)) GTEST_SKIP() << "no " << kRealTrace;
  WorkloadSpec spec;
  spec.use_trace = true;
  spec.trace.path = kRealTrace;
  spec.trace.limit = 300;  // conversations continue: later records reuse earlier blocks
  const Workload w = GenerateWorkload(spec, 1);
  Rng rng(512);
  ExpectViewsMatchCopies(w.prompts, rng);
  EXPECT_LT(w.prompts.StoredTokens(), w.prompts.TotalTokens());
}

TEST(PromptStoreProperty, ResumedPrefixHashesEqualTheWholeComputation) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Rng rng(seed);
    const Workload w = GenerateWorkload(RandomSpec(SharingKind::kGroups, rng), seed);
    const PromptSet copy = CopyEachPrompt(w.prompts);
    std::vector<PrefixHash> whole, head, own;
    PrefixHashResume resume;
    for (const HashScheme scheme :
         {HashScheme::kStreaming, HashScheme::kChained, HashScheme::kStriped, HashScheme::kAes}) {
      for (size_t i = 0; i < w.prompts.size(); ++i) {
        const PromptView view = w.prompts.Prompt(i);
        const uint32_t chunk = 1 + static_cast<uint32_t>(rng.Uniform(30));
        const auto k = static_cast<uint32_t>(rng.Uniform(view.size() / chunk + 1));
        ComputePrefixHashes(scheme, copy.Prompt(i), chunk, whole);
        PrefixHashesUpTo(scheme, view, chunk, k, head, resume);
        PrefixHashesFrom(scheme, view, chunk, k, resume, own);
        head.insert(head.end(), own.begin(), own.end());
        ASSERT_EQ(head, whole) << ToString(scheme) << " prompt " << i << " k " << k;
      }
    }
  }
}

// The CHT shares the hashes of keyed heads (the store's views) among present requests. A tree
// fed the store's views and one fed contiguous copies make the same proposals through random
// arrivals, admissions, finishes, cancellations and preemptions.
TEST(PromptStoreProperty, ChtOnKeyedViewsMatchesChtOnCopies) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Rng rng(seed);
    const SharingKind kind = seed % 2 == 0 ? SharingKind::kGroups : SharingKind::kRadix;
    WorkloadSpec spec = RandomSpec(kind, rng);
    spec.sharing.prefix_tokens = 20 + static_cast<uint32_t>(rng.Uniform(200));
    const Workload w = GenerateWorkload(spec, seed);
    const PromptSet copy = CopyEachPrompt(w.prompts);
    ChtConfig config;
    config.chunk_tokens = 1 + static_cast<uint32_t>(rng.Uniform(20));
    config.hash_scheme = static_cast<HashScheme>(seed % 4);
    ChunkedHashTree keyed(config);
    ChunkedHashTree plain(config);
    std::vector<RequestId> active;
    size_t next = 0;
    for (int op = 0; op < 3000; ++op) {
      const uint64_t pick = rng.Uniform(10);
      if (pick < 4 && next < w.prompts.size()) {
        const auto id = static_cast<RequestId>(next++);
        keyed.Insert(id, w.prompts.Prompt(id));
        plain.Insert(id, copy.Prompt(id));
        ASSERT_EQ(keyed.NumChunksOf(id), plain.NumChunksOf(id));
      } else if (pick < 7) {
        const std::optional<ChtCandidate> a = keyed.FindBest();
        ASSERT_EQ(a, plain.FindBest()) << "op " << op;
        if (a && rng.Uniform(4) != 0) {
          keyed.AddToBatch(a->request);
          plain.AddToBatch(a->request);
          active.push_back(a->request);
        } else if (a) {
          keyed.Remove(a->request);
          plain.Remove(a->request);
        }
      } else if (!active.empty()) {
        const size_t at = rng.Uniform(active.size());
        const RequestId id = active[at];
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(at));
        if (pick == 9) {
          keyed.Requeue(id);
          plain.Requeue(id);
        } else {
          keyed.Finish(id);
          plain.Finish(id);
        }
      }
      ASSERT_EQ(keyed.TipLevel(), plain.TipLevel()) << "op " << op;
      ASSERT_EQ(keyed.NumWaiting(), plain.NumWaiting());
    }
    keyed.CheckInvariants();
  }
}

TEST(PromptStore, GroupsStoreEachPrefixOnce) {
  WorkloadSpec spec;
  spec.requests = 1000;
  spec.sharing.kind = SharingKind::kGroups;
  spec.sharing.groups = 5;
  spec.sharing.prefix_tokens = 500;
  spec.prompt_tokens.kind = LengthKind::kFixed;
  spec.prompt_tokens.value = 20;
  const Workload w = GenerateWorkload(spec, 3);
  EXPECT_EQ(w.prompts.TotalTokens(), 1000u * 520u);
  EXPECT_EQ(w.prompts.StoredTokens(), 5u * 500u + 1000u * 20u);
  // Block-hash chains: 31 full blocks of 16 per prefix stored once, the rest per request.
  const PromptChains chains(w.prompts, 16);
  EXPECT_EQ(chains.StoredHashes(), 5u * 31u + 1000u * 1u);  // (500 % 16 + 20) / 16 = 1 own
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    const PromptStore::Piece head = w.prompts.Head(i);
    EXPECT_EQ(head.tokens, 500u);
    EXPECT_EQ(w.prompts.Tail(i).tokens, 20u);
  }
}

TEST(PromptStore, StoreEachPromptRoundTrips) {
  const PromptSet set = MakeRadixPrompts(RadixShape{2, 3, 7, 5}, 40, 9);
  const PromptStore store = StoreEachPrompt(set);
  const PromptSet back = CopyEachPrompt(store);
  EXPECT_EQ(back.tokens, set.tokens);
  EXPECT_EQ(back.offsets, set.offsets);
  EXPECT_EQ(back.group, set.group);
  EXPECT_EQ(store.StoredTokens(), store.TotalTokens());
}

TEST(PromptView, EmptyHeadMakesTheTailTheHead) {
  const std::vector<Token> tail = {4, 5, 6};
  const PromptView view(std::span<const Token>{}, tail);
  EXPECT_TRUE(view.contiguous());
  EXPECT_EQ(view.head().size(), 3u);
  EXPECT_EQ(view[2], 6);
  const PromptView none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.size(), 0u);
}

}  // namespace
}  // namespace feather
