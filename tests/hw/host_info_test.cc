// Tests for hw/host_info.h: cache-size parsing, sysfs cache reading, the host reading itself,
// its JSON form and the RSS probes.
#include "hw/host_info.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace feather {
namespace {

// True for "YYYY-MM-DDTHH:MM:SSZ" (digits where the pattern has letters).
bool IsIso8601Utc(const std::string& text) {
  constexpr std::string_view kPattern = "dddd-dd-ddTdd:dd:ddZ";
  if (text.size() != kPattern.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool digit = text[i] >= '0' && text[i] <= '9';
    if (kPattern[i] == 'd' ? !digit : text[i] != kPattern[i]) return false;
  }
  return true;
}

TEST(IsIso8601UtcTest, AcceptsOnlyTheFormat) {
  EXPECT_TRUE(IsIso8601Utc("2024-05-01T12:00:59Z"));
  EXPECT_FALSE(IsIso8601Utc("2024-05-01 12:00:59Z"));
  EXPECT_FALSE(IsIso8601Utc("2024-05-01T12:00:59"));
  EXPECT_FALSE(IsIso8601Utc(""));
}

TEST(ParseCacheSizeBytesTest, ParsesSysfsSuffixes) {
  EXPECT_EQ(ParseCacheSizeBytes("32K"), 32u * 1024);
  EXPECT_EQ(ParseCacheSizeBytes("1024K"), 1024u * 1024);
  EXPECT_EQ(ParseCacheSizeBytes("32M"), 32u * 1024 * 1024);
  EXPECT_EQ(ParseCacheSizeBytes("2G"), size_t{2} * 1024 * 1024 * 1024);
  EXPECT_EQ(ParseCacheSizeBytes("512"), 512u);
  EXPECT_EQ(ParseCacheSizeBytes("48k"), 48u * 1024);
}

TEST(ParseCacheSizeBytesTest, ToleratesSurroundingWhitespace) {
  EXPECT_EQ(ParseCacheSizeBytes("32K\n"), 32u * 1024);
  EXPECT_EQ(ParseCacheSizeBytes("  1M "), 1024u * 1024);
}

TEST(ParseCacheSizeBytesTest, RejectsMalformedInput) {
  EXPECT_EQ(ParseCacheSizeBytes(""), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("   "), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("K"), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("abc"), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("12Q"), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("12KB"), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("-4K"), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("3 K"), 0u);
  EXPECT_EQ(ParseCacheSizeBytes("99999999999999999999999K"), 0u);  // overflows uint64
  EXPECT_EQ(ParseCacheSizeBytes("18014398509481984K"), 0u);        // 2^54 K overflows bytes
}

// A fake sysfs cache folder in a fresh temporary directory, removed at the end of the test.
class FakeCacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "feather_cache_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }
  void AddIndex(int index, const std::string& level, const std::string& type,
                const std::string& size) {
    const std::filesystem::path sub = dir_ / ("index" + std::to_string(index));
    std::filesystem::create_directories(sub);
    std::ofstream(sub / "level") << level << '\n';
    std::ofstream(sub / "type") << type << '\n';
    std::ofstream(sub / "size") << size << '\n';
  }

  std::filesystem::path dir_;
};

TEST_F(FakeCacheDirTest, ReadsDataAndUnifiedLevels) {
  AddIndex(0, "1", "Data", "48K");
  AddIndex(1, "1", "Instruction", "32K");
  AddIndex(2, "2", "Unified", "2048K");
  AddIndex(3, "3", "Unified", "32M");
  const CacheSizes sizes = ReadCacheSizes(dir_);
  EXPECT_EQ(sizes.l1d_bytes, 48u * 1024);
  EXPECT_EQ(sizes.l2_bytes, 2048u * 1024);
  EXPECT_EQ(sizes.l3_bytes, 32u * 1024 * 1024);
}

TEST_F(FakeCacheDirTest, InstructionCacheIsNotTakenForData) {
  AddIndex(0, "1", "Instruction", "64K");
  const CacheSizes sizes = ReadCacheSizes(dir_);
  EXPECT_EQ(sizes.l1d_bytes, 0u);
}

TEST_F(FakeCacheDirTest, MissingOrBadFilesLeaveZero) {
  AddIndex(0, "1", "Data", "garbage");
  std::filesystem::create_directories(dir_ / "index1");  // no files at all
  std::filesystem::create_directories(dir_ / "power");   // not a cache index
  const CacheSizes sizes = ReadCacheSizes(dir_);
  EXPECT_EQ(sizes.l1d_bytes, 0u);
  EXPECT_EQ(sizes.l2_bytes, 0u);
  EXPECT_EQ(sizes.l3_bytes, 0u);
}

TEST(ReadCacheSizesTest, MissingFolderGivesZeros) {
  const CacheSizes sizes = ReadCacheSizes("/nonexistent/feather/cache");
  EXPECT_EQ(sizes.l1d_bytes, 0u);
  EXPECT_EQ(sizes.l2_bytes, 0u);
  EXPECT_EQ(sizes.l3_bytes, 0u);
}

