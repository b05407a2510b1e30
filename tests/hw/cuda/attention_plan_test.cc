// Tests for hw/cuda/attention_plan.h: the split-KV chunk choice against a brute-force search, and
// property tests of built plans over random batches (every row's KV range covered exactly once by
// its items, slots and merge lists consistent, the grid within budget when it splits), and the
// errors of bad input.
#include "hw/cuda/attention_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "base/rng.h"
#include "hw/paged_kv.h"

namespace feather::hw::cuda {
namespace {

uint64_t Items(const std::vector<uint32_t>& pages, const std::vector<uint32_t>& tiles,
               uint32_t chunk) {
  uint64_t items = 0;
  for (size_t e = 0; e < pages.size(); ++e) {
    items += uint64_t{tiles[e]} * std::max<uint32_t>(1, (pages[e] + chunk - 1) / chunk);
  }
  return items;
}

TEST(AttentionPlanTest, ChunkChoiceIsTheSmallestWithinBudget) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Rng rng(seed);
    const size_t n = 1 + rng.Uniform(8);
    std::vector<uint32_t> pages(n), tiles(n);
    uint32_t most = 1;
    for (size_t e = 0; e < n; ++e) {
      pages[e] = static_cast<uint32_t>(rng.Uniform(100));
      tiles[e] = 1 + static_cast<uint32_t>(rng.Uniform(3));
      most = std::max(most, pages[e]);
    }
    const uint64_t budget = 1 + rng.Uniform(200);
    uint32_t want = most;  // brute force: the first chunk within budget, else no split
    for (uint32_t chunk = 1; chunk <= most; ++chunk) {
      if (Items(pages, tiles, chunk) <= budget) {
        want = chunk;
        break;
      }
    }
    EXPECT_EQ(ChooseKvChunkPages(pages, tiles, budget), want) << "seed " << seed;
  }
}

struct Batch {
  std::vector<uint32_t> indptr{0}, last, begin, qo{0};
};

Batch RandomBatch(Rng& rng, uint32_t entries, bool prefill) {
  Batch b;
  for (uint32_t e = 0; e < entries; ++e) {
    const auto len = static_cast<uint32_t>(rng.Uniform(300));
    const uint32_t pages = (len + 15) / 16;
    b.indptr.push_back(b.indptr.back() + pages);
    b.last.push_back(LastPageLen(len, 16));
    b.begin.push_back(prefill ? 0 : static_cast<uint32_t>(rng.Uniform(uint64_t{len} + 1)));
    const uint32_t rows = prefill ? 1 + static_cast<uint32_t>(rng.Uniform(std::max(1u, len))) : 1;
    b.qo.push_back(b.qo.back() + (prefill && len == 0 ? 0 : rows));
  }
  return b;
}

