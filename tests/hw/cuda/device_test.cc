// Tests for hw/cuda/device.h, and the GPU-only tests of hw/cuda/: on this project's machines there
// is no GPU, so QueryCudaDevice must answer "not available" with a reason (never crash or
// throw), and every test that needs a device skips saying why. On a GPU machine the kernel test
// runs the self-check's attention cases through the real kernels.
#include "hw/cuda/device.h"

#include <gtest/gtest.h>

#include <sstream>

#include "hw/cuda/attention_cases.h"
#if FEATHER_HAVE_CUDA
#include "hw/cuda/gemm_cublas.h"
#include "hw/cuda/selfcheck.h"
#endif

namespace feather::hw::cuda {
namespace {

TEST(CudaDeviceTest, AnswersWithAReasonWhenThereIsNoDevice) {
  const CudaDeviceInfo info = QueryCudaDevice();
  if (info.available) {
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.sm_count, 0);
    EXPECT_EQ(info.uuid.rfind("GPU-", 0), 0u);
  } else {
    EXPECT_FALSE(info.why_not.empty());
    EXPECT_EQ(info.why_not.find('\n'), std::string::npos) << "one line";
  }
  EXPECT_EQ(CudaCompiledIn(), FEATHER_HAVE_CUDA != 0);
}

// cuBLAS and cuBLASLt are dlopen'ed, not linked: their names, paths and every symbol feather
// calls must resolve (checked without a GPU).
TEST(CudaDeviceTest, CublasLoadsAndEverySymbolResolves) {
#if FEATHER_HAVE_CUDA
  EXPECT_EQ(CheckCublasLoadable(), "");
#else
  GTEST_SKIP() << "built without CUDA (no nvcc at configure time)";
#endif
}

TEST(CudaDeviceTest, SelfcheckPassesOnAGpu) {
#if FEATHER_HAVE_CUDA
  const CudaDeviceInfo info = QueryCudaDevice();
  if (!info.available) GTEST_SKIP() << "needs a CUDA GPU: " << info.why_not;
  std::ostringstream log;
  const SelfcheckStamp stamp = RunCudaSelfcheck(info, log);
  EXPECT_TRUE(stamp.passed) << log.str();
#else
  GTEST_SKIP() << "built without CUDA (no nvcc at configure time)";
#endif
}

}  // namespace
}  // namespace feather::hw::cuda
