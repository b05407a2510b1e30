// Tests for calib/cuda_calibration.h's host part: the CUDA fit's base profile is complete (it
// round-trips through the profile writer and the validating reader), takes its peaks from the GPU
// probes in the right units and its SM count and memory from the device, and marks them measured.
// The GPU probes and the grid themselves need a GPU (CUDA builds, never run here).
#include "calib/cuda_calibration.h"

#include <gtest/gtest.h>

#include <string>

#include "sim/io/device_profile_yaml.h"

namespace feather::calib {
namespace {

TEST(CudaCalibrationTest, BaseProfileTakesPeaksFromProbesAndDevice) {
  CudaProbes probes;
  probes.copy.best = 2900;  // GB/s
  probes.read.best = 3100;  // GB/s
  probes.flops.best = 700;  // TFLOP/s
  probes.read.reps = 20;
  probes.flops.reps = 10;
  hw::cuda::CudaDeviceInfo device;
  device.available = true;
  device.name = "NVIDIA H100 80GB HBM3";
  device.sm_count = 132;
  device.memory_bytes = 85'017'493'504;  // what an H100 80GB HBM3 reports: not a multiple of 10
  const DeviceProfile profile = CudaBaseProfile(probes, device);
  EXPECT_EQ(profile.device, "NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(profile.dram_bw_bytes_per_s, 3.1e12);
  EXPECT_DOUBLE_EQ(profile.dense_flops_per_s, 7e14);
  EXPECT_DOUBLE_EQ(profile.sm_count, 132);
  EXPECT_DOUBLE_EQ(profile.memory_bytes, 85'017'493'504.0);

  const std::string yaml = DeviceProfileToYaml(profile);
  const DeviceProfile back = ParseDeviceProfile(yaml, "cuda-base.yaml");
  EXPECT_DOUBLE_EQ(back.dram_bw_bytes_per_s, profile.dram_bw_bytes_per_s);
  EXPECT_DOUBLE_EQ(back.sm_count, 132);
  // Integer parameters must stay integers, or the reader refuses the profile calibrate wrote
  // (seen on the first H100 run: activation_reserve_bytes 8501749350.4).
  EXPECT_DOUBLE_EQ(back.activation_reserve_bytes, profile.activation_reserve_bytes);
  EXPECT_NE(yaml.find("source: measured"), std::string::npos) << yaml;
}

}  // namespace
}  // namespace feather::calib
