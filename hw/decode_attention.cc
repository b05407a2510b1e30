// decode_attention.cc: PagedDecodeAttention — plans the split of a decode batch into
// (request, kv head, KV chunk) tasks, runs them on OpenMP threads through the shared tile step
// (attention_internal.h) and merges the chunks of split requests by log-sum-exp.
#include "hw/decode_attention.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "cht/check.h"
#include "hw/attention_internal.h"

namespace feather::hw {
namespace {

using attention_internal::kLanes;

// A chunk shorter than this costs more in merging and per-task setup than it gains in balance.
constexpr uint32_t kMinChunkTokens = 256;
// Tasks per thread aimed for when splitting: enough for dynamic scheduling to even out.
constexpr uint64_t kTasksPerThread = 8;

uint32_t RangeBegin(const DecodeAttentionParams& p, uint32_t r) {
  return p.kv_begin == nullptr ? 0 : p.kv_begin[r];
}
uint32_t RangeTokens(const DecodeAttentionParams& p, uint32_t r) {
  const uint32_t begin = RangeBegin(p, r);
  return p.kv_end[r] > begin ? p.kv_end[r] - begin : 0;
}

// Tokens per task of one (request, kv head): the whole range unless the batch is too small to
// keep every thread busy (flash-decoding's split-KV).
uint32_t ChooseChunkTokens(const DecodeAttentionParams& p) {
  if (p.num_threads <= 1) return std::numeric_limits<uint32_t>::max();
  uint64_t work = 0;
  for (uint32_t r = 0; r < p.num_requests; ++r) work += RangeTokens(p, r);
  work *= p.layout.kv_heads;
  const uint64_t per_task = work / (static_cast<uint64_t>(p.num_threads) * kTasksPerThread);
  const uint64_t block = p.layout.block_tokens;
  const uint64_t rounded = (per_task + block - 1) / block * block;
  return static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(kMinChunkTokens, rounded),
                                                  std::numeric_limits<uint32_t>::max()));
}

// offsets[r] .. offsets[r + 1]: the global chunk indices of request r (an empty range is one).
uint32_t PlanChunks(const DecodeAttentionParams& p, uint32_t chunk_tokens,
                    std::vector<uint32_t>& offsets) {
  offsets.resize(p.num_requests + 1);
  offsets[0] = 0;
  uint32_t max_chunks = 1;
  for (uint32_t r = 0; r < p.num_requests; ++r) {
    const uint32_t tokens = RangeTokens(p, r);
    const uint32_t chunks = std::max(1u, (tokens + (chunk_tokens - 1)) / chunk_tokens);
    max_chunks = std::max(max_chunks, chunks);
    offsets[r + 1] = offsets[r] + chunks;
  }
  return max_chunks;
}

// Where a task writes: rows of [num_heads][head_dim] and [num_heads], indexed by `row`.
struct TaskOutput {
  float* out;
  float* lse;  // may be null
  uint32_t row;
};

// One request's query heads of kv head g over KV tokens [begin, end).
void RunTask(const DecodeAttentionParams& p, const attention_internal::TileKernels& kernels,
             uint32_t r, uint32_t g, uint32_t begin, uint32_t end, const TaskOutput& output) {
  using namespace attention_internal;
  const uint32_t dim = p.layout.head_dim;
  const uint32_t group = p.num_heads / p.layout.kv_heads;
  const uint32_t batches = (group + kLanes - 1) / kLanes;
  LaneScratch& scratch = ThreadLaneScratch();
  scratch.Reserve(batches, dim);
  const uint32_t first_head = g * group;
  for (uint32_t b = 0; b < batches; ++b) {
    const uint32_t lanes = std::min(kLanes, group - b * kLanes);
    scratch.Lanes(b) = lanes;
    for (uint32_t j = 0; j < lanes; ++j) {
      const size_t head = size_t{r} * p.num_heads + first_head + b * kLanes + j;
      InitLane(scratch, b, j, p.q + head * dim, p.scale, dim);
    }
    ClearLanesFrom(scratch, b, lanes, dim);
  }
  const KvRange range{p.k_pool, p.v_pool, &p.layout, p.block_tables[r], g, begin, end};
  RunBatchesOverRange(kernels, scratch, batches, range, /*causal=*/false);
  for (uint32_t h = 0; h < group; ++h) {
    const size_t head = size_t{output.row} * p.num_heads + first_head + h;
    FinishLane(scratch, h / kLanes, h % kLanes, dim, output.out + head * dim,
               output.lse == nullptr ? nullptr : output.lse + head);
  }
}