// Every row sees its range [begin, end) exactly once across the items that hold it, in order;
// a row with one item writes out directly, a row with several has them all in its merge list.
TEST(AttentionPlanTest, ItemsCoverEveryRowsRangeExactlyOnce) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(seed);
    const bool prefill = seed % 3 == 0;
    const auto entries = 1 + static_cast<uint32_t>(rng.Uniform(12));
    Batch b = RandomBatch(rng, entries, prefill);
    AttentionPlanInput in;
    in.num_entries = entries;
    in.kv_indptr = b.indptr.data();
    in.kv_last_page_len = b.last.data();
    in.kv_begin = prefill ? nullptr : b.begin.data();
    in.qo_indptr = prefill ? b.qo.data() : nullptr;
    in.causal = prefill;
    in.kv_heads = 1 + static_cast<uint32_t>(rng.Uniform(4));
    in.num_heads = in.kv_heads * (1 + static_cast<uint32_t>(rng.Uniform(8)));
    in.head_dim = rng.Uniform(2) ? 64 : 128;
    in.split_kv = rng.Uniform(4) != 0;
    in.max_ctas = static_cast<uint32_t>(rng.Uniform(600));
    AttentionPlan plan;
    ASSERT_EQ(BuildAttentionPlan(in, plan), "") << "seed " << seed;

    const uint32_t rows = prefill ? b.qo.back() : entries;
    ASSERT_EQ(plan.row_list.size(), rows);
    std::map<uint32_t, std::vector<std::pair<uint32_t, uint32_t>>> seen;  // row -> ranges
    std::map<uint32_t, std::vector<uint32_t>> slots;                      // row -> slots
    for (const AttentionWorkItem& item : plan.items) {
      ASSERT_LE(item.num_rows, plan.geometry.rows_per_item);
      ASSERT_LE(item.kv_begin, item.kv_end);
      for (uint32_t i = 0; i < item.num_rows; ++i) {
        const uint32_t row = plan.row_list[item.row_begin + i];
        seen[row].push_back({item.kv_begin, item.kv_end});
        if (item.slot != kNoSlot) {
          ASSERT_LT(item.slot + i, plan.num_slots);
          slots[row].push_back(item.slot + i);
        }
      }
    }
    for (uint32_t e = 0; e < entries; ++e) {
      const uint32_t len = CsrSeqLen(b.indptr.data(), b.last.data(), 16, e);
      const uint32_t n = prefill ? b.qo[e + 1] - b.qo[e] : 1;
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t row = prefill ? b.qo[e] + i : e;
        const auto& ranges = seen[row];
        ASSERT_FALSE(ranges.empty()) << "seed " << seed << " row " << row;
        const uint32_t begin = prefill ? 0 : b.begin[e];
        // Causal: the row's tile ends at the tile's last row; this row masks the rest.
        EXPECT_EQ(ranges.front().first, begin) << "seed " << seed;
        for (size_t k = 1; k < ranges.size(); ++k) {
          EXPECT_EQ(ranges[k].first, ranges[k - 1].second) << "seed " << seed;
        }
        const uint32_t end = ranges.back().second;
        if (prefill) {
          EXPECT_GE(end, len - n + i + 1);  // at least up to its own position
          EXPECT_LE(end, len);
        } else {
          EXPECT_EQ(end, len) << "seed " << seed;
        }
        EXPECT_EQ(slots[row].size(), ranges.size() == 1 ? 0u : ranges.size());
      }
    }
    // Merge lists: exactly the rows with slots, each listing its slots.
    ASSERT_EQ(plan.merge_indptr.size(), plan.merge_rows.size() + 1);
    for (size_t m = 0; m < plan.merge_rows.size(); ++m) {
      std::vector<uint32_t> listed(plan.merge_slots.begin() + plan.merge_indptr[m],
                                   plan.merge_slots.begin() + plan.merge_indptr[m + 1]);
      EXPECT_EQ(listed, slots[plan.merge_rows[m]]) << "seed " << seed;
    }
    size_t rows_with_slots = 0;
    for (const auto& [row, list] : slots) rows_with_slots += list.empty() ? 0 : 1;
    EXPECT_EQ(rows_with_slots, plan.merge_rows.size());
    if (plan.kv_chunk_tokens > 0) {
      EXPECT_LE(plan.NumCtas(in.kv_heads), std::max<uint64_t>(in.max_ctas, in.kv_heads))
          << "seed " << seed;
      EXPECT_EQ(plan.kv_chunk_tokens % 16, 0u);
    }
    if (!in.split_kv) {
      EXPECT_EQ(plan.num_slots, 0u);
    }
  }
}

TEST(AttentionPlanTest, LongSequenceSplitsToFillTheGrid) {
  const std::vector<uint32_t> indptr = {0, 64};  // 1024 tokens
  const std::vector<uint32_t> last = {16};
  AttentionPlanInput in;
  in.num_entries = 1;
  in.kv_indptr = indptr.data();
  in.kv_last_page_len = last.data();
  in.num_heads = 8;
  in.kv_heads = 8;
  in.head_dim = 128;
  in.max_ctas = 64;  // 8 items per kv head
  AttentionPlan plan;
  ASSERT_EQ(BuildAttentionPlan(in, plan), "");
  EXPECT_EQ(plan.kv_chunk_tokens, 128u);
  EXPECT_EQ(plan.items.size(), 8u);
  EXPECT_EQ(plan.merge_rows, std::vector<uint32_t>{0});
  in.split_kv = false;
  ASSERT_EQ(BuildAttentionPlan(in, plan), "");
  EXPECT_EQ(plan.items.size(), 1u);
  EXPECT_EQ(plan.items[0].slot, kNoSlot);
  EXPECT_TRUE(plan.merge_rows.empty());
}

TEST(AttentionPlanTest, BadInputIsNamed) {
  const std::vector<uint32_t> indptr = {0, 2};
  const std::vector<uint32_t> last = {4};  // 20 tokens
  const std::vector<uint32_t> begin = {21};
  AttentionPlanInput in;
  in.num_entries = 1;
  in.kv_indptr = indptr.data();
  in.kv_last_page_len = last.data();
  in.num_heads = 8;
  in.kv_heads = 3;
  in.head_dim = 128;
  AttentionPlan plan;
  EXPECT_EQ(BuildAttentionPlan(in, plan),
            "query heads (8) must be a positive multiple of kv heads (3)");
  in.kv_heads = 2;
  in.head_dim = 80;
  EXPECT_EQ(BuildAttentionPlan(in, plan), "head_dim must be 64 or 128");
  in.head_dim = 64;
  in.kv_begin = begin.data();
  EXPECT_EQ(BuildAttentionPlan(in, plan), "entry 0: kv_begin 21 is past its 20 tokens");
  in.kv_begin = nullptr;
  const std::vector<uint32_t> qo = {0, 21};
  in.qo_indptr = qo.data();
  in.causal = true;
  EXPECT_EQ(BuildAttentionPlan(in, plan), "entry 0: 21 causal rows but only 20 tokens");
}

}  // namespace
}  // namespace feather::hw::cuda
