// gemm_eigen_body.h: the Eigen backend of hw/gemm.h, written once and compiled once per
// instruction set (gemm_eigen_avx2.cc: AVX2 + FMA; gemm_eigen_avx512.cc: AVX-512 F + VL), each
// reached only from gemm.cc after a run-time check of the CPU. Private to those two files.
//
// Each includer first defines the macro `Eigen` to a name of its own (FeatherEigenAvx2, ...), so
// that every Eigen template it instantiates lives in a namespace no other translation unit uses.
// Without that, the same Eigen template compiled with AVX2 in one file and AVX-512 in another
// gives two bodies under one weak symbol, and the linker keeps whichever it meets first: the
// AVX-512 body could then run on the AVX2 path (SIGILL on an AVX2-only CPU), or the AVX2 body
// silently on the AVX-512 one. calib/ uses Eigen (doubles) under its real name; with both kernel
// files renamed, `nm -C` finds no Eigen symbol shared between them and calib. There is no
// baseline (non-AVX2) Eigen build: without AVX2 + FMA, gemm.cc sends kEigen to OpenBLAS.
//
// Threading is done here rather than by Eigen: the column range of C (or, for tall products, the
// row range) is split into `num_threads` contiguous blocks in one OpenMP region, and each thread
// runs a single-threaded Eigen product on its block (Eigen sees omp_get_num_threads() > 1 and
// does not start threads of its own). That keeps the thread count a per-call argument — Eigen's
// setNbThreads() is process-wide state — and also spreads m = 1 products (GEMV, which Eigen
// never threads) over the cores. Cost: O(m·n·k) flops, plus one OpenMP fork/join (a few µs)
// when more than one thread is used.
#pragma once

#ifndef Eigen
#error "define Eigen to a per-ISA namespace name before including hw/gemm_eigen_body.h"
#endif

#include <immintrin.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hw/gemm.h"

namespace feather::hw::internal {
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces): one copy per ISA, see above

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using MatrixMap = Eigen::Map<RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

// Below this many multiply-adds a fork/join costs more than the second core gains (a 1×1024 ×
// 1024×256 product takes ~30 µs on one Zen 3 core; a fork/join ~3 µs).
constexpr double kMinMultiplyAddsPerThread = 1 << 17;
// Column blocks are multiples of 16 floats (one AVX-512 register, two AVX ones), so each block
// runs Eigen's full kernels and no thread writes into a cache line another thread writes.
constexpr uint32_t kColumnAlign = 16;

// C[rows r0.., cols c0..] = A[r0.., :] · B[:, c0..] for a block of `rows` × `cols`.
void ProductBlock(uint32_t n, uint32_t k, const float* a, const float* b, float* c, uint32_t r0,
                  uint32_t rows, uint32_t c0, uint32_t cols) {
  if (rows == 0 || cols == 0) return;
  const ConstMatrixMap a_block(a + static_cast<size_t>(r0) * k, rows, k, Eigen::OuterStride<>(k));
  const ConstMatrixMap b_block(b + c0, k, cols, Eigen::OuterStride<>(n));
  MatrixMap c_block(c + static_cast<size_t>(r0) * n + c0, rows, cols, Eigen::OuterStride<>(n));
  c_block.noalias() = a_block * b_block;
}