void CheckParams(const DecodeAttentionParams& p) {
  FEATHER_CHECK(p.layout.kv_heads > 0 && p.num_heads % p.layout.kv_heads == 0,
                "num_heads must be a positive multiple of kv_heads");
  FEATHER_CHECK(p.layout.head_dim > 0 && p.layout.head_dim % 8 == 0,
                "head_dim must be a positive multiple of 8");
  FEATHER_CHECK(p.layout.block_tokens > 0, "block_tokens must be positive");
  FEATHER_CHECK(p.num_requests == 0 || (p.q != nullptr && p.out != nullptr &&
                                        p.block_tables != nullptr && p.kv_end != nullptr),
                "q, out, block_tables and kv_end are required");
}

}  // namespace

void PagedDecodeAttention(const DecodeAttentionParams& params, DecodeWorkspace& workspace) {
  CheckParams(params);
  if (params.num_requests == 0) return;
  const auto& kernels = attention_internal::ActiveTileKernels();
  // Thread-local so the plan does not allocate after the first call; the workers read it through
  // this reference (a thread_local named inside the parallel region would be their own copy).
  thread_local std::vector<uint32_t> plan;
  std::vector<uint32_t>& offsets = plan;
  const uint32_t chunk_tokens = ChooseChunkTokens(params);
  const bool split = PlanChunks(params, chunk_tokens, offsets) > 1;
  const uint32_t total_chunks = offsets[params.num_requests];
  const uint32_t heads = params.num_heads;
  const uint32_t dim = params.layout.head_dim;
  if (split) {
    workspace.partial_out.resize(size_t{total_chunks} * heads * dim);
    workspace.partial_lse.resize(size_t{total_chunks} * heads);
  }
  const int64_t tasks = int64_t{total_chunks} * params.layout.kv_heads;
  const int threads = std::max(1, params.num_threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const auto chunk = static_cast<uint32_t>(task / params.layout.kv_heads);
      const auto g = static_cast<uint32_t>(task % params.layout.kv_heads);
      const auto r = static_cast<uint32_t>(
          std::upper_bound(offsets.begin() + 1, offsets.end(), chunk) - (offsets.begin() + 1));
      const uint32_t index = chunk - offsets[r];
      const uint32_t begin = RangeBegin(params, r) + index * chunk_tokens;
      const uint32_t end = std::min(
          params.kv_end[r],
          static_cast<uint32_t>(std::min<uint64_t>(uint64_t{begin} + chunk_tokens, UINT32_MAX)));
      const bool alone = offsets[r + 1] - offsets[r] == 1;
      const TaskOutput output =
          alone ? TaskOutput{params.out, params.lse, r}
                : TaskOutput{workspace.partial_out.data(), workspace.partial_lse.data(), chunk};
      RunTask(params, kernels, r, g, begin, std::max(begin, end), output);
    }
    if (split) {
#pragma omp for schedule(static)
      for (int64_t rh = 0; rh < int64_t{params.num_requests} * heads; ++rh) {
        const auto r = static_cast<uint32_t>(rh / heads);
        const auto h = static_cast<uint32_t>(rh % heads);
        const uint32_t chunks = offsets[r + 1] - offsets[r];
        if (chunks == 1) continue;
        const size_t first = size_t{offsets[r]} * heads + h;
        attention_internal::CombineStates(
            workspace.partial_out.data() + first * dim, size_t{heads} * dim,
            workspace.partial_lse.data() + first, heads, chunks, dim,
            params.out + (size_t{r} * heads + h) * dim,
            params.lse == nullptr ? nullptr : params.lse + size_t{r} * heads + h);
      }
    }
  }
}

}  // namespace feather::hw
