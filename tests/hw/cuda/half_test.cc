// Tests for hw/cuda/half.h: exhaustive round trip of every fp16 bit pattern, rounding to nearest
// even against a brute-force nearest search, and the special values.
#include "hw/cuda/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "base/rng.h"

namespace feather::hw::cuda {
namespace {

TEST(HalfTest, EveryFiniteHalfRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = HalfToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << bits;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << "bits " << bits << " value " << f;
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0F);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0F);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0F);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0F, -24));
  EXPECT_EQ(FloatToHalf(65520.0F), 0x7c00);  // rounds to +inf
  EXPECT_EQ(FloatToHalf(-1e9F), 0xfc00);
  EXPECT_EQ(FloatToHalf(1.0F + std::ldexp(1.0F, -11)), 0x3c00);      // tie to even (down)
  EXPECT_EQ(FloatToHalf(1.0F + 3 * std::ldexp(1.0F, -11)), 0x3c02);  // tie to even (up)
}

// A random float rounds to the nearest half (ties to the even pattern).
TEST(HalfTest, RoundsToNearest) {
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const auto f = static_cast<float>((2 * rng.NextDouble() - 1) *
                                      std::ldexp(1.0, static_cast<int>(rng.Uniform(40)) - 24));
    const uint16_t h = FloatToHalf(f);
    const double err = std::fabs(double{HalfToFloat(h)} - f);
    for (const int delta : {-1, 1}) {
      const auto neighbour = static_cast<uint16_t>(h + delta);
      const float g = HalfToFloat(neighbour);
      if (std::isnan(g) || std::isinf(g) || (neighbour & 0x7fff) == 0x7fff) continue;
      if ((h ^ neighbour) & 0x8000) continue;  // crossed the sign
      const double other = std::fabs(double{g} - f);
      EXPECT_LE(err, other) << f;
      if (err == other) {
        EXPECT_EQ(h & 1, 0) << f;
      }
    }
  }
}

}  // namespace
}  // namespace feather::hw::cuda
