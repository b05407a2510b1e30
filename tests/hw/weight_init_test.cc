// Tests for hw/weight_init.h: the shared weight rule is the expression the CPU engine always used
// (tags (layer + 1)·256 + matrix, 1 and 2; key and value from SplitMix64), lies within its bound,
// and its tags are distinct for every matrix of a 64-layer model. (The CPU engine's own tests
// still pass unchanged on top of it.)
#include "hw/weight_init.h"

#include <gtest/gtest.h>

#include <set>

namespace feather::hw {
namespace {

TEST(WeightInitTest, TagsAreTheCpuEnginesAndDistinct) {
  EXPECT_EQ(TagOf(WeightMatrix::kLmHead, 0), 1u);
  EXPECT_EQ(TagOf(WeightMatrix::kEmbedding, 0), 2u);
  EXPECT_EQ(TagOf(WeightMatrix::kQkv, 0), (1u << 8) + 1);
  EXPECT_EQ(TagOf(WeightMatrix::kDown, 2), (3u << 8) + 4);
  std::set<uint64_t> tags;
  for (uint32_t l = 0; l < 64; ++l) {
    for (const WeightMatrix m :
         {WeightMatrix::kQkv, WeightMatrix::kO, WeightMatrix::kGateUp, WeightMatrix::kDown}) {
      EXPECT_TRUE(tags.insert(TagOf(m, l)).second);
    }
  }
  EXPECT_TRUE(tags.insert(TagOf(WeightMatrix::kLmHead, 0)).second);
  EXPECT_TRUE(tags.insert(TagOf(WeightMatrix::kEmbedding, 0)).second);
}

TEST(WeightInitTest, ValuesFollowTheHashAndStayInBounds) {
  const uint64_t key = WeightKey(1, TagOf(WeightMatrix::kQkv, 0));
  EXPECT_EQ(key, SplitMix64Hash(1 ^ SplitMix64Hash(257)));
  const float bound = ProjectionBound(1024);
  for (uint64_t i = 0; i < 10000; ++i) {
    const float w = UniformWeight(key, i, bound);
    EXPECT_LE(std::abs(w), bound);
    const float unit = static_cast<float>(SplitMix64Hash(key + i) >> 40) * 0x1.0p-24F;
    EXPECT_EQ(w, (2.0F * unit - 1.0F) * bound);
  }
  EXPECT_EQ(TokenOf(7, 3, 1000), SplitMix64Hash((uint64_t{7} << 32) | 3) % 1000);
}

}  // namespace
}  // namespace feather::hw
