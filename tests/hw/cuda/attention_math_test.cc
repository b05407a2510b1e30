// Tests for hw/cuda/attention_math.h on the CPU (g++): the online-softmax tile update against a
// direct softmax in double, the state merge against the CPU kernels' MergeAttentionStates
// (hw/cascade_attention.h) and against a softmax over the union, and the launch geometry.
// Bounds: 1e-6 relative on fp32 values of O(1) (the arithmetic is a handful of expf / logf).
#include "hw/cuda/attention_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/rng.h"
#include "hw/cascade_attention.h"

namespace feather::hw::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Folding tiles of random scores (some masked) gives m = max and d = Σ exp(s − m), and the
// returned factors rebuild Σ p·x for any x.
TEST(AttentionMathTest, TileUpdatesMatchDirectSoftmax) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    const uint32_t tiles = 1 + static_cast<uint32_t>(rng.Uniform(6));
    std::vector<float> all;
    std::vector<float> x;
    SoftmaxState state = EmptySoftmaxState();
    double o = 0;  // unnormalised Σ p·x
    for (uint32_t t = 0; t < tiles; ++t) {
      std::vector<float> scores(kTileTokens);
      std::vector<float> xs(kTileTokens);
      for (uint32_t i = 0; i < kTileTokens; ++i) {
        scores[i] = rng.Uniform(4) == 0 ? -kInf : static_cast<float>(20 * rng.NextDouble() - 10);
        xs[i] = static_cast<float>(rng.NextDouble());
        all.push_back(scores[i]);
        x.push_back(xs[i]);
      }
      const float factor = SoftmaxTileUpdate(state, scores.data(), kTileTokens);
      o *= factor;
      for (uint32_t i = 0; i < kTileTokens; ++i) o += double{scores[i]} * xs[i];
    }
    double m = -kInf;
    for (const float s : all) m = std::max(m, double{s});
    if (m == -kInf) {
      EXPECT_EQ(FinalLse(state), -kInf);
      EXPECT_EQ(FinalScale(state), 0.0F);
      continue;
    }
    double d = 0, want_o = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      d += std::exp(all[i] - m);
      want_o += std::exp(all[i] - m) * x[i];
    }
    EXPECT_FLOAT_EQ(state.m, static_cast<float>(m)) << "seed " << seed;
    EXPECT_NEAR(state.d, d, 1e-5 * d) << "seed " << seed;
    EXPECT_NEAR(o * FinalScale(state), want_o / d, 1e-6) << "seed " << seed;
    EXPECT_NEAR(FinalLse(state), m + std::log(d), 1e-5) << "seed " << seed;
  }
}

TEST(AttentionMathTest, FullyMaskedTileChangesNothing) {
  SoftmaxState state{2.0F, 3.0F};
  std::vector<float> scores(kTileTokens, -kInf);
  EXPECT_EQ(SoftmaxTileUpdate(state, scores.data(), kTileTokens), 1.0F);
  EXPECT_EQ(state.m, 2.0F);
  EXPECT_EQ(state.d, 3.0F);
  for (const float p : scores) EXPECT_EQ(p, 0.0F);
  SoftmaxState empty = EmptySoftmaxState();
  std::vector<float> masked(kTileTokens, -kInf);
  EXPECT_EQ(SoftmaxTileUpdate(empty, masked.data(), kTileTokens), 1.0F);
  EXPECT_EQ(empty.m, -kInf);
  EXPECT_EQ(FinalLse(empty), -kInf);
}

