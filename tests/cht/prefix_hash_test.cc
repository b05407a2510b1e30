// prefix_hash_test.cc: both hash schemes are prefix-consistent, include the final partial chunk,
// and the parallel chained form equals the sequential one.
#include "cht/prefix_hash.h"

#include <gtest/gtest.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

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
  for (HashScheme scheme : {HashScheme::kStreaming, HashScheme::kChained}) {
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

}  // namespace
}  // namespace feather
