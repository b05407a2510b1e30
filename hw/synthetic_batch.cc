// synthetic_batch.cc: MakeSyntheticBatch and FillPlanFields (see synthetic_batch.h).
#include "hw/synthetic_batch.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/rng.h"

namespace feather::hw {
namespace {

[[noreturn]] void Invalid(const std::string& field, const std::string& message) {
  throw std::invalid_argument("synthetic batch: " + field + ": " + message);
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// One request before block ids are assigned.
struct Draft {
  uint32_t context = 0;
  uint32_t new_tokens = 0;
  bool is_prefill = false;
  int32_t group = -1;
  uint64_t blocks = 0;  // table length
};

}  // namespace

void FillPlanFields(BatchPlan& plan) {
  plan.decode_requests = 0;
  plan.prefill_tokens = 0;
  plan.decode_kv_tokens = 0;
  plan.decode_kv_unique_tokens = 0;
  plan.common_prefix_tokens = 0;
  std::unordered_map<uint32_t, uint32_t> holders;  // block -> requests holding it
  std::unordered_set<uint32_t> decode_blocks;
  for (const StepRequest& r : plan.requests) {
    if (r.is_prefill) {
      plan.prefill_tokens += r.new_tokens;
    } else {
      ++plan.decode_requests;
      plan.decode_kv_tokens += uint64_t{r.context_tokens} + 1;
      decode_blocks.insert(r.block_table.begin(), r.block_table.end());
    }
    for (const uint32_t block : r.block_table) ++holders[block];
  }
  plan.decode_kv_unique_tokens =
      std::min(plan.decode_kv_tokens, uint64_t{plan.block_tokens} * decode_blocks.size());
  if (!plan.requests.empty()) {
    // vLLM's num_common_prefix_blocks: leading blocks of the first request that every request
    // holds (KvCache::CommonPrefixBlocks with the reference counts of this step's requests).
    uint32_t common = 0;
    for (const uint32_t block : plan.requests.front().block_table) {
      if (holders[block] != plan.num_requests()) break;
      ++common;
    }
    plan.common_prefix_tokens = common * plan.block_tokens;
  }
}

SyntheticBatch MakeSyntheticBatch(const SyntheticBatchSpec& spec) {
  if (spec.block_tokens == 0) Invalid("block_tokens", "must be at least 1");
  if (spec.prefill_requests > 0 && spec.prefill_chunk_tokens == 0) {
    Invalid("prefill_chunk_tokens", "must be at least 1 with prefill requests");
  }
  const bool prefill_shares = spec.prefill_shares_prefix && spec.groups > 0;
  if (prefill_shares && spec.prefill_context_tokens < spec.shared_prefix_tokens) {
    Invalid("prefill_context_tokens", std::to_string(spec.prefill_context_tokens) +
                                          " is shorter than the shared prefix it starts with (" +
                                          std::to_string(spec.shared_prefix_tokens) + " tokens)");
  }
  const uint64_t bt = spec.block_tokens;
  const uint32_t prefix_tokens = spec.groups > 0 ? spec.shared_prefix_tokens : 0;
  const uint64_t shared_blocks = prefix_tokens / bt;  // whole blocks only, as vLLM shares them
  Rng rng(spec.seed);

  // Requests in spec order: decode (grouped, balanced contiguous groups), then prefill.
  const uint32_t num_requests = spec.decode_requests + spec.prefill_requests;
  std::vector<Draft> drafts(num_requests);
  for (uint32_t i = 0; i < spec.decode_requests; ++i) {
    Draft& d = drafts[i];
    int64_t suffix = spec.suffix_tokens;
    if (spec.suffix_jitter_tokens > 0) {
      const int64_t jitter = spec.suffix_jitter_tokens;
      suffix = std::max<int64_t>(0, suffix + rng.UniformInt(-jitter, jitter));
    }
    const uint64_t context = uint64_t{prefix_tokens} + static_cast<uint64_t>(suffix);
    if (context + 1 > std::numeric_limits<uint32_t>::max()) {
      Invalid("suffix_tokens", "context does not fit 32 bits");
    }
    d.context = static_cast<uint32_t>(context);
    d.new_tokens = 1;
    d.group = spec.groups > 0
                  ? static_cast<int32_t>(uint64_t{i} * spec.groups / spec.decode_requests)
                  : -1;
    d.blocks = CeilDiv(context + 1, bt);
  }
  for (uint32_t j = 0; j < spec.prefill_requests; ++j) {
    Draft& d = drafts[spec.decode_requests + j];
    const uint64_t total = uint64_t{spec.prefill_context_tokens} + spec.prefill_chunk_tokens;
    if (total > std::numeric_limits<uint32_t>::max()) {
      Invalid("prefill_chunk_tokens", "context + chunk does not fit 32 bits");
    }
    d.context = spec.prefill_context_tokens;
    d.new_tokens = spec.prefill_chunk_tokens;
    d.is_prefill = true;
    d.group = prefill_shares ? static_cast<int32_t>(j % spec.groups) : -1;
    d.blocks = CeilDiv(total, bt);
  }

  // Blocks needed: each used group's prefix once, and every request's private blocks.
  std::vector<uint8_t> group_used(spec.groups, 0);
  uint64_t needed = 0;
  for (const Draft& d : drafts) {
    uint64_t shared = 0;
    if (d.group >= 0) {
      shared = shared_blocks;
      if (!group_used[static_cast<size_t>(d.group)]) {
        group_used[static_cast<size_t>(d.group)] = 1;
        needed += shared_blocks;
      }
    }
    needed += d.blocks - shared;
  }
  if (needed > std::numeric_limits<uint32_t>::max()) {
    Invalid("decode_requests", "the batch needs " + std::to_string(needed) +
                                   " blocks, more than 32-bit block ids can name");
  }
  if (spec.pool_blocks != 0 && spec.pool_blocks < needed) {
    Invalid("pool_blocks", std::to_string(spec.pool_blocks) + " is less than the " +
                               std::to_string(needed) + " blocks the batch needs");
  }

  // Physical ids, in order of first use: a seeded random subset of the pool, or sequential.
  const uint64_t pool = spec.pool_blocks != 0 ? spec.pool_blocks : needed;
  if (pool > uint64_t{std::numeric_limits<uint32_t>::max()} + 1) {
    Invalid("pool_blocks", "more than 2^32 blocks");
  }
  std::vector<uint32_t> ids;
  if (spec.scatter_blocks) {
    ids.resize(pool);
    std::iota(ids.begin(), ids.end(), 0u);
    for (uint64_t k = 0; k < needed; ++k) {  // partial Fisher–Yates: the first `needed` ids
      std::swap(ids[k], ids[k + rng.Uniform(pool - k)]);
    }
    ids.resize(needed);
  } else {
    ids.resize(needed);
    std::iota(ids.begin(), ids.end(), 0u);
  }

  SyntheticBatch batch;
  std::vector<std::vector<uint32_t>> spec_tables(num_requests);
  std::vector<std::vector<uint32_t>> prefix_of(spec.groups);
  uint64_t next = 0;
  for (uint32_t i = 0; i < num_requests; ++i) {
    const Draft& d = drafts[i];
    std::vector<uint32_t>& table = spec_tables[i];
    table.reserve(d.blocks);
    uint64_t shared = 0;
    if (d.group >= 0) {
      std::vector<uint32_t>& prefix = prefix_of[static_cast<size_t>(d.group)];
      if (prefix.empty()) {
        for (uint64_t b = 0; b < shared_blocks; ++b) prefix.push_back(ids[next++]);
      }
      table.insert(table.end(), prefix.begin(), prefix.end());
      shared = shared_blocks;
    }
    for (uint64_t b = shared; b < d.blocks; ++b) table.push_back(ids[next++]);
  }

  // Plan order: decode requests grouped or shuffled, then prefill requests.
  std::vector<uint32_t> order(num_requests);
  std::iota(order.begin(), order.end(), 0u);
  if (spec.shuffle) {
    for (uint32_t k = spec.decode_requests; k > 1; --k) {
      std::swap(order[k - 1], order[rng.Uniform(k)]);
    }
  }
  batch.tables.resize(num_requests);
  batch.requests.resize(num_requests);
  batch.group.resize(num_requests);
  for (uint32_t k = 0; k < num_requests; ++k) {
    const uint32_t i = order[k];
    batch.tables[k] = std::move(spec_tables[i]);
    StepRequest& r = batch.requests[k];
    r.id = i;
    r.context_tokens = drafts[i].context;
    r.new_tokens = drafts[i].new_tokens;
    r.is_prefill = drafts[i].is_prefill;
    r.block_table = batch.tables[k];
    batch.group[k] = drafts[i].group;
  }
  batch.blocks_used = needed;
  batch.pool_blocks = needed == 0 ? 0 : uint64_t{*std::max_element(ids.begin(), ids.end())} + 1;
  batch.plan.block_tokens = spec.block_tokens;
  batch.plan.requests = batch.requests;
  FillPlanFields(batch.plan);
  return batch;
}

}  // namespace feather::hw
