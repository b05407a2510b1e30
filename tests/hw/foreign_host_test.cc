// foreign_host_test.cc: telling a profile's machine from this one, fact by fact, with the
// tolerances of hw/foreign_host.h; a fact either side lacks is never a difference.
#include "hw/foreign_host.h"
#include "sim/io/device_profile_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace feather {
namespace {

using ::testing::HasSubstr;

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
  const DeviceProfile back = ParseDeviceProfile(DeviceProfileToYaml(profile), "p.yaml");
  ASSERT_TRUE(back.measured_on.has_value());
  EXPECT_EQ(*back.measured_on, *profile.measured_on);
  EXPECT_EQ(ForeignHostDifference(IdentityOf(*back.measured_on), Epyc()), std::nullopt);
}

}  // namespace
}  // namespace feather
