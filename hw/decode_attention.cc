// decode_attention.cc: PagedDecodeAttention — plans the split of a decode batch into (request,
// KV chunk) tasks, each serving all of the request's query heads (every kv head's group as lane
// batches), runs them on OpenMP threads through the shared tile step (attention_internal.h) and
// merges the chunks of split requests by log-sum-exp. Tasks span all kv heads because a block's
// kv-head tiles are adjacent in the pool: one task then streams each block as a contiguous run.
#include "hw/decode_attention.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/check.h"
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
uint32_t RangeEnd(const DecodeAttentionParams& p, uint32_t r) { return p.kv.SeqLen(r); }
uint32_t RangeTokens(const DecodeAttentionParams& p, uint32_t r) {
  const uint32_t begin = RangeBegin(p, r);
  const uint32_t end = RangeEnd(p, r);
  return end > begin ? end - begin : 0;
}

// Tokens per task (a request's chunk, all kv heads): the whole range unless the batch is too
// small to keep every thread busy (flash-decoding's split-KV).
uint32_t ChooseChunkTokens(const DecodeAttentionParams& p) {
  if (p.num_threads <= 1) return std::numeric_limits<uint32_t>::max();
  uint64_t work = 0;
  for (uint32_t r = 0; r < p.kv.batch_size; ++r) work += RangeTokens(p, r);
  const uint64_t per_task = work / (static_cast<uint64_t>(p.num_threads) * kTasksPerThread);
  const uint64_t block = p.kv.layout.block_tokens;
  const uint64_t rounded = (per_task + block - 1) / block * block;
  return static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(kMinChunkTokens, rounded),
                                                  std::numeric_limits<uint32_t>::max()));
}

