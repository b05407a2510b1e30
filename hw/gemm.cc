// gemm.cc: backend dispatch of hw/gemm.h, the CBLAS (OpenBLAS) backend, and the run-time CPU
// checks that pick the Eigen build (gemm_eigen_avx2.cc, gemm_eigen_avx512.cc).
//
// OpenBLAS (Debian's pthread build) keeps its own pool of worker threads whose size is process
// state: we set it to the caller's `num_threads` only when it differs from the last value we set
// (openblas_set_num_threads takes a lock and may resize the pool), so one BLAS call never uses
// more threads than the caller allows. Two threads calling Gemm(kBlas) concurrently with
// different `num_threads` race on that setting; the engine calls GEMMs from one thread.
// What this cannot prevent: OpenBLAS's pool and the OpenMP team are two sets of threads, and
// each spins for a while after its work (libgomp ~ms, OpenBLAS yielding), so alternating BLAS
// calls with OpenMP kernels on a machine with few cores has them compete for the cores — the
// reason the default backend is Eigen, which runs on the OpenMP team (hw/README.md).
#include "hw/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <iterator>
#include <string_view>

#include "base/check.h"
#include "hw/isa_variable.h"

namespace feather::hw {
namespace internal {
// Defined in gemm_eigen_avx2.cc (compiled with -mavx2 -mfma): call only when CpuHasAvx2Fma().
void GemmEigenAvx2(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
                   int num_threads, uint32_t skinny_rows);
// Defined in gemm_eigen_avx512.cc: call only when ActiveGemmIsa() says kAvx512.
void GemmEigenAvx512(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
                     int num_threads, uint32_t skinny_rows);
// Defined in the same two files: the skinny kernel on packed B (gemm_eigen_body.h PackedGemm).
void GemmPackedAvx2(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads);
void GemmPackedAvx512(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads);
}  // namespace internal

namespace {

// The measured winner for the engine's configuration on the reference machine (hw/README.md,
// "GEMM backend"): at the engine's default of all cores, Eigen on the engine's own OpenMP team
// ties OpenBLAS in isolation and stays fast when GEMMs alternate with OpenMP kernels, where
// OpenBLAS's separate thread pool lost 3–28× in the worst case measured (SCHED_FIFO).
constexpr GemmBackend kMeasuredDefault = GemmBackend::kEigen;

// The skinny kernel's row limit (gemm.h); kSkinnyUnset until FEATHER_GEMM_SKINNY is read.
constexpr uint32_t kSkinnyUnset = 0xFFFFFFFEu;
std::atomic<uint32_t> skinny_rows{kSkinnyUnset};

// FEATHER_GEMM_SKINNY=off|auto, read once: unset or empty = auto; a bad value exits with status 2
// (hw/isa_variable.h).
uint32_t SkinnyRowsFromEnvironment() {
  static const uint32_t rows = [] {
    constexpr std::string_view kNames[] = {"auto", "off"};
    const size_t choice = ChoiceFromVariable("FEATHER_GEMM_SKINNY", kNames, 0,
                                             [](size_t) { return std::string_view(); });
    return choice == 0 ? kGemmSkinnyRowsAuto : 0u;
  }();
  return rows;
}

// The setting as stored: 0, kGemmSkinnyRowsAuto or a row count.
uint32_t SkinnySetting() {
  uint32_t rows = skinny_rows.load();
  if (rows == kSkinnyUnset) {
    (void)skinny_rows.compare_exchange_strong(rows, SkinnyRowsFromEnvironment());
    rows = skinny_rows.load();
  }
  return rows;
}

bool CpuHasAvx2Fma() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool kHas = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return kHas;
#else
  return false;
#endif
}

// What the CPU lacks for an Eigen build ("" when it has everything), checked in order.
const char* MissingFeature(GemmIsa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == GemmIsa::kAuto) return "";
  if (!__builtin_cpu_supports("avx2")) return "avx2";
  if (!__builtin_cpu_supports("fma")) return "fma";
  if (isa == GemmIsa::kAvx512 && !__builtin_cpu_supports("avx512f")) return "avx512f";
  if (isa == GemmIsa::kAvx512 && !__builtin_cpu_supports("avx512vl")) return "avx512vl";
  return "";
#else
  return isa == GemmIsa::kAuto ? "" : "x86-64";
#endif
}

