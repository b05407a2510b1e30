// Benchmarks of the CPU attention kernels (hw/decode_attention.h, hw/cascade_attention.h,
// hw/prefill_attention.h) against a plain read-bandwidth loop measured in the same process.
//
// Decode is memory-bound: its figure of merit is the KV bytes it streams per second, compared
// with BM_ReadBandwidth (threads summing a large array: what the memory system gives to a pure
// read stream). The non-shared decode batch (256 requests × 4096 tokens, 2 kv heads, head dim 64,
// 8 query heads) holds 1 GiB of fp32 KV (0.5 GiB bf16), ≥ 16× the 32 MiB LLC, in physical
// blocks of random order. Reported:
//   bytes_per_second: KV bytes the kernel reads (decode: Σ ranges; cascade: each group's prefix
//     once plus the suffixes) — the bytes the cost model prices;
//   logical_kv_Bps: Σ over requests of their whole KV, so plain decode and cascade on the same
//     shared-prefix batch compare directly;
//   GFLOPs (prefix pass, prefill): 4 · query heads · keys · head_dim per second (QK and PV).
// Every kernel benchmark first checks a sample of its output against the double reference
// (hw/attention_reference.h) and reports verify_failed instead of a time when it differs.
//
// Pools (and the bandwidth array) are 2 MiB-aligned and advised into transparent huge pages.
// Bandwidth figures only mean something on an otherwise idle machine; on a shared one, take the
// median of repetitions and compare figures from the same run.
//
// Run (Release build), e.g. the headline decode-vs-bandwidth comparison:
//   build-kernels/tests/attention_kernels_benchmark --benchmark_repetitions=3
//     --benchmark_report_aggregates_only=true
//     --benchmark_filter='ReadBandwidth/threads:2|PagedDecode/.*/shared:0/threads:2'
// Every kernel benchmark's label says the tile step it ran (isa=avx512bf16|avx512|avx2|scalar),
// and its last argument picks it: isa:0 the automatic choice (or FEATHER_ATTENTION_ISA's), isa:1-4
// force scalar, avx2, avx512, avx512bf16 (registered for the headline shapes only). Every
// path side by side with the probe, repetitions interleaved so the machine's drift reaches all:
//   attention_kernels_benchmark --benchmark_repetitions=5 --benchmark_enable_random_interleaving
//     --benchmark_report_aggregates_only=true
//     --benchmark_filter='ReadBandwidth/threads:2/streams:1|PagedDecode/.*/shared:0/threads:2/isa'
// How much of the decode's shortfall against the probe is its access pattern (tiles of 2-4 KiB at
// random places) and how much its arithmetic: BM_DecodeOfWalk times a plain read of the same
// blocks in the same order beside each decode pass (walk_of_probe, decode_of_walk):
//   attention_kernels_benchmark --benchmark_repetitions=6 --benchmark_enable_random_interleaving
//     --benchmark_report_aggregates_only=true --benchmark_filter='DecodeOfWalk/.*/threads:2/'
// Both take the page size as their last argument (block: 16, the engine's and vLLM's GPU default;
// 64; 128, vLLM's CPU backend default), so one run puts the page sizes side by side:
//   attention_kernels_benchmark --benchmark_repetitions=5 --benchmark_enable_random_interleaving
//     --benchmark_report_aggregates_only=true --benchmark_filter='DecodeOfProbe/.*/prefetch_kib:0/'
// OpenMP is private to feather_hw, so the bandwidth loop here uses std::thread.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/rng.h"
#include "hw/attention_internal.h"
#include "hw/attention_reference.h"
#include "hw/cascade_attention.h"
#include "hw/decode_attention.h"
#include "hw/paged_kv.h"
#include "hw/prefill_attention.h"

