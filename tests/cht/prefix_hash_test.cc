// prefix_hash_test.cc: both hash schemes are prefix-consistent, include the final partial chunk,
// and the parallel chained form equals the sequential one.
#include "cht/prefix_hash.h"

#include <gtest/gtest.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <vector>

#include "base/rng.h"

namespace feather {
namespace {

std::vector<Token> RandomTokens(Rng& rng, size_t n, uint64_t alphabet) {
  std::vector<Token> out(n);
  for (Token& t : out) t = static_cast<Token>(rng.Uniform(alphabet));
  return out;
}

TEST(PrefixHash, ChunkCountIncludesPartialChunk) {
  std::vector<PrefixHash> h;
  ComputeStreamingHashes(std::vector<Token>(101, 1), 50, h);
  EXPECT_EQ(h.size(), 3u);
  ComputeChainedHashes(std::vector<Token>(100, 1), 50, h);
  EXPECT_EQ(h.size(), 2u);
  ComputeStreamingHashes({}, 50, h);
  EXPECT_TRUE(h.empty());
}

TEST(PrefixHash, StreamingDigestEqualsHashOfWholePrefix) {
  Rng rng(3);
  const auto tokens = RandomTokens(rng, 777, 1000);
  std::vector<PrefixHash> h;
  ComputeStreamingHashes(tokens, 64, h);
  for (size_t c = 0; c < h.size(); ++c) {
    const size_t len = std::min<size_t>((c + 1) * 64, tokens.size());
    EXPECT_EQ(h[c], XXH64(tokens.data(), len * sizeof(Token), 0)) << c;
  }
}

// Property over random pairs: h_c equal <=> the prompts agree on every token up to chunk c's end
// and both reach the same boundary.
TEST(PrefixHash, EqualHashesExactlyWhenPrefixesAgree) {
  for (HashScheme scheme : {HashScheme::kStreaming, HashScheme::kChained, HashScheme::kStriped}) {
    for (uint64_t seed = 0; seed < 300; ++seed) {
      Rng rng(seed);
      const uint32_t chunk = static_cast<uint32_t>(rng.UniformInt(1, 9));
      auto a = RandomTokens(rng, static_cast<size_t>(rng.UniformInt(0, 60)), 3);
      auto b = a;
      b.resize(static_cast<size_t>(rng.UniformInt(0, 60)), 1);
      if (!b.empty() && rng.Uniform(2) == 0) b[rng.Uniform(b.size())] ^= 1;
      std::vector<PrefixHash> ha, hb;
      ComputePrefixHashes(scheme, a, chunk, ha);
      ComputePrefixHashes(scheme, b, chunk, hb);
      for (size_t c = 0; c < std::min(ha.size(), hb.size()); ++c) {
        const size_t end_a = std::min(a.size(), (c + 1) * chunk);
        const size_t end_b = std::min(b.size(), (c + 1) * chunk);
        const bool same = end_a == end_b && std::equal(a.begin(), a.begin() + end_a, b.begin());
        EXPECT_EQ(ha[c] == hb[c], same) << "seed " << seed << " chunk " << c;
      }
    }
  }
}

TEST(PrefixHash, ParallelChainedEqualsSequential) {
  Rng rng(11);
  const auto tokens = RandomTokens(rng, 100000, 50000);
  std::vector<PrefixHash> one, four;
  ComputeChainedHashes(tokens, 256, one, 1);
  ComputeChainedHashes(tokens, 256, four, 4);
  EXPECT_EQ(one, four);
}

TEST(PrefixHash, SchemesDifferInValue) {
  std::vector<PrefixHash> s, c;
  ComputeStreamingHashes(std::vector<Token>(10, 3), 5, s);
  ComputeChainedHashes(std::vector<Token>(10, 3), 5, c);
  EXPECT_NE(s, c);
}

// The striped scheme's paths agree (the best one, AVX2 where the CPU has it; SSE2; portable), on
// contiguous prompts and on two-piece views whose seam falls anywhere in a chunk (chunk sizes
// that are and are not multiples of the 8-token stripe, and chunks of more than 8 stripes, whose
// key rows wrap; the default 50-token chunk, with prompts that end inside a chunk and on a
// chunk boundary).
TEST(PrefixHash, StripedPathsAgreeAndViewsEqualContiguous) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    Rng rng(seed);
    // Every fourth seed the default 50-token chunk, which the AVX2 path unrolls.
    const auto chunk =
        seed % 4 == 1 ? 50u : static_cast<uint32_t>(rng.UniformInt(1, seed % 3 == 0 ? 140 : 70));
    const auto tokens = RandomTokens(rng, static_cast<size_t>(rng.UniformInt(0, 900)), 1u << 31);
    std::vector<PrefixHash> fast, portable, sse2, viewed;
    ComputeStripedHashes(tokens, chunk, fast);
    prefix_hash_internal::ComputeStripedHashesPortable(tokens, chunk, portable);
    ASSERT_EQ(fast, portable) << "seed " << seed;
    prefix_hash_internal::ComputeStripedHashesSse2(tokens, chunk, sse2);
    ASSERT_EQ(sse2, portable) << "seed " << seed;
    const size_t seam = tokens.empty() ? 0 : rng.Uniform(tokens.size() + 1);
    const std::span<const Token> all(tokens);
    const PromptView view(all.first(seam), all.subspan(seam));
    ComputeStripedHashes(view, chunk, viewed);
    ASSERT_EQ(fast, viewed) << "seed " << seed << " seam " << seam;
    prefix_hash_internal::ComputeStripedHashesPortable(view, chunk, viewed);
    ASSERT_EQ(fast, viewed) << "seed " << seed << " seam " << seam;
  }
}

// 2^21 distinct prefixes that differ in few bits (a counter in one token, at the first or the
// last word of a chunk) give 2^21 distinct hashes: a 64-bit hash should give no collision
// (expected pairs ~ 2^41 / 2^64).
TEST(PrefixHash, StripedNoCollisionsOnNearbyInputs) {
  std::vector<PrefixHash> all;
  all.reserve(2u << 20);
  std::vector<PrefixHash> h;
  for (uint32_t i = 0; i < (1u << 19); ++i) {
    for (const size_t position : {size_t{0}, size_t{49}}) {
      std::vector<Token> tokens(100, 7);
      tokens[position] = static_cast<Token>(i);       // chunk 1 differs
      tokens[50 + position] = static_cast<Token>(i);  // and so does chunk 2's prefix
      ComputeStripedHashes(tokens, 50, h);
      all.push_back(h[0]);
      all.push_back(h[1]);
    }
  }
  // Inputs: (i, position) pairs are distinct except position 0 vs 49 with i == 7 (both all-7).
  std::sort(all.begin(), all.end());
  const auto distinct = static_cast<size_t>(std::unique(all.begin(), all.end()) - all.begin());
  EXPECT_EQ(distinct, all.size() - 2);
}

TEST(PrefixHash, StripedPartialChunkDiffersFromZeroPadding) {
  std::vector<PrefixHash> a, b;
  ComputeStripedHashes(std::vector<Token>{5, 6, 7}, 50, a);
  ComputeStripedHashes(std::vector<Token>{5, 6, 7, 0}, 50, b);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NE(a[0], b[0]);
}

}  // namespace
}  // namespace feather
