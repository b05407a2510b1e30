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
#include <vector>

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
// of the profile it was given (CpuEngineOptions::gemm_skinny_rows) when it holds row-major
// weights; on packed weights (its default, PackedB below) every product is the packed kernel's.
inline constexpr uint32_t kGemmSkinnyRowsAuto = 0xFFFFFFFFu;
// The N that products with `backend` run with now: 0 when the kernel is off or `backend` does not
// run Eigen on this machine.
[[nodiscard]] uint32_t GemmSkinnyRows(GemmBackend backend);
// Sets N for the process (0 or 1 = Eigen always, kGemmSkinnyRowsAuto = the automatic choice;
// above 8 rows the kernel runs in passes of 8, which measured no faster than Eigen) and returns
// the previous setting. Not thread-safe against running products.
uint32_t SetGemmSkinnyRows(uint32_t rows);

// B (k × n, row-major) packed once for the skinny kernel: column panels of kGemmPanelColumns
// columns, each panel's k rows of kGemmPanelColumns floats one after another (panel p, row kk at
// Panel(p)[kk · kGemmPanelColumns]), the last panel's missing columns zero. A weight matrix
// that many steps multiply is packed at load (the cpu engine's linear layers, hw/cpu_backend.h),
// so the kernel reads one sequential stream per panel where the row-major walk reads 192-768
// bytes every n floats (hw/README.md, "Skinny products": 1.1-2.6x faster at m = 2-8). O(k · n)
// to build; as many bytes as B, rounded up to whole panels.
inline constexpr uint32_t kGemmPanelColumns = 48;
class PackedB {
 public:
  PackedB() = default;
  PackedB(const float* b, uint32_t k, uint32_t n);
  [[nodiscard]] uint32_t k() const { return k_; }
  [[nodiscard]] uint32_t n() const { return n_; }
  [[nodiscard]] uint32_t panels() const { return (n_ + kGemmPanelColumns - 1) / kGemmPanelColumns; }
  [[nodiscard]] const float* Panel(uint32_t p) const {
    return data_.data() + size_t{p} * k_ * kGemmPanelColumns;
  }
  [[nodiscard]] size_t bytes() const { return data_.size() * sizeof(float); }

 private:
  std::vector<float> data_;
  uint32_t k_ = 0;
  uint32_t n_ = 0;
};

// C (m × b.n(), row-major) = A (m × b.k()) · B with B packed: the skinny kernel for any m (rows
// of A in passes of 8, a panel read from memory once), on the Eigen backend's ISA build. The
// caller picks it for the m it pays at (GemmSkinnyRows); needs AVX2 + FMA (GemmSkinnyRows(kEigen)
// is 0 without them). Identical bits to Gemm's skinny kernel on the unpacked B.
void GemmPackedB(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads);

// Whether a cpu engine on `backend` packs its linear weights unless told otherwise
// (CpuEngineOptions::packed_weights): where GemmPackedB runs (kEigen with AVX2 + FMA), unless
// FEATHER_GEMM_PACKED=off (read once; auto|off, anything else: a message and exit status 2).
[[nodiscard]] bool DefaultPackedWeights(GemmBackend backend);

void Gemm(GemmBackend backend, uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b,
          float* c, int num_threads);

}  // namespace feather::hw
