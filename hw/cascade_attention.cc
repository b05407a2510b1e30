// cascade_attention.cc: shared-prefix (cascade) decode attention on the CPU — the prefix pass
// that reads each prefix KV tile once for every query of a group, the log-sum-exp merge, and the
// cascade step that runs prefix passes, one suffix decode pass and the merge.
#include "hw/cascade_attention.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "base/check.h"
#include "hw/attention_internal.h"

namespace feather::hw {
namespace {

using attention_internal::kLanes;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
// Prefix chunks shorter than this are not worth a partial state and a merge.
constexpr uint32_t kMinPrefixChunkTokens = 64;
// Tasks per thread aimed for when splitting the prefix.
constexpr uint32_t kPrefixTasksPerThread = 4;

uint32_t PrefixTokens(const SharedPrefixParams& p) { return p.kv.SeqLen(0); }

// Splits the prefix into chunks (whole blocks) so that kv_heads × chunks tasks keep every
// thread busy even for one group with few kv heads.
uint32_t PrefixChunkTokens(const SharedPrefixParams& p) {
  const uint32_t tokens = PrefixTokens(p);
  const uint32_t block = p.kv.layout.block_tokens;
  if (p.num_threads <= 1 || tokens == 0) return std::max(tokens, 1u);
  const uint32_t wanted_tasks = kPrefixTasksPerThread * static_cast<uint32_t>(p.num_threads);
  const uint32_t wanted_chunks = (wanted_tasks + p.kv.layout.kv_heads - 1) / p.kv.layout.kv_heads;
  const uint32_t max_chunks = std::max(1u, tokens / kMinPrefixChunkTokens);
  const uint32_t chunks = std::min(wanted_chunks, max_chunks);
  const uint32_t per_chunk = (tokens + chunks - 1) / chunks;
  return (per_chunk + block - 1) / block * block;
}

uint32_t QueryRow(const SharedPrefixParams& p, uint32_t i) {
  return p.q_rows == nullptr ? i : p.q_rows[i];
}

// Where a prefix task writes lane (query i, head h): [row][num_heads][head_dim] and [row][heads].
struct PrefixOutput {
  float* out;
  float* lse;
  bool by_query_row;  // true: row = QueryRow(i) (final output); false: row = i (partial)
};

// All group queries' heads of kv head g over prefix tokens [begin, end): lane i·group + j.
void RunPrefixTask(const SharedPrefixParams& p, const attention_internal::TileKernels& kernels,
                   uint32_t g, uint32_t begin, uint32_t end, const PrefixOutput& output) {
  using namespace attention_internal;
  const uint32_t dim = p.kv.layout.head_dim;
  const uint32_t group = p.num_heads / p.kv.layout.kv_heads;
  const uint32_t lanes_total = p.num_queries * group;
  const uint32_t batches = (lanes_total + kLanes - 1) / kLanes;
  LaneScratch& scratch = ThreadLaneScratch();
  scratch.Reserve(batches, dim, kernels, p.kv.layout.dtype);
  for (uint32_t lane = 0; lane < lanes_total; ++lane) {
    const uint32_t head = g * group + lane % group;
    const size_t q_head = size_t{QueryRow(p, lane / group)} * p.num_heads + head;
    InitLane(scratch, lane / kLanes, lane % kLanes, p.q + q_head * dim, p.scale, dim);
  }
  for (uint32_t b = 0; b < batches; ++b) {
    scratch.Lanes(b) = std::min(kLanes, lanes_total - b * kLanes);
    ClearLanesFrom(scratch, b, scratch.Lanes(b), dim);
  }
  const KvRange range{p.kv.k_data, p.kv.v_data, &p.kv.layout, p.kv.Pages(0), g, 1, begin, end};
  RunBatchesOverRange(kernels, scratch, batches, range, /*causal=*/false);
  for (uint32_t lane = 0; lane < lanes_total; ++lane) {
    const uint32_t i = lane / group;
    const size_t head =
        size_t{output.by_query_row ? QueryRow(p, i) : i} * p.num_heads + g * group + lane % group;
    FinishLane(scratch, lane / kLanes, lane % kLanes, dim, output.out + head * dim,
               output.lse + head);
  }
}

void CheckPrefixParams(const SharedPrefixParams& p) {
  const PagedKvLayout& layout = p.kv.layout;
  FEATHER_CHECK(layout.kv_heads > 0 && p.num_heads % layout.kv_heads == 0,
                "num_heads must be a positive multiple of kv_heads");
  FEATHER_CHECK(layout.head_dim > 0 && layout.head_dim % 8 == 0,
                "head_dim must be a positive multiple of 8");
  FEATHER_CHECK(layout.block_tokens > 0, "block_tokens must be positive");
  FEATHER_CHECK(p.num_queries == 0 || (p.q != nullptr && p.out != nullptr && p.lse != nullptr),
                "q, out and lse are required");
  FEATHER_CHECK(p.kv.batch_size == 1 && p.kv.indptr != nullptr &&
                    p.kv.last_page_len != nullptr &&
                    (p.kv.NumPages(0) == 0 || p.kv.indices != nullptr),
                "the shared prefix is a KV view of exactly one entry");
}

// The partial states of a split prefix pass, [chunk][query][num_heads](×head_dim), kept per
// calling thread so repeated calls do not allocate.
struct PrefixPartials {
  std::vector<float> out;
  std::vector<float> lse;
};

// Combines the chunks' partial states of every (query, head) into the pass's output rows.
void CombinePrefixChunks(const SharedPrefixParams& p, const PrefixPartials& partials,
                         uint32_t chunks) {
  const uint32_t dim = p.kv.layout.head_dim;
  const size_t heads_total = size_t{p.num_queries} * p.num_heads;
#pragma omp for schedule(static)
  for (int64_t index = 0; index < static_cast<int64_t>(heads_total); ++index) {
    const auto i = static_cast<uint32_t>(index / p.num_heads);
    const auto h = static_cast<uint32_t>(index % p.num_heads);
    const size_t row_head = size_t{QueryRow(p, i)} * p.num_heads + h;
    attention_internal::CombineStates(partials.out.data() + static_cast<size_t>(index) * dim,
                                      heads_total * dim, partials.lse.data() + index, heads_total,
                                      chunks, dim, p.out + row_head * dim, p.lse + row_head);
  }
}

}  // namespace

void SharedPrefixAttention(const SharedPrefixParams& params) {
  CheckPrefixParams(params);
  if (params.num_queries == 0) return;
  const auto& kernels = attention_internal::ActiveTileKernels();
  const uint32_t prefix_tokens = PrefixTokens(params);
  const uint32_t chunk_tokens = PrefixChunkTokens(params);
  const uint32_t chunks = std::max(1u, (prefix_tokens + chunk_tokens - 1) / chunk_tokens);
  const uint32_t head_dim = params.kv.layout.head_dim;
  const uint32_t kv_heads = params.kv.layout.kv_heads;
  thread_local PrefixPartials partials_storage;
  PrefixPartials& partials = partials_storage;  // the workers use the caller's
  const size_t heads_total = size_t{params.num_queries} * params.num_heads;
  if (chunks > 1) {
    partials.out.resize(chunks * heads_total * head_dim);
    partials.lse.resize(chunks * heads_total);
  }
  const int threads = std::max(1, params.num_threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < int64_t{chunks} * kv_heads; ++task) {
      const auto chunk = static_cast<uint32_t>(task / kv_heads);
      const auto g = static_cast<uint32_t>(task % kv_heads);
      const uint32_t begin = std::min(prefix_tokens, chunk * chunk_tokens);
      const uint32_t end = std::min(prefix_tokens, begin + chunk_tokens);
      const PrefixOutput output =
          chunks == 1
              ? PrefixOutput{params.out, params.lse, true}
              : PrefixOutput{partials.out.data() + chunk * heads_total * head_dim,
                             partials.lse.data() + chunk * heads_total, false};
      RunPrefixTask(params, kernels, g, begin, end, output);
    }
    if (chunks > 1) CombinePrefixChunks(params, partials, chunks);
  }
}