// --- Skinny products (few rows of A: a decode step's tokens) ------------------------------
//
// For m of 2 to kSkinnyMaxRows Eigen's general product packs each panel of B before its kernel
// runs, and B (the weights) is read once from DRAM and then again from the packed copy: on the
// Zen 5 VM the engine's GEMMs took 9.6 ms per step at m = 2 against 3.5 ms at m = 1 (a GEMV,
// which streams B once; results/validation/issue-20-zen5/cpu-rows.csv). This kernel streams B
// once for any m up to kSkinnyMaxRows: a register tile holds the m × kW outputs of kW columns,
// and B's rows are walked down that column block, each row's kW floats multiplied by the m
// broadcast entries of A in that row's column and added into the tile. Rows of A beyond
// kSkinnyMaxRows go in further passes of at most kSkinnyMaxRows rows. Exact fp32 multiply-adds
// in k order (Eigen's kernel sums in another order: the two differ by rounding only).
#if defined(__AVX512F__)
using SkinnyVec = __m512;
constexpr uint32_t kSkinnyLanes = 16;
constexpr int kSkinnyAccumulators = 24;  // of 32 registers: the rest hold B and A's broadcasts
inline SkinnyVec SkinnyZero() { return _mm512_setzero_ps(); }
inline SkinnyVec SkinnyLoad(const float* p) { return _mm512_loadu_ps(p); }
inline SkinnyVec SkinnyBroadcast(float x) { return _mm512_set1_ps(x); }
inline SkinnyVec SkinnyFma(SkinnyVec a, SkinnyVec b, SkinnyVec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline void SkinnyStore(float* p, SkinnyVec v) { _mm512_storeu_ps(p, v); }
#else
using SkinnyVec = __m256;
constexpr uint32_t kSkinnyLanes = 8;
constexpr int kSkinnyAccumulators = 12;  // of 16 registers
inline SkinnyVec SkinnyZero() { return _mm256_setzero_ps(); }
inline SkinnyVec SkinnyLoad(const float* p) { return _mm256_loadu_ps(p); }
inline SkinnyVec SkinnyBroadcast(float x) { return _mm256_set1_ps(x); }
inline SkinnyVec SkinnyFma(SkinnyVec a, SkinnyVec b, SkinnyVec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline void SkinnyStore(float* p, SkinnyVec v) { _mm256_storeu_ps(p, v); }
#endif
constexpr uint32_t kSkinnyMaxRows = 8;  // the tallest register tile; taller products run in passes
// B's rows prefetched this far ahead of the one being read (the walk down a column block is a
// constant stride of n floats, which hardware prefetchers may or may not follow).
constexpr uint32_t kSkinnyPrefetchRows = 8;

// acc[i][v] = Σ_kk A[i][kk] · B row kk's vector v, B's rows `stride` floats apart from `row`
// (row-major B: n; a packed panel: kGemmPanelColumns); a is kM rows of stride k. Each step
// prefetches `prefetch_rows` rows ahead: every cache line of the kV vectors (kAllLines: the
// row-major walk, whose rows are far apart), or one line (a panel's rows are one stream, which
// the hardware prefetcher follows; one hint a row keeps it ahead).
template <int kM, int kV, bool kAllLines>
inline __attribute__((always_inline)) void SkinnyAccumulate(uint32_t k, const float* a,
                                                            const float* row, size_t stride,
                                                            uint32_t prefetch_rows,
                                                            SkinnyVec (&acc)[kM][kV]) {
  for (int i = 0; i < kM; ++i) {
    for (int v = 0; v < kV; ++v) acc[i][v] = SkinnyZero();
  }
  constexpr int kLineVectors = std::max(1, static_cast<int>(64 / sizeof(float) / kSkinnyLanes));
  for (uint32_t kk = 0; kk < k; ++kk, row += stride) {
    if (kk + prefetch_rows < k) {
      const float* ahead = row + size_t{prefetch_rows} * stride;
      for (int v = 0; v < (kAllLines ? kV : 1); v += kLineVectors) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + v * kSkinnyLanes), _MM_HINT_T0);
      }
    }
    SkinnyVec bv[kV];
    for (int v = 0; v < kV; ++v) bv[v] = SkinnyLoad(row + v * kSkinnyLanes);
    for (int i = 0; i < kM; ++i) {
      const SkinnyVec ai = SkinnyBroadcast(a[static_cast<size_t>(i) * k + kk]);
      for (int v = 0; v < kV; ++v) acc[i][v] = SkinnyFma(ai, bv[v], acc[i][v]);
    }
  }
}

// C[0..kM, c0..c0 + kV · lanes) = A[0..kM, :] · B[:, same columns]; a is kM rows of stride k.
template <int kM, int kV>
inline __attribute__((always_inline)) void SkinnyTile(uint32_t n, uint32_t k, const float* a,
                                                      const float* b, float* c, uint32_t c0) {
  SkinnyVec acc[kM][kV];
  SkinnyAccumulate<kM, kV, true>(k, a, b + c0, n, kSkinnyPrefetchRows, acc);
  for (int i = 0; i < kM; ++i) {
    for (int v = 0; v < kV; ++v) {
      SkinnyStore(c + static_cast<size_t>(i) * n + c0 + v * kSkinnyLanes, acc[i][v]);
    }
  }
}

// Columns [c0, c0 + cols) of kM rows: register tiles as wide as the accumulators allow, then
// one-vector tiles, then the last columns (fewer than one vector) by scalar multiply-adds.
template <int kM>
void SkinnyRows(uint32_t n, uint32_t k, const float* a, const float* b, float* c, uint32_t c0,
                uint32_t cols) {
  constexpr int kV = std::max(1, kSkinnyAccumulators / kM);
  constexpr uint32_t kWide = kV * kSkinnyLanes;
  const uint32_t end = c0 + cols;
  uint32_t col = c0;
  for (; col + kWide <= end; col += kWide) SkinnyTile<kM, kV>(n, k, a, b, c, col);
  for (; col + kSkinnyLanes <= end; col += kSkinnyLanes) SkinnyTile<kM, 1>(n, k, a, b, c, col);
  for (; col < end; ++col) {
    for (int i = 0; i < kM; ++i) {
      float sum = 0;
      for (uint32_t kk = 0; kk < k; ++kk) {
        sum += a[static_cast<size_t>(i) * k + kk] * b[size_t{kk} * n + col];
      }
      c[static_cast<size_t>(i) * n + col] = sum;
    }
  }
}

