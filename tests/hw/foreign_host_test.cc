// foreign_host_test.cc: telling a profile's machine from this one, fact by fact, with the
// tolerances of hw/foreign_host.h; a fact either side lacks is never a difference.
#include "hw/foreign_host.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/io/device_profile_yaml.h"

namespace feather {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

HostIdentity Epyc() { return {"AMD EPYC", 2, 32ull << 20, 25.4e9}; }

TEST(ForeignHost, TheSameMachineIsNotForeign) {
  EXPECT_EQ(ForeignHostDifference(Epyc(), Epyc()), std::nullopt);
  HostIdentity noisy = Epyc();
  // The same VM's read probe has moved by a third within an hour (hw/foreign_host.h).
  noisy.read_bw_bytes_per_s = 17.5e9;
  HostIdentity fast = Epyc();
  fast.read_bw_bytes_per_s = 26.0e9;
  EXPECT_EQ(ForeignHostDifference(fast, noisy), std::nullopt);
  EXPECT_EQ(ForeignHostDifference(noisy, fast), std::nullopt);
}

// The machine of issue 20: same name, same cores, about twice the bandwidth.
TEST(ForeignHost, SameFamilyWithTwiceTheBandwidthIsForeign) {
  HostIdentity other = Epyc();
  other.read_bw_bytes_per_s = 48e9;
  const std::optional<std::string> why = ForeignHostDifference(Epyc(), other);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr("DRAM read 25.4 GB/s"));
  EXPECT_THAT(*why, HasSubstr("DRAM read 48.0 GB/s"));
  EXPECT_THAT(*why, HasSubstr("differ in DRAM read bandwidth (over 40 % apart)"));
}

// A profile that recorded the range of its calibration's reads (this Zen 4 VM: 27.6-48.5 GB/s
// within five minutes) takes any read inside it, and a read outside it is compared with the
// nearer end; without the range, the same VM's slow minute read as foreign.
TEST(ForeignHost, AReadInsideTheCalibrationsRangeIsTheSameHost) {
  HostIdentity profile = Epyc();
  profile.read_bw_bytes_per_s = 48.5e9;
  HostIdentity host = Epyc();
  host.read_bw_bytes_per_s = 28.9e9;
  EXPECT_THAT(ForeignHostDifference(profile, host).value_or(""),
              HasSubstr("DRAM read bandwidth"));  // the top alone: 40.4 % apart
  profile.read_bw_low_bytes_per_s = 27.6e9;
  EXPECT_EQ(ForeignHostDifference(profile, host), std::nullopt);
  host.read_bw_bytes_per_s = 17.0e9;  // 38 % under the range's low end: still the same host
  EXPECT_EQ(ForeignHostDifference(profile, host), std::nullopt);
  host.read_bw_bytes_per_s = 16.0e9;  // 42 % under it
  const std::optional<std::string> low = ForeignHostDifference(profile, host);
  ASSERT_TRUE(low.has_value());
  EXPECT_THAT(*low, HasSubstr("DRAM read 27.6-48.5 GB/s"));
  EXPECT_THAT(*low, HasSubstr("DRAM read 16.0 GB/s"));
  host.read_bw_bytes_per_s = 80.0e9;  // 39 % over its top
  EXPECT_EQ(ForeignHostDifference(profile, host), std::nullopt);
  host.read_bw_bytes_per_s = 82.0e9;  // 41 % over it
  EXPECT_TRUE(ForeignHostDifference(profile, host).has_value());
}

TEST(ForeignHost, EachStaticFactCounts) {
  HostIdentity model = Epyc();
  model.cpu_model = "Intel Xeon";
  EXPECT_THAT(ForeignHostDifference(Epyc(), model).value_or(""), HasSubstr("CPU model"));
  HostIdentity cpus = Epyc();
  cpus.usable_cpus = 4;
  EXPECT_THAT(ForeignHostDifference(Epyc(), cpus).value_or(""), HasSubstr("CPU count"));
  HostIdentity l3 = Epyc();
  l3.l3_cache_bytes = 16ull << 20;
  EXPECT_THAT(ForeignHostDifference(Epyc(), l3).value_or(""), HasSubstr("L3 size"));
}