void MergeAttentionStates(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                          uint32_t rows, uint32_t num_heads, uint32_t head_dim, int num_threads) {
  const int64_t heads_total = int64_t{rows} * num_heads;
  const int threads = std::max(1, num_threads);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t index = 0; index < heads_total; ++index) {
    const auto i = static_cast<size_t>(index);
    attention_internal::MergeState(out_a + i * head_dim, lse_a + i, out_b + i * head_dim, lse_b[i],
                                   head_dim);
  }
}

namespace {

// kv_begin[r] = the prefix length of r's group (0 for requests in no group).
void SetSuffixBegins(const CascadeDecodeParams& p, std::vector<uint32_t>& kv_begin) {
  const PagedKvView& kv = p.decode.kv;
  kv_begin.assign(kv.batch_size, 0);
  for (uint32_t g = 0; g < p.prefix_kv.batch_size; ++g) {
    const uint32_t prefix_tokens = p.prefix_kv.SeqLen(g);
    for (uint32_t i = p.group_indptr[g]; i < p.group_indptr[g + 1]; ++i) {
      const uint32_t row = p.group_rows[i];
      FEATHER_CHECK(row < kv.batch_size, "cascade group row out of range");
      FEATHER_CHECK(prefix_tokens <= kv.SeqLen(row),
                    "a request is shorter than its group's shared prefix");
      kv_begin[row] = prefix_tokens;
    }
  }
}

// out/lse hold the prefix states of rows with a prefix (kv_begin > 0); fold the suffix states in.
// Other rows take the suffix state, which covered their whole range.
void MergeSuffix(const DecodeAttentionParams& d, const std::vector<uint32_t>& kv_begin,
                 const float* suffix_out, const float* suffix_lse, float* lse) {
  const uint32_t heads = d.num_heads;
  const uint32_t dim = d.kv.layout.head_dim;
  const int threads = std::max(1, d.num_threads);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t index = 0; index < int64_t{d.kv.batch_size} * heads; ++index) {
    const auto i = static_cast<size_t>(index);
    if (kv_begin[i / heads] == 0) {
      std::memcpy(d.out + i * dim, suffix_out + i * dim, dim * sizeof(float));
      lse[i] = suffix_lse[i];
    } else {
      attention_internal::MergeState(d.out + i * dim, lse + i, suffix_out + i * dim, suffix_lse[i],
                                     dim);
    }
  }
}

}  // namespace

