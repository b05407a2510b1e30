// input_hardening_test.cc: the readers' defences against malformed bytes, in process: UTF-8
// validation, the key path of an unparsable YAML line, a trace field given twice, a truncated or
// non-UTF-8 trace record named after its field, numbers too large for JSON, timestamps beyond
// the simulated clock, empty profile and model files naming line and field, YAML nested too
// deep, a second YAML document, keys without a value, and files that cannot be read.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "sim/engine/device_profile.h"
#include "base/input_error.h"
#include "base/input_text.h"
#include "sim/engine/model_config.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"
#include "sim/io/scenario.h"
#include "sim/workload/trace_reader.h"
#include "sim/io/yaml_map_reader.h"
#include "tests/sim/io/input_error_test_support.h"

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

using test::ErrorOf;

std::string Nested(size_t levels, bool closed = true) {
  return std::string(levels, '[') + (closed ? std::string(levels, ']') : "");
}

// yaml-cpp stops near 500 levels with "bad file" and no key; the readers now stop at 64, with
// the line and key path like every other problem.
TEST(YamlNestingTest, SixtyFourLevelsParseSixtyFiveAreAProblem) {
  EXPECT_EQ(ErrorOf([] { (void)ParseYaml(Nested(64), "d.yaml"); }), "");
  EXPECT_EQ(ErrorOf([] { (void)ParseYaml(Nested(65), "d.yaml"); }),
            "d.yaml:1: lists and maps nested deeper than 64 levels");
  std::string dashes;
  for (int i = 0; i < 65; ++i) dashes += "- ";
  EXPECT_EQ(ErrorOf([&] { (void)ParseYaml(dashes + "x\n", "d.yaml"); }),
            "d.yaml:1: lists and maps nested deeper than 64 levels");
  // Block maps by indentation: the 65th map starts on line 65.
  std::string indented;
  for (int i = 0; i < 70; ++i) indented += std::string(static_cast<size_t>(i), ' ') + "a:\n";
  const std::string message = ErrorOf([&] { (void)ParseYaml(indented, "d.yaml"); });
  EXPECT_EQ(message.rfind("d.yaml:65: a.a.a.", 0), 0u) << message;
  EXPECT_NE(message.find(": lists and maps nested deeper than 64 levels"), std::string::npos);
}