// The two VM types of 2026-11-28..12-01: both "AMD EPYC", 2 CPUs, 32 MiB of L3, DRAM probes
// 40-62 GB/s; a Zen 4 and a Zen 5 with 178 and 533 GFLOP/s of GEMM peak.
HostIdentity Zen(const char* signature, double read_bw, double gemm_peak) {
  HostIdentity h = Epyc();
  h.cpu_signature = signature;
  h.kernels = {"avx512bf16", "eigen/avx512"};
  h.read_bw_bytes_per_s = read_bw;
  h.gemm_peak_flops_per_s = gemm_peak;
  return h;
}

TEST(ForeignHost, TheSignatureTellsGenerationsOfOneModelNameApart) {
  const HostIdentity zen4 = Zen("AuthenticAMD family 25 model 17", 40e9, 178e9);
  const HostIdentity zen5 = Zen("AuthenticAMD family 26 model 2", 62e9, 533e9);
  const std::optional<std::string> why = ForeignHostDifference(zen5, zen4);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr("AMD EPYC (AuthenticAMD family 26 model 2)"));
  EXPECT_THAT(*why, HasSubstr("AMD EPYC (AuthenticAMD family 25 model 17)"));
  EXPECT_THAT(*why, HasSubstr("CPU signature"));
  EXPECT_THAT(*why, HasSubstr("GEMM peak (over 50 % apart)"));
  EXPECT_THAT(*why, Not(HasSubstr("DRAM read bandwidth")));  // 35 % apart: within 40 %
}

TEST(ForeignHost, TheGemmPeakCountsWhenBothSidesProbedIt) {
  const HostIdentity zen5 = Zen("AuthenticAMD family 26 model 2", 62e9, 533e9);
  HostIdentity slow = zen5;
  slow.gemm_peak_flops_per_s = 178e9;  // as a Zen 4 VM reads, with the signature unrecorded
  slow.cpu_signature.clear();
  EXPECT_THAT(ForeignHostDifference(zen5, slow).value_or(""), HasSubstr("GEMM peak"));
  HostIdentity drifted = zen5;
  drifted.gemm_peak_flops_per_s = 0.62 * 533e9;  // one VM's drift within a validation
  EXPECT_EQ(ForeignHostDifference(zen5, drifted), std::nullopt);
  HostIdentity unprobed = zen5;
  unprobed.gemm_peak_flops_per_s = 0;  // `feather run`
  EXPECT_EQ(ForeignHostDifference(zen5, unprobed), std::nullopt);
}

TEST(ForeignHost, KernelsComeFromTheVariantAndTheHost) {
  EXPECT_EQ(KernelsOfVariant("avx2+fma, openmp 2 threads, gemm=blas"), (KernelIds{"avx2", "blas"}));
  EXPECT_EQ(KernelsOfVariant(
                "avx512bf16, openmp 2 threads, gemm=eigen/avx512+skinny packed, model cpu-small"),
            (KernelIds{"avx512bf16", "eigen/avx512"}));
  EXPECT_EQ(KernelsOfVariant("avx512, openmp 1 threads, gemm=eigen/avx2, model m, quick grid"),
            (KernelIds{"avx512", "eigen/avx2"}));
  EXPECT_EQ(KernelsOfVariant("avx2+fma, openmp 2 threads, gemm=eigen, model cpu-small"),
            (KernelIds{"avx2", "eigen"}));
  EXPECT_EQ(KernelsOfVariant("cuda NVIDIA H100 sm_90 GPU-1234, model llama"), KernelIds{});
  EXPECT_EQ(KernelsOfVariant("avx2+fma, openmp 2 threads"), (KernelIds{"avx2", ""}));
  HostInfo host;
  host.attention_isa = "avx512bf16";
  host.gemm_kernel = "eigen/avx512+skinny";
  EXPECT_EQ(KernelsOfHost(host), (KernelIds{"avx512bf16", "eigen/avx512"}));
}

