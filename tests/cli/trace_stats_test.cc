// trace_stats_test.cc: `feather trace-stats` on a 5-request fixture whose statistics are worked
// out by hand (tests/cli/data/small_trace.jsonl), in process and through the binary, plus the
// bad-trace path (exit 2, FILE:LINE) and bad --bin-s values (exit 2, one line).
#include "cli/trace_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "sim/workload/trace_reader.h"
#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using test::RunFeather;
using test::RunResult;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

const std::string kTrace = std::string(FEATHER_SOURCE_DIR) + "/tests/cli/data/small_trace.jsonl";

// The fixture, request by request (512-token blocks):
//   t=0 s  1000 in  10 out  [0 1]     leading reuse 0
//   t=0 s  1500 in  20 out  [0 1 2]   2 blocks (1024 tokens)
//   t=1 s   600 in  30 out  [0 3]     1 block (512 tokens)
//   t=2 s   512 in  40 out  [4]       0
//   t=4 s  1024 in  50 out  [0 1]     2 blocks (1024 tokens)
TraceStats FixtureStats(double bin_s = 0) {
  TraceReadOptions read;
  const MooncakeTrace trace = ReadMooncakeTrace(kTrace, read);
  TraceStatsOptions options;
  options.bin_s = bin_s;
  return ComputeTraceStats(trace, kTrace, options);
}

TEST(TraceStatsTest, ArrivalsAndRate) {
  const TraceStats s = FixtureStats(2.0);
  EXPECT_EQ(s.requests, 5u);
  EXPECT_DOUBLE_EQ(s.duration_s, 4.0);
  EXPECT_DOUBLE_EQ(s.mean_rate_per_s, 1.25);
  EXPECT_EQ(s.distinct_timestamps, 4u);
  EXPECT_EQ(s.max_requests_per_timestamp, 2u);
  EXPECT_DOUBLE_EQ(s.bin_s, 2.0);
  EXPECT_THAT(s.requests_per_bin, ElementsAre(3u, 1u, 1u));  // [0,2) [2,4) [4,6)
  EXPECT_DOUBLE_EQ(FixtureStats().bin_s, 1.0);  // automatic: a round length, about 20 bins
}

TEST(TraceStatsTest, LengthDistributions) {
  const TraceStats s = FixtureStats();
  EXPECT_EQ(s.input_tokens.count, 5u);
  EXPECT_DOUBLE_EQ(s.input_tokens.mean, 927.2);
  EXPECT_EQ(s.input_tokens.min, 512u);
  EXPECT_EQ(s.input_tokens.p50, 1000u);
  EXPECT_EQ(s.input_tokens.p90, 1500u);
  EXPECT_EQ(s.input_tokens.max, 1500u);
  EXPECT_DOUBLE_EQ(s.output_tokens.mean, 30.0);
  EXPECT_EQ(s.total_input_tokens, 4636u);
  EXPECT_EQ(s.total_output_tokens, 150u);
}

TEST(TraceStatsTest, PrefixSharing) {
  const TraceStats s = FixtureStats();
  EXPECT_EQ(s.blocks, 10u);
  EXPECT_EQ(s.unique_blocks, 5u);
  EXPECT_DOUBLE_EQ(s.shared_block_fraction, 0.5);              // 5 of 10 blocks seen before
  EXPECT_DOUBLE_EQ(s.shared_block_fraction_after_first, 0.4);  // 2 of the 5 after block 0
  EXPECT_DOUBLE_EQ(s.shared_token_fraction, 2560.0 / 4636.0);
  EXPECT_EQ(s.distinct_first_blocks, 2u);
  EXPECT_DOUBLE_EQ(s.requests_reusing_1_plus, 0.6);
  EXPECT_DOUBLE_EQ(s.requests_reusing_2_plus, 0.4);
  EXPECT_EQ(s.reused_leading_blocks.max, 2u);
  EXPECT_THAT(s.reused_depth_histogram, ElementsAre(Pair("0", 2u), Pair("1", 1u), Pair("2-3", 2u)));
  ASSERT_EQ(s.depths.size(), 2u);  // no request has 4 blocks
  EXPECT_EQ(s.depths[0].depth_blocks, 1u);
  EXPECT_EQ(s.depths[0].requests, 5u);
  EXPECT_EQ(s.depths[0].distinct, 2u);         // first blocks 0 and 4
  EXPECT_EQ(s.depths[0].shared_requests, 4u);  // the four starting with block 0
  EXPECT_EQ(s.depths[1].requests, 4u);
  EXPECT_EQ(s.depths[1].distinct, 2u);  // prefixes ending in block 1 or 3
  EXPECT_EQ(s.depths[1].shared_requests, 3u);
}