TEST(YamlNestingTest, DepthBombsInScenarioProfileAndModelNameLineAndKey) {
  EXPECT_EQ(ErrorOf([] {
              (void)LoadScenarioText("seed: 1\nworkload:\n  requests: " + Nested(100'000) + "\n",
                                     "s.yaml", ".");
            }),
            "s.yaml:3: workload.requests: lists and maps nested deeper than 64 levels");
  std::string dashes;
  for (int i = 0; i < 100'000; ++i) dashes += "- ";
  EXPECT_EQ(ErrorOf([&] { (void)LoadScenarioText(dashes + "x\n", "s.yaml", "."); }),
            "s.yaml:1: lists and maps nested deeper than 64 levels");
  EXPECT_EQ(ErrorOf([] {
              (void)ParseDeviceProfile("name: p\nnotes: " + Nested(100'000, false), "p.yaml");
            }),
            "p.yaml:2: notes: lists and maps nested deeper than 64 levels");
  EXPECT_EQ(ErrorOf([] {
              (void)ParseModelConfig("name: m\nsource: {a: " + Nested(100'000) + "}\n", "m.yaml");
            }),
            "m.yaml:2: source: lists and maps nested deeper than 64 levels");
}

// A second document was ignored: the run used the first alone.
TEST(YamlSecondDocumentTest, ASecondDocumentIsAProblemAnEmptyOneIsNot) {
  const std::string rest =
      "), which would be ignored; a file holds one document: delete the '---' line to merge the "
      "two, or the second document";
  EXPECT_EQ(ErrorOf([] {
              (void)LoadScenarioText("seed: 1\n---\nworkload: {requests: 5}\n", "s.yaml", ".");
            }),
            "s.yaml:3: workload: in a second YAML document (it starts on line 2" + rest);
  // The first document empty: its second one would be ignored too.
  EXPECT_EQ(ErrorOf([] { (void)LoadScenarioText("---\n---\nseed: 2\n", "s.yaml", "."); }),
            "s.yaml:3: seed: in a second YAML document (it starts on line 2" + rest);
  // After an end marker, without '---'; the key path is read from the second document's lines.
  EXPECT_EQ(ErrorOf([] { (void)ParseYaml("a:\n  b: 1\n...\nc: 2\n", "p.yaml"); }),
            "p.yaml:4: c: in a second YAML document (it starts on line 4" + rest);
  EXPECT_EQ(ErrorOf([] { (void)ParseYaml("a:\n  b: 1\n---\n\n  c: 2\n", "p.yaml"); }),
            "p.yaml:5: c: in a second YAML document (it starts on line 3" + rest);
  // A syntax error in the second document is found too.
  EXPECT_NE(ErrorOf([] { (void)ParseYaml("a: 1\n---\n[\n", "p.yaml"); }).find("YAML syntax error"),
            std::string::npos);
  // A leading '---', a trailing one, a trailing comment and an end marker hold no second document.
  for (const std::string text :
       {"---\nseed: 1\n", "seed: 1\n---\n", "seed: 1\n---\n# old: 2\n", "seed: 1\n...\n"}) {
    EXPECT_EQ(ErrorOf([&] { (void)LoadScenarioText(text, "s.yaml", "."); }), "") << text;
  }
}

// yaml-cpp neither consumes nor rejects a ',' where a document starts: YAML::Load read ",x" as an
// empty file (a scenario of defaults), and reading every document never ended (found by
// scenario_fuzzer once ParseYaml looked for a second document).
TEST(YamlHardeningTest, AStrayCommaIsASyntaxErrorNotAnEmptyFile) {
  EXPECT_EQ(ErrorOf([] { (void)ParseYaml(",alrdowkocaory_utitmax_tiNULLge_siz\n", "d.yaml"); }),
            "d.yaml:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(ErrorOf([] { (void)LoadScenarioText("seed: 1\n---\n,x\n", "s.yaml", "."); }),
            "s.yaml:3: YAML syntax error: unexpected ','");
}

// "requests:" with its value lost ran the default 1,000 requests in silence.
TEST(EmptyValueTest, AKeyWithoutAValueIsAProblemNotTheDefault) {
  const auto scenario_error = [](const std::string& text) {
    return ErrorOf([&] { (void)LoadScenarioText(text, "s.yaml", "."); });
  };
  const std::string no_value = "no value; remove the key to keep the default";
  EXPECT_EQ(scenario_error("workload:\n  requests:\n"), "s.yaml:2: workload.requests: " + no_value);
  EXPECT_EQ(scenario_error("seed: ~\n"), "s.yaml:1: seed: " + no_value);
  EXPECT_EQ(scenario_error("workload:\n  requests: 5\n  prompt_tokens:\n"),
            "s.yaml:3: workload.prompt_tokens: " + no_value);
  // A map key too: an empty `workload:` or `trace:` ran the default workload.
  EXPECT_EQ(scenario_error("workload:\nseed: 1\n"), "s.yaml:1: workload: " + no_value);
  EXPECT_EQ(scenario_error("workload:\n  trace:\n"), "s.yaml:2: workload.trace: " + no_value);
  // An empty string is a value (and a wrong one).
  EXPECT_NE(scenario_error("workload: {requests: ''}\n").find("expected an integer"),
            std::string::npos);
  // --set gives the key its value.
  const std::vector<std::string> set = {"workload.requests=7"};
  EXPECT_EQ(LoadScenarioText("workload:\n  requests:\n", "s.yaml", ".", set).workload.requests, 7u);

  const std::string model =
      "name: m\nsource: test\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\n"
      "intermediate: 128\nvocab: 1000\ntied_embeddings: false\ndtype: bf16\n";
  EXPECT_EQ(ErrorOf([&] { (void)ParseModelConfig(model, "m.yaml"); }), "");
  EXPECT_EQ(ErrorOf([&] { (void)ParseModelConfig(model + "notes:\n", "m.yaml"); }),
            "m.yaml:12: notes: " + no_value);
  // A required key without a value: "missing (required)", once.
  std::string no_layers = model;
  no_layers.replace(no_layers.find("layers: 2"), 9, "layers:");
  EXPECT_EQ(ErrorOf([&] { (void)ParseModelConfig(no_layers, "m.yaml"); }),
            "m.yaml:3: layers: missing (required)");
}

// A failed read was taken for an empty file: the built-in default scenario ran, and a directory
// named as a profile was "empty".
TEST(ReadTextFileTest, FailedReadsAndDirectoriesAreNamed) {
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(ErrorOf([&] { (void)ReadTextFile(dir, "device profile", "profile"); }),
            dir + ": profile: cannot read the device profile: Is a directory");
  EXPECT_EQ(ErrorOf([] { (void)ReadTextFile("/no/such/m.yaml", "model description"); }),
            "/no/such/m.yaml: cannot open the model description: No such file or directory");
  // A file longer than one read comes back whole.
  const std::string path = dir + "/feather_read_text_file_test.yaml";
  std::string text(100'000, 'x');
  text[5] = '\0';
  std::ofstream(path, std::ios::binary) << text;
  EXPECT_EQ(ReadTextFile(path, "file"), text);
  std::remove(path.c_str());
  if (!std::ifstream("/proc/self/mem")) GTEST_SKIP() << "/proc/self/mem cannot be opened here";
  EXPECT_EQ(ErrorOf([] { (void)ReadTextFile("/proc/self/mem", "scenario file"); }),
            "/proc/self/mem: cannot read the scenario file: Input/output error");
}

}  // namespace
}  // namespace feather

namespace feather {
namespace {

TEST(SplitLinesTest, CrlfAndAFinalNewlineReadLikeLf) {
  EXPECT_EQ(SplitLines(""), std::vector<std::string_view>{});
  EXPECT_EQ(SplitLines("a\r\nb\n"), (std::vector<std::string_view>{"a", "b"}));
  EXPECT_EQ(SplitLines("a\n\nb"), (std::vector<std::string_view>{"a", "", "b"}));
}

TEST(CappedInputProblemsTest, KeepsTheFirstAndCountsTheRest) {
  CappedInputProblems problems("f.csv", 2);
  problems.ThrowIfAny();  // nothing to throw
  for (uint32_t line = 1; line <= 5; ++line) problems.Add(line, "k", "bad");
  try {
    problems.ThrowIfAny();
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.problems().size(), 3u);
    EXPECT_EQ(e.problems()[1].ToString(), "f.csv:2: k: bad");
    EXPECT_EQ(e.problems()[2].ToString(), "f.csv: 3 more problems not shown");
  }
}

}  // namespace
}  // namespace feather
