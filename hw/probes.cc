// probes.cc: the bandwidth and GEMM probes of hw/probes.h.
//
// Bandwidth kernels are OpenMP loops with a static schedule, and the arrays are first touched
// with that same schedule, so each thread streams the pages it faulted in (STREAM's rule; it
// matters on multi-socket machines). Arrays are 2 MiB aligned and advised for transparent huge
// pages: fewer TLB misses in the timed loops and fewer, cheaper page faults at setup.
#include "hw/probes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>

#include "base/cpus.h"
#include "hw/aligned_memory.h"

namespace feather::hw {
namespace {

using Clock = std::chrono::steady_clock;

// Triad's scalar (STREAM's value).
constexpr double kTriadScalar = 3.0;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
using DoubleArray = std::unique_ptr<double[], FreeDeleter>;

// An uninitialised array of `count` doubles, 2 MiB aligned, advised for huge pages.
DoubleArray AllocateArray(size_t count) {
  return DoubleArray(
      static_cast<double*>(AllocateLargeArray(std::max(kHugePageBytes, count * sizeof(double)))));
}

// Fills `x` with `value` using the kernels' schedule (first touch places the pages).
void ParallelFill(double* x, size_t count, double value, int threads) {
  const auto n = static_cast<ptrdiff_t>(count);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (ptrdiff_t i = 0; i < n; ++i) x[i] = value;
}

int ResolveThreads(int requested) { return requested > 0 ? requested : UsableThreads(); }

// Shared bookkeeping of the three bandwidth probes: runs `pass` `repetitions` times and turns
// the times into bytes/s over `arrays` arrays of `count` doubles.
template <typename Pass>
BandwidthResult TimeBandwidth(const BandwidthOptions& options, int arrays, size_t count,
                              int threads, Pass pass) {
  const double bytes = static_cast<double>(arrays) * static_cast<double>(count) * sizeof(double);
  std::vector<double> rates;
  const int repetitions = std::max(1, options.repetitions);
  for (int r = 0; r < repetitions; ++r) {
    const Clock::time_point start = Clock::now();
    pass();
    rates.push_back(bytes / std::max(SecondsSince(start), 1e-9));
  }
  BandwidthResult result;
  result.spread = SpreadOf(rates);
  result.bytes_per_s = result.spread.max;
  result.array_bytes = count * sizeof(double);
  result.arrays = arrays;
  result.num_threads = threads;
  result.repetitions = repetitions;
  return result;
}

size_t ElementsOf(const BandwidthOptions& options) {
  return std::max<size_t>(1024, options.array_bytes / sizeof(double));
}

// Whether x[i] == expected at a few evenly spread positions (the first and last included).
bool SampleEquals(const double* x, size_t count, double expected) {
  constexpr size_t kSamples = 64;
  for (size_t s = 0; s < kSamples; ++s) {
    const size_t i = (count - 1) * s / (kSamples - 1);
    if (x[i] != expected) return false;
  }
  return true;
}

// --- GEMM ------------------------------------------------------------------------------------

// Values in [-1, 1) from a 64-bit LCG: fast enough for 2048² matrices, and deterministic.
std::vector<float> PseudoRandomMatrix(size_t elements, uint64_t seed) {
  std::vector<float> out(elements);
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (float& x : out) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<float>(static_cast<double>(state >> 40) / double{1 << 23} - 1.0);
  }
  return out;
}

// Compares a few sampled entries of C with double dot products, within an fp32 rounding bound.
Verification VerifyGemmSamples(uint32_t m, uint32_t n, uint32_t k, const std::vector<float>& a,
                               const std::vector<float>& b, const std::vector<float>& c) {
  constexpr uint32_t kSamples = 16;
  for (uint32_t s = 0; s < kSamples; ++s) {
    const auto i = static_cast<uint32_t>(static_cast<uint64_t>(m - 1) * s / (kSamples - 1));
    const auto j =
        static_cast<uint32_t>(static_cast<uint64_t>(n - 1) * (kSamples - 1 - s) / (kSamples - 1));
    double sum = 0;
    double sum_abs = 0;
    for (uint32_t p = 0; p < k; ++p) {
      const double term = static_cast<double>(a[size_t{i} * k + p]) * b[size_t{p} * n + j];
      sum += term;
      sum_abs += std::abs(term);
    }
    // Any reasonable fp32 summation order stays far inside k·2^-24·Σ|terms|; 1e-5·Σ|terms| is
    // tighter than that worst case for k > 168 and still ~100× the typical error.
    if (std::abs(c[size_t{i} * n + j] - sum) > 1e-5 * sum_abs + 1e-6) {
      return Verification::kVerifyFailed;
    }
  }
  return Verification::kOk;
}

// Calls per timed batch so that a batch lasts about `seconds`. Times doubling batches until one
// lasts a quarter of that, so one call slowed by a page fault, a pool start-up or a descheduling
// does not set the batch size (one slow call would make every batch a single short call).
template <typename Call>
int64_t CalibrateCallsPerBatch(double seconds, Call call) {
  int64_t calls = 1;
  while (true) {
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < calls; ++i) call();
    const double elapsed = SecondsSince(start);
    if (elapsed >= seconds / 4 || calls >= (int64_t{1} << 24)) {
      const double per_call = elapsed / static_cast<double>(calls);
      return static_cast<int64_t>(
          std::clamp(std::ceil(seconds / std::max(per_call, 1e-9)), 1.0, 1e7));
    }
    calls *= 2;
  }
}

}  // namespace

