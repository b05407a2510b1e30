// gemm.h: the dense fp32 matrix products of the linear layers (QKV, O, gate/up, down, LM head).
//
// C[m×n] = A[m×k] · B[k×n], all row-major and contiguous: A holds one row per token, B is a
// weight matrix stored input-major. Two backends, chosen at run time so a microbenchmark can
// compare them on the same machine: Eigen (compiled here, once for AVX2 + FMA and once for
// AVX-512, the build picked by the CPU's features) and a CBLAS (Debian's OpenBLAS).
// `num_threads` caps the threads the product may use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace feather::hw {

enum class GemmBackend : uint8_t { kEigen, kBlas };

[[nodiscard]] std::string_view GemmBackendName(GemmBackend backend);  // "eigen" | "blas"
// The backend the engine uses by default: the faster one on this machine (see hw/README.md for
// the measurement behind the choice).
[[nodiscard]] GemmBackend DefaultGemmBackend();

// The build of Eigen that kEigen runs: kAvx2 (AVX2 + FMA) or kAvx512 (AVX-512 F + VL). kAuto
// picks kAvx512 where the CPU has it, else kAvx2 (hw/README.md, "GEMM backend", has the
// measurement); FEATHER_GEMM_ISA=avx2|avx512, read once at the first product, forces one for a
// run (an unknown name or one the CPU lacks: a message and exit status 2). Without AVX2 + FMA
// kEigen runs OpenBLAS, whatever this says.
enum class GemmIsa : uint8_t { kAuto, kAvx2, kAvx512 };
[[nodiscard]] std::string_view GemmIsaName(GemmIsa isa);  // "auto" | "avx2" | "avx512"
[[nodiscard]] GemmIsa ActiveGemmIsa();                    // never kAuto
// What `backend` runs here, for records: "eigen/avx512", "eigen/avx2" or "blas" (also kEigen
// where the CPU lacks AVX2 + FMA). Calibration's kernel_variant and HostInfo use it.
[[nodiscard]] std::string GemmKernelName(GemmBackend backend);
// Forces a build for the process (tests, benchmarks); one the CPU lacks is refused (returns
// false, nothing changes); kAuto returns to the automatic choice. Not thread-safe against
// running products.
bool SetGemmIsaForTesting(GemmIsa isa);

// Eigen products of 2 to N rows of A can run feather's skinny kernel (gemm_eigen_body.h: B
// streamed once, where Eigen's general product reads it again through its packed copy: 1.3-2x
// faster for a decode step's 2-8 tokens). kGemmSkinnyRowsAuto = where the kernel measured faster
// (8 rows on the AVX-512 build, 4 on AVX2). Off by default; FEATHER_GEMM_SKINNY=auto (read once
// at the first product; off|auto, anything else: a message and exit status 2) turns it on for a
// run, and GemmKernelName then says "+skinny". Why off: the cost model prices every product of
// 2 or more rows with one repacking cost (gemm_batched_fixed_ns), which the kernel removes below
// N and Eigen keeps above it, and calibrated with the kernel on the hold-out error rose from 2.4
// to 9.3 % (hw/README.md, "Skinny products"); it becomes the default with a model term for that.
// SetGemmSkinnyRowsForTesting sets N for the process (0 = Eigen always) and returns the previous
// setting, for tests and the side-by-side benchmark.
inline constexpr uint32_t kGemmSkinnyRowsAuto = 0xFFFFFFFFu;
uint32_t SetGemmSkinnyRowsForTesting(uint32_t rows);

void Gemm(GemmBackend backend, uint32_t m, uint32_t n, uint32_t k, const float* a,
          const float* b, float* c, int num_threads);

}  // namespace feather::hw
