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

// Eigen products of 2 to N rows of A run feather's skinny kernel (gemm_eigen_body.h: B streamed
// once, where Eigen's general product reads it again through its packed copy: 1.3-2x faster for
// a decode step's 2-8 tokens; hw/README.md, "Skinny products"). The automatic N is where the
// kernel measured faster: 8 rows on the AVX-512 build, 4 on AVX2. It is the default;
// FEATHER_GEMM_SKINNY=off|auto (read once at the first product; anything else: a message and exit
// status 2) chooses for a run, and GemmKernelName then says "+skinny" when it is on. The cost
// model prices the kernel's steps apart (the profile's gemm_skinny_max_tokens, written by
// calibration from GemmSkinnyRows; sim/engine/model_engine.h), and the `cpu` engine runs the N
// of the profile it was given (CpuEngineOptions::gemm_skinny_rows).
inline constexpr uint32_t kGemmSkinnyRowsAuto = 0xFFFFFFFFu;
// The N that products with `backend` run with now: 0 when the kernel is off or `backend` does not
// run Eigen on this machine.
[[nodiscard]] uint32_t GemmSkinnyRows(GemmBackend backend);
// Sets N for the process (0 or 1 = Eigen always, kGemmSkinnyRowsAuto = the automatic choice;
// above 8 rows the kernel runs in passes of 8, which measured no faster than Eigen) and returns
// the previous setting. Not thread-safe against running products.
uint32_t SetGemmSkinnyRows(uint32_t rows);

void Gemm(GemmBackend backend, uint32_t m, uint32_t n, uint32_t k, const float* a,
          const float* b, float* c, int num_threads);

}  // namespace feather::hw
