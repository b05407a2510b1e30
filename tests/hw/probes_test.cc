// Tests for hw/probes.h with the Quick() settings: every probe returns a positive, verified
// figure, its parameters, and a consistent spread (min ≤ median ≤ max = figure). Speeds are not
// asserted — CI machines are shared and vary — beyond a sanity bound.
//
// DISABLED_ReportMachineFigures runs the probes with their full default settings and prints the
// figures hw/README.md quotes (about a minute):
//   probes_test --gtest_also_run_disabled_tests --gtest_filter='*ReportMachineFigures*'
#include "hw/probes.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace feather::hw {
namespace {

void ExpectConsistentSpread(const Spread& spread, double figure) {
  EXPECT_GT(spread.min, 0.0);
  EXPECT_LE(spread.min, spread.median);
  EXPECT_LE(spread.median, spread.max);
  EXPECT_DOUBLE_EQ(spread.max, figure);
}

void ExpectPlausibleBandwidth(const BandwidthResult& result, int arrays) {
  EXPECT_GT(result.bytes_per_s, 1e8);   // 100 MB/s: even an emulator does better
  EXPECT_LT(result.bytes_per_s, 1e13);  // 10 TB/s: no CPU does
  EXPECT_EQ(result.arrays, arrays);
  EXPECT_EQ(result.array_bytes, BandwidthOptions::Quick().array_bytes);
  EXPECT_EQ(result.repetitions, BandwidthOptions::Quick().repetitions);
  EXPECT_GE(result.num_threads, 1);
  EXPECT_EQ(result.verification, Verification::kOk);
  ExpectConsistentSpread(result.spread, result.bytes_per_s);
}

TEST(ProbesTest, ReadBandwidth) {
  ExpectPlausibleBandwidth(MeasureReadBandwidth(BandwidthOptions::Quick()), 1);
}

// Several streams a thread read every element once: the sum of ones checks it, also where the
// array does not split evenly into threads, streams and lines, and past kMaxReadStreams (clamped).
TEST(ProbesTest, ReadBandwidthWithSeveralStreamsReadsEveryElement) {
  for (const int streams : {2, 3, 8, kMaxReadStreams, kMaxReadStreams + 10}) {
    for (const int threads : {1, 2, 3}) {
      SCOPED_TRACE(std::to_string(streams) + " streams, " + std::to_string(threads) + " threads");
      BandwidthOptions options = BandwidthOptions::Quick();
      options.array_bytes = (size_t{3} << 20) + 8 * 13;  // 13 doubles past a round size
      options.num_threads = threads;
      options.streams_per_thread = streams;
      const BandwidthResult result = MeasureReadBandwidth(options);
      EXPECT_EQ(result.verification, Verification::kOk);
      EXPECT_EQ(result.array_bytes, options.array_bytes);
      EXPECT_GT(result.bytes_per_s, 1e8);
      EXPECT_EQ(result.streams_per_thread, std::min(streams, kMaxReadStreams));
    }
  }
  EXPECT_EQ(MeasureReadBandwidth(BandwidthOptions::Quick()).streams_per_thread, 1);
}

TEST(ProbesTest, StreamCopy) {
  ExpectPlausibleBandwidth(MeasureStreamCopy(BandwidthOptions::Quick()), 2);
}

TEST(ProbesTest, StreamTriadSingleThread) {
  BandwidthOptions options = BandwidthOptions::Quick();
  options.num_threads = 1;
  const BandwidthResult result = MeasureStreamTriad(options);
  ExpectPlausibleBandwidth(result, 3);
  EXPECT_EQ(result.num_threads, 1);
}

TEST(ProbesTest, GemmFlopsBothBackends) {
  for (const GemmBackend backend : {GemmBackend::kEigen, GemmBackend::kBlas}) {
    const GemmFlopsResult result =
        MeasureGemmFlops(backend, 17, 96, 130, 2, GemmProbeOptions::Quick());
    EXPECT_GT(result.flops_per_s, 1e7) << GemmBackendName(backend);
    EXPECT_EQ(result.backend, backend);
    EXPECT_EQ(result.m, 17u);
    EXPECT_EQ(result.n, 96u);
    EXPECT_EQ(result.k, 130u);
    EXPECT_EQ(result.num_threads, 2);
    EXPECT_EQ(result.repetitions, GemmProbeOptions::Quick().repetitions);
    EXPECT_GE(result.calls_per_repetition, 1);
    EXPECT_EQ(result.verification, Verification::kOk);
    ExpectConsistentSpread(result.spread, result.flops_per_s);
  }
}

TEST(ProbesTest, GemmFlopsEmptyShapeIsNotTimed) {
  const GemmFlopsResult result = MeasureGemmFlops(GemmBackend::kBlas, 0, 8, 8, 1);
  EXPECT_EQ(result.flops_per_s, 0.0);
  EXPECT_EQ(result.repetitions, 0);
  EXPECT_EQ(result.verification, Verification::kSkipped);
}

TEST(ProbesTest, PeakGemmPicksTheBestSize) {
  const PeakGemmOptions options = PeakGemmOptions::Quick();
  const GemmFlopsResult peak = MeasurePeakGemmFlops(GemmBackend::kBlas, 1, options);
  EXPECT_GT(peak.flops_per_s, 1e8);
  EXPECT_EQ(peak.m, peak.n);
  EXPECT_EQ(peak.n, peak.k);
  EXPECT_TRUE(peak.m == options.sizes[0] || peak.m == options.sizes[1]);
  EXPECT_EQ(peak.verification, Verification::kOk);
}

TEST(SpreadOfTest, OddEvenAndEmpty) {
  const Spread odd = SpreadOf({3.0, 1.0, 2.0});
  EXPECT_EQ(odd.min, 1.0);
  EXPECT_EQ(odd.median, 2.0);
  EXPECT_EQ(odd.max, 3.0);
  const Spread even = SpreadOf({4.0, 1.0, 2.0, 3.0});
  EXPECT_EQ(even.median, 2.5);
  const Spread empty = SpreadOf({});
  EXPECT_EQ(empty.max, 0.0);
}

TEST(VerificationNameTest, Names) {
  EXPECT_EQ(VerificationName(Verification::kOk), "ok");
  EXPECT_EQ(VerificationName(Verification::kVerifyFailed), "verify_failed");
  EXPECT_EQ(VerificationName(Verification::kSkipped), "skipped");
}

TEST(UsableThreadsTest, AtLeastOne) { EXPECT_GE(UsableThreads(), 1); }

void PrintBandwidth(const char* name, const BandwidthResult& r) {
  std::printf(
      "%-6s threads=%d arrays=%d x %zu MiB reps=%d  best %.2f GB/s  (min %.2f, median "
      "%.2f)  %s\n",
      name, r.num_threads, r.arrays, r.array_bytes >> 20, r.repetitions, r.bytes_per_s / 1e9,
      r.spread.min / 1e9, r.spread.median / 1e9,
      std::string(VerificationName(r.verification)).c_str());
}

void PrintGemm(const GemmFlopsResult& r) {
  std::printf(
      "gemm %-5s m=%-4u n=%-5u k=%-5u threads=%d reps=%d x %lld calls  best %.2f GFLOP/s "
      "(min %.2f, median %.2f)  %s\n",
      std::string(GemmBackendName(r.backend)).c_str(), r.m, r.n, r.k, r.num_threads, r.repetitions,
      static_cast<long long>(r.calls_per_repetition), r.flops_per_s / 1e9, r.spread.min / 1e9,
      r.spread.median / 1e9, std::string(VerificationName(r.verification)).c_str());
}

TEST(ProbesReport, DISABLED_ReportMachineFigures) {
  for (const int threads : {1, UsableThreads()}) {
    BandwidthOptions options;
    options.num_threads = threads;
    PrintBandwidth("read", MeasureReadBandwidth(options));
    PrintBandwidth("copy", MeasureStreamCopy(options));
    PrintBandwidth("triad", MeasureStreamTriad(options));
  }
  for (const int threads : {1, UsableThreads()}) {
    for (const GemmBackend backend : {GemmBackend::kEigen, GemmBackend::kBlas}) {
      std::printf("peak: ");
      PrintGemm(MeasurePeakGemmFlops(backend, threads));
    }
  }
  // The engine's linear layers (k → n) at decode and prefill batch sizes, backends interleaved
  // so both see the same background load.
  constexpr uint32_t kLayers[][2] = {
      {1024, 1024}, {1024, 1536}, {1024, 5632}, {2816, 1024}, {1024, 8192}};
  for (const int threads : {1, UsableThreads()}) {
    for (const uint32_t m : {1U, 8U, 32U, 128U, 512U}) {
      for (const auto& kn : kLayers) {
        for (const GemmBackend backend : {GemmBackend::kEigen, GemmBackend::kBlas}) {
          PrintGemm(MeasureGemmFlops(backend, m, kn[1], kn[0], threads));
        }
      }
    }
  }
}

}  // namespace
}  // namespace feather::hw