TEST(ForeignHost, DifferentKernelsAreForeign) {
  HostIdentity avx2 = Epyc();
  avx2.kernels = {"avx2", "eigen/avx2"};
  HostIdentity avx512 = Epyc();
  avx512.kernels = {"avx512bf16", "eigen/avx512"};
  const std::optional<std::string> why = ForeignHostDifference(avx2, avx512);
  EXPECT_THAT(why.value_or(""), HasSubstr("kernels attention avx2, gemm eigen/avx2"));
  EXPECT_THAT(why.value_or(""), HasSubstr("differ in kernels"));
  EXPECT_EQ(ForeignHostDifference(avx512, avx512), std::nullopt);
  HostIdentity blas = avx512;
  blas.kernels.gemm = "blas";
  EXPECT_THAT(ForeignHostDifference(blas, avx512).value_or(""), HasSubstr("kernels"));
  // A profile from before the GEMM's ISA was recorded says "eigen": any Eigen build matches.
  HostIdentity old = avx512;
  old.kernels.gemm = "eigen";
  EXPECT_EQ(ForeignHostDifference(old, avx512), std::nullopt);
  old.kernels.attention = "avx2";
  EXPECT_THAT(ForeignHostDifference(old, avx512).value_or(""), HasSubstr("kernels"));
}

TEST(ForeignHost, UnrecordedFactsAreNotCompared) {
  HostIdentity old_profile;  // written before these fields: only the CPU model
  old_profile.cpu_model = "AMD EPYC";
  EXPECT_EQ(ForeignHostDifference(old_profile, Epyc()), std::nullopt);
  HostIdentity unprobed = Epyc();
  unprobed.read_bw_bytes_per_s = 0;  // `feather run` does not probe
  EXPECT_EQ(ForeignHostDifference(Epyc(), unprobed), std::nullopt);
}

TEST(ForeignHost, ProfileFactsRoundTripThroughYaml) {
  DeviceProfile profile =
      LoadDeviceProfile(std::string(FEATHER_SOURCE_DIR) + "/results/profiles/cpu.yaml");
  ASSERT_TRUE(profile.measured_on.has_value());
  profile.measured_on->usable_cpus = 2;
  profile.measured_on->l3_cache_bytes = 32ull << 20;
  profile.measured_on->read_bw_bytes_per_s = 25.4e9;
  profile.measured_on->read_bw_low_bytes_per_s = 19.3e9;
  profile.measured_on->cpu_signature = "AuthenticAMD family 25 model 17";
  const DeviceProfile back = ParseDeviceProfile(DeviceProfileToYaml(profile), "p.yaml");
  ASSERT_TRUE(back.measured_on.has_value());
  EXPECT_EQ(*back.measured_on, *profile.measured_on);
  HostIdentity host = Epyc();
  host.cpu_signature = "AuthenticAMD family 25 model 17";
  host.kernels = KernelsOfVariant(back.measured_on->kernel_variant);
  EXPECT_EQ(ForeignHostDifference(IdentityOf(*back.measured_on), host), std::nullopt);
  host.cpu_signature = "AuthenticAMD family 23 model 49";
  EXPECT_THAT(ForeignHostDifference(IdentityOf(*back.measured_on), host).value_or(""),
              HasSubstr("CPU signature"));
  // A slowest read above the fastest is named.
  profile.measured_on->read_bw_low_bytes_per_s = 30e9;
  try {
    (void)ParseDeviceProfile(DeviceProfileToYaml(profile), "p.yaml");
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("measured_on.read_bw_low_bytes_per_s: the slowest read is "
                                    "above the fastest"));
  }
}

// A profile's page size: recorded, or 16 (every calibration before the field); any other size in
// the run is named with both sizes and the calibration that fits.
TEST(BlockTokens, AnUnrecordedSizeIsSixteenAndAnotherSizeIsNamed) {
  ProfileMeasuredOn old;
  EXPECT_EQ(CalibratedBlockTokens(old), 16u);
  EXPECT_EQ(BlockTokensDifference(old, 16), std::nullopt);
  const std::optional<std::string> why = BlockTokensDifference(old, 128);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr("calibrated with 16-token KV pages; this run uses 128"));
  EXPECT_THAT(*why, HasSubstr("feather calibrate --block-tokens 128"));
  ProfileMeasuredOn large;
  large.block_tokens = 128;
  EXPECT_EQ(CalibratedBlockTokens(large), 128u);
  EXPECT_EQ(BlockTokensDifference(large, 128), std::nullopt);
  EXPECT_THAT(BlockTokensDifference(large, 16).value_or(""),
              HasSubstr("calibrated with 128-token KV pages; this run uses 16"));
}

}  // namespace
}  // namespace feather