bool CpuSupports(GemmIsa isa) { return *MissingFeature(isa) == '\0'; }

std::atomic<GemmIsa> forced_isa{GemmIsa::kAuto};

// FEATHER_GEMM_ISA, read once: kAuto when unset or empty; exits with status 2 on a bad value
// (hw/isa_variable.h). kAllIsas lists the enum in value order, so an index is the value.
constexpr GemmIsa kAllIsas[] = {GemmIsa::kAuto, GemmIsa::kAvx2, GemmIsa::kAvx512};
GemmIsa IsaFromEnvironment() {
  static const GemmIsa isa = [] {
    std::string_view names[std::size(kAllIsas)];
    for (size_t i = 0; i < std::size(kAllIsas); ++i) names[i] = GemmIsaName(kAllIsas[i]);
    return kAllIsas[ChoiceFromVariable("FEATHER_GEMM_ISA", names, 0, [](size_t i) {
      return std::string_view(MissingFeature(kAllIsas[i]));
    })];
  }();
  return isa;
}

// The thread count last given to OpenBLAS; 0 before the first call.
std::atomic<int> blas_threads{0};

void SetBlasThreads(int num_threads) {
  if (blas_threads.load(std::memory_order_relaxed) == num_threads) return;
  openblas_set_num_threads(num_threads);
  blas_threads.store(num_threads, std::memory_order_relaxed);
}

void GemmBlas(uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b, float* c,
              int num_threads) {
  SetBlasThreads(num_threads);
  const auto mi = static_cast<blasint>(m);
  const auto ni = static_cast<blasint>(n);
  const auto ki = static_cast<blasint>(k);
  if (m == 1) {
    // One token (decode): c = Bᵀ·a as a GEMV. OpenBLAS 0.3.21's sgemm runs m = 1 through its
    // packed GEMM kernels, 2–4× slower than its sgemv here (hw/README.md, "GEMM backend").
    cblas_sgemv(CblasRowMajor, CblasTrans, ki, ni, 1.0F, b, ni, a, 1, 0.0F, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0F, a, ki, b, ni, 0.0F, c,
              ni);
}

}  // namespace

std::string_view GemmBackendName(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kEigen:
      return "eigen";
    case GemmBackend::kBlas:
      return "blas";
  }
  return "unknown";
}

std::string_view GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAuto:
      return "auto";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

GemmIsa ActiveGemmIsa() {
  GemmIsa chosen = forced_isa.load(std::memory_order_relaxed);
  if (chosen == GemmIsa::kAuto) chosen = IsaFromEnvironment();
  if (chosen != GemmIsa::kAuto) return chosen;
  static const bool kHasAvx512 = CpuSupports(GemmIsa::kAvx512);
  return kHasAvx512 ? GemmIsa::kAvx512 : GemmIsa::kAvx2;
}

// The most rows for which the skinny kernel beats Eigen's product, measured per build on the Zen 5
// VM (tests/hw/gemm_benchmark.cc, BM_GemmStep: one decode step's weights from DRAM, two threads;
// Eigen's ms / the kernel's): AVX-512 m = 2: 10.4 / 5.3, 4: 10.1-11.0 / 6.0-6.6, 8: 11.0-11.7 /
// 7.8-8.9, 12: 12.0 / 11.3-12.9 (a tie); AVX2 2: 12.1 / 8.0, 4: 11.7 / 10.7, 8: 13.5 / 19.1 (with
// 16 registers the tile of 8 rows is one vector wide, and B is read 32 bytes per row).
namespace {
uint32_t SkinnyRowsThatPay(GemmIsa isa) { return isa == GemmIsa::kAvx512 ? 8 : 4; }
}  // namespace

std::string GemmKernelName(GemmBackend backend) {
  if (backend == GemmBackend::kEigen && CpuHasAvx2Fma()) {
    return "eigen/" + std::string(GemmIsaName(ActiveGemmIsa())) +
           (GemmSkinnyRows(backend) != 0 ? "+skinny" : "");
  }
  return std::string(GemmBackendName(GemmBackend::kBlas));
}

bool SetGemmIsaForTesting(GemmIsa isa) {
  if (!CpuSupports(isa)) return false;
  forced_isa.store(isa);
  return true;
}

