// Benchmarks of hw::CpuEngine: one decode step of the cpu-small model (scenarios/models/
// cpu-small.yaml, built in) over synthetic batches (hw/synthetic_batch.h) of B requests with
// 1,000-token contexts, in G prefix groups (0 = nothing shared; shared prefix 960 tokens and a
// 40-token private suffix otherwise), vLLM's cascade attention on or off. The same plan runs
// every iteration (steady state: each step rewrites its new tokens' KV at the same positions);
// the KV pools hold zeros — reading them costs what reading any values costs.
//
// Counters, per step: ms (wall time of Execute) and each term's ms and share of the total
// (gemm, decode, cascade, prefill, overhead; kv_reuse is always 0 on the CPU), cascade (1 when
// the step used it). items/s = decode tokens/s; bytes/s = weights streamed + KV read per step.
//
// The engine runs its GEMMs with Eigen (as `feather run --set engine=cpu` does, cli/engines.cc);
// a second grid uses OpenBLAS for comparison.
//
// Run: build/tests/cpu_engine_benchmark (arguments: requests, groups, cascade, backend
// 0 eigen | 1 blas, block: tokens per KV page), e.g. --benchmark_filter='BM_DecodeStep/requests:128/'.
// The page sizes side by side (16, the shipped scenarios'; 128, vLLM's CPU backend default;
// hw/README.md "Page size"), repetitions interleaved:
//   cpu_engine_benchmark --benchmark_filter='BM_DecodeStep/requests:(32|128)/groups:0/.*/backend:0/'
//     --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//     --benchmark_report_aggregates_only=true
// On a shared machine, give it the cores first: the numbers assume no other process competes.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "hw/cpu_engine.h"
#include "hw/gemm.h"
#include "hw/synthetic_batch.h"
#include "sim/io/embedded_files.h"
#include "sim/engine/model_config.h"
#include "sim/io/model_config_yaml.h"