std::string_view VerificationName(Verification verification) {
  switch (verification) {
    case Verification::kOk:
      return "ok";
    case Verification::kVerifyFailed:
      return "verify_failed";
    case Verification::kSkipped:
      return "skipped";
  }
  return "unknown";
}

BandwidthOptions BandwidthOptions::Quick() {
  BandwidthOptions options;
  options.array_bytes = size_t{16} << 20;
  options.repetitions = 3;
  return options;
}

GemmProbeOptions GemmProbeOptions::Quick() {
  GemmProbeOptions options;
  options.repetitions = 3;
  options.seconds_per_repetition = 0.005;
  return options;
}

PeakGemmOptions PeakGemmOptions::Quick() {
  PeakGemmOptions options;
  options.sizes = {256, 512};
  options.probe = GemmProbeOptions::Quick();
  return options;
}

void OpenMpStep(float* x, size_t count, int num_threads) {
  const auto n = static_cast<ptrdiff_t>(count);
#pragma omp parallel for schedule(static) num_threads(std::max(1, num_threads))
  for (ptrdiff_t i = 0; i < n; ++i) x[i] = 0.5F * x[i] + 1.0F;
}

int UsableThreads() { return static_cast<int>(UsableCpus()); }

Spread SpreadOf(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {values.front(), median, values.back()};
}

BandwidthResult MeasureReadBandwidth(const BandwidthOptions& options) {
  const int threads = ResolveThreads(options.num_threads);
  const size_t count = ElementsOf(options);
  const DoubleArray a = AllocateArray(count);
  ParallelFill(a.get(), count, 1.0, threads);
  // Eight independent partial sums per thread: one chain of dependent adds would be bound by
  // the FP-add latency (~2 doubles per 3 cycles with SSE2), well below a core's load bandwidth.
  constexpr ptrdiff_t kLanes = 8;
  const auto blocks = static_cast<ptrdiff_t>(count) / kLanes;
  double sum = 0;
  const double* in = a.get();
  auto pass = [&] {
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) num_threads(threads)
    for (ptrdiff_t block = 0; block < blocks; ++block) {
      const double* x = in + block * kLanes;
      double lanes[kLanes];
      for (ptrdiff_t j = 0; j < kLanes; ++j) lanes[j] = x[j];
      total += ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
               ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    }
    for (auto i = static_cast<size_t>(blocks * kLanes); i < count; ++i) total += in[i];
    sum = total;
  };
  // Several streams a thread: thread t sums its share [t·count/threads, (t+1)·count/threads) as
  // `streams` equal parts read a line (kLanes doubles) of each in turn, then the tail. One
  // iteration a thread under the static schedule, as ParallelFill touched the pages.
  const int streams = std::clamp(options.streams_per_thread, 1, kMaxReadStreams);
  auto interleaved = [&] {
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) num_threads(threads)
    for (int t = 0; t < threads; ++t) {
      const size_t begin = count * static_cast<size_t>(t) / static_cast<size_t>(threads);
      const size_t end = count * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      constexpr auto kLine = static_cast<size_t>(kLanes);
      const size_t part = (end - begin) / static_cast<size_t>(streams) / kLine * kLine;
      double lanes[kLanes] = {};
      for (size_t offset = 0; offset < part; offset += kLine) {
        for (int s = 0; s < streams; ++s) {
          const double* x = in + begin + static_cast<size_t>(s) * part + offset;
          for (ptrdiff_t j = 0; j < kLanes; ++j) lanes[j] += x[j];
        }
      }
      double share = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                     ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (size_t i = begin + static_cast<size_t>(streams) * part; i < end; ++i) share += in[i];
      total += share;
    }
    sum = total;
  };
  BandwidthResult result = streams > 1 ? TimeBandwidth(options, 1, count, threads, interleaved)
                                       : TimeBandwidth(options, 1, count, threads, pass);
  result.streams_per_thread = streams;
  // A sum of ones is exact below 2^53 elements.
  result.verification =
      sum == static_cast<double>(count) ? Verification::kOk : Verification::kVerifyFailed;
  return result;
}