// SkinnyRows<kM> for kM = 1 .. kSkinnyMaxRows, at index kM - 1.
using SkinnyRowsFn = void (*)(uint32_t, uint32_t, const float*, const float*, float*, uint32_t,
                              uint32_t);
constexpr SkinnyRowsFn kSkinnyRowsFns[kSkinnyMaxRows] = {
    &SkinnyRows<1>, &SkinnyRows<2>, &SkinnyRows<3>, &SkinnyRows<4>,
    &SkinnyRows<5>, &SkinnyRows<6>, &SkinnyRows<7>, &SkinnyRows<8>};

// The skinny product over columns [c0, c0 + cols) of all m rows, kSkinnyMaxRows at a time.
void SkinnyBlock(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
                 uint32_t c0, uint32_t cols) {
  if (cols == 0) return;
  for (uint32_t r = 0; r < m; r += kSkinnyMaxRows) {
    const float* ar = a + static_cast<size_t>(r) * k;
    float* cr = c + static_cast<size_t>(r) * n;
    kSkinnyRowsFns[std::min(m - r, kSkinnyMaxRows) - 1](n, k, ar, b, cr, c0, cols);
  }
}

// --- The skinny kernel on packed B (PackedB, gemm.h: the engine's weights, packed at load) ------
//
// The same register tiles as above, but B's column block lies in one contiguous panel of
// kGemmPanelColumns columns, its k rows one after another, so a tile reads one sequential stream
// instead of kW floats every n: on the Zen 5 VM, one decode step of cpu-small's weights (204 MB,
// two threads) at m = 2 / 4 / 8 took 3.7-5.2 / 4.8-5.7 / 3.9-6.1 ms packed against 4.8-5.9 /
// 6.4-7.2 / 9.0-10.3 ms strided, 1.1-2.6x (a side-by-side experiment, prefetch distances 4-64
// rows; hw/README.md "Skinny products" has the benchmark). Rows of A go in passes of at most
// kSkinnyMaxRows; a panel (k · 192 bytes: 192-540 KB for the engine's shapes) is read from DRAM
// by the first pass and from L2 by the others. Panels are split over the threads. Exact fp32
// multiply-adds in k order, as the strided kernel: the two give identical bits.
constexpr uint32_t kPanelVectors = kGemmPanelColumns / kSkinnyLanes;
static_assert(kGemmPanelColumns % kSkinnyLanes == 0, "a panel is whole vectors");
// Panel rows prefetched this far ahead (a sequential stream: 6 KB).
constexpr uint32_t kPackedPrefetchRows = 32;

// Columns [v0 · lanes, (v0 + kV) · lanes) of one panel for kM rows of A (stride k), into C's
// columns from c0 (stride n); `valid` of those columns exist in C (the last panel's padding is
// computed and dropped).
template <int kM, int kV>
inline __attribute__((always_inline)) void PackedTile(uint32_t n, uint32_t k, const float* a,
                                                      const float* panel, uint32_t v0, float* c,
                                                      uint32_t c0, uint32_t valid) {
  SkinnyVec acc[kM][kV];
  SkinnyAccumulate<kM, kV, false>(k, a, panel + v0 * kSkinnyLanes, kGemmPanelColumns,
                                  kPackedPrefetchRows, acc);
  constexpr uint32_t kWidth = kV * kSkinnyLanes;
  for (int i = 0; i < kM; ++i) {
    float* out = c + static_cast<size_t>(i) * n + c0;
    if (valid >= kWidth) {
      for (int v = 0; v < kV; ++v) SkinnyStore(out + v * kSkinnyLanes, acc[i][v]);
    } else {
      alignas(64) float tail[kWidth];
      for (int v = 0; v < kV; ++v) SkinnyStore(tail + v * kSkinnyLanes, acc[i][v]);
      std::copy_n(tail, valid, out);
    }
  }
}

// One panel (columns [c0, c0 + valid) of C) for kM rows: tiles of as many vectors as the
// accumulators allow.
template <int kM>
void PackedRows(uint32_t n, uint32_t k, const float* a, const float* panel, float* c, uint32_t c0,
                uint32_t valid) {
  constexpr int kV = std::min<int>(kPanelVectors, std::max(1, kSkinnyAccumulators / kM));
  constexpr uint32_t kWidth = kV * kSkinnyLanes;
  uint32_t v0 = 0;
  for (; v0 + kV <= kPanelVectors; v0 += kV) {
    const uint32_t done = v0 * kSkinnyLanes;
    if (done >= valid) return;
    PackedTile<kM, kV>(n, k, a, panel, v0, c, c0 + done, std::min(valid - done, kWidth));
  }
  for (; v0 < kPanelVectors; ++v0) {
    const uint32_t done = v0 * kSkinnyLanes;
    if (done >= valid) return;
    PackedTile<kM, 1>(n, k, a, panel, v0, c, c0 + done, std::min(valid - done, kSkinnyLanes));
  }
}