namespace feather::hw {
namespace {

constexpr uint32_t kContextTokens = 1000;
constexpr uint32_t kSharedPrefixTokens = 960;
constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kMaxRequests = 128;
// Enough for the largest batch without sharing: 128 × ceil(1001 / block_tokens) blocks.
constexpr uint64_t PoolBlocks(uint32_t block_tokens) {
  return kMaxRequests * ((kContextTokens + block_tokens) / block_tokens);
}
constexpr uint64_t kPoolBlocks = PoolBlocks(kBlockTokens);

const ModelConfig& CpuSmall() {
  static const ModelConfig model = [] {
    const std::string path = "scenarios/models/cpu-small.yaml";
    return ParseModelConfig(FindEmbeddedFile(path).value_or(""), "built-in:" + path);
  }();
  return model;
}

// One engine per (cascade, backend, page size), kept across benchmarks: building one allocates
// ~250 MB of weights and ~1 GB of KV pool.
CpuEngine& EngineFor(bool cascade, GemmBackend backend, uint32_t block_tokens = kBlockTokens) {
  static std::map<std::tuple<bool, GemmBackend, uint32_t>, std::unique_ptr<CpuEngine>> engines;
  auto& slot = engines[{cascade, backend, block_tokens}];
  if (!slot) {
    // Only one engine alive at a time, to keep the benchmark's memory bounded.
    engines.clear();
    CpuEngineOptions options;
    options.cascade_attention = cascade;
    options.gemm_backend = backend;
    auto& fresh = engines[{cascade, backend, block_tokens}];
    fresh = std::make_unique<CpuEngine>(CpuSmall(), PoolBlocks(block_tokens), block_tokens,
                                        options);
    return *fresh;
  }
  return *slot;
}

void BM_DecodeStep(benchmark::State& state) {
  const auto requests = static_cast<uint32_t>(state.range(0));
  const auto groups = static_cast<uint32_t>(state.range(1));
  const bool cascade = state.range(2) != 0;
  const auto backend = static_cast<GemmBackend>(state.range(3));
  const auto block_tokens = static_cast<uint32_t>(state.range(4));
  SyntheticBatchSpec spec;
  spec.block_tokens = block_tokens;
  spec.decode_requests = requests;
  spec.groups = groups;
  spec.shared_prefix_tokens = groups > 0 ? kSharedPrefixTokens : 0;
  spec.suffix_tokens = kContextTokens - spec.shared_prefix_tokens;
  spec.pool_blocks = PoolBlocks(block_tokens);
  const SyntheticBatch batch = MakeSyntheticBatch(spec);
  CpuEngine& engine = EngineFor(cascade, backend, block_tokens);

  (void)engine.Execute(batch.plan);  // warm-up: first touch of buffers, RoPE table
  std::array<double, kNumStepTerms> term_ns{};
  double total_ns = 0;
  bool used = false;
  for (auto _ : state) {
    const StepTiming t = engine.Execute(batch.plan);
    for (size_t k = 0; k < kNumStepTerms; ++k) term_ns[k] += static_cast<double>(t.term_ns[k]);
    total_ns += static_cast<double>(t.total_ns);
    used = t.cascade_used;
    benchmark::DoNotOptimize(engine.last_argmax().data());
  }
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["ms"] = total_ns / iterations * 1e-6;
  for (const StepTerm term : {StepTerm::kGemm, StepTerm::kDecodeAttention, StepTerm::kCascadePrefix,
                              StepTerm::kOverhead}) {
    const auto k = static_cast<size_t>(term);
    const std::string name(StepTermName(term));
    state.counters[name + "_ms"] = term_ns[k] / iterations * 1e-6;
    state.counters[name + "_share"] = total_ns > 0 ? term_ns[k] / total_ns : 0;
  }
  state.counters["cascade"] = used ? 1 : 0;
  const ModelConfig& m = CpuSmall();
  const double kv_bytes =
      static_cast<double>(batch.plan.decode_kv_tokens) * static_cast<double>(m.KvBytesPerToken());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * requests);
  state.SetBytesProcessed(
      static_cast<int64_t>(iterations * (static_cast<double>(m.StepWeightBytes()) + kv_bytes)));
  state.SetLabel(std::string(GemmBackendName(backend)) + (used ? " cascade" : ""));
}

void Grid(benchmark::internal::Benchmark* bench) {
  for (const int64_t groups : {0, 5, 1}) {
    for (const int64_t cascade : {1, 0}) {
      if (groups != 1 && cascade == 0) continue;  // no common prefix: cascade never applies
      for (const int64_t requests : {1, 8, 32, 128}) {
        bench->Args({requests, groups, cascade, static_cast<int64_t>(GemmBackend::kEigen), 16});
      }
    }
  }
  // OpenBLAS on the no-sharing grid: its pthread workers and the kernels' OpenMP workers spin
  // on the same cores between calls (see cli/engines.cc for what that costs).
  for (const int64_t requests : {1, 8, 32, 128}) {
    bench->Args({requests, 0, 1, static_cast<int64_t>(GemmBackend::kBlas), 16});
  }
  // vLLM's CPU page size beside the default one, without sharing (where decode attention's share
  // of the step is largest).
  for (const int64_t requests : {32, 128}) {
    bench->Args({requests, 0, 1, static_cast<int64_t>(GemmBackend::kEigen), 128});
  }
}

BENCHMARK(BM_DecodeStep)
    ->Apply(Grid)
    ->ArgNames({"requests", "groups", "cascade", "backend", "block"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One decode step of `requests` requests without sharing, timed after a step of another kind:
// predecessor 0 = the same step, 1 = a decode step of 128 requests, 2 = a 512-token prefill chunk
// after 1,000 cached tokens. Calibration times each grid point after a different one (its
// interleaved passes); serving runs a step after one nearly like it. The gap between
// predecessors is what that ordering costs the rows. runs_before = k > 0 (with the prefill
// predecessor) runs the timed step k more times, untimed, between the predecessor and the timed
// run: whether an effect of the predecessor outlasts one step (calibrate --primed primes once).
// Measured: Zen 5 VM (2026-11-29) 4.99 / 5.32 / 5.86 ms after predecessor 0 / 1 / 2; Zen 4 VM
// (2026-12-01, 8 repetitions, cv 10-21 %) 7.38 / 7.56 / 7.66 ms: within the noise there.
void BM_StepAfter(benchmark::State& state) {
  const auto requests = static_cast<uint32_t>(state.range(0));
  const auto predecessor = static_cast<int>(state.range(1));
  SyntheticBatchSpec spec;
  spec.block_tokens = kBlockTokens;
  spec.decode_requests = requests;
  spec.suffix_tokens = kContextTokens;
  spec.pool_blocks = kPoolBlocks;
  const SyntheticBatch timed = MakeSyntheticBatch(spec);
  SyntheticBatchSpec before = spec;
  if (predecessor == 1) {
    before.decode_requests = kMaxRequests;
  } else if (predecessor == 2) {
    before.decode_requests = 0;
    before.prefill_requests = 1;
    before.prefill_context_tokens = kContextTokens;
    before.prefill_chunk_tokens = 512;
  }
  before.seed = 2;
  const SyntheticBatch first = MakeSyntheticBatch(before);
  CpuEngine& engine = EngineFor(true, GemmBackend::kEigen);
  (void)engine.Execute(first.plan);
  (void)engine.Execute(timed.plan);
  const auto runs_before = static_cast<int>(state.range(2));
  double gemm_ns = 0;
  for (auto _ : state) {
    (void)engine.Execute(predecessor == 0 ? timed.plan : first.plan);
    for (int k = 0; k < runs_before; ++k) (void)engine.Execute(timed.plan);
    const StepTiming t = engine.Execute(timed.plan);
    gemm_ns += static_cast<double>(t.term_ns[static_cast<size_t>(StepTerm::kGemm)]);
    state.SetIterationTime(static_cast<double>(t.total_ns) * 1e-9);
  }
  state.counters["gemm_ms"] = gemm_ns / static_cast<double>(state.iterations()) * 1e-6;
}

BENCHMARK(BM_StepAfter)
    ->ArgsProduct({{1, 8}, {0, 1, 2}, {0}})
    ->ArgsProduct({{1}, {2}, {1, 2, 4, 8}})
    ->ArgNames({"requests", "predecessor", "runs_before"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

}  // namespace
}  // namespace feather::hw