// offsets[r] .. offsets[r + 1]: the global chunk indices of request r (an empty range is one).
uint32_t PlanChunks(const DecodeAttentionParams& p, uint32_t chunk_tokens,
                    std::vector<uint32_t>& offsets) {
  offsets.resize(p.kv.batch_size + 1);
  offsets[0] = 0;
  uint32_t max_chunks = 1;
  for (uint32_t r = 0; r < p.kv.batch_size; ++r) {
    const uint64_t tokens = RangeTokens(p, r);
    const auto chunks =
        static_cast<uint32_t>(std::max<uint64_t>(1, (tokens + chunk_tokens - 1) / chunk_tokens));
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

// All query heads of request r over KV tokens [begin, end). Every kv head's group is a set of
// lane batches, and the walk visits a block's kv heads one after the other: their tiles are
// adjacent in the pool, so the task streams each block's K (and V) as one contiguous run.
void RunTask(const DecodeAttentionParams& p, const attention_internal::TileKernels& kernels,
             uint32_t r, uint32_t begin, uint32_t end, const TaskOutput& output) {
  using namespace attention_internal;
  const PagedKvLayout& layout = p.kv.layout;
  const uint32_t dim = layout.head_dim;
  const uint32_t group = p.num_heads / layout.kv_heads;
  const uint32_t per_head = (group + kLanes - 1) / kLanes;
  LaneScratch& scratch = ThreadLaneScratch();
  scratch.Reserve(per_head * layout.kv_heads, dim, kernels, layout.dtype);
  for (uint32_t g = 0; g < layout.kv_heads; ++g) {
    for (uint32_t i = 0; i < per_head; ++i) {
      const uint32_t b = g * per_head + i;
      const uint32_t lanes = std::min(kLanes, group - i * kLanes);
      scratch.Lanes(b) = lanes;
      for (uint32_t j = 0; j < lanes; ++j) {
        const size_t head = size_t{r} * p.num_heads + g * group + i * kLanes + j;
        InitLane(scratch, b, j, p.q + head * dim, p.scale, dim);
      }
      ClearLanesFrom(scratch, b, lanes, dim);
    }
  }
  const KvRange range{p.kv.k_data, p.kv.v_data, &layout, p.kv.Pages(r),
                      0,           layout.kv_heads, begin,   end};
  RunBatchesOverRange(kernels, scratch, per_head, range, /*causal=*/false);
  for (uint32_t h = 0; h < p.num_heads; ++h) {
    const uint32_t g = h / group, j = h % group;
    const size_t head = size_t{output.row} * p.num_heads + h;
    FinishLane(scratch, g * per_head + j / kLanes, j % kLanes, dim, output.out + head * dim,
               output.lse == nullptr ? nullptr : output.lse + head);
  }
}

void CheckParams(const DecodeAttentionParams& p) {
  const PagedKvLayout& layout = p.kv.layout;
  FEATHER_CHECK(layout.kv_heads > 0 && p.num_heads % layout.kv_heads == 0,
                "num_heads must be a positive multiple of kv_heads");
  FEATHER_CHECK(layout.head_dim > 0 && layout.head_dim % 8 == 0,
                "head_dim must be a positive multiple of 8");
  FEATHER_CHECK(layout.block_tokens > 0, "block_tokens must be positive");
  FEATHER_CHECK(p.kv.batch_size == 0 ||
                    (p.q != nullptr && p.out != nullptr && p.kv.indptr != nullptr &&
                     p.kv.last_page_len != nullptr),
                "q, out and the KV view's indptr and last_page_len are required");
}

// The KV tokens of global chunk `index`: request r's tokens [begin, end).
struct ChunkRange {
  uint32_t index;
  uint32_t request;
  uint32_t begin;
  uint32_t end;
  bool alone;  // the request's only chunk: its result goes straight to out
};

ChunkRange LocateChunk(const DecodeAttentionParams& p, const std::vector<uint32_t>& offsets,
                       uint32_t chunk_tokens, uint32_t index) {
  const auto r = static_cast<uint32_t>(std::upper_bound(offsets.begin() + 1, offsets.end(), index) -
                                       (offsets.begin() + 1));
  const uint64_t begin = RangeBegin(p, r) + uint64_t{index - offsets[r]} * chunk_tokens;
  const uint64_t end = std::min<uint64_t>(RangeEnd(p, r), begin + chunk_tokens);
  return {index, r, static_cast<uint32_t>(begin), static_cast<uint32_t>(std::max(begin, end)),
          offsets[r + 1] - offsets[r] == 1};
}

// Merges the chunks of every split request by log-sum-exp into out and lse. Called inside the
// parallel region: the heads are shared out among its threads.
void CombineSplitRequests(const DecodeAttentionParams& p, const std::vector<uint32_t>& offsets,
                          const DecodeWorkspace& workspace) {
  const uint32_t heads = p.num_heads;
  const uint32_t dim = p.kv.layout.head_dim;
#pragma omp for schedule(static)
  for (int64_t rh = 0; rh < int64_t{p.kv.batch_size} * heads; ++rh) {
    const auto r = static_cast<uint32_t>(rh / heads);
    const auto h = static_cast<uint32_t>(rh % heads);
    const uint32_t chunks = offsets[r + 1] - offsets[r];
    if (chunks == 1) continue;
    const size_t first = size_t{offsets[r]} * heads + h;
    attention_internal::CombineStates(workspace.partial_out.data() + first * dim,
                                      size_t{heads} * dim, workspace.partial_lse.data() + first,
                                      heads, chunks, dim, p.out + (size_t{r} * heads + h) * dim,
                                      p.lse == nullptr ? nullptr : p.lse + size_t{r} * heads + h);
  }
}

}  // namespace

void PagedDecodeAttention(const DecodeAttentionParams& params, DecodeWorkspace& workspace) {
  CheckParams(params);
  if (params.kv.batch_size == 0) return;
  const auto& kernels = attention_internal::ActiveTileKernels();
  // Thread-local so the plan does not allocate after the first call; the workers read it through
  // this reference (a thread_local named inside the parallel region would be their own copy).
  thread_local std::vector<uint32_t> plan;
  std::vector<uint32_t>& offsets = plan;
  const uint32_t chunk_tokens = ChooseChunkTokens(params);
  const bool split = PlanChunks(params, chunk_tokens, offsets) > 1;
  const uint32_t total_chunks = offsets[params.kv.batch_size];
  if (split) {
    workspace.partial_out.resize(size_t{total_chunks} * params.num_heads *
                                 params.kv.layout.head_dim);
    workspace.partial_lse.resize(size_t{total_chunks} * params.num_heads);
  }
  const int threads = std::max(1, params.num_threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < int64_t{total_chunks}; ++task) {
      const ChunkRange chunk =
          LocateChunk(params, offsets, chunk_tokens, static_cast<uint32_t>(task));
      const TaskOutput output = chunk.alone ? TaskOutput{params.out, params.lse, chunk.request}
                                            : TaskOutput{workspace.partial_out.data(),
                                                         workspace.partial_lse.data(), chunk.index};
      RunTask(params, kernels, chunk.request, chunk.begin, chunk.end, output);
    }
    if (split) CombineSplitRequests(params, offsets, workspace);
  }
}

}  // namespace feather::hw