using PackedRowsFn = void (*)(uint32_t, uint32_t, const float*, const float*, float*, uint32_t,
                              uint32_t);
constexpr PackedRowsFn kPackedRowsFns[kSkinnyMaxRows] = {
    &PackedRows<1>, &PackedRows<2>, &PackedRows<3>, &PackedRows<4>,
    &PackedRows<5>, &PackedRows<6>, &PackedRows<7>, &PackedRows<8>};

// C (m × n) = A (m × k) · B, B packed; panels over `num_threads` threads.
void PackedGemm(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads) {
  const uint32_t n = b.n(), k = b.k();
  if (m == 0 || n == 0) return;
  const uint32_t panels = b.panels();
  const int threads = std::min<int>(num_threads, static_cast<int>(panels));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t p = 0; p < int64_t{panels}; ++p) {
    const auto panel_index = static_cast<uint32_t>(p);
    const float* panel = b.Panel(panel_index);
    const uint32_t c0 = panel_index * kGemmPanelColumns;
    const uint32_t valid = std::min(kGemmPanelColumns, n - c0);
    for (uint32_t r = 0; r < m; r += kSkinnyMaxRows) {
      kPackedRowsFns[std::min(m - r, kSkinnyMaxRows) - 1](
          n, k, a + static_cast<size_t>(r) * k, panel, c + static_cast<size_t>(r) * n, c0, valid);
    }
  }
}

// Threads worth starting for this product: at most `num_threads`, at least one, and none that
// would get less than kMinMultiplyAddsPerThread of work.
int UsefulThreads(uint32_t m, uint32_t n, uint32_t k, int num_threads) {
  const double work = static_cast<double>(m) * n * k;
  const int by_work = static_cast<int>(std::max(1.0, work / kMinMultiplyAddsPerThread));
  return std::max(1, std::min(num_threads, by_work));
}

// `skinny_rows`: products of 2 to this many rows (and no more rows than columns) run the skinny
// kernel above instead of Eigen's, in passes of at most kSkinnyMaxRows rows; 0 = never (gemm.cc
// resolves the automatic choice). One row stays with Eigen, whose GEMV streams B at the DRAM
// probe's rate (3.6 ms per step against the skinny kernel's 6.5).
void EigenGemm(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
               int num_threads, uint32_t skinny_rows) {
  if (m == 0 || n == 0) return;
  const int threads = UsefulThreads(m, n, k, num_threads);
  const bool skinny = m >= 2 && m <= skinny_rows && m <= n;
  if (skinny && threads == 1) {
    SkinnyBlock(m, n, k, a, b, c, 0, n);
    return;
  }
  if (threads == 1) {
    // Outside a parallel region Eigen would start omp_get_max_threads() threads of its own;
    // lower that (a per-thread OpenMP setting) to one for the call.
    const int saved_max_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    ProductBlock(n, k, a, b, c, 0, m, 0, n);
    omp_set_num_threads(saved_max_threads);
    return;
  }
  // Split the larger of the two output dimensions: columns for the engine's usual wide products
  // (m tokens ≤ n features), rows for tall ones.
  const bool split_rows = m > n;
#pragma omp parallel num_threads(threads)
  {
    const auto parts = static_cast<uint32_t>(omp_get_num_threads());
    const auto part = static_cast<uint32_t>(omp_get_thread_num());
    if (split_rows) {
      const auto begin = static_cast<uint32_t>(static_cast<uint64_t>(m) * part / parts);
      const auto end = static_cast<uint32_t>(static_cast<uint64_t>(m) * (part + 1) / parts);
      ProductBlock(n, k, a, b, c, begin, end - begin, 0, n);
    } else {
      const uint32_t chunks = (n + kColumnAlign - 1) / kColumnAlign;
      const uint32_t begin = std::min(n, chunks * part / parts * kColumnAlign);
      const uint32_t end = std::min(n, chunks * (part + 1) / parts * kColumnAlign);
      if (skinny) {
        SkinnyBlock(m, n, k, a, b, c, begin, end - begin);
      } else {
        ProductBlock(n, k, a, b, c, 0, m, begin, end - begin);
      }
    }
  }
}

}  // namespace
}  // namespace feather::hw::internal
