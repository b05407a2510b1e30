// Tests for hw/gemm.h: both backends, and each Eigen build the CPU can run (AVX2, AVX-512; the
// others skipped with the feature missing), against a naive triple loop (double accumulation) on
// odd shapes — single rows, sizes that are not multiples of the SIMD width or of the column
// blocks — with one and two threads, plus the empty and k = 0 edge cases, the names, the
// automatic choice and FEATHER_GEMM_ISA.
#include "hw/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace feather::hw {
namespace {

std::vector<float> RandomMatrix(size_t elements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0F, 1.0F);
  std::vector<float> out(elements);
  for (float& x : out) x = value(rng);
  return out;
}

// C = A·B, row-major, accumulated in double: the reference.
std::vector<double> NaiveGemm(uint32_t m, uint32_t n, uint32_t k, const std::vector<float>& a,
                              const std::vector<float>& b) {
  std::vector<double> c(static_cast<size_t>(m) * n, 0.0);
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (uint32_t p = 0; p < k; ++p) {
        sum += static_cast<double>(a[static_cast<size_t>(i) * k + p]) *
               static_cast<double>(b[static_cast<size_t>(p) * n + j]);
      }
      c[static_cast<size_t>(i) * n + j] = sum;
    }
  }
  return c;
}

struct Shape {
  uint32_t m, n, k;
};

struct GemmCase {
  GemmBackend backend;
  GemmIsa isa;  // kEigen's build; kAuto with kBlas
  Shape shape;
  int threads;
};

std::string CaseName(const testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  std::string name(GemmBackendName(c.backend));
  if (c.isa != GemmIsa::kAuto) name += "_" + std::string(GemmIsaName(c.isa));
  return name + "_m" + std::to_string(c.shape.m) + "_n" + std::to_string(c.shape.n) + "_k" +
         std::to_string(c.shape.k) + "_t" + std::to_string(c.threads);
}

// Forces an Eigen build for one test and restores the automatic choice after.
class ScopedGemmIsa {
 public:
  explicit ScopedGemmIsa(GemmIsa isa) : forced_(SetGemmIsaForTesting(isa)) {}
  ~ScopedGemmIsa() { (void)SetGemmIsaForTesting(GemmIsa::kAuto); }
  ScopedGemmIsa(const ScopedGemmIsa&) = delete;
  ScopedGemmIsa& operator=(const ScopedGemmIsa&) = delete;
  [[nodiscard]] bool forced() const { return forced_; }

 private:
  bool forced_;
};

bool CpuHas(const char* feature) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const std::string f = feature;
  if (f == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (f == "avx512") {
    return CpuHas("avx2") && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl");
  }
#endif
  (void)feature;
  return false;
}

class GemmVersusNaiveTest : public testing::TestWithParam<GemmCase> {};

TEST_P(GemmVersusNaiveTest, MatchesTripleLoop) {
  const auto [backend, isa, shape, threads] = GetParam();
  const ScopedGemmIsa scoped(isa);
  if (!scoped.forced()) {
    GTEST_SKIP() << "this CPU cannot run Eigen's " << GemmIsaName(isa)
                 << " build (avx2 needs avx2 + fma; avx512 also avx512f + avx512vl)";
  }
  const auto a = RandomMatrix(static_cast<size_t>(shape.m) * shape.k, 1);
  const auto b = RandomMatrix(static_cast<size_t>(shape.k) * shape.n, 2);
  std::vector<float> c(static_cast<size_t>(shape.m) * shape.n, 12345.0F);  // must be overwritten
  Gemm(backend, shape.m, shape.n, shape.k, a.data(), b.data(), c.data(), threads);
  const auto expected = NaiveGemm(shape.m, shape.n, shape.k, a, b);
  // fp32 products of k terms in [-1, 1]: the rounding error grows like sqrt(k)·2^-24 per term.
  const double tolerance = 1e-5 * std::sqrt(static_cast<double>(shape.k)) * 4.0 + 1e-6;
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(c[i], expected[i], tolerance) << "element " << i;
  }
}

