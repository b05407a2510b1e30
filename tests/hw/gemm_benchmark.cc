// Benchmarks of hw/gemm.h: Eigen against OpenBLAS over the linear-layer shapes of the CPU engine
// (m tokens × k inputs → n outputs: attention output, QKV, fused gate/up, down projection and LM
// head of the engine's model: hidden 1024, intermediate 2816, vocab 8192), one and two threads.
// Weights stay warm in the caches between iterations where they fit (steady state of a repeated
// layer, not a cold pass over a whole model). Reports items/s as FLOP/s (2·m·n·k per product)
// and bytes/s as the bytes of A, B and C touched once.
//
// Run: <build>/tests/gemm_benchmark [--benchmark_filter=...]; the arguments are
// backend (0 eigen, 1 blas), m, k, n, threads. On a shared machine, run it alone (hw/README.md,
// "GEMM backend", says how the published figures were taken). BM_GemmEigenIsa puts Eigen's AVX2
// and AVX-512 builds side by side (isa 1 avx2, 2 avx512; skipped where the CPU lacks one):
//   gemm_benchmark --benchmark_filter=BM_GemmEigenIsa --benchmark_repetitions=5
//     --benchmark_enable_random_interleaving --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hw/gemm.h"
#include "hw/probes.h"

namespace feather::hw {
namespace {

std::vector<float> RandomMatrix(size_t elements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0F, 1.0F);
  std::vector<float> out(elements);
  for (float& x : out) x = value(rng);
  return out;
}

void RunGemm(benchmark::State& state, GemmBackend backend) {
  const auto m = static_cast<uint32_t>(state.range(1));
  const auto k = static_cast<uint32_t>(state.range(2));
  const auto n = static_cast<uint32_t>(state.range(3));
  const auto threads = static_cast<int>(state.range(4));
  const auto a = RandomMatrix(static_cast<size_t>(m) * k, 1);
  const auto b = RandomMatrix(static_cast<size_t>(k) * n, 2);
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (auto _ : state) {
    Gemm(backend, m, n, k, a.data(), b.data(), c.data(), threads);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  const auto iterations = static_cast<int64_t>(state.iterations());
  state.SetItemsProcessed(iterations * 2 * int64_t{m} * n * k);
  state.SetBytesProcessed(iterations * 4 * (int64_t{m} * k + int64_t{k} * n + int64_t{m} * n));
  state.SetLabel(GemmKernelName(backend));
}

void BM_Gemm(benchmark::State& state) { RunGemm(state, static_cast<GemmBackend>(state.range(0))); }

// Eigen with its build forced: args isa (1 avx2, 2 avx512), m, k, n, threads.
void BM_GemmEigenIsa(benchmark::State& state) {
  const auto isa = static_cast<GemmIsa>(state.range(0));
  if (!SetGemmIsaForTesting(isa)) {
    state.SkipWithError(
        ("skipped: this CPU cannot run Eigen's " + std::string(GemmIsaName(isa)) + " build")
            .c_str());
    return;
  }
  RunGemm(state, GemmBackend::kEigen);
  (void)SetGemmIsaForTesting(GemmIsa::kAuto);
}

// (k, n) of the engine's linear layers.
constexpr int64_t kLayerShapes[][2] = {
    {1024, 1024},  // attention output projection
    {1024, 1536},  // fused QKV (GQA: 1024 query + 2 × 256 key/value)
    {1024, 5632},  // fused gate + up (2 × 2816)
    {2816, 1024},  // down projection
    {1024, 8192},  // LM head
};

void EngineShapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"backend", "m", "k", "n", "threads"});
  for (const int64_t threads : {1, 2}) {
    for (const int64_t m : {1, 8, 32, 128, 512}) {
      for (const auto& kn : kLayerShapes) {
        for (const int64_t backend : {0, 1}) bench->Args({backend, m, kn[0], kn[1], threads});
      }
    }
  }
}

