// prefix_hash_test.cc: every hash scheme is prefix-consistent and includes the final partial chunk,
// the parallel chained form equals the sequential one, and each SIMD path equals the portable one.
#include "cht/prefix_hash.h"

#include <gtest/gtest.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "cht/prefix_hash_aes.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
  for (HashScheme scheme :
       {HashScheme::kStreaming, HashScheme::kChained, HashScheme::kStriped, HashScheme::kAes}) {
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
// (expected pairs ~ 2^41 / 2^64). Returns the number of distinct hashes and of inputs.
using HashFunction = void (*)(PromptView, uint32_t, std::vector<PrefixHash>&);
std::pair<size_t, size_t> DistinctHashesOfNearbyInputs(HashFunction hash) {
  std::vector<PrefixHash> all;
  all.reserve(2u << 20);
  std::vector<PrefixHash> h;
  for (uint32_t i = 0; i < (1u << 19); ++i) {
    for (const size_t position : {size_t{0}, size_t{49}}) {
      std::vector<Token> tokens(100, 7);
      tokens[position] = static_cast<Token>(i);       // chunk 1 differs
      tokens[50 + position] = static_cast<Token>(i);  // and so does chunk 2's prefix
      hash(tokens, 50, h);
      all.push_back(h[0]);
      all.push_back(h[1]);
    }
  }
  const size_t inputs = all.size();
  std::sort(all.begin(), all.end());
  return {static_cast<size_t>(std::unique(all.begin(), all.end()) - all.begin()), inputs};
}

// Inputs: (i, position) pairs are distinct except position 0 vs 49 with i == 7 (both all-7).
TEST(PrefixHash, StripedNoCollisionsOnNearbyInputs) {
  const auto [distinct, inputs] = DistinctHashesOfNearbyInputs(&ComputeStripedHashes);
  EXPECT_EQ(distinct, inputs - 2);
}

TEST(PrefixHash, AesNoCollisionsOnNearbyInputs) {
  const auto [distinct, inputs] = DistinctHashesOfNearbyInputs(&ComputeAesHashes);
  EXPECT_EQ(distinct, inputs - 2);
}

TEST(PrefixHash, PartialChunkDiffersFromZeroPadding) {
  for (const HashScheme scheme : {HashScheme::kStriped, HashScheme::kAes}) {
    std::vector<PrefixHash> a, b;
    ComputePrefixHashes(scheme, std::vector<Token>{5, 6, 7}, 50, a);
    ComputePrefixHashes(scheme, std::vector<Token>{5, 6, 7, 0}, 50, b);
    ASSERT_EQ(a.size(), 1u) << ToString(scheme);
    ASSERT_EQ(b.size(), 1u) << ToString(scheme);
    EXPECT_NE(a[0], b[0]) << ToString(scheme);
  }
}

// The portable AES round equals the CPU's aesenc on random states and keys (and the FIPS-197
// S-box spot values are checked at compile time in prefix_hash_aes.cc).
#if defined(__x86_64__)
__attribute__((target("aes"))) void CpuAesRound(const unsigned char* s, const unsigned char* k,
                                                unsigned char* out) {
  const __m128i r = _mm_aesenc_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(k)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), r);
}
#endif

TEST(PrefixHash, AesPortableRoundEqualsCpuInstruction) {
#if defined(__x86_64__)
  if (!aes_prefix_hash::HasAesNi()) GTEST_SKIP() << "this CPU has no AES-NI to compare with";
  Rng rng(17);
  for (int trial = 0; trial < 10000; ++trial) {
    unsigned char s[16], k[16], portable[16], cpu[16];
    for (int i = 0; i < 16; ++i) {
      s[i] = static_cast<unsigned char>(rng.Uniform(256));
      k[i] = static_cast<unsigned char>(rng.Uniform(256));
    }
    aes_prefix_hash::PortableAesRound(s, k, portable);
    CpuAesRound(s, k, cpu);
    ASSERT_EQ(0, std::memcmp(portable, cpu, 16)) << "trial " << trial;
  }
#else
  GTEST_SKIP() << "not an x86-64 build: no aesenc instruction to compare with";
#endif
}

