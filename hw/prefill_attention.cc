// prefill_attention.cc: PrefillAttention — causal attention of prefill chunks against a paged KV
// cache. A task is (request, kv head, query tile); its lanes are the tile's query tokens × the
// group's heads, so each KV tile loaded serves all of them; causality is a per-lane limit.
#include "hw/prefill_attention.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "hw/attention_internal.h"

namespace feather::hw {
namespace {

using attention_internal::kLanes;

// Query lanes (tokens × heads of one kv head) per task: enough batches per KV tile that a tile
// fetched from memory is reused many times, few enough that their state stays in L1/L2.
constexpr uint32_t kQueryLanesPerTask = 64;

uint32_t QueryTileTokens(const PrefillAttentionParams& p) {
  const uint32_t group = p.num_heads / p.kv.layout.kv_heads;
  return std::max(1u, kQueryLanesPerTask / group);
}

uint32_t ChunkLen(const PrefillAttentionParams& p, uint32_t r) {
  return p.qo_indptr[r + 1] - p.qo_indptr[r];
}

// Query tokens [first, first + count) of request r, heads of kv head g.
void RunPrefillTask(const PrefillAttentionParams& p, const attention_internal::TileKernels& kernels,
                    uint32_t r, uint32_t g, uint32_t first, uint32_t count) {
  using namespace attention_internal;
  const uint32_t dim = p.kv.layout.head_dim;
  const uint32_t group = p.num_heads / p.kv.layout.kv_heads;
  const uint32_t lanes_total = count * group;
  const uint32_t row_offset = p.qo_indptr[r];
  const uint32_t context = p.kv.SeqLen(r) - ChunkLen(p, r);
  const uint32_t batches = (lanes_total + kLanes - 1) / kLanes;
  LaneScratch& scratch = ThreadLaneScratch();
  scratch.Reserve(batches, dim, kernels, p.kv.layout.dtype);
  for (uint32_t lane = 0; lane < lanes_total; ++lane) {
    const uint32_t token = first + lane / group;
    const size_t head = (size_t{row_offset} + token) * p.num_heads + g * group + lane % group;
    InitLane(scratch, lane / kLanes, lane % kLanes, p.q + head * dim, p.scale, dim);
    scratch.Limit(lane / kLanes)[lane % kLanes] = static_cast<int32_t>(context + token + 1);
  }
  for (uint32_t b = 0; b < batches; ++b) {
    scratch.Lanes(b) = std::min(kLanes, lanes_total - b * kLanes);
    ClearLanesFrom(scratch, b, scratch.Lanes(b), dim);
  }
  const KvRange range{p.kv.k_data, p.kv.v_data, &p.kv.layout, p.kv.Pages(r),
                      g,           1,           0,             context + first + count};
  RunBatchesOverRange(kernels, scratch, batches, range, /*causal=*/true);
  for (uint32_t lane = 0; lane < lanes_total; ++lane) {
    const uint32_t token = first + lane / group;
    const size_t head = (size_t{row_offset} + token) * p.num_heads + g * group + lane % group;
    FinishLane(scratch, lane / kLanes, lane % kLanes, dim, p.out + head * dim, nullptr);
  }
}

void CheckParams(const PrefillAttentionParams& p) {
  const PagedKvLayout& layout = p.kv.layout;
  FEATHER_CHECK(layout.kv_heads > 0 && p.num_heads % layout.kv_heads == 0,
                "num_heads must be a positive multiple of kv_heads");
  FEATHER_CHECK(layout.head_dim > 0 && layout.head_dim % 8 == 0,
                "head_dim must be a positive multiple of 8");
  FEATHER_CHECK(layout.block_tokens > 0, "block_tokens must be positive");
  FEATHER_CHECK(p.kv.batch_size == 0 ||
                    (p.q != nullptr && p.out != nullptr && p.qo_indptr != nullptr &&
                     p.kv.indptr != nullptr && p.kv.indices != nullptr &&
                     p.kv.last_page_len != nullptr),
                "q, out, qo_indptr and the KV view's indptr, indices and last_page_len are "
                "required");
  for (uint32_t r = 0; r < p.kv.batch_size; ++r) {
    FEATHER_CHECK(ChunkLen(p, r) >= 1 && ChunkLen(p, r) <= p.kv.SeqLen(r),
                  "a prefill chunk is empty or longer than its request's KV");
  }
}

}  // namespace

void PrefillAttention(const PrefillAttentionParams& params) {
  CheckParams(params);
  const uint32_t num_requests = params.kv.batch_size;
  if (num_requests == 0) return;
  const auto& kernels = attention_internal::ActiveTileKernels();
  const uint32_t tile_tokens = QueryTileTokens(params);
  thread_local std::vector<uint32_t> plan;
  std::vector<uint32_t>& offsets = plan;  // the workers read the caller's plan
  offsets.resize(num_requests + 1);
  offsets[0] = 0;
  for (uint32_t r = 0; r < num_requests; ++r) {
    offsets[r + 1] = offsets[r] + (ChunkLen(params, r) + tile_tokens - 1) / tile_tokens;
  }
  const uint32_t kv_heads = params.kv.layout.kv_heads;
  const int64_t tasks = int64_t{offsets[num_requests]} * kv_heads;
  const int threads = std::max(1, params.num_threads);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(dynamic, 1)
  for (int64_t order = 0; order < tasks; ++order) {
    // Last tiles first: under the causal mask they attend to the most tokens, so the long tasks
    // start early and the short ones fill the gaps at the end.
    const int64_t task = tasks - 1 - order;
    const auto tile = static_cast<uint32_t>(task / kv_heads);
    const auto g = static_cast<uint32_t>(task % kv_heads);
    const auto r = static_cast<uint32_t>(
        std::upper_bound(offsets.begin() + 1, offsets.end(), tile) - (offsets.begin() + 1));
    const uint32_t first = (tile - offsets[r]) * tile_tokens;
    const uint32_t count = std::min(tile_tokens, ChunkLen(params, r) - first);
    RunPrefillTask(params, kernels, r, g, first, count);
  }
}

}  // namespace feather::hw
