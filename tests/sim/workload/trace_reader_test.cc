// trace_reader_test.cc: Mooncake JSONL parsing: a small fixture, the real trace's first lines,
// and every error path (each problem names file, 1-based line and field).
#include "sim/workload/trace_reader.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include "base/input_error.h"

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

// `levels` nested arrays around nothing: "[[...]]".
std::string Nested(size_t levels, bool closed = true) {
  return std::string(levels, '[') + (closed ? std::string(levels, ']') : "");
}

// A line of 100,000 brackets crashed the reader (the message serialised the whole value, one
// stack frame per level): nesting now stops at 64 levels, a problem of its line and field.
TEST(TraceReaderTest, DepthBombIsAProblemOfItsLineNotACrash) {
  const std::string too_deep =
      "arrays and objects nested deeper than 64 levels (a record is a flat JSON object)";
  EXPECT_EQ(OnlyProblem(Nested(100'000) + "\n"), "t.jsonl:1: " + too_deep);
  EXPECT_EQ(OnlyProblem(Nested(100'000, false) + "\n"), "t.jsonl:1: " + too_deep);
  const std::string bomb_in_ids =
      R"({"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": )" + Nested(100'000) +
      "}";
  EXPECT_EQ(OnlyProblem(kGood + "\n" + bomb_in_ids + "\n" + kGood + "\n"),
            "t.jsonl:2: hash_ids: " + too_deep);
}

TEST(TraceReaderTest, SixtyFourLevelsAreReadSixtyFiveAreAProblem) {
  // The record is level 1; an extra field (ignored) nests 63 more, or 64.
  const std::string deepest = R"({"timestamp": 0, "input_length": 5, "output_length": 2, )"
                              R"("hash_ids": [0, 1], "extra": )" +
                              Nested(63) + "}";
  EXPECT_EQ(ParseText(deepest, Options(4)).size(), 1u);
  const std::string deeper = R"({"timestamp": 0, "input_length": 5, "output_length": 2, )"
                             R"("hash_ids": [0, 1], "extra": )" +
                             Nested(64) + "}";
  EXPECT_EQ(OnlyProblem(deeper),
            "t.jsonl:1: extra: arrays and objects nested deeper than 64 levels (a record is a "
            "flat JSON object)");
}

// A message quotes 40 characters of a bad value, written as dump() would, without dumping it
// whole; a cut never splits a UTF-8 sequence.
TEST(TraceReaderTest, BadValuesAreQuotedInShort) {
  const std::string head =
      R"({"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": )";
  EXPECT_EQ(OnlyProblem(head + "[" + Nested(60) + "]}"),
            "t.jsonl:1: hash_ids[0]: must be a non-negative integer, got array " +
                std::string(40, '[') + "...");
  EXPECT_EQ(OnlyProblem(head + R"([{"a": 1, "b": [1, 2.5, null, true, "x\"y"]}]})"),
            R"(t.jsonl:1: hash_ids[0]: must be a non-negative integer, got object )"
            R"({"a":1,"b":[1,2.5,null,true,"x\"y"]})");
  EXPECT_EQ(OnlyProblem(head + "[\"" + std::string(1'000'000, 'x') + "\"]}"),
            "t.jsonl:1: hash_ids[0]: must be a non-negative integer, got string \"" +
                std::string(39, 'x') + "...");
  std::string accents;
  for (int i = 0; i < 30; ++i) accents += "\xc3\xa9";  // 'é', two bytes each
  // '"' and 19 accents fill 39 bytes; the 20th would straddle the 40-byte cut.
  EXPECT_EQ(OnlyProblem(head + "[\"" + accents + "\"]}"),
            "t.jsonl:1: hash_ids[0]: must be a non-negative integer, got string \"" +
                accents.substr(0, 38) + "...");
  EXPECT_EQ(OnlyProblem(head + R"([{"k": ")" + std::string(100, 'y') + R"("}]})"),
            "t.jsonl:1: hash_ids[0]: must be a non-negative integer, got object {\"k\":\"" +
                std::string(34, 'y') + "...");
}

// A stream whose reads fail (errno EIO) after its first line, as /proc/self/mem's do at once.
class FailingBuffer : public std::streambuf {
 public:
  explicit FailingBuffer(std::string first) : first_(std::move(first)) {
    setg(first_.data(), first_.data(), first_.data() + first_.size());
  }

 protected:
  int_type underflow() override {
    errno = EIO;
    throw std::ios_base::failure("read failed");
  }

 private:
  std::string first_;
};

// A failed read was taken for the end of the file: the records before it ran as the whole trace
// (or, with none, "no records").
TEST(TraceReaderTest, AFailedReadIsAProblemNotTheEnd) {
  FailingBuffer buffer(kGood + "\n");
  std::istream in(&buffer);
  try {
    (void)ParseMooncakeTrace(in, "t.jsonl", Options(4));
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.jsonl:1: cannot read the trace after this line: Input/output error");
  }
  if (!std::ifstream("/proc/self/mem")) GTEST_SKIP() << "/proc/self/mem cannot be opened here";
  try {
    (void)ReadMooncakeTrace("/proc/self/mem", Options(512));
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "/proc/self/mem: cannot read the trace: Input/output error");
  }
}

}  // namespace
}  // namespace feather
