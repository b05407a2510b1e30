// probes.h: quick measurements of what this machine can do — memory bandwidth (read, STREAM copy
// and triad) and dense fp32 GEMM throughput — for calibration tables and `feather info`-style
// reports.
//
// Every probe runs its kernel a few times and reports the best repetition (the machine's
// capability, as STREAM does) together with the spread over repetitions (min / median / max),
// so a noisy neighbour shows up as a wide spread rather than as a silently low figure.
// Bandwidths follow STREAM's counting convention: bytes the program names (read 8, copy 16,
// triad 24 bytes per element), not the extra write-allocate traffic of the stores.
//
// Costs (defaults, 2-core Zen 3 VM): each bandwidth probe allocates and touches its arrays once
// (3 × 256 MiB for triad; ~0.3–0.5 s of page faults) then runs `repetitions` passes, about
// 1–1.5 s in all. A GEMM probe warms up, sizes a batch of calls to ~25 ms (timing doubling
// batches until one lasts ~6 ms) and times `repetitions` batches: ~0.2 s per engine shape. The
// peak probe runs three square sizes with 3 repetitions each: ~1 s on one core. The Quick()
// options (small arrays and sizes, 3 short repetitions) take < 0.3 s each and are meant for
// tests and CI, where the figures are only checked for plausibility.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "hw/gemm.h"

namespace feather::hw {

// The distribution of one figure (bytes/s or FLOP/s) over the repetitions of a probe.
struct Spread {
  double min = 0;
  double median = 0;
  double max = 0;  // the best repetition; equals the probe's reported figure
};

// Whether a probe checked the result it timed (CUTLASS profiler style): a point that failed
// verification is reported as such, never silently timed.
enum class Verification : uint8_t { kOk, kVerifyFailed, kSkipped };
[[nodiscard]] std::string_view VerificationName(Verification verification);  // ok | ...

struct BandwidthOptions {
  size_t array_bytes = size_t{256} << 20;  // per array; keep ≫ the last-level cache
  int num_threads = 0;                     // 0: every CPU this process may use
  int repetitions = 5;
  // Read probe only: how many sequential streams each thread reads at once. 1 (STREAM's order):
  // each thread sums its share front to back. S > 1 (at most kMaxReadStreams) splits the share
  // into S equal parts and reads a cache line of each in turn, as a GEMV reads several weight
  // columns or a decode kernel several KV blocks. One stream a core can fall well short of the
  // memory's bandwidth, since the prefetchers keep only so many lines of one stream in flight:
  // on the 2-vCPU Intel Xeon VM of 2026-12-03 (105 MiB L3) 840 MiB read at 14.7 GB/s as one
  // stream a thread, 17.4-19.7 as 2, 22.2 as 4 and 22.7-25.5 as 8 (results/validation/
  // issue-20-weight-stream).
  int streams_per_thread = 1;
  // Small arrays and few repetitions: < 0.3 s, for tests. Figures then include cache effects.
  [[nodiscard]] static BandwidthOptions Quick();
};

struct BandwidthResult {
  double bytes_per_s = 0;  // best repetition, STREAM counting
  size_t array_bytes = 0;  // per array
  int arrays = 0;          // 1 read, 2 copy, 3 triad
  int num_threads = 0;     // threads actually used
  int repetitions = 0;
  int streams_per_thread = 1;  // the read probe's streams a thread (BandwidthOptions)
  Spread spread;               // of bytes/s
  Verification verification = Verification::kSkipped;
};

inline constexpr int kMaxReadStreams = 64;

// Sum of one array of doubles (pure load stream). Counts 8 bytes per element.
[[nodiscard]] BandwidthResult MeasureReadBandwidth(const BandwidthOptions& options = {});
// STREAM copy c[i] = a[i]. Counts 16 bytes per element.
[[nodiscard]] BandwidthResult MeasureStreamCopy(const BandwidthOptions& options = {});
// STREAM triad a[i] = b[i] + s·c[i]. Counts 24 bytes per element.
[[nodiscard]] BandwidthResult MeasureStreamTriad(const BandwidthOptions& options = {});

struct GemmProbeOptions {
  int repetitions = 5;
  double seconds_per_repetition = 0.025;  // a repetition is a batch of calls about this long
  // Time GemmPackedB on B packed once (hw/gemm.h PackedB; needs AVX2 + FMA) instead of Gemm.
  bool packed = false;
  [[nodiscard]] static GemmProbeOptions Quick();  // 3 repetitions of ~5 ms
};

struct GemmFlopsResult {
  double flops_per_s = 0;  // best repetition, 2·m·n·k per product
  GemmBackend backend = GemmBackend::kBlas;
  uint32_t m = 0, n = 0, k = 0;
  int num_threads = 0;
  int repetitions = 0;
  int64_t calls_per_repetition = 0;
  bool packed = false;  // timed GemmPackedB (GemmProbeOptions::packed)
  Spread spread;        // of FLOP/s
  // Sampled entries of C compared with double-precision dot products after the timing.
  Verification verification = Verification::kSkipped;
};

// FLOP/s of Gemm(backend, m, n, k, ..., num_threads) on warm operands (B stays in the caches
// where it fits: the steady state of a layer run many times, not a cold pass over a model).
[[nodiscard]] GemmFlopsResult MeasureGemmFlops(GemmBackend backend, uint32_t m, uint32_t n,
                                               uint32_t k, int num_threads,
                                               const GemmProbeOptions& options = {});

// The best FLOP/s over a few large square products (the machine's practical GEMM peak for
// `backend`; where a cpu engine on `backend` packs its weights, DefaultPackedWeights, the packed
// kernel's products too, whichever is faster: the engine's GEMMs are the packed kernel's, which
// outran Eigen's square products by a few percent on the Zen 5 VM). Default sizes 512, 1024, 1536
// (Zen 3 reaches its plateau by 1024); Quick() probes 256 and 512 only.
struct PeakGemmOptions {
  std::vector<uint32_t> sizes = {512, 1024, 1536};
  GemmProbeOptions probe = {.repetitions = 3, .seconds_per_repetition = 0.025};
  [[nodiscard]] static PeakGemmOptions Quick();
};
// Returns the result of the best size, or the first one whose verification failed.
[[nodiscard]] GemmFlopsResult MeasurePeakGemmFlops(GemmBackend backend, int num_threads,
                                                   const PeakGemmOptions& options = {});

// One short OpenMP kernel (x[i] = 0.5·x[i] + 1 over `count` floats, static schedule on
// `num_threads` threads): the kind of parallel step the CPU engine runs between its GEMMs. The
// GEMM benchmarks alternate it with Gemm() to see how each backend's threads share the cores
// with an OpenMP team. O(count); one fork/join.
void OpenMpStep(float* x, size_t count, int num_threads);

// The thread count the probes use for num_threads = 0: the CPUs this process may run on.
[[nodiscard]] int UsableThreads();

// Min, median (mean of the middle two for an even count) and max of `values`; all 0 if empty.
[[nodiscard]] Spread SpreadOf(std::vector<double> values);

}  // namespace feather::hw