BandwidthResult MeasureStreamCopy(const BandwidthOptions& options) {
  const int threads = ResolveThreads(options.num_threads);
  const size_t count = ElementsOf(options);
  const DoubleArray a = AllocateArray(count);
  const DoubleArray c = AllocateArray(count);
  ParallelFill(a.get(), count, 1.0, threads);
  ParallelFill(c.get(), count, 0.0, threads);
  const auto n = static_cast<ptrdiff_t>(count);
  const double* in = a.get();
  double* out = c.get();
  auto pass = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (ptrdiff_t i = 0; i < n; ++i) out[i] = in[i];
  };
  BandwidthResult result = TimeBandwidth(options, 2, count, threads, pass);
  result.verification =
      SampleEquals(out, count, 1.0) ? Verification::kOk : Verification::kVerifyFailed;
  return result;
}

BandwidthResult MeasureStreamTriad(const BandwidthOptions& options) {
  const int threads = ResolveThreads(options.num_threads);
  const size_t count = ElementsOf(options);
  const DoubleArray a = AllocateArray(count);
  const DoubleArray b = AllocateArray(count);
  const DoubleArray c = AllocateArray(count);
  ParallelFill(a.get(), count, 0.0, threads);
  ParallelFill(b.get(), count, 2.0, threads);
  ParallelFill(c.get(), count, 1.0, threads);
  const auto n = static_cast<ptrdiff_t>(count);
  double* out = a.get();
  const double* x = b.get();
  const double* y = c.get();
  auto pass = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (ptrdiff_t i = 0; i < n; ++i) out[i] = x[i] + kTriadScalar * y[i];
  };
  BandwidthResult result = TimeBandwidth(options, 3, count, threads, pass);
  result.verification = SampleEquals(out, count, 2.0 + kTriadScalar * 1.0)
                            ? Verification::kOk
                            : Verification::kVerifyFailed;
  return result;
}

GemmFlopsResult MeasureGemmFlops(GemmBackend backend, uint32_t m, uint32_t n, uint32_t k,
                                 int num_threads, const GemmProbeOptions& options) {
  GemmFlopsResult result;
  result.backend = backend;
  result.m = m;
  result.n = n;
  result.k = k;
  result.num_threads = ResolveThreads(num_threads);
  if (m == 0 || n == 0 || k == 0) return result;  // no work: nothing to time
  const auto a = PseudoRandomMatrix(size_t{m} * k, 1);
  const auto b = PseudoRandomMatrix(size_t{k} * n, 2);
  std::vector<float> c(size_t{m} * n);
  result.packed = options.packed;
  const PackedB packed = options.packed ? PackedB(b.data(), k, n) : PackedB();
  auto call = [&] {
    if (options.packed) {
      GemmPackedB(m, a.data(), packed, c.data(), result.num_threads);
    } else {
      Gemm(backend, m, n, k, a.data(), b.data(), c.data(), result.num_threads);
    }
  };

  call();  // warm-up: starts thread pools, allocates Eigen's buffers, faults C in
  result.calls_per_repetition = CalibrateCallsPerBatch(options.seconds_per_repetition, call);
  const double flops_per_call = 2.0 * m * n * k;
  std::vector<double> rates;
  result.repetitions = std::max(1, options.repetitions);
  for (int r = 0; r < result.repetitions; ++r) {
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < result.calls_per_repetition; ++i) call();
    rates.push_back(flops_per_call * static_cast<double>(result.calls_per_repetition) /
                    std::max(SecondsSince(start), 1e-9));
  }
  result.spread = SpreadOf(rates);
  result.flops_per_s = result.spread.max;
  result.verification = VerifyGemmSamples(m, n, k, a, b, c);
  return result;
}

GemmFlopsResult MeasurePeakGemmFlops(GemmBackend backend, int num_threads,
                                     const PeakGemmOptions& options) {
  GemmFlopsResult best;
  best.backend = backend;
  best.num_threads = ResolveThreads(num_threads);
  const bool packed = DefaultPackedWeights(backend);
  for (const uint32_t size : options.sizes) {
    for (const bool use_packed : {false, true}) {
      if (use_packed && !packed) continue;
      GemmProbeOptions probe = options.probe;
      probe.packed = use_packed;
      GemmFlopsResult result = MeasureGemmFlops(backend, size, size, size, num_threads, probe);
      // A backend that computes a wrong product has no peak worth reporting: return the failure.
      if (result.verification == Verification::kVerifyFailed) return result;
      if (best.repetitions == 0 || result.flops_per_s > best.flops_per_s) best = result;
    }
  }
  return best;
}

}  // namespace feather::hw