BENCHMARK(BM_Gemm)->Apply(EngineShapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

void EigenIsaShapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"isa", "m", "k", "n", "threads"});
  for (const int64_t m : {1, 8, 32, 128, 512}) {
    for (const auto& kn : kLayerShapes) {
      for (const int64_t isa : {1, 2}) bench->Args({isa, m, kn[0], kn[1], 2});
    }
  }
}

BENCHMARK(BM_GemmEigenIsa)->Apply(EigenIsaShapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The engine's rhythm: a GEMM, then a short OpenMP kernel (64 K floats, about an attention step
// of a small batch), on the same threads. With OpenBLAS two thread pools take turns on the cores
// and each spins after its work; Eigen runs on the OpenMP team itself. Arguments as BM_Gemm;
// items/s counts the GEMM's FLOPs only, the time is the pair's.
void BM_GemmThenOpenMpStep(benchmark::State& state) {
  const auto backend = static_cast<GemmBackend>(state.range(0));
  const auto m = static_cast<uint32_t>(state.range(1));
  const auto k = static_cast<uint32_t>(state.range(2));
  const auto n = static_cast<uint32_t>(state.range(3));
  const auto threads = static_cast<int>(state.range(4));
  const auto a = RandomMatrix(static_cast<size_t>(m) * k, 1);
  const auto b = RandomMatrix(static_cast<size_t>(k) * n, 2);
  std::vector<float> c(static_cast<size_t>(m) * n);
  std::vector<float> step(size_t{1} << 16, 1.0F);
  for (auto _ : state) {
    Gemm(backend, m, n, k, a.data(), b.data(), c.data(), threads);
    OpenMpStep(step.data(), step.size(), threads);
    benchmark::DoNotOptimize(c.data());
    benchmark::DoNotOptimize(step.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2 * int64_t{m} * n * k);
  state.SetLabel(std::string(GemmBackendName(backend)));
}

void AlternatingShapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"backend", "m", "k", "n", "threads"});
  for (const int64_t threads : {1, 2}) {
    for (const int64_t m : {1, 8, 128}) {
      for (const int64_t backend : {0, 1}) bench->Args({backend, m, 1024, 1536, threads});
    }
  }
}

BENCHMARK(BM_GemmThenOpenMpStep)
    ->Apply(AlternatingShapes)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Token-count scan (issue 20 item 3): the fused gate + up product of the engine's model at every
// m from 24 to 72, Eigen, two threads. The serving loop runs the GEMMs at whatever token count a
// step has; calibration samples a grid. Compare a multiple of 8 with its neighbours (e.g. m 63
// and 64) to see how far the time is from linear in m.
void TokenScan(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"backend", "m", "k", "n", "threads"});
  for (int64_t m = 24; m <= 72; ++m) bench->Args({0, m, 1024, 5632, 2});
}

BENCHMARK(BM_Gemm)
    ->Name("BM_GemmTokenScan")
    ->Apply(TokenScan)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// One decode step's linear layers of the engine's model, weights from DRAM: the four products
// of each of 4 layers (QKV, output, gate + up, down) and the LM head, each over weights of its
// own (214 MB in all, ≫ the LLC, so every product streams its B from memory as the engine's
// steps do; the warm-cache benchmarks above do not show this). Args: skinny (the rows up to
// which feather's skinny kernel runs instead of Eigen's product, SetGemmSkinnyRows:
// 0 = Eigen's always, 1 = kGemmSkinnyRowsAuto, else that many), m (the step's tokens), threads.
// bytes_per_second: weight bytes per second. Side by side:
//   gemm_benchmark --benchmark_filter=BM_GemmStep --benchmark_repetitions=3
//     --benchmark_enable_random_interleaving --benchmark_report_aggregates_only=true
// (FEATHER_GEMM_ISA=avx2 for the AVX2 build).
struct StepLayer {
  uint32_t k, n;
};
const std::vector<StepLayer>& StepLayers() {
  static const std::vector<StepLayer> kStep = [] {
    std::vector<StepLayer> layers;
    for (int l = 0; l < 4; ++l) {
      for (const auto& kn : {StepLayer{1024, 1536}, StepLayer{1024, 1024}, StepLayer{1024, 5632},
                             StepLayer{2816, 1024}}) {
        layers.push_back(kn);
      }
    }
    layers.push_back({1024, 8192});
    return layers;
  }();
  return kStep;
}