namespace feather::hw {
namespace {

constexpr uint32_t kBlockTokens = 16;
constexpr float kVerifyTolerance = 1e-4f;

// Kernels in bf16 math (attention_internal::TileKernels::bf16_math) round q and the softmax
// weights to bf16: the reference then runs on the q they see, and the output may move by 2^-9
// (V in [-1, 1]; tests/hw/attention_kernels_test.cc derives it).
float VerifyTolerance(KvDtype dtype) {
  const bool bf16_math =
      attention_internal::UsesBf16Math(attention_internal::ActiveTileKernels(), dtype);
  return kVerifyTolerance + (bf16_math ? 0x1p-9f : 0);
}
std::vector<float> ReferenceQ(const float* q, size_t count, float scale, KvDtype dtype) {
  std::vector<float> copy(q, q + count);
  attention_internal::RoundQueriesAsKernelsSee(attention_internal::ActiveTileKernels(), dtype,
                                               copy.data(), count, scale);
  return copy;
}

// The tile step in use (FEATHER_ATTENTION_ISA=scalar|avx2|avx512|avx512bf16 forces one).
// The active path; on a CPU with AVX-512 BF16 also the probe's ratio of the dot step's time to
// the pairs step's, which chose between them (attention_internal::Bf16PathProbe).
std::string IsaName() {
  std::string name = attention_internal::AttentionIsaName(attention_internal::ActiveAttentionIsa());
  const attention_internal::Bf16PathTimes& probe = attention_internal::Bf16PathProbe();
  if (probe.pairs_seconds > 0) {
    char ratio[48];
    std::snprintf(ratio, sizeof ratio, " bf16_dot/pairs=%.3f",
                  probe.dot_seconds / probe.pairs_seconds);
    name += ratio;
  }
  return name;
}

// The kernel benchmarks' last argument, "isa": 0 runs the automatic choice (or the variable's),
// 1-4 force scalar, avx2, avx512 or avx512bf16 for that benchmark only, so that one run can put
// every path the CPU has side by side (with --benchmark_enable_random_interleaving their
// repetitions alternate, and a drifting machine reaches them alike). A path the CPU lacks is
// reported as skipped, naming the missing feature.
class ScopedIsa {
 public:
  ScopedIsa(benchmark::State& state, int isa_arg) {
    const auto isa = static_cast<attention_internal::AttentionIsa>(state.range(isa_arg));
    if (isa == attention_internal::AttentionIsa::kAuto) return;
    forced_ = attention_internal::SetAttentionIsaForTesting(isa);
    if (!forced_) {
      state.SkipWithError(
          (std::string("skipped: this CPU lacks ") + attention_internal::MissingFeature(isa))
              .c_str());
    }
  }
  ~ScopedIsa() {
    if (forced_) {
      (void)attention_internal::SetAttentionIsaForTesting(attention_internal::AttentionIsa::kAuto);
    }
  }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  bool forced_ = false;
};

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using PoolMemory = std::unique_ptr<char, FreeDeleter>;

// 2 MiB-aligned memory, advised into transparent huge pages: a KV pool is one long-lived
// allocation, and with 4 KiB pages every (block, kv head) tile of a random block order would be
// a TLB miss of its own. Set FEATHER_BENCH_SMALL_PAGES=1 to measure without.
PoolMemory AllocatePool(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  PoolMemory memory(static_cast<char*>(std::aligned_alloc(kHugePage, rounded)));
  if (std::getenv("FEATHER_BENCH_SMALL_PAGES") == nullptr) {
    madvise(memory.get(), rounded, MADV_HUGEPAGE);
  }
  return memory;
}

// --- Read bandwidth -----------------------------------------------------------------------

// Sum of `streams` equal contiguous parts of a slice, read side by side (four independent
// accumulators per stream, no loop-carried latency chain).
uint64_t SumSlice(const uint64_t* data, size_t count, size_t streams) {
  const size_t part = count / streams;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  if (streams == 1) {
    for (size_t i = 0; i + 4 <= part; i += 4) {
      a += data[i];
      b += data[i + 1];
      c += data[i + 2];
      d += data[i + 3];
    }
  } else {
    const uint64_t* second = data + part;
    for (size_t i = 0; i + 2 <= part; i += 2) {
      a += data[i];
      b += data[i + 1];
      c += second[i];
      d += second[i + 1];
    }
  }
  return a + b + c + d;
}

// Runs sum(t) for t = 0 .. threads - 1, one thread each, and keeps the sums from the optimizer
// (the reads behind them are what is measured).
template <class Sum>
void SumOnThreads(size_t threads, const Sum& sum) {
  std::vector<uint64_t> sums(threads);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) workers.emplace_back([&, t] { sums[t] = sum(t); });
  for (std::thread& worker : workers) worker.join();
  benchmark::DoNotOptimize(sums.data());
}

// The probe's 1 GiB array, built (allocated, huge pages advised as for the KV pools, filled) on
// the first call. Every benchmark that reads it calls this before its timed loop, so that no
// timed pass, and no probe of a decode pair, pays for the fill.
constexpr size_t kProbeWords = (size_t{1} << 30) / sizeof(uint64_t);
const uint64_t* ProbeWords() {
  static const PoolMemory memory = [] {
    PoolMemory words = AllocatePool(kProbeWords * sizeof(uint64_t));
    auto* begin = reinterpret_cast<uint64_t*>(words.get());
    std::iota(begin, begin + kProbeWords, uint64_t{1});
    return words;
  }();
  return reinterpret_cast<const uint64_t*>(memory.get());
}

// One pass of the probe: `threads` threads each sum their slice of the 1 GiB array. Returns the
// bytes read.
size_t ReadProbePass(size_t threads, size_t streams) {
  const uint64_t* data = ProbeWords();
  const size_t slice = kProbeWords / threads;
  SumOnThreads(threads, [&](size_t t) { return SumSlice(data + t * slice, slice, streams); });
  return slice * threads * sizeof(uint64_t);
}

// Threads each sum their contiguous slice of a 1 GiB array (> 30× the LLC), as one sequential
// stream or as two (the KV walk of decode reads K and V side by side; on the VM this was tuned on
// two streams per core read noticeably faster, so both are reported and the better one is the
// bar). Args: threads, streams per thread.
void BM_ReadBandwidth(benchmark::State& state) {
  const auto threads = static_cast<size_t>(state.range(0));
  const auto streams = static_cast<size_t>(state.range(1));
  (void)ProbeWords();
  size_t bytes = 0;
  for (auto _ : state) bytes = ReadProbePass(threads, streams);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgNames({"threads", "streams"})
    ->ArgsProduct({{1, 2}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// --- KV pools and batches -----------------------------------------------------------------

// K and V pools of small pseudo-random values (uninitialized allocation, then one pass of a fast
// generator: a 1 GiB pool takes well under a second to build).
struct KvPools {
  PagedKvLayout layout;
  PoolMemory k, v;
};

KvPools MakePools(uint32_t num_blocks, uint32_t kv_heads, uint32_t head_dim, KvDtype dtype,
                  uint32_t block_tokens = kBlockTokens) {
  KvPools pools;
  pools.layout = {num_blocks, kv_heads, block_tokens, head_dim, dtype};
  const size_t bytes = pools.layout.PoolBytes();
  pools.k = AllocatePool(bytes);
  pools.v = AllocatePool(bytes);
  std::thread fill_v(
      [&] { FillPseudoRandomKv(pools.v.get(), bytes / KvDtypeBytes(dtype), dtype, 2); });
  FillPseudoRandomKv(pools.k.get(), bytes / KvDtypeBytes(dtype), dtype, 1);
  fill_v.join();
  return pools;
}

// A CSR block table (hw/paged_kv.h): entries of ceil(tokens / block_tokens) pages each.
struct CsrTable {
  uint32_t block_tokens = kBlockTokens;
  std::vector<uint32_t> indptr = {0}, indices, last_page_len;

  void Add(const std::vector<uint32_t>& pages, uint32_t tokens) {
    const uint32_t used = (tokens + block_tokens - 1) / block_tokens;
    indices.insert(indices.end(), pages.begin(), pages.begin() + used);
    indptr.push_back(static_cast<uint32_t>(indices.size()));
    last_page_len.push_back(LastPageLen(tokens, block_tokens));
  }
  [[nodiscard]] PagedKvView View(KvPools& pools) const {
    return PagedKvView{.k_data = pools.k.get(),
                       .v_data = pools.v.get(),
                       .layout = pools.layout,
                       .batch_size = static_cast<uint32_t>(last_page_len.size()),
                       .indptr = indptr.data(),
                       .indices = indices.data(),
                       .last_page_len = last_page_len.data()};
  }
};

// A decode batch: pools, block tables (physical blocks in random order), queries, outputs.
// With groups > 0, requests come in `groups` groups whose tables start with the same
// prefix_tokens of shared blocks, then suffix_tokens of their own.
struct DecodeSetup {
  KvPools pools;
  std::vector<std::vector<uint32_t>> tables;
  CsrTable table;     // one entry per request
  CsrTable prefixes;  // one entry per group: its shared blocks
  std::vector<uint32_t> group_indptr = {0}, group_rows;
  std::vector<std::vector<uint32_t>> prefix_tables;  // the groups' shared blocks
  uint32_t groups = 0;
  uint32_t kv_end = 0;  // every request's length
  std::vector<float> q, out, lse;
  uint32_t num_heads = 8;
  uint32_t prefix_tokens = 0;
};

struct DecodeShape {
  KvDtype dtype;
  uint32_t requests;
  uint32_t groups;  // 0: no sharing
  uint32_t prefix_tokens;
  uint32_t suffix_tokens;
  uint32_t kv_heads = 2;  // query heads: 4 per kv head
  uint32_t head_dim = 64;
  uint32_t block_tokens = kBlockTokens;
  bool operator==(const DecodeShape&) const = default;
};

std::unique_ptr<DecodeSetup> BuildDecodeSetup(const DecodeShape& shape) {
  auto setup = std::make_unique<DecodeSetup>();
  setup->num_heads = 4 * shape.kv_heads;
  const uint32_t block_tokens = shape.block_tokens;
  const uint32_t prefix_blocks = shape.prefix_tokens / block_tokens;
  const uint32_t own_blocks = (shape.suffix_tokens + block_tokens - 1) / block_tokens;
  const uint32_t total_blocks = shape.groups * prefix_blocks + shape.requests * own_blocks;
  setup->pools = MakePools(total_blocks, shape.kv_heads, shape.head_dim, shape.dtype, block_tokens);
  setup->table.block_tokens = block_tokens;
  setup->prefixes.block_tokens = block_tokens;
  std::vector<uint32_t> order(total_blocks);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(42);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Uniform(i)]);
  size_t next = 0;
  auto take = [&](uint32_t count) {
    std::vector<uint32_t> blocks(order.begin() + next, order.begin() + next + count);
    next += count;
    return blocks;
  };
  std::vector<std::vector<uint32_t>>& prefixes = setup->prefix_tables;
  for (uint32_t g = 0; g < shape.groups; ++g) prefixes.push_back(take(prefix_blocks));
  std::vector<std::vector<uint32_t>> group_rows(shape.groups);
  setup->kv_end = shape.prefix_tokens + shape.suffix_tokens;
  for (uint32_t r = 0; r < shape.requests; ++r) {
    std::vector<uint32_t> table;
    if (shape.groups > 0) {
      const uint32_t g = r % shape.groups;
      table = prefixes[g];
      group_rows[g].push_back(r);
    }
    const auto own = take(own_blocks);
    table.insert(table.end(), own.begin(), own.end());
    setup->table.Add(table, setup->kv_end);
    setup->tables.push_back(std::move(table));
  }
  for (uint32_t g = 0; g < shape.groups; ++g) {
    setup->prefixes.Add(prefixes[g], shape.prefix_tokens);
    setup->group_rows.insert(setup->group_rows.end(), group_rows[g].begin(), group_rows[g].end());
    setup->group_indptr.push_back(static_cast<uint32_t>(setup->group_rows.size()));
  }
  setup->groups = shape.groups;
  setup->prefix_tokens = shape.prefix_tokens;
  const size_t heads_total = size_t{shape.requests} * setup->num_heads;
  setup->q.resize(heads_total * shape.head_dim);
  for (float& x : setup->q) x = static_cast<float>(rng.NextDouble() * 2 - 1);
  setup->out.resize(heads_total * shape.head_dim);
  setup->lse.resize(heads_total);
  return setup;
}

// One decode batch at a time is kept (the largest is 1 GiB); rebuilt when the shape changes.
DecodeSetup& CachedDecodeSetup(const DecodeShape& shape) {
  static std::unique_ptr<DecodeSetup> cached;
  static DecodeShape cached_shape{};
  if (cached == nullptr || !(cached_shape == shape)) {
    cached.reset();
    cached = BuildDecodeSetup(shape);
    cached_shape = shape;
  }
  return *cached;
}

DecodeAttentionParams DecodeParamsOf(DecodeSetup& s, int threads) {
  DecodeAttentionParams p;
  p.q = s.q.data();
  p.out = s.out.data();
  p.lse = s.lse.data();
  p.kv = s.table.View(s.pools);
  p.num_heads = s.num_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.pools.layout.head_dim));
  p.num_threads = threads;
  return p;
}

