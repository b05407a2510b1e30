// trace_reader_test.cc: Mooncake JSONL parsing: a small fixture, the real trace's first lines,
// and every error path (each problem names file, 1-based line and field).
#include "sim/trace_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/input_error.h"

namespace feather {
namespace {

const std::string kFixture = std::string(FEATHER_SOURCE_DIR) + "/tests/sim/data/small_trace.jsonl";
const std::string kRealTrace =
    std::string(FEATHER_SOURCE_DIR) + "/../shared/traces/conversation_trace.jsonl";

TraceReadOptions Options(uint32_t block_tokens, uint64_t limit = 0) {
  TraceReadOptions o;
  o.block_tokens = block_tokens;
  o.limit = limit;
  return o;
}

MooncakeTrace ParseText(const std::string& text, const TraceReadOptions& options) {
  std::istringstream in(text);
  return ParseMooncakeTrace(in, "t.jsonl", options);
}

// Parses `text` expecting an InputError; returns its problems.
std::vector<InputProblem> Problems(const std::string& text, uint32_t block_tokens = 4) {
  try {
    (void)ParseText(text, Options(block_tokens));
  } catch (const InputError& e) {
    return e.problems();
  }
  ADD_FAILURE() << "no InputError for:\n" << text;
  return {};
}

// The single problem of `text`, rendered "FILE:LINE: KEY: MESSAGE".
std::string OnlyProblem(const std::string& text) {
  const std::vector<InputProblem> problems = Problems(text);
  EXPECT_EQ(problems.size(), 1u) << text;
  return problems.empty() ? "" : problems[0].ToString();
}

const std::string kGood =
    R"({"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})";

TEST(TraceReaderTest, ReadsFixture) {
  const MooncakeTrace t = ReadMooncakeTrace(kFixture, Options(4));
  ASSERT_EQ(t.size(), 5u);
  const std::vector<int64_t> ts = {0, 0, 1500, 2000, 2000};
  const std::vector<uint32_t> in = {10, 8, 7, 3, 12};
  const std::vector<uint32_t> out = {5, 3, 2, 1, 9};
  const std::vector<std::vector<uint64_t>> blocks = {{0, 1, 2}, {0, 1}, {0, 3}, {0}, {0, 1, 2}};
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t.records[i].timestamp_ms, ts[i]) << i;
    EXPECT_EQ(t.records[i].input_tokens, in[i]) << i;
    EXPECT_EQ(t.records[i].output_tokens, out[i]) << i;
    const std::span<const uint64_t> b = t.Blocks(i);
    EXPECT_EQ(std::vector<uint64_t>(b.begin(), b.end()), blocks[i]) << i;
  }
  EXPECT_EQ(t.total_input_tokens, 40u);
}

TEST(TraceReaderTest, LimitKeepsFirstRecords) {
  const MooncakeTrace t = ReadMooncakeTrace(kFixture, Options(4, 2));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.records[1].input_tokens, 8u);
  // Lines after the limit are not even checked.
  const MooncakeTrace u = ParseText(kGood + "\nnot json\n", Options(4, 1));
  EXPECT_EQ(u.size(), 1u);
}

TEST(TraceReaderTest, ReadsRealTraceFirstHundredLines) {
  if (!std::filesystem::exists(kRealTrace)) GTEST_SKIP() << kRealTrace << " not present";
  const MooncakeTrace t = ReadMooncakeTrace(kRealTrace, Options(512, 100));
  ASSERT_EQ(t.size(), 100u);
  // First line: {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0..13]}
  EXPECT_EQ(t.records[0].timestamp_ms, 0);
  EXPECT_EQ(t.records[0].input_tokens, 6758u);
  EXPECT_EQ(t.records[0].output_tokens, 500u);
  ASSERT_EQ(t.records[0].block_count, 14u);
  EXPECT_EQ(t.Blocks(0)[13], 13u);
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t.records[i].block_count, (t.records[i].input_tokens + 511) / 512) << i;
    EXPECT_EQ(t.Blocks(i)[0], 0u) << "block 0 is the common system prefix";
    if (i > 0) {
      EXPECT_GE(t.records[i].timestamp_ms, t.records[i - 1].timestamp_ms);
    }
  }
}

TEST(TraceReaderTest, SkipsBlankLinesAndCountsThemInLineNumbers) {
  const std::string text = "\n  \n" + kGood + "\n\n{\"timestamp\": 1}\n";
  const std::vector<InputProblem> problems = Problems(text);
  ASSERT_EQ(problems.size(), 3u);  // line 5 misses three fields
  for (const InputProblem& p : problems) EXPECT_EQ(p.line, 5u);
  EXPECT_EQ(problems[0].ToString(), "t.jsonl:5: input_length: missing field");
  EXPECT_EQ(problems[1].ToString(), "t.jsonl:5: output_length: missing field");
  EXPECT_EQ(problems[2].ToString(), "t.jsonl:5: hash_ids: missing field");
}

TEST(TraceReaderTest, MissingTimestamp) {
  EXPECT_EQ(OnlyProblem(R"({"input_length": 5, "output_length": 2, "hash_ids": [0, 1]})"),
            "t.jsonl:1: timestamp: missing field");
}

