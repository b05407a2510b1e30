// input_hardening_test.cc: the readers' defences against malformed bytes, in process: UTF-8
// validation, the key path of an unparsable YAML line, a trace field given twice, a truncated or
// non-UTF-8 trace record named after its field, numbers too large for JSON, timestamps beyond
// the simulated clock, and empty profile and model files naming line and field.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "sim/device_profile.h"
#include "sim/input_error.h"
#include "sim/model_config.h"
#include "sim/scenario.h"
#include "sim/trace_reader.h"
#include "sim/yaml_map_reader.h"

namespace feather {
namespace {

TEST(Utf8Test, FindsTheFirstByteOfABadSequence) {
  EXPECT_EQ(FirstInvalidUtf8(""), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii\n"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("caf\xe9"), 3u);           // Latin-1
  EXPECT_EQ(FirstInvalidUtf8("a\x80"), 1u);             // lone continuation byte
  EXPECT_EQ(FirstInvalidUtf8("a\xc3"), 1u);             // truncated sequence
  EXPECT_EQ(FirstInvalidUtf8("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xe0\x80\xaf"), 0u);      // overlong, 3 bytes
  EXPECT_EQ(FirstInvalidUtf8("ok\xed\xa0\x80"), 2u);    // UTF-16 surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xf0\x9f\x98"), 0u);      // cut 4-byte sequence
}

TEST(KeyPathAtLineTest, FollowsIndentationListsAndFlowMaps) {
  const std::string text =
      "# comment\n"
      "name: x\n"
      "workload:\n"
      "  requests: 5\n"
      "  arrival: {kind: poisson, rate: 1\n"
      "  sharing:\n"
      "    groups: 2\n"
      "    \n"
      "phases:\n"
      "  - duration_s: 1\n"
      "    rate: 2\n"
      "\"quoted key\": 3\n";
  EXPECT_EQ(KeyPathAtLine(text, 1), "");
  EXPECT_EQ(KeyPathAtLine(text, 2), "name");
  EXPECT_EQ(KeyPathAtLine(text, 4), "workload.requests");
  EXPECT_EQ(KeyPathAtLine(text, 5), "workload.arrival");
  EXPECT_EQ(KeyPathAtLine(text, 7), "workload.sharing.groups");
  EXPECT_EQ(KeyPathAtLine(text, 10), "phases.duration_s");
  EXPECT_EQ(KeyPathAtLine(text, 11), "phases.rate");
  EXPECT_EQ(KeyPathAtLine(text, 12), "quoted key");
  EXPECT_EQ(KeyPathAtLine(text, 99), "");
}

std::vector<InputProblem> ScenarioProblems(const std::string& text) {
  try {
    (void)LoadScenarioText(text, "s.yaml", ".");
  } catch (const InputError& e) {
    return e.problems();
  }
  return {};
}

TEST(YamlHardeningTest, NonUtf8AndTruncatedScenariosNameLineAndKey) {
  auto problems = ScenarioProblems("seed: 1\nworkload:\n  trace: {path: \"a\xff\"}\n");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].ToString(),
            "s.yaml:3: workload.trace: not valid UTF-8: byte 0xFF at column 19 (save the file as "
            "UTF-8)");
  problems = ScenarioProblems("workload:\n  requests: 10\n  arrival: {kind: poisson, rate: 1");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].line, 3u);
  EXPECT_EQ(problems[0].key, "workload.arrival");
  EXPECT_NE(problems[0].message.find("YAML syntax error"), std::string::npos);
}

std::string TraceProblems(const std::string& text) {
  std::istringstream in(text);
  TraceReadOptions options;
  options.block_tokens = 4;
  try {
    (void)ParseMooncakeTrace(in, "t.jsonl", options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kRecord =
    R"({"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})";

TEST(TraceHardeningTest, AFieldGivenTwiceIsAProblem) {
  EXPECT_EQ(TraceProblems(R"({"timestamp": 3, "input_length": 5, "timestamp": 1, )"
                          R"("output_length": 2, "hash_ids": [0, 1]})"),
            "t.jsonl:1: timestamp: given twice in one record (which value is meant is ambiguous)");
  // Nested objects may repeat their own keys' names; only the record's fields count.
  EXPECT_EQ(TraceProblems(R"({"timestamp": 3, "meta": {"timestamp": 1}, "input_length": 5, )"
                          R"("output_length": 2, "hash_ids": [0, 1]})"),
            "");
}

TEST(TraceHardeningTest, TruncatedAndNonUtf8RecordsNameTheirField) {
  const std::string truncated = TraceProblems(kRecord + "\n" + kRecord.substr(0, 52));
  EXPECT_EQ(truncated.rfind(
                "t.jsonl:2: output_length: malformed JSON in or after this field: parse error at "
                "column ",
                0),
            0u)
      << truncated;
  EXPECT_EQ(TraceProblems(R"({"timestamp": 0, "note": "x)"
                          "\xc3("
                          R"(", "input_length": 5, "output_length": 2, "hash_ids": [0, 1]})"),
            "t.jsonl:1: note: not valid UTF-8: byte 0xC3 at column 28");
  // A line that is not JSON at all has no field to name.
  EXPECT_EQ(TraceProblems("oops\n").rfind("t.jsonl:1: malformed JSON: parse error at column 1", 0),
            0u);
}

TEST(TraceHardeningTest, NumbersBeyondJsonAndTheClockAreProblemsOfTheirLine) {
  EXPECT_EQ(TraceProblems(R"({"timestamp": 1e999, "input_length": 5, "output_length": 2, )"
                          R"("hash_ids": [0, 1]})")
                .rfind("t.jsonl:1: timestamp: malformed JSON", 0),
            0u);
  EXPECT_EQ(TraceProblems(R"({"timestamp": 9000000000001, "input_length": 5, )"
                          R"("output_length": 2, "hash_ids": [0, 1]})"),
            "t.jsonl:1: timestamp: must be <= 9000000000000, got 9000000000001");
  std::istringstream in(R"({"timestamp": 5000, "input_length": 5, "output_length": 2, )"
                        R"("hash_ids": [0, 1]})");
  TraceReadOptions options;
  options.block_tokens = 4;
  options.max_timestamp_ms = 4999;
  EXPECT_THROW((void)ParseMooncakeTrace(in, "t.jsonl", options), InputError);
}

TEST(EmptyFileTest, ProfileAndModelNameLineOneAndTheFirstField) {
  try {
    (void)ParseDeviceProfile("# nothing but a comment\n", "p.yaml");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(
        std::string(e.what()).rfind("p.yaml:1: name: missing (required): the file is empty", 0), 0u)
        << e.what();
  }
  try {
    (void)ParseModelConfig("", "m.yaml");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind("m.yaml:1: name: missing (required): the file is empty", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace feather