// Compares the first `rows` requests of a decode output with the reference.
bool VerifyDecodeRows(const DecodeAttentionParams& p, uint32_t rows) {
  DecodeAttentionParams sample = p;
  sample.kv = p.kv.Slice(0, std::min(rows, p.kv.batch_size));
  const size_t heads_total = size_t{sample.kv.batch_size} * p.num_heads;
  std::vector<float> want(heads_total * p.kv.layout.head_dim), want_lse(heads_total);
  const KvDtype dtype = p.kv.layout.dtype;
  const std::vector<float> q = ReferenceQ(p.q, want.size(), p.scale, dtype);
  sample.q = q.data();
  sample.out = want.data();
  sample.lse = want_lse.data();
  ReferenceDecodeAttention(sample);
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(want[i] - p.out[i]) <= VerifyTolerance(dtype))) return false;
  }
  return true;
}

size_t KvBytesPerToken(const PagedKvLayout& layout) {
  return size_t{2} * layout.kv_heads * layout.head_dim * KvDtypeBytes(layout.dtype);
}

void ReportDecode(benchmark::State& state, size_t read_bytes, size_t logical_bytes) {
  const auto iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(read_bytes));
  state.counters["logical_kv_Bps"] =
      benchmark::Counter(iterations * static_cast<double>(logical_bytes),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

// --- Decode -------------------------------------------------------------------------------

// Args: dtype (0 fp32, 1 bf16), shared (0: 256 × 4096 own tokens; 1: 8 groups of 32 sharing a
// 3584-token prefix, 512 own tokens each), threads. Plain paged decode over the whole batch.
void BM_PagedDecode(benchmark::State& state) {
  const ScopedIsa isa(state, 3);
  if (state.error_occurred()) return;
  const auto dtype = static_cast<KvDtype>(state.range(0));
  const bool shared = state.range(1) != 0;
  const DecodeShape shape =
      shared ? DecodeShape{dtype, 256, 8, 3584, 512} : DecodeShape{dtype, 256, 0, 0, 4096};
  DecodeSetup& setup = CachedDecodeSetup(shape);
  DecodeAttentionParams p = DecodeParamsOf(setup, static_cast<int>(state.range(2)));
  DecodeWorkspace workspace;
  PagedDecodeAttention(p, workspace);
  if (!VerifyDecodeRows(p, 2)) {
    state.SkipWithError("verify_failed");
    return;
  }
  for (auto _ : state) {
    PagedDecodeAttention(p, workspace);
    benchmark::ClobberMemory();
  }
  const size_t logical = size_t{p.kv.batch_size} * setup.kv_end * KvBytesPerToken(p.kv.layout);
  ReportDecode(state, logical, logical);
  state.SetLabel("verify=ok isa=" + IsaName());
}
BENCHMARK(BM_PagedDecode)
    ->ArgNames({"bf16", "shared", "threads", "isa"})
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2}, {0}})
    ->ArgsProduct({{0, 1}, {0}, {1, 2}, {1, 2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The nearest-rank q-quantile of v.
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// BM_PagedDecode's non-shared batch at `threads`, decoded once and checked against the
// reference; nullopt (and the benchmark skipped as verify_failed) when it differs.
struct HeadlineDecode {
  DecodeSetup* setup;
  DecodeAttentionParams params;
  size_t logical_bytes;  // Σ over requests of their whole KV
};
// shape 1 ("wide"): 64 requests of Llama-3-8B's attention shape instead (8 kv heads, head dim
// 128: a block's K is 8 tiles end to end, 32 KiB in bf16), as much KV; shape 2: 128 requests of
// cpu-small's (scenarios/models/cpu-small.yaml: 4 kv heads, head dim 64), the model the CPU
// engine serves, as much KV. block_tokens: the page size (16: vLLM's GPU default and the
// engine's; 128: vLLM's CPU backend with its optimized kernels, vllm/platforms/cpu.py).
std::optional<HeadlineDecode> PrepareHeadlineDecode(benchmark::State& state, KvDtype dtype,
                                                    int threads, DecodeWorkspace& workspace,
                                                    int shape = 0,
                                                    uint32_t block_tokens = kBlockTokens) {
  DecodeShape want{dtype, 256, 0, 0, 4096};
  if (shape == 1) want = DecodeShape{dtype, 64, 0, 0, 4096, 8, 128};
  if (shape == 2) want = DecodeShape{dtype, 128, 0, 0, 4096, 4, 64};
  want.block_tokens = block_tokens;
  DecodeSetup& setup = CachedDecodeSetup(want);
  DecodeAttentionParams p = DecodeParamsOf(setup, threads);
  PagedDecodeAttention(p, workspace);
  if (!VerifyDecodeRows(p, 2)) {
    state.SkipWithError("verify_failed");
    return std::nullopt;
  }
  const size_t logical = size_t{p.kv.batch_size} * setup.kv_end * KvBytesPerToken(p.kv.layout);
  return HeadlineDecode{&setup, p, logical};
}

// The headline decode figure as a fraction of the probe, measured in pairs: each iteration runs
// one probe pass (2 threads, one stream each, as ReadBandwidth/threads:2/streams:1) and, right
// after it, one decode pass over BM_PagedDecode's non-shared batch, and takes the ratio of their
// rates. Both passes take tens of milliseconds, so a pair sees the same machine; the VM this was
// written on moves its bandwidth by 0.6-1.8x within minutes, which a probe figure and a decode
// figure from different repetitions cannot separate from the kernel. Reported:
//   of_probe: the median of the per-pair ratios (decode KV bytes/s over probe bytes/s);
//   of_probe_p10, of_probe_p90: their spread;
//   probe_Bps: the probe's median rate over the same pairs.
// bytes_per_second is the decode pass alone (manual time). Args: dtype, threads, isa,
// prefetch_kib (the kernels' lookahead, SetDecodePrefetchBytes; 0 = the default, 16 KiB; rounded
// up to whole tiles, which are 2 KiB bf16 and 4 KiB fp32 here), block (tokens per page, as
// PrepareHeadlineDecode: 16, or 64 and 128 where larger pages make longer runs of KV).
void BM_DecodeOfProbe(benchmark::State& state) {
  const ScopedIsa isa(state, 2);
  if (state.error_occurred()) return;
  const auto dtype = static_cast<KvDtype>(state.range(0));
  const auto threads = static_cast<int>(state.range(1));
  const size_t prefetch_before = DecodePrefetchBytes();
  if (state.range(3) > 0) SetDecodePrefetchBytes(static_cast<size_t>(state.range(3)) << 10);
  DecodeWorkspace workspace;
  const std::optional<HeadlineDecode> decode = PrepareHeadlineDecode(
      state, dtype, threads, workspace, 0, static_cast<uint32_t>(state.range(4)));
  if (!decode) {
    SetDecodePrefetchBytes(prefetch_before);
    return;
  }
  const DecodeAttentionParams& p = decode->params;
  const size_t logical = decode->logical_bytes;
  std::vector<double> ratios, probe_rates;
  (void)ProbeWords();
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const Clock::time_point probe_start = Clock::now();
    const size_t probe_bytes = ReadProbePass(static_cast<size_t>(threads), 1);
    const Clock::time_point decode_start = Clock::now();
    PagedDecodeAttention(p, workspace);
    benchmark::ClobberMemory();
    const Clock::time_point decode_end = Clock::now();
    const double probe_s = std::chrono::duration<double>(decode_start - probe_start).count();
    const double decode_s = std::chrono::duration<double>(decode_end - decode_start).count();
    state.SetIterationTime(decode_s);
    const double probe_rate = static_cast<double>(probe_bytes) / probe_s;
    probe_rates.push_back(probe_rate);
    ratios.push_back(static_cast<double>(logical) / decode_s / probe_rate);
  }
  ReportDecode(state, logical, logical);
  state.counters["of_probe"] = Quantile(ratios, 0.5);
  state.counters["of_probe_p10"] = Quantile(ratios, 0.1);
  state.counters["of_probe_p90"] = Quantile(ratios, 0.9);
  state.counters["probe_Bps"] = benchmark::Counter(
      Quantile(probe_rates, 0.5), benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.SetLabel("verify=ok isa=" + IsaName() +
                 " prefetch=" + std::to_string(DecodePrefetchBytes() >> 10) + "KiB");
  SetDecodePrefetchBytes(prefetch_before);
}
BENCHMARK(BM_DecodeOfProbe)
    ->ArgNames({"bf16", "threads", "isa", "prefetch_kib", "block"})
    ->ArgsProduct({{0, 1}, {2}, {0, 2, 3, 4}, {0}, {16}})
    ->ArgsProduct({{0, 1}, {2}, {0}, {2, 4, 8, 16, 32}, {16}})
    ->ArgsProduct({{0, 1}, {2}, {0, 2, 3, 4}, {0}, {64, 128}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The read side of BM_DecodeOfProbe's batch without its arithmetic: `threads` threads each walk
// their share of the requests' blocks in the kernels' order ((block, kv head) tiles, K then V),
// summing every word as the probe does, and prefetching `hops` tiles ahead into L2 as the kernels
// do (DecodePrefetchBytes()). Blocks lie at random places in the pools (2 KiB tiles in bf16,
// 4 KiB in fp32 at this shape), so the hardware's stream prefetchers, which follow a sequential
// read within a 4 KiB page, get little to follow. Pattern 0: no software prefetch; 1: a tile's
// lines all at once as the tile starts (a burst); 2: one line ahead per line read (spread).
// Returns the bytes read.
size_t WalkDecodeBlocks(const DecodeSetup& setup, size_t threads, int pattern) {
  const PagedKvLayout& layout = setup.pools.layout;
  const size_t elem = KvDtypeBytes(layout.dtype);
  // The kernels' tile: up to kTileTokens rows of one kv head; a page of more rows is visited as
  // (rows, head) in token-then-head order (decode_attention_tile.cc, RunBatchesOverRange).
  const uint32_t tile_tokens = std::min(layout.block_tokens, attention_internal::kTileTokens);
  const size_t tiles_per_head = layout.block_tokens / tile_tokens;
  const size_t tile_bytes = size_t{tile_tokens} * layout.head_dim * elem;
  const size_t head_bytes = layout.TileElems() * elem;
  const size_t block_bytes = layout.BlockElems() * elem;
  const size_t hops = std::max<size_t>(1, (DecodePrefetchBytes() + tile_bytes - 1) / tile_bytes);
  const char* k_pool = setup.pools.k.get();
  const char* v_pool = setup.pools.v.get();
  const size_t requests = setup.tables.size();
  SumOnThreads(threads, [&](size_t t) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t r = t * requests / threads; r < (t + 1) * requests / threads; ++r) {
      const std::vector<uint32_t>& blocks = setup.tables[r];
      const size_t per_block = tiles_per_head * layout.kv_heads;
      const size_t tiles = blocks.size() * per_block;
      const auto tile_offset = [&](size_t i) {
        const size_t in_block = i % per_block;
        return blocks[i / per_block] * block_bytes + in_block % layout.kv_heads * head_bytes +
               in_block / layout.kv_heads * tile_bytes;
      };
      for (size_t i = 0; i < tiles; ++i) {
        const size_t ahead = i + hops < tiles ? tile_offset(i + hops) : tile_offset(i);
        if (pattern == 1) {
          for (size_t o = 0; o < tile_bytes; o += 64) {
            __builtin_prefetch(k_pool + ahead + o, 0, 2);
            __builtin_prefetch(v_pool + ahead + o, 0, 2);
          }
        }
        const size_t offset = tile_offset(i);
        for (const char* pool : {k_pool, v_pool}) {
          const auto* words = reinterpret_cast<const uint64_t*>(pool + offset);
          for (size_t w = 0; w < tile_bytes / 8; w += 8) {
            if (pattern == 2) __builtin_prefetch(pool + ahead + w * 8, 0, 2);
            a += words[w] + words[w + 4];
            b += words[w + 1] + words[w + 5];
            c += words[w + 2] + words[w + 6];
            d += words[w + 3] + words[w + 7];
          }
        }
      }
    }
    return a + b + c + d;
  });
  return requests * setup.tables[0].size() * block_bytes * 2;
}

// BM_DecodeOfProbe's pairs with a third pass between probe and decode: the block walk above. It
// separates what the decode's access pattern allows from what its arithmetic costs:
//   walk_of_probe: the walk's rate over the probe's (medians of per-iteration ratios; p10-p90);
//   decode_of_walk: the decode's rate over the walk's;
//   of_probe: the decode's over the probe's, as BM_DecodeOfProbe.
// Args: dtype, threads, pattern (WalkDecodeBlocks), isa (as BM_DecodeOfProbe), wide (the shape of
// PrepareHeadlineDecode: 0 the headline; 1 Llama-3-8B's, 4 KiB bf16 tiles in 32 KiB runs; 2
// cpu-small's, 2 KiB bf16 tiles in 8 KiB runs), block (tokens per page, as BM_DecodeOfProbe).
void BM_DecodeOfWalk(benchmark::State& state) {
  const ScopedIsa isa(state, 3);
  if (state.error_occurred()) return;
  const auto dtype = static_cast<KvDtype>(state.range(0));
  const auto threads = static_cast<int>(state.range(1));
  const auto pattern = static_cast<int>(state.range(2));
  DecodeWorkspace workspace;
  const std::optional<HeadlineDecode> headline =
      PrepareHeadlineDecode(state, dtype, threads, workspace, static_cast<int>(state.range(4)),
                            static_cast<uint32_t>(state.range(5)));
  if (!headline) return;
  const DecodeSetup& setup = *headline->setup;
  const DecodeAttentionParams& p = headline->params;
  const size_t logical = headline->logical_bytes;
  std::vector<double> walk_of_probe, decode_of_walk, decode_of_probe;
  (void)ProbeWords();
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  };
  for (auto _ : state) {
    const Clock::time_point probe_start = Clock::now();
    const size_t probe_bytes = ReadProbePass(static_cast<size_t>(threads), 1);
    const Clock::time_point walk_start = Clock::now();
    const size_t walk_bytes = WalkDecodeBlocks(setup, static_cast<size_t>(threads), pattern);
    const Clock::time_point decode_start = Clock::now();
    PagedDecodeAttention(p, workspace);
    benchmark::ClobberMemory();
    const Clock::time_point decode_end = Clock::now();
    state.SetIterationTime(seconds(decode_start, decode_end));
    const double probe = static_cast<double>(probe_bytes) / seconds(probe_start, walk_start);
    const double walk = static_cast<double>(walk_bytes) / seconds(walk_start, decode_start);
    const double decode = static_cast<double>(logical) / seconds(decode_start, decode_end);
    walk_of_probe.push_back(walk / probe);
    decode_of_walk.push_back(decode / walk);
    decode_of_probe.push_back(decode / probe);
  }
  ReportDecode(state, logical, logical);
  for (const auto& [name, values] :
       {std::pair<const char*, const std::vector<double>&>{"walk_of_probe", walk_of_probe},
        {"decode_of_walk", decode_of_walk},
        {"of_probe", decode_of_probe}}) {
    state.counters[name] = Quantile(values, 0.5);
    state.counters[std::string(name) + "_p10"] = Quantile(values, 0.1);
    state.counters[std::string(name) + "_p90"] = Quantile(values, 0.9);
  }
  state.SetLabel("verify=ok isa=" + IsaName() +
                 " prefetch=" + std::to_string(DecodePrefetchBytes() >> 10) + "KiB");
}
BENCHMARK(BM_DecodeOfWalk)
    ->ArgNames({"bf16", "threads", "pattern", "isa", "wide", "block"})
    ->ArgsProduct({{0, 1}, {1, 2}, {0, 1, 2}, {0}, {0}, {16}})
    ->ArgsProduct({{0, 1}, {2}, {2}, {0}, {1, 2}, {16}})
    ->ArgsProduct({{0, 1}, {2}, {2}, {0}, {0, 2}, {64, 128}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Cascade decode over the shared-prefix batch of BM_PagedDecode: one prefix pass per group, the
// suffixes by paged decode, the merge. Args: dtype, threads.
void BM_CascadeDecode(benchmark::State& state) {
  const ScopedIsa isa(state, 2);
  if (state.error_occurred()) return;
  const auto dtype = static_cast<KvDtype>(state.range(0));
  DecodeSetup& setup = CachedDecodeSetup(DecodeShape{dtype, 256, 8, 3584, 512});
  CascadeDecodeParams p{DecodeParamsOf(setup, static_cast<int>(state.range(1))),
                        setup.prefixes.View(setup.pools), setup.group_indptr.data(),
                        setup.group_rows.data()};
  CascadeWorkspace workspace;
  CascadeDecodeAttention(p, workspace);
  if (!VerifyDecodeRows(p.decode, 2)) {
    state.SkipWithError("verify_failed");
    return;
  }
  for (auto _ : state) {
    CascadeDecodeAttention(p, workspace);
    benchmark::ClobberMemory();
  }
  const size_t per_token = KvBytesPerToken(p.decode.kv.layout);
  const size_t requests = p.decode.kv.batch_size;
  const size_t read = (size_t{setup.groups} * setup.prefix_tokens +
                       requests * (setup.kv_end - setup.prefix_tokens)) *
                      per_token;
  ReportDecode(state, read, requests * setup.kv_end * per_token);
  state.SetLabel("verify=ok isa=" + IsaName());
}
BENCHMARK(BM_CascadeDecode)
    ->ArgNames({"bf16", "threads", "isa"})
    ->ArgsProduct({{0, 1}, {1, 2}, {0}})
    ->ArgsProduct({{0, 1}, {2}, {2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The tile step's own speed, with the KV in L2 (one request of 1024 tokens, one kv head, one
// thread): the ceiling above which memory, not arithmetic, limits decode. Args: dtype, head_dim,
// query heads per kv head.
void BM_DecodeInCache(benchmark::State& state) {
  const ScopedIsa isa(state, 3);
  if (state.error_occurred()) return;
  const auto dtype = static_cast<KvDtype>(state.range(0));
  const auto head_dim = static_cast<uint32_t>(state.range(1));
  const auto group = static_cast<uint32_t>(state.range(2));
  constexpr uint32_t kTokens = 1024;
  KvPools pools = MakePools(kTokens / kBlockTokens, 1, head_dim, dtype);
  std::vector<uint32_t> table(kTokens / kBlockTokens);
  std::iota(table.begin(), table.end(), 0u);
  std::vector<float> q(size_t{group} * head_dim, 0.5f), out(q.size()), lse(group);
  CsrTable csr;
  csr.Add(table, kTokens);
  DecodeAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.lse = lse.data();
  p.kv = csr.View(pools);
  p.num_heads = group;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  DecodeWorkspace workspace;
  PagedDecodeAttention(p, workspace);
  if (!VerifyDecodeRows(p, 1)) {
    state.SkipWithError("verify_failed");
    return;
  }
  for (auto _ : state) {
    PagedDecodeAttention(p, workspace);
    benchmark::ClobberMemory();
  }
  const size_t bytes = kTokens * KvBytesPerToken(p.kv.layout);
  ReportDecode(state, bytes, bytes);
  state.SetLabel("verify=ok isa=" + IsaName());
}
BENCHMARK(BM_DecodeInCache)
    ->ArgNames({"bf16", "dim", "group", "isa"})
    ->ArgsProduct({{0, 1}, {64, 128}, {1, 4, 8}, {0}})
    ->ArgsProduct({{0, 1}, {64, 128}, {4}, {1, 2, 3, 4}})
    ->Unit(benchmark::kMicrosecond);

// --- Shared-prefix pass ---------------------------------------------------------------------

// One group's prefix pass: `queries` requests × 8 query heads (2 kv heads) over an 8192-token
// prefix (16 MiB fp32 at head dim 128: in the LLC; the pass is compute-bound once a group has a
// few queries). Args: dtype, head_dim, queries, threads.
void BM_SharedPrefixPass(benchmark::State& state) {
  const ScopedIsa isa(state, 4);
  if (state.error_occurred()) return;
  const auto dtype = static_cast<KvDtype>(state.range(0));
  const auto head_dim = static_cast<uint32_t>(state.range(1));
  const auto queries = static_cast<uint32_t>(state.range(2));
  constexpr uint32_t kPrefixTokens = 8192, kKvHeads = 2, kHeads = 8;
  KvPools pools = MakePools(kPrefixTokens / kBlockTokens, kKvHeads, head_dim, dtype);
  std::vector<uint32_t> table(kPrefixTokens / kBlockTokens);
  std::iota(table.begin(), table.end(), 0u);
  Rng rng(7);
  for (size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[rng.Uniform(i)]);
  std::vector<float> q(size_t{queries} * kHeads * head_dim), out(q.size()), lse(queries * kHeads);
  for (float& x : q) x = static_cast<float>(rng.NextDouble() * 2 - 1);
  CsrTable csr;
  csr.Add(table, kPrefixTokens);
  SharedPrefixParams p;
  p.q = q.data();
  p.out = out.data();
  p.lse = lse.data();
  p.kv = csr.View(pools);
  p.num_queries = queries;
  p.num_heads = kHeads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.num_threads = static_cast<int>(state.range(3));
  SharedPrefixAttention(p);
  SharedPrefixParams sample = p;
  sample.num_queries = 1;
  std::vector<float> want(size_t{kHeads} * head_dim), want_lse(kHeads);
  const std::vector<float> reference_q = ReferenceQ(p.q, want.size(), p.scale, dtype);
  sample.q = reference_q.data();
  sample.out = want.data();
  sample.lse = want_lse.data();
  ReferenceSharedPrefixAttention(sample);
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(want[i] - out[i]) <= VerifyTolerance(dtype))) {
      state.SkipWithError("verify_failed");
      return;
    }
  }
  for (auto _ : state) {
    SharedPrefixAttention(p);
    benchmark::ClobberMemory();
  }
  const auto iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kPrefixTokens * KvBytesPerToken(p.kv.layout)));
  state.counters["GFLOPs"] =
      benchmark::Counter(iterations * 4.0 * queries * kHeads * kPrefixTokens * head_dim * 1e-9,
                         benchmark::Counter::kIsRate);
  state.SetLabel("verify=ok isa=" + IsaName());
}
BENCHMARK(BM_SharedPrefixPass)
    ->ArgNames({"bf16", "dim", "queries", "threads", "isa"})
    ->ArgsProduct({{0, 1}, {64, 128}, {1, 8, 32}, {2}, {0}})
    ->Args({0, 128, 32, 1, 0})
    ->ArgsProduct({{0, 1}, {128}, {32}, {2}, {2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// --- Prefill --------------------------------------------------------------------------------

// One request's chunk of 512 new tokens after `context` cached ones, 8 query heads over 2 kv
// heads, fp32. Items are query tokens; GFLOPs counts the causal QK and PV work.
void BM_Prefill(benchmark::State& state) {
  const ScopedIsa isa(state, 3);
  if (state.error_occurred()) return;
  const auto head_dim = static_cast<uint32_t>(state.range(0));
  const auto context = static_cast<uint32_t>(state.range(1));
  constexpr uint32_t kChunk = 512, kKvHeads = 2, kHeads = 8;
  const uint32_t total = context + kChunk;
  KvPools pools =
      MakePools((total + kBlockTokens - 1) / kBlockTokens, kKvHeads, head_dim, KvDtype::kFp32);
  std::vector<uint32_t> table(pools.layout.num_blocks);
  std::iota(table.begin(), table.end(), 0u);
  Rng rng(9);
  for (size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[rng.Uniform(i)]);
  std::vector<float> q(size_t{kChunk} * kHeads * head_dim), out(q.size());
  for (float& x : q) x = static_cast<float>(rng.NextDouble() * 2 - 1);
  CsrTable csr;
  csr.Add(table, total);
  const uint32_t qo_indptr[] = {0, kChunk};
  PrefillAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.kv = csr.View(pools);
  p.qo_indptr = qo_indptr;
  p.num_heads = kHeads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.num_threads = static_cast<int>(state.range(2));
  PrefillAttention(p);
  // The first rows of a causal chunk depend only on the tokens before them: check 8 of them.
  PrefillAttentionParams sample = p;
  const uint32_t sample_len = 8;
  std::vector<float> want(size_t{sample_len} * kHeads * head_dim);
  CsrTable sample_csr;
  sample_csr.Add(table, context + sample_len);
  const uint32_t sample_qo_indptr[] = {0, sample_len};
  sample.kv = sample_csr.View(pools);
  sample.qo_indptr = sample_qo_indptr;
  sample.out = want.data();
  ReferencePrefillAttention(sample);
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(want[i] - out[i]) <= kVerifyTolerance)) {
      state.SkipWithError("verify_failed");
      return;
    }
  }
  for (auto _ : state) {
    PrefillAttention(p);
    benchmark::ClobberMemory();
  }
  // Σ_i (context + i + 1) keys per query head.
  const double keys = double{kChunk} * context + double{kChunk} * (kChunk + 1) / 2;
  const auto iterations = static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kChunk);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(total * KvBytesPerToken(p.kv.layout)));
  state.counters["GFLOPs"] = benchmark::Counter(iterations * 4.0 * kHeads * keys * head_dim * 1e-9,
                                                benchmark::Counter::kIsRate);
  state.SetLabel("verify=ok isa=" + IsaName());
}
BENCHMARK(BM_Prefill)
    ->ArgNames({"dim", "context", "threads", "isa"})
    ->ArgsProduct({{64, 128}, {0, 1536}, {1, 2}, {0}})
    ->ArgsProduct({{128}, {1536}, {2}, {2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace feather::hw
