// Tests for hw/cuda/selfcheck_stamp.h: the stamp's JSON round trip (golden field names), every
// malformed-field message, and each reason the calibration gate refuses.
#include "hw/cuda/selfcheck_stamp.h"

#include <gtest/gtest.h>

#include <string>

namespace feather::hw::cuda {
namespace {

SelfcheckStamp Good() {
  SelfcheckStamp s;
  s.passed = true;
  s.device_name = "NVIDIA H100 80GB HBM3";
  s.device_uuid = "GPU-1";
  s.git_rev = "abc1234";
  s.feather_version = "0.1.0";
  s.date_utc = "2026-11-24T10:00:00Z";
  s.results = {{"attention decode", true, 1e-6, 5e-5, ""},
               {"probe copy GB/s", true, 3000, 3350, ""}};
  return s;
}

TEST(SelfcheckStampTest, RoundTrips) {
  const std::string json = StampToJson(Good());
  EXPECT_NE(json.find("\"device_uuid\": \"GPU-1\""), std::string::npos) << json;
  std::string error;
  const auto parsed = ParseStamp(json, "stamp.json", &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(parsed->device_name, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(parsed->results.size(), 2u);
  EXPECT_EQ(parsed->results[1].kernel, "probe copy GB/s");
  EXPECT_EQ(parsed->results[1].max_abs_error, 3000);
  EXPECT_EQ(StampAllows(*parsed, "GPU-1", "abc1234"), "");
}

TEST(SelfcheckStampTest, MalformedStampsNameTheField) {
  std::string error;
  EXPECT_FALSE(ParseStamp("{", "s.json", &error));
  EXPECT_EQ(error, "s.json: not valid JSON");
  EXPECT_FALSE(ParseStamp("[]", "s.json", &error));
  EXPECT_EQ(error, "s.json: expected a JSON object");
  EXPECT_FALSE(ParseStamp(R"({"passed": 1})", "s.json", &error));
  EXPECT_EQ(error, "s.json: field 'passed': expected true or false");
  EXPECT_FALSE(ParseStamp(R"({"passed": true})", "s.json", &error));
  EXPECT_EQ(error, "s.json: field 'device_name': expected a string");
  std::string text = StampToJson(Good());
  text.replace(text.find("\"kernel\""), 8, "\"kernal\"");
  EXPECT_FALSE(ParseStamp(text, "s.json", &error));
  EXPECT_EQ(error,
            "s.json: field 'results[0]': expected an object with 'kernel' (string) and "
            "'passed' (bool)");
}

TEST(SelfcheckStampTest, GateRefusesWithAReason) {
  SelfcheckStamp s = Good();
  EXPECT_EQ(StampAllows(s, "GPU-2", "abc1234"),
            "the self-check ran on another device (NVIDIA H100 80GB HBM3, GPU-1), not GPU-2");
  EXPECT_EQ(StampAllows(s, "GPU-1", "def5678"),
            "the self-check ran on build abc1234, this is def5678");
  s.results[0].passed = false;
  EXPECT_EQ(StampAllows(s, "GPU-1", "abc1234"),
            "the self-check stamp lists a failed kernel: attention decode");
  s.passed = false;
  EXPECT_EQ(StampAllows(s, "GPU-1", "abc1234"),
            "the last self-check on NVIDIA H100 80GB HBM3 failed");
  s = Good();
  s.results.clear();
  EXPECT_EQ(StampAllows(s, "GPU-1", "abc1234"), "the self-check stamp lists no kernel");
}

}  // namespace
}  // namespace feather::hw::cuda
