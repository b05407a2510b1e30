// synthetic_batch.h: BatchPlans with physical block tables, built without the serving loop, for
// the real engines' microbenchmarks and calibration.
//
// A spec describes one step: decode requests in G prefix groups (each group shares
// shared_prefix_tokens physically; G = 0 shares nothing), each with private suffix tokens, plus
// optional prefill requests (a chunk after a cached context, optionally starting with a group's
// prefix). MakeSyntheticBatch assigns physical block ids the way a paged KV cache would hand them
// out (a group's prefix blocks once, private blocks per request; ids scattered over the pool by a
// seeded permutation, as real engines scatter blocks) and fills every BatchPlan field exactly as
// the serving loop does (sim/serving/simulator.cc, Simulator::BuildPlan):
//   decode_requests, prefill_tokens          counts over the requests
//   decode_kv_tokens        = Σ (context + 1) over decode requests
//   decode_kv_unique_tokens = min(decode_kv_tokens, block_tokens · distinct blocks in the
//                             decode requests' tables) — the serving loop's "blocks in use less
//                             the prefill requests' private ones", which is the same number
//                             whenever each prefill request's cached blocks are also held by a
//                             decode request (always, unless a group has prefill requests only)
//   common_prefix_tokens    = block_tokens · leading blocks of the first request's table held by
//                             every request of the step (vLLM's num_common_prefix_blocks: 0 with
//                             more than one group or any request outside the groups; the whole
//                             table with a single request)
// Only whole blocks are shared, as in vLLM: with shared_prefix_tokens not a multiple of
// block_tokens, the remainder is the same logical content but lives in each request's first
// private block.
//
// Cost: O(requests + blocks), one allocation per vector; plus O(pool_blocks) for the permutation.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/engine/engine.h"

namespace feather::hw {

struct SyntheticBatchSpec {
  uint32_t block_tokens = 16;
  // Decode requests: context = shared_prefix_tokens (when grouped) + private suffix tokens.
  uint32_t decode_requests = 0;
  uint32_t groups = 0;                // prefix groups, sizes as equal as possible; 0 = no sharing
  uint32_t shared_prefix_tokens = 0;  // per group (ignored when groups == 0)
  uint32_t suffix_tokens = 0;         // private context tokens of each decode request
  // Each decode request's suffix varies uniformly in [suffix − jitter, suffix + jitter] (seeded,
  // clamped at 0); 0 = every suffix is suffix_tokens.
  uint32_t suffix_jitter_tokens = 0;
  // Prefill requests: a chunk of prefill_chunk_tokens (≥ 1) after prefill_context_tokens cached
  // tokens. With prefill_shares_prefix (and groups > 0), prefill request j's context starts with
  // group (j mod groups)'s prefix blocks; its context must then be ≥ shared_prefix_tokens.
  uint32_t prefill_requests = 0;
  uint32_t prefill_context_tokens = 0;
  uint32_t prefill_chunk_tokens = 0;
  bool prefill_shares_prefix = false;
  // Request order: decode requests grouped (group 0's, then group 1's, ...) or shuffled (seeded);
  // prefill requests always follow them (the serving loop lists running requests in admission
  // order, and prompts still prefilling are the latest admitted).
  bool shuffle = false;
  // Physical ids: a seeded random subset of [0, pool_blocks) (0 = exactly the blocks needed), in
  // random order; false = sequential ids 0, 1, 2, ... in table order.
  bool scatter_blocks = true;
  uint64_t pool_blocks = 0;
  uint64_t seed = 1;
};

// A built step. `plan` and `requests` point into this object's own vectors: it can be moved
// (vector buffers move with it) but not copied.
struct SyntheticBatch {
  std::vector<std::vector<uint32_t>> tables;  // per request, in plan order
  std::vector<feather::StepRequest> requests;
  std::vector<int32_t> group;  // per request: its prefix group, −1 when it shares nothing
  feather::BatchPlan plan;
  uint64_t blocks_used = 0;  // distinct physical blocks behind all tables
  uint64_t pool_blocks = 0;  // a KV pool needs at least this many blocks (max id + 1)

  SyntheticBatch() = default;
  SyntheticBatch(SyntheticBatch&&) = default;
  SyntheticBatch& operator=(SyntheticBatch&&) = default;
  SyntheticBatch(const SyntheticBatch&) = delete;
  SyntheticBatch& operator=(const SyntheticBatch&) = delete;
};

// Builds the step. Throws std::invalid_argument naming the field for an impossible spec
// (block_tokens 0, a prefill chunk of 0 tokens, a sharing prefill context shorter than the
// prefix, pool_blocks smaller than the blocks needed, more than 2^32 − 1 blocks). Request ids
// are 0 .. R − 1 in spec order (decode requests first, by group), whatever the plan order.
[[nodiscard]] SyntheticBatch MakeSyntheticBatch(const SyntheticBatchSpec& spec);

// The serving loop's plan fields (see the file comment) recomputed for arbitrary requests with
// block tables: decode_requests, prefill_tokens, decode_kv_tokens, decode_kv_unique_tokens and
// common_prefix_tokens. `plan.requests` and `plan.block_tokens` must be set. O(Σ table sizes)
// with a hash set; for plans assembled by hand in tests and benchmarks.
void FillPlanFields(feather::BatchPlan& plan);

}  // namespace feather::hw
