// synthetic_batch_test.cc: MakeSyntheticBatch against brute-force recounts of every plan field,
// the physical sharing it promises, grouped vs shuffled order, its errors, and a differential
// check against the serving loop's own way of filling the fields (KvCache with prefix caching).
#include "hw/synthetic_batch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "sim/kv/kv_cache.h"

namespace feather::hw {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Every plan field recounted the plain way: common prefix by comparing tables position by
// position, unique KV from the set of blocks decode requests read.
void ExpectFieldsMatchBruteForce(const SyntheticBatch& batch) {
  const BatchPlan& plan = batch.plan;
  uint32_t decode = 0;
  uint64_t prefill_tokens = 0;
  uint64_t kv_tokens = 0;
  std::set<uint32_t> decode_blocks;
  for (const StepRequest& r : plan.requests) {
    EXPECT_EQ(r.block_table.size(),
              CeilDiv(uint64_t{r.context_tokens} + r.new_tokens, plan.block_tokens));
    if (r.is_prefill) {
      prefill_tokens += r.new_tokens;
    } else {
      EXPECT_EQ(r.new_tokens, 1u);
      ++decode;
      kv_tokens += r.context_tokens + 1;
      decode_blocks.insert(r.block_table.begin(), r.block_table.end());
    }
  }
  EXPECT_EQ(plan.decode_requests, decode);
  EXPECT_EQ(plan.prefill_tokens, prefill_tokens);
  EXPECT_EQ(plan.decode_kv_tokens, kv_tokens);
  EXPECT_EQ(plan.decode_kv_unique_tokens,
            std::min<uint64_t>(kv_tokens, decode_blocks.size() * plan.block_tokens));
  size_t common = plan.requests.empty() ? 0 : plan.requests[0].block_table.size();
  for (const StepRequest& r : plan.requests) {
    size_t k = 0;
    while (k < common && k < r.block_table.size() &&
           r.block_table[k] == plan.requests[0].block_table[k]) {
      ++k;
    }
    common = k;
  }
  EXPECT_EQ(plan.common_prefix_tokens, common * plan.block_tokens);

  std::set<uint32_t> all;
  uint32_t max_id = 0;
  for (const auto& table : batch.tables) {
    for (const uint32_t b : table) {
      all.insert(b);
      max_id = std::max(max_id, b);
    }
  }
  EXPECT_EQ(batch.blocks_used, all.size());
  if (!all.empty()) {
    EXPECT_EQ(batch.pool_blocks, uint64_t{max_id} + 1);
  }
}

// Blocks shared exactly as the groups say: a group's prefix blocks in every member, nothing else
// in more than one table.
void ExpectSharingAsSpecified(const SyntheticBatch& batch, const SyntheticBatchSpec& spec) {
  const uint32_t shared_blocks =
      spec.groups > 0 ? spec.shared_prefix_tokens / spec.block_tokens : 0;
  std::map<int32_t, std::vector<uint32_t>> prefix_of;
  std::map<uint32_t, int> holders;
  for (size_t i = 0; i < batch.tables.size(); ++i) {
    const auto& table = batch.tables[i];
    for (const uint32_t b : table) ++holders[b];
    if (batch.group[i] < 0) continue;
    const std::vector<uint32_t> prefix(table.begin(), table.begin() + shared_blocks);
    auto [it, inserted] = prefix_of.emplace(batch.group[i], prefix);
    if (!inserted) {
      EXPECT_EQ(it->second, prefix) << "request " << i;
    }
  }
  std::set<uint32_t> prefix_blocks;
  for (const auto& [group, prefix] : prefix_of) {
    for (const uint32_t b : prefix) {
      EXPECT_TRUE(prefix_blocks.insert(b).second) << "shared twice";
    }
  }
  for (const auto& [block, count] : holders) {
    if (!prefix_blocks.count(block)) {
      EXPECT_EQ(count, 1) << "private block " << block;
    }
  }
}

TEST(SyntheticBatchTest, FieldsMatchBruteForceAcrossSpecs) {
  for (const uint32_t groups : {0u, 1u, 3u, 5u}) {
    for (const bool shuffle : {false, true}) {
      for (const uint32_t prefill : {0u, 2u}) {
        SyntheticBatchSpec spec;
        spec.block_tokens = 16;
        spec.decode_requests = 23;
        spec.groups = groups;
        spec.shared_prefix_tokens = 500;  // 31 whole blocks + 4 tokens in a private block
        spec.suffix_tokens = 40;
        spec.suffix_jitter_tokens = 30;
        spec.prefill_requests = prefill;
        spec.prefill_context_tokens = 512;
        spec.prefill_chunk_tokens = 100;
        spec.prefill_shares_prefix = prefill > 0;
        spec.shuffle = shuffle;
        spec.pool_blocks = 5000;
        spec.seed = 7 + groups;
        const SyntheticBatch batch = MakeSyntheticBatch(spec);
        SCOPED_TRACE(testing::Message()
                     << "groups " << groups << " shuffle " << shuffle << " prefill " << prefill);
        ASSERT_EQ(batch.plan.num_requests(), 23 + prefill);
        ExpectFieldsMatchBruteForce(batch);
        ExpectSharingAsSpecified(batch, spec);
        EXPECT_LT(batch.pool_blocks, 5001u);
      }
    }
  }
}

TEST(SyntheticBatchTest, CommonPrefixOnlyWhenEveryRequestSharesIt) {
  SyntheticBatchSpec spec;
  spec.decode_requests = 12;
  spec.groups = 1;
  spec.shared_prefix_tokens = 320;
  spec.suffix_tokens = 20;
  SyntheticBatch one = MakeSyntheticBatch(spec);
  EXPECT_EQ(one.plan.common_prefix_tokens, 320u);
  EXPECT_EQ(one.plan.decode_kv_tokens, 12u * 341);
  // Unique: 20 shared blocks + 12 × ceil((341 − 320) / 16) = 2 private blocks, in tokens.
  EXPECT_EQ(one.plan.decode_kv_unique_tokens, (20u + 12 * 2) * 16);

  spec.groups = 2;
  EXPECT_EQ(MakeSyntheticBatch(spec).plan.common_prefix_tokens, 0u);
  spec.groups = 5;
  EXPECT_EQ(MakeSyntheticBatch(spec).plan.common_prefix_tokens, 0u);

  // One group, plus a prefill request that does not share the prefix: nothing is common.
  spec.groups = 1;
  spec.prefill_requests = 1;
  spec.prefill_context_tokens = 0;
  spec.prefill_chunk_tokens = 64;
  EXPECT_EQ(MakeSyntheticBatch(spec).plan.common_prefix_tokens, 0u);
  // ... unless it does.
  spec.prefill_context_tokens = 320;
  spec.prefill_shares_prefix = true;
  const SyntheticBatch shared = MakeSyntheticBatch(spec);
  EXPECT_EQ(shared.plan.common_prefix_tokens, 320u);
  EXPECT_EQ(shared.plan.prefill_tokens, 64u);
  ExpectFieldsMatchBruteForce(shared);

  // A single request holds all its blocks alone: its whole table is "common" (as the serving
  // loop's reference counts say with one running request).
  SyntheticBatchSpec single;
  single.decode_requests = 1;
  single.suffix_tokens = 100;
  EXPECT_EQ(MakeSyntheticBatch(single).plan.common_prefix_tokens, 7u * 16);
}

TEST(SyntheticBatchTest, GroupedAndShuffledOrders) {
  SyntheticBatchSpec spec;
  spec.decode_requests = 40;
  spec.groups = 5;
  spec.shared_prefix_tokens = 64;
  spec.suffix_tokens = 10;
  spec.prefill_requests = 2;
  spec.prefill_chunk_tokens = 8;
  const SyntheticBatch grouped = MakeSyntheticBatch(spec);
  std::vector<int32_t> decode_groups(grouped.group.begin(), grouped.group.begin() + 40);
  EXPECT_TRUE(std::is_sorted(decode_groups.begin(), decode_groups.end()));
  for (int32_t g = 0; g < 5; ++g) {
    EXPECT_EQ(std::count(decode_groups.begin(), decode_groups.end(), g), 8);
  }
  spec.shuffle = true;
  const SyntheticBatch shuffled = MakeSyntheticBatch(spec);
  std::vector<int32_t> shuffled_groups(shuffled.group.begin(), shuffled.group.begin() + 40);
  EXPECT_FALSE(std::is_sorted(shuffled_groups.begin(), shuffled_groups.end()));
  std::sort(shuffled_groups.begin(), shuffled_groups.end());
  EXPECT_EQ(shuffled_groups, decode_groups);
  // Prefill requests stay at the end; ids name spec order whatever the plan order.
  for (size_t i = 40; i < 42; ++i) {
    EXPECT_TRUE(shuffled.requests[i].is_prefill);
    EXPECT_EQ(shuffled.requests[i].id, i);
  }
  std::set<RequestId> ids;
  for (const StepRequest& r : shuffled.requests) ids.insert(r.id);
  EXPECT_EQ(ids.size(), 42u);
  // Order does not change the plan's aggregate fields.
  EXPECT_EQ(shuffled.plan.decode_kv_tokens, grouped.plan.decode_kv_tokens);
  EXPECT_EQ(shuffled.plan.decode_kv_unique_tokens, grouped.plan.decode_kv_unique_tokens);
  EXPECT_EQ(shuffled.plan.common_prefix_tokens, grouped.plan.common_prefix_tokens);
  // Same seed, same batch.
  const SyntheticBatch again = MakeSyntheticBatch(spec);
  for (size_t i = 0; i < 42; ++i) EXPECT_EQ(again.tables[i], shuffled.tables[i]);
}

TEST(SyntheticBatchTest, BlockIdsScatteredOrSequential) {
  SyntheticBatchSpec spec;
  spec.decode_requests = 8;
  spec.groups = 2;
  spec.shared_prefix_tokens = 128;
  spec.suffix_tokens = 50;
  spec.scatter_blocks = false;
  const SyntheticBatch sequential = MakeSyntheticBatch(spec);
  // 2 prefixes of 8 blocks + 8 × ceil(51 / 16) = 4 private blocks.
  EXPECT_EQ(sequential.blocks_used, 2u * 8 + 8 * 4);
  EXPECT_EQ(sequential.pool_blocks, sequential.blocks_used);
  EXPECT_EQ(sequential.tables[0][0], 0u);
  EXPECT_EQ(sequential.tables[0][8], 8u);  // first private block follows the prefix
  spec.scatter_blocks = true;
  spec.pool_blocks = 1000;
  const SyntheticBatch scattered = MakeSyntheticBatch(spec);
  EXPECT_EQ(scattered.blocks_used, sequential.blocks_used);
  EXPECT_GT(scattered.pool_blocks, scattered.blocks_used);  // spread over the pool
  ExpectSharingAsSpecified(scattered, spec);
}

TEST(SyntheticBatchTest, MovedBatchKeepsItsSpans) {
  SyntheticBatchSpec spec;
  spec.decode_requests = 4;
  spec.suffix_tokens = 33;
  SyntheticBatch a = MakeSyntheticBatch(spec);
  const uint32_t first = a.tables[0][0];
  SyntheticBatch b = std::move(a);
  ASSERT_EQ(b.plan.requests.data(), b.requests.data());
  EXPECT_EQ(b.plan.requests[0].block_table.data(), b.tables[0].data());
  EXPECT_EQ(b.plan.requests[0].block_table[0], first);
}

TEST(SyntheticBatchTest, ImpossibleSpecsThrowNamingTheField) {
  auto expect_throw = [](const SyntheticBatchSpec& spec, const std::string& field) {
    try {
      (void)MakeSyntheticBatch(spec);
      ADD_FAILURE() << "no throw for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  SyntheticBatchSpec spec;
  spec.decode_requests = 4;
  spec.suffix_tokens = 10;
  SyntheticBatchSpec bad = spec;
  bad.block_tokens = 0;
  expect_throw(bad, "block_tokens");
  bad = spec;
  bad.prefill_requests = 1;
  expect_throw(bad, "prefill_chunk_tokens");
  bad = spec;
  bad.groups = 1;
  bad.shared_prefix_tokens = 64;
  bad.prefill_requests = 1;
  bad.prefill_chunk_tokens = 4;
  bad.prefill_context_tokens = 32;
  bad.prefill_shares_prefix = true;
  expect_throw(bad, "prefill_context_tokens");
  bad = spec;
  bad.pool_blocks = 2;
  expect_throw(bad, "pool_blocks");
}

// The serving loop's own computation (Simulator::BuildPlan) on a KvCache holding the same
// structure: groups whose first member computed the prefix and registered it, members that hit
// it. The synthetic plan must agree on every field.
TEST(SyntheticBatchTest, AgreesWithTheServingLoopOnAKvCache) {
  for (const uint32_t groups : {0u, 1u, 4u}) {
    SyntheticBatchSpec spec;
    spec.block_tokens = 16;
    spec.decode_requests = 20;
    spec.groups = groups;
    spec.shared_prefix_tokens = 256;
    spec.suffix_tokens = 30;
    spec.suffix_jitter_tokens = 20;
    spec.seed = 3;
    const SyntheticBatch batch = MakeSyntheticBatch(spec);

    KvCache kv(KvCacheConfig{.block_tokens = 16, .num_blocks = 4096, .prefix_caching = true});
    std::vector<RequestId> admitted;
    for (const StepRequest& r : batch.requests) admitted.push_back(r.id);
    std::sort(admitted.begin(), admitted.end());  // spec order: a group's members in a row
    std::vector<uint32_t> context_of(admitted.size());
    std::vector<int32_t> group_of(admitted.size());
    for (size_t k = 0; k < batch.requests.size(); ++k) {
      context_of[batch.requests[k].id] = batch.requests[k].context_tokens;
      group_of[batch.requests[k].id] = batch.group[k];
    }
    for (const RequestId id : admitted) {
      // Prompt = the context; its block-hash chain: the group's prefix, then unique hashes.
      const uint32_t prompt = context_of[id];
      std::vector<PrefixHash> chain;
      for (uint32_t b = 0; b < prompt / 16; ++b) {
        chain.push_back(group_of[id] >= 0 && b < 16 ? 1000 + 100 * group_of[id] + b
                                                    : (uint64_t{id} << 32) + b + 1);
      }
      ASSERT_TRUE(kv.Allocate(id, chain, prompt, prompt + 1));
      kv.CacheBlocks(id, chain, prompt);
    }
    // BuildPlan's fields, computed as the serving loop computes them.
    uint64_t kv_tokens = 0;
    for (const RequestId id : admitted) kv_tokens += context_of[id] + 1;
    const uint64_t unique = std::min<uint64_t>(kv_tokens, kv.NumUsedBlocks() * 16);
    const uint32_t common =
        kv.CommonPrefixBlocks(batch.requests[0].id, static_cast<uint32_t>(admitted.size())) * 16;
    SCOPED_TRACE(testing::Message() << "groups " << groups);
    EXPECT_EQ(batch.plan.decode_kv_tokens, kv_tokens);
    EXPECT_EQ(batch.plan.decode_kv_unique_tokens, unique);
    EXPECT_EQ(batch.plan.common_prefix_tokens, common);
    EXPECT_EQ(batch.blocks_used, kv.NumUsedBlocks());
  }
}

}  // namespace
}  // namespace feather::hw
