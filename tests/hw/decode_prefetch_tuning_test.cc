// Tests for hw/decode_prefetch_tuning.h with the Quick() settings: the candidates are whole tiles
// (1, 2, 4, 8 ahead), every one timed and verified, the winner is the fastest median, and the
// process's lookahead is left as it was. Which candidate wins is not asserted: it is the
// machine's answer (and Quick()'s pool sits in the caches).
//
// DISABLED_ReportMachineFigures runs the full default tuning (512 MiB, 9 rounds) for fp32 and
// bf16 KV of cpu-small's shape and prints every candidate's rates (hw/README.md quotes them):
//   decode_prefetch_tuning_test --gtest_also_run_disabled_tests --gtest_filter='*Report*'
#include "hw/decode_prefetch_tuning.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace feather::hw {
namespace {

TEST(DecodePrefetchTuningTest, TimesEveryWholeTileCandidateAndPicksTheFastestMedian) {
  for (const KvDtype dtype : {KvDtype::kFp32, KvDtype::kBf16}) {
    SetDecodePrefetchBytes(12345);
    DecodePrefetchTuneOptions options = DecodePrefetchTuneOptions::Quick();
    options.dtype = dtype;
    options.num_threads = 2;
    const DecodePrefetchTuning tuning = TuneDecodePrefetch(options);
    EXPECT_EQ(DecodePrefetchBytes(), 12345u) << "the tuning must restore the setting";
    const size_t tile = size_t{16} * 64 * KvDtypeBytes(dtype);
    EXPECT_EQ(tuning.tile_bytes, tile);
    EXPECT_EQ(tuning.verification, Verification::kOk);
    EXPECT_EQ(tuning.rounds, 2);
    EXPECT_EQ(tuning.num_threads, 2);
    EXPECT_GT(tuning.kv_bytes, 0u);
    ASSERT_EQ(tuning.candidates.size(), 4u);
    double best = 0;
    for (size_t i = 0; i < tuning.candidates.size(); ++i) {
      const DecodePrefetchCandidate& c = tuning.candidates[i];
      EXPECT_EQ(c.tiles, 1u << i);
      EXPECT_EQ(c.bytes, c.tiles * tile);
      EXPECT_GT(c.bytes_per_s.min, 0.0);
      EXPECT_LE(c.bytes_per_s.min, c.bytes_per_s.median);
      EXPECT_LE(c.bytes_per_s.median, c.bytes_per_s.max);
      if (c.bytes_per_s.median > best) best = c.bytes_per_s.median;
    }
    bool winner_found = false;
    for (const DecodePrefetchCandidate& c : tuning.candidates) {
      if (c.bytes == tuning.best_bytes) {
        winner_found = true;
        EXPECT_EQ(c.bytes_per_s.median, best);
      }
    }
    EXPECT_TRUE(winner_found) << tuning.best_bytes;
  }
  SetDecodePrefetchBytes(0);
}

// Pages longer than the kernels' 16-row tile are walked in such tiles, so the candidates stay
// 1-8 kernel tiles ahead (a 128-token page's own 32 KiB would put them 8-64 tiles ahead), and
// pages shorter than a tile make shorter tiles.
TEST(DecodePrefetchTuningTest, CandidatesCountTheKernelsTilesWhateverThePageSize) {
  for (const uint32_t block_tokens : {8u, 16u, 128u}) {
    DecodePrefetchTuneOptions options = DecodePrefetchTuneOptions::Quick();
    options.block_tokens = block_tokens;
    options.num_threads = 1;
    const DecodePrefetchTuning tuning = TuneDecodePrefetch(options);
    const size_t tile = size_t{std::min(block_tokens, 16u)} * 64 * 4;
    EXPECT_EQ(tuning.tile_bytes, tile) << block_tokens;
    ASSERT_EQ(tuning.candidates.size(), 4u);
    EXPECT_EQ(tuning.candidates.back().bytes, 8 * tile) << block_tokens;
    EXPECT_EQ(tuning.verification, Verification::kOk) << block_tokens;
  }
  SetDecodePrefetchBytes(0);
}

TEST(DecodePrefetchTuningTest, RejectsShapesTheKernelsCannotRun) {
  DecodePrefetchTuneOptions options = DecodePrefetchTuneOptions::Quick();
  options.heads = 6;  // not a multiple of 4 kv heads
  EXPECT_THROW((void)TuneDecodePrefetch(options), std::invalid_argument);
  options = DecodePrefetchTuneOptions::Quick();
  options.head_dim = 60;
  EXPECT_THROW((void)TuneDecodePrefetch(options), std::invalid_argument);
  options = DecodePrefetchTuneOptions::Quick();
  options.pool_bytes = 4096;  // not one request of 1,024 tokens
  EXPECT_THROW((void)TuneDecodePrefetch(options), std::invalid_argument);
}

TEST(DecodePrefetchTuningTest, DISABLED_ReportMachineFigures) {
  for (const KvDtype dtype : {KvDtype::kFp32, KvDtype::kBf16}) {
    DecodePrefetchTuneOptions options;
    options.dtype = dtype;
    const DecodePrefetchTuning tuning = TuneDecodePrefetch(options);
    std::printf("%s KV, %zu MiB per pass, %d threads, %d rounds:\n",
                dtype == KvDtype::kFp32 ? "fp32" : "bf16", tuning.kv_bytes >> 20,
                tuning.num_threads, tuning.rounds);
    for (const DecodePrefetchCandidate& c : tuning.candidates) {
      std::printf("  %2u tiles (%5zu KiB): median %.2f GB/s (min %.2f, max %.2f)%s\n", c.tiles,
                  c.bytes >> 10, c.bytes_per_s.median / 1e9, c.bytes_per_s.min / 1e9,
                  c.bytes_per_s.max / 1e9, c.bytes == tuning.best_bytes ? "  <- chosen" : "");
    }
  }
}

}  // namespace
}  // namespace feather::hw