TEST(TraceStatsTest, CommandPrintsTextAndJson) {
  const RunResult text = RunFeather({"trace-stats", kTrace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("requests          5"));
  EXPECT_THAT(text.out, HasSubstr("blocks seen before           0.500"));
  EXPECT_THAT(text.out, HasSubstr("distinct first blocks        2"));

  const RunResult json = RunFeather({"trace-stats", kTrace, "--json", "--bin-s", "2"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["requests"], 5);
  EXPECT_EQ(j["rate_over_time"]["requests_per_bin"], nlohmann::json::array({3, 1, 1}));
  EXPECT_DOUBLE_EQ(j["sharing"]["shared_block_fraction"].get<double>(), 0.5);
  EXPECT_EQ(j["sharing"]["distinct_first_blocks"], 2);
  EXPECT_EQ(j["input_tokens"]["p50"], 1000);

  const RunResult limited = RunFeather({"trace-stats", kTrace, "--json", "--limit", "2"});
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  EXPECT_EQ(nlohmann::json::parse(limited.out)["requests"], 2);
}

TEST(TraceStatsTest, BadTraceIsExit2WithFileAndLine) {
  const fs::path bad = fs::path(::testing::TempDir()) / "feather_trace_stats_bad.jsonl";
  {
    std::ofstream out(bad);
    out << "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
        << "{\"timestamp\": 5, \"input_length\": 10}\n";
  }
  const RunResult run = RunFeather({"trace-stats", bad.string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr(bad.string() + ":2:"));
  fs::remove(bad);
}

// --bin-s 0 was CLI11's range error, which printed DBL_MAX in full (310 digits) on two lines;
// nan passed (as the automatic bin) and 1e-300 asked for 1e300 bins.
TEST(TraceStatsTest, BinSecondsMustBePositiveFiniteAndNotTooShort) {
  for (const std::string bin : {"0", "-1", "nan", "inf", "1e999", "abc", "2s"}) {
    const RunResult run = RunFeather({"trace-stats", kTrace, "--bin-s", bin});
    EXPECT_EQ(run.exit_code, 2) << bin;
    EXPECT_EQ(run.err, "feather: error: --bin-s: expected a positive number of seconds, got '" +
                           bin + "'\n");
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
  // The fixture lasts 4 s: 100,000 bins or more is an error, not 4e300 counters.
  const RunResult tiny = RunFeather({"trace-stats", kTrace, "--bin-s", "1e-300"});
  EXPECT_EQ(tiny.exit_code, 2);
  EXPECT_EQ(tiny.err.rfind("feather: error: --bin-s: a bin of 1e-300 s cuts the trace's 4 s into "
                           "more than 100000 bins; give at least ",
                           0),
            0u)
      << tiny.err;
  EXPECT_EQ(std::count(tiny.err.begin(), tiny.err.end(), '\n'), 1) << tiny.err;
  EXPECT_DOUBLE_EQ(ParseBinSeconds("0.5"), 0.5);
  EXPECT_DOUBLE_EQ(ParseBinSeconds("1e3"), 1000.0);
  EXPECT_THROW((void)ParseBinSeconds(""), std::invalid_argument);
}

}  // namespace
}  // namespace feather
