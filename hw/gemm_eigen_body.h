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

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>

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

// Threads worth starting for this product: at most `num_threads`, at least one, and none that
// would get less than kMinMultiplyAddsPerThread of work.
int UsefulThreads(uint32_t m, uint32_t n, uint32_t k, int num_threads) {
  const double work = static_cast<double>(m) * n * k;
  const int by_work = static_cast<int>(std::max(1.0, work / kMinMultiplyAddsPerThread));
  return std::max(1, std::min(num_threads, by_work));
}

void EigenGemm(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
               int num_threads) {
  if (m == 0 || n == 0) return;
  const int threads = UsefulThreads(m, n, k, num_threads);
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
      ProductBlock(n, k, a, b, c, 0, m, begin, end - begin);
    }
  }
}

}  // namespace
}  // namespace feather::hw::internal