GemmBackend DefaultGemmBackend() {
  // Without AVX2 + FMA kEigen would run OpenBLAS anyway; say so in the records.
  return CpuHasAvx2Fma() ? kMeasuredDefault : GemmBackend::kBlas;
}

uint32_t GemmSkinnyRows(GemmBackend backend) {
  if (backend != GemmBackend::kEigen || !CpuHasAvx2Fma()) return 0;
  const uint32_t setting = SkinnySetting();
  if (setting == kGemmSkinnyRowsAuto) return SkinnyRowsThatPay(ActiveGemmIsa());
  return setting < 2 ? 0 : setting;
}

uint32_t SetGemmSkinnyRows(uint32_t rows) {
  (void)SkinnySetting();
  return skinny_rows.exchange(rows);
}

PackedB::PackedB(const float* b, uint32_t k, uint32_t n) : k_(k), n_(n) {
  data_.assign(size_t{panels()} * k * kGemmPanelColumns, 0.0F);
  for (uint32_t p = 0; p < panels(); ++p) {
    const uint32_t c0 = p * kGemmPanelColumns;
    const uint32_t cols = std::min(kGemmPanelColumns, n - c0);
    float* panel = data_.data() + size_t{p} * k * kGemmPanelColumns;
    for (uint32_t kk = 0; kk < k; ++kk) {
      std::copy_n(b + size_t{kk} * n + c0, cols, panel + size_t{kk} * kGemmPanelColumns);
    }
  }
}

bool DefaultPackedWeights(GemmBackend backend) {
  static const bool kOn = [] {
    constexpr std::string_view kNames[] = {"auto", "off"};
    return ChoiceFromVariable("FEATHER_GEMM_PACKED", kNames, 0,
                              [](size_t) { return std::string_view(); }) == 0;
  }();
  return kOn && backend == GemmBackend::kEigen && CpuHasAvx2Fma();
}

void GemmPackedB(uint32_t m, const float* a, const PackedB& b, float* c, int num_threads) {
  FEATHER_CHECK(num_threads >= 1, "GemmPackedB needs num_threads >= 1");
  FEATHER_CHECK(CpuHasAvx2Fma(), "GemmPackedB needs AVX2 + FMA");
  if (m == 0 || b.n() == 0) return;
  if (b.k() == 0) {
    std::fill_n(c, static_cast<size_t>(m) * b.n(), 0.0F);
    return;
  }
  if (ActiveGemmIsa() == GemmIsa::kAvx512) {
    internal::GemmPackedAvx512(m, a, b, c, num_threads);
  } else {
    internal::GemmPackedAvx2(m, a, b, c, num_threads);
  }
}

void Gemm(GemmBackend backend, uint32_t m, uint32_t n, uint32_t k, const float* a, const float* b,
          float* c, int num_threads) {
  FEATHER_CHECK(num_threads >= 1, "Gemm needs num_threads >= 1");
  if (m == 0 || n == 0) return;
  FEATHER_CHECK(c != nullptr, "Gemm: null C with m, n > 0");
  if (k == 0) {
    // An empty sum; BLAS implementations disagree on whether they still write C with k = 0.
    std::fill_n(c, static_cast<size_t>(m) * n, 0.0F);
    return;
  }
  FEATHER_CHECK(a != nullptr && b != nullptr, "Gemm: null A or B with m, n, k > 0");
  // Without AVX2 + FMA the Eigen kernel cannot run; OpenBLAS picks its kernels for the CPU at
  // load time, so it is the portable fallback (see gemm_eigen_body.h for why there is no
  // baseline Eigen build beside the AVX2 one). DefaultGemmBackend() then answers kBlas.
  if (backend == GemmBackend::kEigen && CpuHasAvx2Fma()) {
    if (ActiveGemmIsa() == GemmIsa::kAvx512) {
      internal::GemmEigenAvx512(m, n, k, a, b, c, num_threads, GemmSkinnyRows(backend));
    } else {
      internal::GemmEigenAvx2(m, n, k, a, b, c, num_threads, GemmSkinnyRows(backend));
    }
  } else {
    GemmBlas(m, n, k, a, b, c, num_threads);
  }
}

}  // namespace feather::hw