// Cut from the /proc/cpuinfo of the project's VMs and of an ARM server.
TEST(CpuSignatureOfTest, ReadsVendorFamilyAndModelOrTheArmPart) {
  constexpr std::string_view kZen4 =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
      "model name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n"
      "cpu family\t: 25\nmodel\t\t: 17\n";
  EXPECT_EQ(CpuSignatureOf(kZen4), "AuthenticAMD family 25 model 17");
  constexpr std::string_view kArm =
      "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
      "CPU variant\t: 0x1\nCPU part\t: 0xd0c\nCPU revision\t: 1\n";
  EXPECT_EQ(CpuSignatureOf(kArm), "ARM implementer 0x41 part 0xd0c");
  EXPECT_EQ(CpuSignatureOf("model name\t: AMD EPYC\n"), "");  // the name alone
  EXPECT_EQ(CpuSignatureOf(""), "");
  // "model name" is not "model": a text with the name but no model number has no signature.
  EXPECT_EQ(CpuSignatureOf("vendor_id : GenuineIntel\ncpu family : 6\nmodel name : Xeon\n"), "");
}

TEST(ReadHostInfoTest, FillsTheFieldsThisMachineHas) {
  const HostInfo info = ReadHostInfo();
  EXPECT_FALSE(info.hostname.empty());
  EXPECT_FALSE(info.cpu_model.empty());
  EXPECT_GE(info.logical_cpus, 1u);
  EXPECT_GE(info.usable_cpus, 1u);
  EXPECT_LE(info.usable_cpus, info.logical_cpus);
  EXPECT_GT(info.memory_bytes, size_t{64} << 20);
  EXPECT_FALSE(info.os.empty());
  EXPECT_EQ(info.kernel.rfind("Linux ", 0), 0u) << info.kernel;
  EXPECT_FALSE(info.arch.empty());
  EXPECT_FALSE(info.compiler.empty());
  EXPECT_FALSE(info.build_type.empty());
  EXPECT_FALSE(info.git_rev.empty());
  EXPECT_FALSE(info.feather_version.empty());
  EXPECT_TRUE(IsIso8601Utc(info.date_utc)) << info.date_utc;
  if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0) {
    EXPECT_TRUE(info.cuda_compiler_present);
  }
}

TEST(ReadHostInfoTest, CachesMatchSysfsWhenPresent) {
  const std::filesystem::path sysfs = "/sys/devices/system/cpu/cpu0/cache";
  if (!std::filesystem::exists(sysfs)) GTEST_SKIP() << "no " << sysfs;
  const CacheSizes expected = ReadCacheSizes(sysfs);
  const HostInfo info = ReadHostInfo();
  EXPECT_EQ(info.caches.l1d_bytes, expected.l1d_bytes);
  EXPECT_EQ(info.caches.l2_bytes, expected.l2_bytes);
  EXPECT_EQ(info.caches.l3_bytes, expected.l3_bytes);
}

TEST(HostInfoJsonTest, HasEveryKeyWithItsType) {
  const nlohmann::json json = ToJson(ReadHostInfo());
  ASSERT_TRUE(json.is_object());
  const std::vector<std::string> strings = {
      "hostname", "cpu_model",     "cpu_signature", "os",      "kernel",
      "arch",     "compiler",      "build_type",    "git_rev", "feather_version",
      "date_utc", "attention_isa", "gemm_kernel"};
  const std::vector<std::string> numbers = {"logical_cpus",   "usable_cpus",    "l1d_cache_bytes",
                                            "l2_cache_bytes", "l3_cache_bytes", "memory_bytes"};
  const std::vector<std::string> booleans = {"sanitized", "cuda_compiler_present"};
  for (const auto& key : strings) {
    ASSERT_TRUE(json.contains(key)) << key;
    EXPECT_TRUE(json[key].is_string()) << key;
  }
  for (const auto& key : numbers) {
    ASSERT_TRUE(json.contains(key)) << key;
    EXPECT_TRUE(json[key].is_number_unsigned()) << key;
  }
  for (const auto& key : booleans) {
    ASSERT_TRUE(json.contains(key)) << key;
    EXPECT_TRUE(json[key].is_boolean()) << key;
  }
  // No key without a test above: a new HostInfo field must be added here too.
  EXPECT_EQ(json.size(), strings.size() + numbers.size() + booleans.size()) << json.dump(2);
}

TEST(HostInfoJsonTest, CopiesFieldValues) {
  HostInfo info;
  info.hostname = "h";
  info.logical_cpus = 7;
  info.caches.l2_bytes = 1234;
  info.sanitized = true;
  info.date_utc = "2024-01-02T03:04:05Z";
  const nlohmann::json json = ToJson(info);
  EXPECT_EQ(json["hostname"], "h");
  EXPECT_EQ(json["logical_cpus"], 7);
  EXPECT_EQ(json["l2_cache_bytes"], 1234);
  EXPECT_EQ(json["sanitized"], true);
  EXPECT_EQ(json["date_utc"], "2024-01-02T03:04:05Z");
}

TEST(RssTest, PeakCoversCurrentAndGrowsWithTouchedMemory) {
  const size_t current = CurrentRssBytes();
  EXPECT_GT(current, 0u);
  EXPECT_GE(PeakRssBytes() + (size_t{1} << 20), current);  // ru_maxrss lags by at most a page
  constexpr size_t kTouched = size_t{64} << 20;
  std::vector<char> block(kTouched, 1);  // value-initialised: every page written
  volatile char sink = block[kTouched / 2];
  (void)sink;
  EXPECT_GE(PeakRssBytes(), kTouched);
  EXPECT_GE(CurrentRssBytes(), kTouched);
}

}  // namespace
}  // namespace feather
