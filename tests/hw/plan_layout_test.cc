// Tests for hw/plan_layout.h: the CSR arrays a BatchPlan becomes (batch order, pages trimmed to
// the tokens, last_page_len, rows, the cascade level) and the views over them.
#include "hw/plan_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "sim/engine/engine.h"

namespace feather::hw {
namespace {

TEST(PlanLayoutTest, DecodeFirstThenPrefillInCsrWithTrimmedPages) {
  // Plan order: prefill A (context 4, chunk 9: 13 tokens), decode B (context 16: 17 tokens),
  // decode C (context 3: 4 tokens). Page size 4. Tables may hold more pages than needed.
  const std::vector<uint32_t> a = {10, 11, 12, 13, 14}, b = {20, 21, 22, 23, 24, 25}, c = {30, 31};
  const std::vector<StepRequest> requests = {{7, 4, 9, true, a}, {8, 16, 1, false, b},
                                             {9, 3, 1, false, c}};
  BatchPlan plan;
  plan.requests = requests;
  plan.block_tokens = 4;
  StepLayout layout;
  LayOutPlan(plan, 0, 64, layout);
  EXPECT_EQ(layout.num_decode, 2u);
  EXPECT_EQ(layout.num_prefill, 1u);
  EXPECT_EQ(layout.num_rows, 11u);
  EXPECT_EQ(layout.max_position, 17u);
  EXPECT_EQ(layout.plan_index, (std::vector<uint32_t>{1, 2, 0}));
  EXPECT_EQ(layout.kv_indptr, (std::vector<uint32_t>{0, 5, 6, 10}));
  EXPECT_EQ(layout.kv_indices, (std::vector<uint32_t>{20, 21, 22, 23, 24, 30, 10, 11, 12, 13}));
  EXPECT_EQ(layout.kv_last_page_len, (std::vector<uint32_t>{1, 4, 1}));
  EXPECT_EQ(layout.qo_indptr, (std::vector<uint32_t>{0, 1, 2, 11}));
  EXPECT_EQ(layout.prefill_qo_indptr, (std::vector<uint32_t>{0, 9}));
  EXPECT_EQ(layout.sampled_row, (std::vector<uint32_t>{10, 0, 1}));  // plan order
  EXPECT_EQ(layout.row_position[0], 16u);
  EXPECT_EQ(layout.row_position[2], 4u);
  EXPECT_EQ(layout.row_request[10], 7u);
  EXPECT_EQ(layout.Context(0), 16u);
  EXPECT_EQ(layout.Context(2), 4u);
  EXPECT_EQ(layout.NewTokens(2), 9u);
  EXPECT_EQ(layout.cascade_prefix_tokens, 0u);

  const PagedKvLayout kv_layout{.num_blocks = 64, .kv_heads = 1, .block_tokens = 4, .head_dim = 8};
  const PagedKvView all = layout.Kv(nullptr, nullptr, kv_layout);
  EXPECT_EQ(all.SeqLen(0), 17u);
  EXPECT_EQ(all.SeqLen(1), 4u);
  EXPECT_EQ(all.SeqLen(2), 13u);
  const PagedKvView prefill = layout.PrefillKv(nullptr, nullptr, kv_layout);
  EXPECT_EQ(prefill.batch_size, 1u);
  EXPECT_EQ(prefill.SeqLen(0), 13u);
  EXPECT_EQ(prefill.Pages(0)[0], 10u);
  EXPECT_EQ(layout.DecodeKv(nullptr, nullptr, kv_layout).batch_size, 2u);
}

TEST(PlanLayoutTest, CascadePrefixIsAOneEntryViewOverTheFirstDecodePages) {
  const std::vector<uint32_t> x = {5, 6, 7, 40}, y = {5, 6, 7, 41, 42};
  const std::vector<StepRequest> requests = {{1, 13, 1, false, x}, {2, 16, 1, false, y}};
  BatchPlan plan;
  plan.requests = requests;
  plan.block_tokens = 4;
  StepLayout layout;
  LayOutPlan(plan, 10, 64, layout);  // a prefix ending mid-page
  EXPECT_EQ(layout.cascade_prefix_tokens, 10u);
  EXPECT_EQ(layout.cascade_kv_begin, (std::vector<uint32_t>{10, 10}));
  const PagedKvLayout kv_layout{.num_blocks = 64, .kv_heads = 1, .block_tokens = 4, .head_dim = 8};
  const PagedKvView prefix = layout.CascadePrefixKv(nullptr, nullptr, kv_layout);
  ASSERT_EQ(prefix.batch_size, 1u);
  EXPECT_EQ(prefix.NumPages(0), 3u);
  EXPECT_EQ(prefix.SeqLen(0), 10u);
  EXPECT_EQ(prefix.Pages(0)[2], 7u);
  // Reuse: a step without cascade clears the level.
  LayOutPlan(plan, 0, 64, layout);
  EXPECT_EQ(layout.CascadePrefixKv(nullptr, nullptr, kv_layout).batch_size, 0u);
}

TEST(PlanLayoutDeathTest, BrokenPlansAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<uint32_t> short_table = {1};
  const std::vector<StepRequest> requests = {{1, 4, 1, false, short_table}};
  BatchPlan plan;
  plan.requests = requests;
  plan.block_tokens = 4;
  StepLayout layout;
  EXPECT_DEATH(LayOutPlan(plan, 0, 64, layout), "does not cover");
  const std::vector<uint32_t> outside = {100, 101};
  const std::vector<StepRequest> bad_id = {{1, 4, 1, false, outside}};
  plan.requests = bad_id;
  EXPECT_DEATH(LayOutPlan(plan, 0, 64, layout), "outside the KV pool");
}

}  // namespace
}  // namespace feather::hw