void CascadeDecodeAttention(const CascadeDecodeParams& params, CascadeWorkspace& workspace) {
  const DecodeAttentionParams& d = params.decode;
  FEATHER_CHECK(d.kv_begin == nullptr, "CascadeDecodeAttention sets kv_begin itself");
  FEATHER_CHECK(params.prefix_kv.batch_size == 0 ||
                    (params.prefix_kv.k_data == d.kv.k_data &&
                     params.prefix_kv.v_data == d.kv.v_data && params.group_indptr != nullptr),
                "the prefix view must share the batch's pools and name its groups' rows");
  if (d.kv.batch_size == 0) return;
  const size_t heads_total = size_t{d.kv.batch_size} * d.num_heads;
  SetSuffixBegins(params, workspace.kv_begin);
  workspace.suffix_out.resize(heads_total * d.kv.layout.head_dim);
  // The prefix lse goes to d.lse, or (when the caller wants none) behind the suffix lse.
  workspace.suffix_lse.resize(d.lse == nullptr ? 2 * heads_total : heads_total);
  float* lse = d.lse == nullptr ? workspace.suffix_lse.data() + heads_total : d.lse;

  DecodeAttentionParams suffix = d;
  suffix.out = workspace.suffix_out.data();
  suffix.lse = workspace.suffix_lse.data();
  suffix.kv_begin = workspace.kv_begin.data();
  PagedDecodeAttention(suffix, workspace.decode);

  for (uint32_t g = 0; g < params.prefix_kv.batch_size; ++g) {
    const uint32_t first = params.group_indptr[g];
    const uint32_t rows = params.group_indptr[g + 1] - first;
    if (params.prefix_kv.SeqLen(g) == 0 || rows == 0) continue;
    SharedPrefixParams prefix;
    prefix.q = d.q;
    prefix.out = d.out;
    prefix.lse = lse;
    prefix.kv = params.prefix_kv.Slice(g, 1);
    prefix.q_rows = params.group_rows + first;
    prefix.num_queries = rows;
    prefix.num_heads = d.num_heads;
    prefix.scale = d.scale;
    prefix.num_threads = d.num_threads;
    SharedPrefixAttention(prefix);
  }
  MergeSuffix(d, workspace.kv_begin, workspace.suffix_out.data(), workspace.suffix_lse.data(), lse);
}

}  // namespace feather::hw