// Every AES path (VAES where the CPU has it, AES-NI, portable) gives the same values, on
// contiguous prompts and on two-piece views with the seam anywhere (chunks that are and are not
// multiples of the 8-token block, the default 50-token chunk the VAES path unrolls, prompts
// that end inside a chunk and on a boundary). Paths the CPU lacks fall back to the portable one
// and are named in the output.
TEST(PrefixHash, AesPathsAgreeAndViewsEqualContiguous) {
  if (!aes_prefix_hash::HasVaes()) std::printf("[ note ] no VAES on this CPU: VAES path not run\n");
  if (!aes_prefix_hash::HasAesNi()) {
    std::printf("[ note ] no AES-NI on this CPU: AES-NI and VAES paths not run\n");
  }
  for (uint64_t seed = 0; seed < 300; ++seed) {
    Rng rng(seed);
    const auto chunk =
        seed % 4 == 1 ? 50u : static_cast<uint32_t>(rng.UniformInt(1, seed % 3 == 0 ? 140 : 70));
    const auto tokens = RandomTokens(rng, static_cast<size_t>(rng.UniformInt(0, 900)), 1u << 31);
    std::vector<PrefixHash> best, portable, aesni, viewed;
    ComputeAesHashes(tokens, chunk, best);
    prefix_hash_internal::ComputeAesHashesVia(prefix_hash_internal::AesPath::kPortable, tokens,
                                              chunk, portable);
    ASSERT_EQ(best, portable) << "seed " << seed;
    prefix_hash_internal::ComputeAesHashesVia(prefix_hash_internal::AesPath::kAesNi, tokens, chunk,
                                              aesni);
    ASSERT_EQ(aesni, portable) << "seed " << seed;
    const size_t seam = tokens.empty() ? 0 : rng.Uniform(tokens.size() + 1);
    const std::span<const Token> all(tokens);
    const PromptView view(all.first(seam), all.subspan(seam));
    ComputeAesHashes(view, chunk, viewed);
    ASSERT_EQ(best, viewed) << "seed " << seed << " seam " << seam;
    prefix_hash_internal::ComputeAesHashesVia(prefix_hash_internal::AesPath::kPortable, view, chunk,
                                              viewed);
    ASSERT_EQ(best, viewed) << "seed " << seed << " seam " << seam;
  }
}

// Avalanche: one flipped input bit anywhere in chunk 1 (chunk sizes 1-60 tokens, so the bit
// lands in every block position and lane) flips each bit of h_1, h_2 and h_3 with probability
// 1/2. Over 4,000 flips per output the per-bit frequency has a standard deviation of 0.008 and
// the mean flipped count one of 0.06 bits: the bounds below are over 6 standard deviations wide.
TEST(PrefixHash, AesAvalanche) {
  constexpr int kTrials = 4000;
  std::array<std::array<int, 64>, 3> flips{};
  std::array<int64_t, 3> total{};
  Rng rng(23);
  std::vector<PrefixHash> a, b;
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto chunk = static_cast<uint32_t>(rng.UniformInt(1, 60));
    auto tokens = RandomTokens(rng, 3 * size_t{chunk}, 1u << 31);
    ComputeAesHashes(tokens, chunk, a);
    tokens[rng.Uniform(chunk)] ^= Token{1} << rng.Uniform(32);
    ComputeAesHashes(tokens, chunk, b);
    for (size_t c = 0; c < 3; ++c) {
      const uint64_t d = a[c] ^ b[c];
      total[c] += std::popcount(d);
      for (int bit = 0; bit < 64; ++bit) flips[c][static_cast<size_t>(bit)] += (d >> bit) & 1;
    }
  }
  for (size_t c = 0; c < 3; ++c) {
    const double mean = static_cast<double>(total[c]) / kTrials;
    EXPECT_NEAR(mean, 32.0, 0.5) << "h_" << c + 1;
    for (int bit = 0; bit < 64; ++bit) {
      EXPECT_NEAR(flips[c][static_cast<size_t>(bit)] / static_cast<double>(kTrials), 0.5, 0.05)
          << "h_" << c + 1 << " bit " << bit;
    }
  }
}

}  // namespace
}  // namespace feather