std::vector<GemmCase> AllCases() {
  // Odd m (one decode row, a few rows, 17 and 129 off every register-panel height), n and k off
  // every multiple of 8 and of the 16-column thread blocks, and shapes large enough to take the
  // multi-threaded path of both backends (split by columns, and by rows when m > n).
  const Shape shapes[] = {{1, 37, 53},   {3, 101, 29},   {17, 67, 131},
                          {1, 333, 517}, {17, 259, 301}, {129, 200, 97}};
  std::vector<GemmCase> cases;
  const std::pair<GemmBackend, GemmIsa> builds[] = {{GemmBackend::kEigen, GemmIsa::kAvx2},
                                                    {GemmBackend::kEigen, GemmIsa::kAvx512},
                                                    {GemmBackend::kBlas, GemmIsa::kAuto}};
  for (const auto& [backend, isa] : builds) {
    for (const Shape& shape : shapes) {
      for (const int threads : {1, 2}) cases.push_back({backend, isa, shape, threads});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(OddShapes, GemmVersusNaiveTest, testing::ValuesIn(AllCases()), CaseName);

// The skinny kernel (gemm_eigen_body.h) on every Eigen build the CPU runs: every row count from 1
// to 17 (one and two passes of at most 8 rows, every register-tile height), column counts off
// every tile width and vector (the one-vector and scalar tails), one and two threads, against
// the triple loop. With the kernel switched off the same products take Eigen's path.
TEST(GemmSkinnyTest, EveryRowCountMatchesTripleLoopOnEveryBuild) {
  for (const GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    const ScopedGemmIsa scoped(isa);
    if (!scoped.forced()) {
      std::printf("[ SKIPPED  ] skinny kernel, Eigen's %s build: this CPU cannot run it\n",
                  std::string(GemmIsaName(isa)).c_str());
      continue;
    }
    for (const uint32_t skinny : {16u, 0u}) {
      const uint32_t before = SetGemmSkinnyRows(skinny);
      for (uint32_t m = 1; m <= 17; ++m) {
        for (const Shape shape : {Shape{m, 37, 53}, Shape{m, 1029, 517}, Shape{m, 389, 1}}) {
          const auto a = RandomMatrix(static_cast<size_t>(shape.m) * shape.k, m);
          const auto b = RandomMatrix(static_cast<size_t>(shape.k) * shape.n, m + 100);
          const auto expected = NaiveGemm(shape.m, shape.n, shape.k, a, b);
          const double tolerance = 1e-5 * std::sqrt(static_cast<double>(shape.k)) * 4.0 + 1e-6;
          for (const int threads : {1, 2}) {
            std::vector<float> c(static_cast<size_t>(shape.m) * shape.n, 12345.0F);
            Gemm(GemmBackend::kEigen, shape.m, shape.n, shape.k, a.data(), b.data(), c.data(),
                 threads);
            for (size_t i = 0; i < c.size(); ++i) {
              ASSERT_NEAR(c[i], expected[i], tolerance)
                  << GemmIsaName(isa) << " skinny " << skinny << " m " << m << " n " << shape.n
                  << " k " << shape.k << " threads " << threads << " element " << i;
            }
          }
        }
      }
      (void)SetGemmSkinnyRows(before);
    }
  }
}

// The skinny kernel on packed B, on every Eigen build the CPU runs: every m from 1 to 17, column
// counts that end a panel early (the zero padding is computed and dropped) or fill it, k of 1
// and odd sizes, one and two threads, against the triple loop; and the same bits as the
// row-major skinny kernel (Gemm with the row limit at 17) wherever that one multiplies-adds in
// vectors (both sum in k order with FMAs).
TEST(GemmPackedTest, EveryRowCountMatchesTripleLoopAndTheRowMajorKernel) {
  for (const GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    const ScopedGemmIsa scoped(isa);
    if (!scoped.forced()) {
      std::printf("[ SKIPPED  ] packed kernel, %s build: this CPU cannot run it\n",
                  std::string(GemmIsaName(isa)).c_str());
      continue;
    }
    const uint32_t before = SetGemmSkinnyRows(17);
    for (uint32_t m = 1; m <= 17; ++m) {
      for (const Shape shape : {Shape{m, 37, 53}, Shape{m, 1029, 517}, Shape{m, 389, 1},
                                Shape{m, 96, 64}, Shape{m, 7, 300}}) {
        const auto a = RandomMatrix(static_cast<size_t>(shape.m) * shape.k, m);
        const auto b = RandomMatrix(static_cast<size_t>(shape.k) * shape.n, m + 200);
        const PackedB packed(b.data(), shape.k, shape.n);
        EXPECT_EQ(packed.panels(), (shape.n + kGemmPanelColumns - 1) / kGemmPanelColumns);
        const auto expected = NaiveGemm(shape.m, shape.n, shape.k, a, b);
        const double tolerance = 1e-5 * std::sqrt(static_cast<double>(shape.k)) * 4.0 + 1e-6;
        for (const int threads : {1, 2}) {
          std::vector<float> c(static_cast<size_t>(shape.m) * shape.n, 12345.0F);
          GemmPackedB(shape.m, a.data(), packed, c.data(), threads);
          std::vector<float> row_major(c.size(), -1.0F);
          Gemm(GemmBackend::kEigen, shape.m, shape.n, shape.k, a.data(), b.data(), row_major.data(),
               threads);
          // Gemm took its skinny kernel, whose columns past the last whole vector are scalar
          // sums (no FMA: the same order, other rounding).
          const bool skinny = m >= 2 && m <= shape.n;
          const uint32_t lanes = isa == GemmIsa::kAvx512 ? 16 : 8;
          const uint32_t vector_columns = shape.n / lanes * lanes;
          for (size_t i = 0; i < c.size(); ++i) {
            ASSERT_NEAR(c[i], expected[i], tolerance)
                << GemmIsaName(isa) << " m " << m << " n " << shape.n << " k " << shape.k
                << " threads " << threads << " element " << i;
            if (skinny && i % shape.n < vector_columns) {
              ASSERT_EQ(c[i], row_major[i]) << GemmIsaName(isa) << " m " << m << " n " << shape.n
                                            << " k " << shape.k << " element " << i;
            }
          }
        }
      }
    }
    (void)SetGemmSkinnyRows(before);
  }
}

TEST(GemmTest, EmptyProductsLeaveOrZeroC) {
  for (const GemmBackend backend : {GemmBackend::kEigen, GemmBackend::kBlas}) {
    // m = 0 or n = 0: nothing to write, null pointers allowed.
    Gemm(backend, 0, 5, 3, nullptr, nullptr, nullptr, 1);
    Gemm(backend, 4, 0, 3, nullptr, nullptr, nullptr, 2);
    // k = 0: C is the empty sum, all zeros.
    std::vector<float> c(6, 7.0F);
    Gemm(backend, 2, 3, 0, nullptr, nullptr, c.data(), 2);
    for (const float x : c) EXPECT_EQ(x, 0.0F);
  }
}

TEST(GemmTest, BackendsAgreeAfterThreadCountChanges) {
  // Alternating thread counts exercises the "set OpenBLAS threads only on change" path.
  const Shape shape{64, 96, 80};
  const auto a = RandomMatrix(static_cast<size_t>(shape.m) * shape.k, 3);
  const auto b = RandomMatrix(static_cast<size_t>(shape.k) * shape.n, 4);
  std::vector<float> eigen(static_cast<size_t>(shape.m) * shape.n);
  std::vector<float> blas(eigen.size());
  for (const int threads : {2, 1, 2, 2, 1}) {
    Gemm(GemmBackend::kEigen, shape.m, shape.n, shape.k, a.data(), b.data(), eigen.data(), threads);
    Gemm(GemmBackend::kBlas, shape.m, shape.n, shape.k, a.data(), b.data(), blas.data(), threads);
    for (size_t i = 0; i < eigen.size(); ++i) ASSERT_NEAR(eigen[i], blas[i], 1e-4) << i;
  }
}

TEST(GemmTest, NamesAndDefault) {
  EXPECT_EQ(GemmBackendName(GemmBackend::kEigen), "eigen");
  EXPECT_EQ(GemmBackendName(GemmBackend::kBlas), "blas");
  const GemmBackend chosen = DefaultGemmBackend();
  EXPECT_TRUE(chosen == GemmBackend::kEigen || chosen == GemmBackend::kBlas);
}

TEST(GemmIsaTest, NamesAutoChoiceAndForcing) {
  EXPECT_EQ(GemmIsaName(GemmIsa::kAuto), "auto");
  EXPECT_EQ(GemmIsaName(GemmIsa::kAvx2), "avx2");
  EXPECT_EQ(GemmIsaName(GemmIsa::kAvx512), "avx512");
  if (std::getenv("FEATHER_GEMM_ISA") == nullptr) {
    EXPECT_EQ(ActiveGemmIsa(), CpuHas("avx512") ? GemmIsa::kAvx512 : GemmIsa::kAvx2);
  }
  EXPECT_EQ(GemmKernelName(GemmBackend::kBlas), "blas");
  for (const GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    const bool supported = CpuHas(GemmIsaName(isa) == "avx2" ? "avx2" : "avx512");
    const GemmIsa before = ActiveGemmIsa();
    EXPECT_EQ(SetGemmIsaForTesting(isa), supported) << GemmIsaName(isa);
    EXPECT_EQ(ActiveGemmIsa(), supported ? isa : before) << GemmIsaName(isa);
    if (supported) {
      const bool skinny = GemmSkinnyRows(GemmBackend::kEigen) != 0;
      EXPECT_EQ(GemmKernelName(GemmBackend::kEigen),
                "eigen/" + std::string(GemmIsaName(isa)) + (skinny ? "+skinny" : ""));
    }
    (void)SetGemmIsaForTesting(GemmIsa::kAuto);
  }
  if (!CpuHas("avx2")) {
    EXPECT_EQ(GemmKernelName(GemmBackend::kEigen), "blas");
  }
}

// The skinny kernel's row limit: the automatic choice is the build's (8 rows on AVX-512, 4 on
// AVX2), a number is taken as it is (1 means none), 0 is off, and backends that do not run Eigen
// here have none.
TEST(GemmSkinnyTest, RowLimitFollowsTheSettingAndTheBuild) {
  if (!CpuHas("avx2")) GTEST_SKIP() << "without avx2 + fma kEigen runs OpenBLAS: no skinny kernel";
  const uint32_t before = SetGemmSkinnyRows(kGemmSkinnyRowsAuto);
  for (const GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    const ScopedGemmIsa scoped(isa);
    if (!scoped.forced()) continue;
    EXPECT_EQ(GemmSkinnyRows(GemmBackend::kEigen), isa == GemmIsa::kAvx512 ? 8u : 4u);
    EXPECT_TRUE(GemmKernelName(GemmBackend::kEigen).ends_with("+skinny"));
  }
  EXPECT_EQ(GemmSkinnyRows(GemmBackend::kBlas), 0u);
  EXPECT_EQ(SetGemmSkinnyRows(5), kGemmSkinnyRowsAuto);
  EXPECT_EQ(GemmSkinnyRows(GemmBackend::kEigen), 5u);
  (void)SetGemmSkinnyRows(1);
  EXPECT_EQ(GemmSkinnyRows(GemmBackend::kEigen), 0u);
  (void)SetGemmSkinnyRows(0);
  EXPECT_EQ(GemmSkinnyRows(GemmBackend::kEigen), 0u);
  EXPECT_FALSE(GemmKernelName(GemmBackend::kEigen).ends_with("+skinny"));
  (void)SetGemmSkinnyRows(before);
}

// FEATHER_GEMM_SKINNY: unset or auto turns the skinny kernel on (and the kernel name says so), an
// unknown value is bad input (exit 2, naming it).
TEST(GemmSkinnyDeathTest, EnvironmentVariableTurnsTheKernelOnAndRejectsBadValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  if (!CpuHas("avx2")) GTEST_SKIP() << "without avx2 + fma kEigen runs OpenBLAS";
  EXPECT_EXIT(
      {
        setenv("FEATHER_GEMM_SKINNY", "auto", 1);
        std::exit(GemmKernelName(GemmBackend::kEigen).ends_with("+skinny") ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_GEMM_SKINNY", "off", 1);
        std::exit(GemmKernelName(GemmBackend::kEigen).ends_with("+skinny") ? 4 : 3);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        unsetenv("FEATHER_GEMM_SKINNY");
        std::exit(GemmKernelName(GemmBackend::kEigen).ends_with("+skinny") ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_GEMM_SKINNY", "on", 1);
        (void)GemmKernelName(GemmBackend::kEigen);
      },
      ::testing::ExitedWithCode(2), "FEATHER_GEMM_SKINNY=on: unknown");
}

// FEATHER_GEMM_PACKED: unset or auto packs where the packed kernel runs, off never, an unknown
// value is bad input (exit 2, naming it); a backend that is not Eigen never packs.
TEST(GemmPackedDeathTest, EnvironmentVariableChoosesAndRejectsBadValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const bool can = CpuHas("avx2");
  EXPECT_EXIT(
      {
        unsetenv("FEATHER_GEMM_PACKED");
        std::exit(DefaultPackedWeights(GemmBackend::kEigen) == can ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_GEMM_PACKED", "off", 1);
        std::exit(DefaultPackedWeights(GemmBackend::kEigen) ? 4 : 3);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_GEMM_PACKED", "yes", 1);
        (void)DefaultPackedWeights(GemmBackend::kEigen);
      },
      ::testing::ExitedWithCode(2), "FEATHER_GEMM_PACKED=yes: unknown");
  // (After the death tests: a threadsafe death test reruns this test up to its statement, and
  // the variable is read once per process.)
  EXPECT_FALSE(DefaultPackedWeights(GemmBackend::kBlas));
}

TEST(GemmIsaDeathTest, EnvironmentVariableForcesABuildAndRejectsBadValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  if (CpuHas("avx2")) {
    EXPECT_EXIT(
        {
          setenv("FEATHER_GEMM_ISA", "avx2", 1);
          std::exit(ActiveGemmIsa() == GemmIsa::kAvx2 ? 3 : 4);
        },
        ::testing::ExitedWithCode(3), "");
  }
  EXPECT_EXIT(
      {
        setenv("FEATHER_GEMM_ISA", "avx9", 1);
        (void)ActiveGemmIsa();
      },
      ::testing::ExitedWithCode(2), "FEATHER_GEMM_ISA=avx9: unknown");
  if (!CpuHas("avx512")) {
    EXPECT_EXIT(
        {
          setenv("FEATHER_GEMM_ISA", "avx512", 1);
          (void)ActiveGemmIsa();
        },
        ::testing::ExitedWithCode(2),
        "FEATHER_GEMM_ISA=avx512: this CPU lacks (avx2|fma|avx512f|avx512vl) \\(this CPU runs: ");
  }
}

TEST(GemmDeathTest, ZeroThreadsIsABug) {
  // OpenBLAS and OpenMP pools exist by now: re-execute the binary rather than fork it.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> c(1);
  const float one = 1.0F;
  EXPECT_DEATH(Gemm(GemmBackend::kBlas, 1, 1, 1, &one, &one, c.data(), 0), "num_threads");
}

}  // namespace
}  // namespace feather::hw