TEST(TraceReaderTest, WrongTypes) {
  EXPECT_EQ(OnlyProblem(
                kGood + "\n" +
                R"({"timestamp": "0", "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})"),
            "t.jsonl:2: timestamp: must be an integer, got string \"0\"");
  EXPECT_EQ(OnlyProblem(
                R"({"timestamp": 0, "input_length": 5.5, "output_length": 2, "hash_ids": [0, 1]})"),
            "t.jsonl:1: input_length: must be an integer, got number 5.5");
  EXPECT_EQ(
      OnlyProblem(
          R"({"timestamp": 0, "input_length": 5, "output_length": null, "hash_ids": [0, 1]})"),
      "t.jsonl:1: output_length: must be an integer, got null null");
  EXPECT_EQ(
      OnlyProblem(R"({"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": 7})"),
      "t.jsonl:1: hash_ids: must be an array of integers, got number 7");
  EXPECT_EQ(OnlyProblem(
                R"({"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [0, "x"]})"),
            "t.jsonl:1: hash_ids[1]: must be a non-negative integer, got string \"x\"");
  EXPECT_EQ(OnlyProblem(
                R"({"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [-1, 2]})"),
            "t.jsonl:1: hash_ids[0]: must be a non-negative integer, got number -1");
  EXPECT_EQ(OnlyProblem("[1, 2, 3]"),
            "t.jsonl:1: a record must be a JSON object, got array [1,2,3]");
}

TEST(TraceReaderTest, NegativeAndZeroValues) {
  EXPECT_EQ(OnlyProblem(
                R"({"timestamp": -1, "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})"),
            "t.jsonl:1: timestamp: must be >= 0, got -1");
  EXPECT_EQ(
      OnlyProblem(R"({"timestamp": 0, "input_length": 0, "output_length": 2, "hash_ids": []})"),
      "t.jsonl:1: input_length: must be >= 1, got 0");
  EXPECT_EQ(
      OnlyProblem(R"({"timestamp": 0, "input_length": -3, "output_length": 2, "hash_ids": [0]})"),
      "t.jsonl:1: input_length: must be >= 1, got -3");
  EXPECT_EQ(
      OnlyProblem(R"({"timestamp": 0, "input_length": 5, "output_length": 0, "hash_ids": [0, 1]})"),
      "t.jsonl:1: output_length: must be >= 1, got 0");
  EXPECT_EQ(
      OnlyProblem(
          R"({"timestamp": 0, "input_length": 5000000000, "output_length": 2, "hash_ids": [0]})"),
      "t.jsonl:1: input_length: must be <= 4294967295, got 5000000000");
  EXPECT_EQ(
      OnlyProblem(
          R"({"timestamp": 18446744073709551615, "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})"),
      "t.jsonl:1: timestamp: must be <= 9000000000000, got 18446744073709551615");
}

TEST(TraceReaderTest, TimestampMayRepeatButNotDecrease) {
  const std::string t5 =
      R"({"timestamp": 5, "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})";
  const std::string t3 =
      R"({"timestamp": 3, "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})";
  EXPECT_EQ(ParseText(t5 + "\n" + t5 + "\n", Options(4)).size(), 2u);
  EXPECT_EQ(OnlyProblem(t5 + "\n" + t5 + "\n" + t3 + "\n"),
            "t.jsonl:3: timestamp: decreases: 3 after 5 on line 2");
}

TEST(TraceReaderTest, HashIdCountMustMatchLength) {
  EXPECT_EQ(
      OnlyProblem(R"({"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": [0, 1]})"),
      "t.jsonl:1: hash_ids: has 2 ids, but input_length 9 needs ceil(9/4) = 3");
  EXPECT_EQ(
      OnlyProblem(R"({"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [0, 1]})"),
      "t.jsonl:1: hash_ids: has 2 ids, but input_length 4 needs ceil(4/4) = 1");
}

TEST(TraceReaderTest, MalformedJson) {
  const std::string p = OnlyProblem(kGood + "\n{\"timestamp\": 0, \"input_length\": \n");
  // Named after the last field read: the record was cut inside its value.
  EXPECT_EQ(p.rfind("t.jsonl:2: input_length: malformed JSON in or after this field", 0), 0u) << p;
  EXPECT_NE(p.find("parse error"), std::string::npos) << p;
}

TEST(TraceReaderTest, CollectsAllProblemsOfTheFileUpToACap) {
  std::string text;
  for (int i = 0; i < 30; ++i) text += "oops\n";
  const std::vector<InputProblem> problems = Problems(text);
  ASSERT_EQ(problems.size(), 21u);
  EXPECT_EQ(problems[19].line, 20u);
  EXPECT_EQ(problems[20].ToString(), "t.jsonl: 10 more problems not shown (30 in all)");
}

TEST(TraceReaderTest, ProblemsOnSeveralLinesAreAllReported) {
  const std::string text =
      kGood + "\n" + R"({"timestamp": 0, "input_length": 0, "output_length": 2, "hash_ids": []})" +
      "\n" + kGood + "\n" + R"({"timestamp": 0, "output_length": 2, "hash_ids": [1]})" + "\n";
  const std::vector<InputProblem> problems = Problems(text);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].ToString(), "t.jsonl:2: input_length: must be >= 1, got 0");
  EXPECT_EQ(problems[1].ToString(), "t.jsonl:4: input_length: missing field");
}

TEST(TraceReaderTest, EmptyFile) {
  const std::string empty =
      "t.jsonl:1: timestamp: missing: the trace has no records (expected one JSON object per line "
      "with timestamp, input_length, output_length and hash_ids)";
  EXPECT_EQ(OnlyProblem(""), empty);
  EXPECT_EQ(OnlyProblem("\n \n"), empty);
}

TEST(TraceReaderTest, UnreadableFile) {
  const std::string missing = testing::TempDir() + "/feather_no_such_trace.jsonl";
  try {
    (void)ReadMooncakeTrace(missing, Options(512));
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": cannot open trace: No such file or directory");
  }
  try {
    (void)ReadMooncakeTrace(testing::TempDir(), Options(512));
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

TEST(TraceReaderTest, ZeroBlockTokensIsAnError) {
  EXPECT_THROW((void)ParseText(kGood, Options(0)), InputError);
}

}  // namespace
}  // namespace feather
