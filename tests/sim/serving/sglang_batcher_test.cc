// sglang_batcher_test.cc: SGLang's new_token_ratio schedule, retraction order and
// chunked_prefill_size rule (sim/serving/sglang_batcher.h), each on hand-worked values.
#include "sim/serving/sglang_batcher.h"

#include <gtest/gtest.h>

#include <vector>

namespace feather {
namespace {

TEST(SglangBatcher, RatioStartsAtInitAndDecaysLinearlyToItsFloorIn600Steps) {
  SglangBatcher b{SglangConfig{}};
  EXPECT_DOUBLE_EQ(b.new_token_ratio(), 0.7);
  EXPECT_DOUBLE_EQ(b.min_new_token_ratio(), 0.7 * 0.14);
  const double step = (0.7 - 0.098) / 600;
  b.OnDecodeWithoutRetraction();
  EXPECT_NEAR(b.new_token_ratio(), 0.7 - step, 1e-12);
  for (int i = 1; i < 599; ++i) b.OnDecodeWithoutRetraction();
  EXPECT_NEAR(b.new_token_ratio(), 0.098 + step, 1e-9);
  b.OnDecodeWithoutRetraction();
  b.OnDecodeWithoutRetraction();
  EXPECT_DOUBLE_EQ(b.new_token_ratio(), 0.7 * 0.14);  // clamped at the floor
}

TEST(SglangBatcher, RetractionSetsRatioFromKeptRequestsAndClearsFull) {
  SglangBatcher b{SglangConfig{}};
  b.set_batch_is_full(true);
  // 3 kept, 30 tokens decoded, 200 max_new_tokens each: (30 + 20*3) / 601.
  b.OnRetraction(3, 30, 600);
  EXPECT_DOUBLE_EQ(b.new_token_ratio(), 90.0 / 601.0);
  EXPECT_FALSE(b.batch_is_full());
  b.OnRetraction(3, 1000, 600);  // capped at 1
  EXPECT_DOUBLE_EQ(b.new_token_ratio(), 1.0);
}

TEST(SglangBatcher, RetractionVictimsAreFewestOutputThenLongestPromptFromTheBack) {
  std::vector<SglangRetractCandidate> batch = {
      {0, 5, 100}, {1, 1, 100}, {2, 1, 300}, {3, 9, 50}, {4, 1, 100}};
  SglangBatcher::RetractionOrder(batch);
  std::vector<RequestId> order;
  for (const auto& c : batch) order.push_back(c.id);
  // Descending output; among equal output, ascending prompt; equal keys keep batch order
  // (Python's stable sort with reverse=True). Victims are popped from the back: 2 first.
  EXPECT_EQ(order, (std::vector<RequestId>{3, 0, 1, 4, 2}));
}

TEST(SglangBatcher, ChunkedPrefillSizeFollowsServerArgsMemoryTiers) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  EXPECT_EQ(ChunkedPrefillSizeFor(16 * kGiB), 2048);    // T4
  EXPECT_EQ(ChunkedPrefillSizeFor(24 * kGiB), 2048);    // 4090
  EXPECT_EQ(ChunkedPrefillSizeFor(48 * kGiB), 4096);    // RTX 6000 Ada, L40
  EXPECT_EQ(ChunkedPrefillSizeFor(80 * kGiB), 8192);    // H100, A100 80GB
  EXPECT_EQ(ChunkedPrefillSizeFor(141 * kGiB), 8192);   // H200
  EXPECT_EQ(ChunkedPrefillSizeFor(192 * kGiB), 16384);  // B200
}

}  // namespace
}  // namespace feather