void BM_GemmStep(benchmark::State& state) {
  const auto skinny =
      state.range(0) == 1 ? kGemmSkinnyRowsAuto : static_cast<uint32_t>(state.range(0));
  const auto m = static_cast<uint32_t>(state.range(1));
  const auto threads = static_cast<int>(state.range(2));
  using Layer = StepLayer;
  const std::vector<Layer>& kStep = StepLayers();
  static const std::vector<std::vector<float>> kWeights = [] {
    std::vector<std::vector<float>> weights;
    uint32_t seed = 3;
    for (const StepLayer& layer : StepLayers()) {
      weights.push_back(RandomMatrix(static_cast<size_t>(layer.k) * layer.n, seed++));
    }
    return weights;
  }();
  const auto a = RandomMatrix(static_cast<size_t>(m) * 2816, 1);
  std::vector<float> c(static_cast<size_t>(m) * 8192);
  const uint32_t before = SetGemmSkinnyRows(skinny);
  int64_t bytes = 0;
  for (const Layer& layer : kStep) bytes += int64_t{4} * layer.k * layer.n;
  for (auto _ : state) {
    for (size_t i = 0; i < kStep.size(); ++i) {
      Gemm(GemmBackend::kEigen, m, kStep[i].n, kStep[i].k, a.data(), kWeights[i].data(), c.data(),
           threads);
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  (void)SetGemmSkinnyRows(before);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.SetLabel(GemmKernelName(GemmBackend::kEigen));
}
BENCHMARK(BM_GemmStep)
    ->ArgNames({"skinny", "m", "threads"})
    ->ArgsProduct({{0, 1, 16}, {1, 2, 4, 8, 12, 16, 32, 64, 128}, {2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The same step with every weight packed (PackedB) and multiplied by GemmPackedB: the cpu
// engine's path for steps of 2 to GemmSkinnyRows tokens. Side by side with BM_GemmStep:
//   gemm_benchmark --benchmark_filter='BM_GemmStep' --benchmark_repetitions=3
//     --benchmark_enable_random_interleaving --benchmark_report_aggregates_only=true
void BM_GemmStepPacked(benchmark::State& state) {
  const auto m = static_cast<uint32_t>(state.range(0));
  const auto threads = static_cast<int>(state.range(1));
  const std::vector<StepLayer>& step = StepLayers();
  static const std::vector<PackedB> kPacked = [] {
    std::vector<PackedB> packed;
    uint32_t seed = 3;
    for (const StepLayer& layer : StepLayers()) {
      const std::vector<float> b = RandomMatrix(static_cast<size_t>(layer.k) * layer.n, seed++);
      packed.emplace_back(b.data(), layer.k, layer.n);
    }
    return packed;
  }();
  const auto a = RandomMatrix(static_cast<size_t>(m) * 2816, 1);
  std::vector<float> c(static_cast<size_t>(m) * 8192);
  int64_t bytes = 0;
  for (const StepLayer& layer : step) bytes += int64_t{4} * layer.k * layer.n;
  for (auto _ : state) {
    for (const PackedB& b : kPacked) GemmPackedB(m, a.data(), b, c.data(), threads);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.SetLabel(GemmKernelName(GemmBackend::kEigen) + " packed");
}
BENCHMARK(BM_GemmStepPacked)
    ->ArgNames({"m", "threads"})
    ->ArgsProduct({{1, 2, 4, 8, 12, 16, 32, 64, 128}, {2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace feather::hw