// StateMergeWeights applied per element equals the CPU's MergeAttentionStates, empty sides
// included.
TEST(AttentionMathTest, MergeMatchesCpuMergeAttentionStates) {
  constexpr uint32_t kRows = 5, kHeads = 3, kDim = 64;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Rng rng(seed);
    std::vector<float> out_a(kRows * kHeads * kDim), out_b(out_a.size());
    std::vector<float> lse_a(kRows * kHeads), lse_b(lse_a.size());
    for (float& v : out_a) v = static_cast<float>(2 * rng.NextDouble() - 1);
    for (float& v : out_b) v = static_cast<float>(2 * rng.NextDouble() - 1);
    for (size_t i = 0; i < lse_a.size(); ++i) {
      lse_a[i] = i % 7 == 3 ? -kInf : static_cast<float>(10 * rng.NextDouble());
      lse_b[i] = i % 5 == 1 ? -kInf : static_cast<float>(10 * rng.NextDouble());
    }
    std::vector<float> cpu_out = out_a, cpu_lse = lse_a;
    MergeAttentionStates(cpu_out.data(), cpu_lse.data(), out_b.data(), lse_b.data(), kRows, kHeads,
                         kDim, 1);
    for (size_t rh = 0; rh < lse_a.size(); ++rh) {
      const MergeWeights w = StateMergeWeights(lse_a[rh], lse_b[rh]);
      if (std::isinf(cpu_lse[rh])) {
        EXPECT_EQ(w.lse, cpu_lse[rh]);
      } else {
        EXPECT_NEAR(w.lse, cpu_lse[rh], 1e-5) << rh;
      }
      for (uint32_t d = 0; d < kDim; ++d) {
        const float merged = w.a * out_a[rh * kDim + d] + w.b * out_b[rh * kDim + d];
        EXPECT_NEAR(merged, cpu_out[rh * kDim + d], 1e-6) << rh << ' ' << d;
      }
    }
  }
}

// Merging the normalised states of two halves of a score list gives the softmax of the whole.
TEST(AttentionMathTest, MergeOfHalvesIsSoftmaxOfUnion) {
  Rng rng(7);
  std::vector<double> s(40), x(40);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = 8 * rng.NextDouble();
    x[i] = rng.NextDouble();
  }
  auto state = [&](size_t lo, size_t hi, double& out, double& lse) {
    double m = -kInf, d = 0, o = 0;
    for (size_t i = lo; i < hi; ++i) m = std::max(m, s[i]);
    for (size_t i = lo; i < hi; ++i) {
      d += std::exp(s[i] - m);
      o += std::exp(s[i] - m) * x[i];
    }
    out = o / d;
    lse = m + std::log(d);
  };
  double oa, la, ob, lb, ow, lw;
  state(0, 13, oa, la);
  state(13, 40, ob, lb);
  state(0, 40, ow, lw);
  const MergeWeights w = StateMergeWeights(static_cast<float>(la), static_cast<float>(lb));
  EXPECT_NEAR(w.a * oa + w.b * ob, ow, 1e-6);
  EXPECT_NEAR(w.lse, lw, 1e-5);
  EXPECT_NEAR(w.a + w.b, 1.0, 1e-6);
}

TEST(AttentionMathTest, GeometryFitsSharedMemoryForEverySupportedShape) {
  for (const uint32_t d : {64u, 128u}) {
    for (uint32_t group = 1; group <= kMaxLanes; ++group) {
      for (const uint32_t max_rows : {1u, 3u, 100u}) {
        const AttentionGeometry g = ChooseAttentionGeometry(d, group, max_rows);
        ASSERT_EQ(g.unsupported, nullptr);
        EXPECT_GE(g.rows_per_item, 1u);
        EXPECT_LE(g.rows_per_item, max_rows);
        EXPECT_EQ(g.lanes, g.rows_per_item * group);
        EXPECT_LE(g.lanes, kMaxLanes);
        EXPECT_LE(g.shared_bytes, kMaxSharedBytes) << d << ' ' << group;
        // As many rows as fit: one more would exceed the lanes or the rows.
        EXPECT_TRUE((g.rows_per_item + 1) * group > kMaxLanes || g.rows_per_item == max_rows);
      }
    }
  }
  EXPECT_EQ(ChooseAttentionGeometry(128, 1, 1).rows_per_item, 1u);   // decode: one row
  EXPECT_EQ(ChooseAttentionGeometry(128, 4, 64).rows_per_item, 4u);  // prefill: 16 lanes
  EXPECT_EQ(AttentionSharedBytes(16, 128), 4u * (2 * 16 * 128 + 2 * 16 * 128 + 16 * 16 + 48));
}

TEST(AttentionMathTest, GeometryNamesUnsupportedShapes) {
  EXPECT_STREQ(ChooseAttentionGeometry(96, 4, 1).unsupported, "head_dim must be 64 or 128");
  EXPECT_STREQ(ChooseAttentionGeometry(128, 0, 1).unsupported,
               "query heads per KV head must be in [1, 16]");
  EXPECT_STREQ(ChooseAttentionGeometry(128, 17, 1).unsupported,
               "query heads per KV head must be in [1, 16]");
}

}  // namespace
}  // namespace feather::hw::cuda
