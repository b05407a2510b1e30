// bad_input_catalogue_test.cc: a catalogue of malformed inputs run through the real `feather run`:
// scenario YAML, a trace it replays (JSONL), a device profile and a model description it names,
// and --set values. Each case must exit with code 2, print exactly one line on stderr naming the
// file, the line and the field (for --set: the argument and the key), and leave no output
// directory behind. Cases cover wrong types, negative or zero rates and sizes, unknown names,
// missing fields, unordered or repeated trace fields, absurd lengths (the memory limits),
// truncated files, bytes that are not UTF-8, and empty files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(FEATHER_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// `text` with the first occurrence of `from` replaced by `to` (which must occur).
std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "fixture text lacks '" << from << "'";
    return text;
  }
  return text.replace(at, from.size(), to);
}

// The first `lines` lines of `text`, then `tail` (to cut a file in the middle of a line).
std::string FirstLines(const std::string& text, int lines, const std::string& tail) {
  size_t end = 0;
  for (int i = 0; i < lines && end != std::string::npos; ++i) end = text.find('\n', end) + 1;
  return text.substr(0, end) + tail;
}

// The hand-written base: its text is the fixture the cases below edit (a refit writes numbers
// in another format).
const std::string kProfile = ReadSource("results/profiles/spec/h100-sxm.yaml");
const std::string kModel = ReadSource("scenarios/models/llama-3-8b.yaml");
const std::string kRecord =
    R"({"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]})";
const std::string kTraceScenario = "workload:\n  trace: {path: trace.jsonl}\n";
const std::string kProfileScenario = "profile: profile.yaml\nworkload: {requests: 5}\n";
const std::string kModelScenario = "model: model.yaml\nworkload: {requests: 5}\n";

struct Case {
  std::string name;
  std::optional<std::string> scenario;  // s.yaml; nullopt: run the built-in default
  std::optional<std::string> trace;     // trace.jsonl next to it
  std::optional<std::string> profile;   // profile.yaml
  std::optional<std::string> model;     // model.yaml
  std::vector<std::string> sets;        // --set values
  std::string file;                     // the file the message names (or "--set")
  int line = 0;                         // the line it names (0 for --set)
  std::string field;                    // the key path or trace field it names
  std::string also = "";                // another fragment the message must contain
};

Case ScenarioCase(std::string name, std::string yaml, int line, std::string field,
                  std::string also = "") {
  Case c;
  c.name = std::move(name);
  c.scenario = std::move(yaml);
  c.file = "s.yaml";
  c.line = line;
  c.field = std::move(field);
  c.also = std::move(also);
  return c;
}

Case TraceCase(std::string name, std::string jsonl, int line, std::string field,
               std::string also = "") {
  Case c = ScenarioCase("trace_" + name, kTraceScenario, line, std::move(field), std::move(also));
  c.trace = std::move(jsonl);
  c.file = "trace.jsonl";
  return c;
}

Case ProfileCase(std::string name, std::string yaml, int line, std::string field,
                 std::string also = "") {
  Case c =
      ScenarioCase("profile_" + name, kProfileScenario, line, std::move(field), std::move(also));
  c.profile = std::move(yaml);
  c.file = "profile.yaml";
  return c;
}

Case ModelCase(std::string name, std::string yaml, int line, std::string field,
               std::string also = "") {
  Case c = ScenarioCase("model_" + name, kModelScenario, line, std::move(field), std::move(also));
  c.model = std::move(yaml);
  c.file = "model.yaml";
  return c;
}

Case SetCase(std::string name, std::vector<std::string> sets, std::string field,
             std::string also = "") {
  Case c;
  c.name = std::move(name);
  c.sets = std::move(sets);
  c.file = "--set";
  c.field = std::move(field);
  c.also = std::move(also);
  return c;
}

std::vector<Case> Catalogue() {
  const std::string raise_requests = "--set limits.max_requests=N";
  return {
      // ---- scenario YAML ----
      ScenarioCase("requests_wrong_type", "workload:\n  requests: many\n", 2, "workload.requests",
                   "expected an integer"),
      ScenarioCase("requests_zero", "workload:\n  requests: 0\n", 2, "workload.requests",
                   "out of range"),
      ScenarioCase("rate_negative", "workload:\n  arrival: {kind: poisson, rate: -5}\n", 2,
                   "workload.arrival.rate", "out of range"),
      ScenarioCase("rate_zero", "workload:\n  arrival: {rate: 0}\n", 2, "workload.arrival.rate",
                   "out of range"),
      ScenarioCase("rate_too_low_for_the_requests",
                   "workload:\n  requests: 1000000\n  arrival: {rate: 0.0001}\n"
                   "  sharing: {kind: none}\n",
                   3, "workload.arrival.rate", "overflow"),
      ScenarioCase("unknown_selector", "scheduler:\n  selector: fifo\n", 2, "scheduler.selector",
                   "expected one of"),
      ScenarioCase("unknown_stop_policy", "scheduler:\n  stop: greedy\n", 2, "scheduler.stop",
                   "expected one of"),
      ScenarioCase("unknown_scheduler_time", "seed: 3\nscheduler_time: sometimes\n", 2,
                   "scheduler_time", "expected one of"),
      ScenarioCase("unknown_engine_cost_table",
                   "scheduler_time: engine\nscheduler_engine_cost: nosuch\n", 2,
                   "scheduler_engine_cost", "no built-in"),
      ScenarioCase("unknown_key", "workload:\n  arival: {rate: 5}\n", 2, "workload.arival",
                   "unknown key"),
      ScenarioCase("missing_trace_path", "workload:\n  trace: {limit: 5}\n", 2,
                   "workload.trace.path", "missing"),
      ScenarioCase("piecewise_without_phases", "workload:\n  arrival: {kind: piecewise}\n", 2,
                   "workload.arrival.phases"),
      ScenarioCase("uniform_min_above_max",
                   "workload:\n  prompt_tokens: {kind: uniform, min: 50, max: 10}\n", 2,
                   "workload.prompt_tokens.min", "exceeds max"),
      ScenarioCase("lognormal_negative_sigma",
                   "workload:\n  output_tokens: {kind: lognormal, mean: 9, sigma: -1, max: 50}\n",
                   2, "workload.output_tokens.sigma", "out of range"),
      ScenarioCase("block_tokens_zero", "serving:\n  block_tokens: 0\n", 2, "serving.block_tokens",
                   "out of range"),
      ScenarioCase("memory_utilization_above_one", "serving:\n  gpu_memory_utilization: 1.5\n", 2,
                   "serving.gpu_memory_utilization", "out of range"),
      ScenarioCase("bool_spelled_yes", "serving:\n  prefix_caching: yes\n", 2,
                   "serving.prefix_caching", "true or false"),
      ScenarioCase("map_expected", "name: m\nworkload: 5\n", 2, "workload", "expected a map"),
      ScenarioCase("list_for_scalar", "seed: [1, 2]\n", 1, "seed", "expected an integer"),
      ScenarioCase("negative_seed", "seed: -1\n", 1, "seed", "out of range"),
      ScenarioCase("duplicate_key", "seed: 1\nseed: 2\n", 2, "seed", "duplicate key"),
      ScenarioCase("name_climbs_out_of_out", "seed: 1\nname: ../../victim\n", 2, "name",
                   "one plain path component"),
      ScenarioCase("name_with_separator", "name: runs/a\n", 1, "name", "path separator '/'"),
      ScenarioCase("name_hidden", "name: .x\n", 1, "name", "starts with '.'"),
      ScenarioCase("name_dot_dot", "name: \"..\"\n", 1, "name", "climbs out of out/"),
      ScenarioCase("name_with_control_character", "name: \"a\\tb\"\n", 1, "name",
                   "control character"),
      ScenarioCase("heuristic_relaxed_below_strict",
                   "scheduler:\n  stop: heuristic\n  heuristic:\n    max_loss_chunks: 9\n"
                   "    relaxed_loss_chunks: 3\n",
                   5, "scheduler.heuristic.relaxed_loss_chunks", "must be >= max_loss_chunks (9)"),
      ScenarioCase("heuristic_strict_above_default_relaxed",
                   "scheduler:\n  heuristic: {max_loss_chunks: 8}\n", 2,
                   "scheduler.heuristic.max_loss_chunks", "relaxed_loss_chunks (7)"),
      ScenarioCase("qlearning_epsilon_min_above_start",
                   "scheduler:\n  qlearning:\n    epsilon_start: 0.1\n    epsilon_min: 0.5\n", 4,
                   "scheduler.qlearning.epsilon_min", "must be <= epsilon_start (0.1)"),
      ScenarioCase("radix_too_many_leaves",
                   "workload:\n  sharing: {kind: radix, levels: 8, branching: 64}\n", 2,
                   "workload.sharing.branching", "2^32"),
      ScenarioCase("missing_model_file", "model: nosuch.yaml\n", 1, "model", "no such file"),
      ScenarioCase("unknown_builtin_profile", "profile: a100\n", 1, "profile", "built-in"),
      ScenarioCase("missing_trace_file", "workload:\n  trace: {path: nosuch.jsonl}\n", 2,
                   "workload.trace.path", "no such file"),
      ScenarioCase("absurd_request_count", "workload:\n  requests: 1000000000\n", 2,
                   "workload.requests", raise_requests),
      ScenarioCase("absurd_prompt_length", "workload:\n  prompt_tokens: 10000000\n", 2,
                   "workload.prompt_tokens", "--set limits.max_prompt_tokens=N"),
      ScenarioCase("absurd_shared_prefix",
                   "workload:\n  sharing: {groups: 2, prefix_tokens: 5000000}\n", 2,
                   "workload.sharing.prefix_tokens", "limit of 1,000,000 tokens per prompt"),
      ScenarioCase("absurd_total_tokens",
                   "workload:\n  requests: 5000000\n  sharing: {kind: none}\n  prompt_tokens: "
                   "500\n",
                   2, "workload.requests", "--set limits.max_total_tokens=N"),
      ScenarioCase("truncated_file",
                   "name: t\nworkload:\n  requests: 10\n  arrival: {kind: poisson, rate: 10", 4,
                   "workload.arrival", "YAML syntax error"),
      ScenarioCase("not_utf8", "seed: 4\nname: caf\xe9\n", 2, "name", "not valid UTF-8"),
      ScenarioCase("not_utf8_nested", "workload:\n  trace: {path: \"tr\xff\xfe.jsonl\"}\n", 2,
                   "workload.trace", "not valid UTF-8"),
      // Nesting beyond 64 levels, keys without a value and a second document (issue 13).
      ScenarioCase("depth_bomb", "workload:\n  requests: " + std::string(100'000, '[') + "\n", 2,
                   "workload.requests", "nested deeper than 64 levels"),
      ScenarioCase("empty_value", "workload:\n  requests:\n", 2, "workload.requests",
                   "no value; remove the key to keep the default"),
      ScenarioCase("second_document", "seed: 1\n---\nworkload: {requests: 5}\n", 3, "workload",
                   "in a second YAML document (it starts on line 2)"),
      TraceCase("hash_ids_depth_bomb",
                Replace(kRecord, "\"hash_ids\": [1]",
                        "\"hash_ids\": " + std::string(100'000, '[') + std::string(100'000, ']')) +
                    "\n",
                1, "hash_ids", "nested deeper than 64 levels"),
      ProfileCase("depth_bomb",
                  Replace(kProfile, "value: 3.35e12", "value: " + std::string(100'000, '[')), 25,
                  "parameters.dram_bw_bytes_per_s.value", "nested deeper than 64 levels"),
      ProfileCase("second_document", kProfile + "---\nname: other\n",
                  static_cast<int>(std::count(kProfile.begin(), kProfile.end(), '\n')) + 2, "name",
                  "in a second YAML document"),
      ModelCase(
          "empty_value",
          Replace(kModel,
                  "notes: \"GQA 32:8; untied LM head; max_position_embeddings 8192 (the paper "
                  "runs 10K-token prompts)\"",
                  "notes:"),
          5, "notes", "no value; remove the key to keep the default"),

      // ---- trace JSONL, replayed by the scenario ----
      TraceCase("timestamps_unordered",
                kRecord + "\n" + Replace(kRecord, "\"timestamp\": 0", "\"timestamp\": 9") + "\n" +
                    Replace(kRecord, "\"timestamp\": 0", "\"timestamp\": 3") + "\n",
                3, "timestamp", "decreases"),
      TraceCase("timestamp_given_twice",
                Replace(kRecord, "\"timestamp\": 0", "\"timestamp\": 0, \"timestamp\": 5") + "\n",
                1, "timestamp", "given twice"),
      TraceCase("timestamp_not_integer",
                Replace(kRecord, "\"timestamp\": 0", "\"timestamp\": 1.5") + "\n", 1, "timestamp",
                "must be an integer"),
      TraceCase("timestamp_beyond_simulated_time",
                Replace(kRecord, "\"timestamp\": 0", "\"timestamp\": 9223372036854") + "\n", 1,
                "timestamp", "must be <="),
      TraceCase("input_length_negative",
                Replace(kRecord, "\"input_length\": 8", "\"input_length\": -8") + "\n", 1,
                "input_length", "must be >= 1"),
      TraceCase("output_length_zero",
                Replace(kRecord, "\"output_length\": 2", "\"output_length\": 0") + "\n", 1,
                "output_length", "must be >= 1"),
      TraceCase("input_length_missing", Replace(kRecord, "\"input_length\": 8, ", "") + "\n", 1,
                "input_length", "missing field"),
      TraceCase("hash_ids_wrong_type",
                Replace(kRecord, "\"hash_ids\": [1]", "\"hash_ids\": \"1\"") + "\n", 1, "hash_ids",
                "must be an array"),
      TraceCase("hash_ids_count_mismatch",
                Replace(kRecord, "\"hash_ids\": [1]", "\"hash_ids\": [1, 2]") + "\n", 1, "hash_ids",
                "needs ceil"),
      TraceCase("input_length_absurd",
                Replace(kRecord, "\"input_length\": 8", "\"input_length\": 20000000") + "\n", 1,
                "input_length", "--set limits.max_prompt_tokens=N"),
      TraceCase("truncated_file", kRecord + "\n" + kRecord.substr(0, 40), 2, "input_length",
                "malformed JSON"),
      TraceCase("not_utf8", Replace(kRecord, "}", ", \"user\": \"caf\xe9\"}") + "\n", 1, "user",
                "not valid UTF-8"),
      TraceCase("empty_file", "", 1, "timestamp", "no records"),

      // ---- device profile YAML, named by the scenario ----
      ProfileCase("value_wrong_type", Replace(kProfile, "value: 3.35e12", "value: fast"), 25,
                  "parameters.dram_bw_bytes_per_s.value", "expected a number"),
      ProfileCase("memory_negative", Replace(kProfile, "value: 85899345920", "value: -1"), 17,
                  "parameters.memory_bytes.value", "out of range"),
      ProfileCase("unknown_source", Replace(kProfile, "source: spec", "source: guess"), 18,
                  "parameters.memory_bytes.source", "spec | assumed | measured"),
      ProfileCase("missing_parameter",
                  Replace(kProfile,
                          "  sm_count:\n    value: 132\n    source: spec\n    note: \"132 SMs on "
                          "H100 SXM5 (Hopper whitepaper)\"\n",
                          ""),
                  16, "parameters.sm_count", "missing (required)"),
      ProfileCase("truncated_file", FirstLines(kProfile, 18, "    note: \"80 GiB (data"), 19,
                  "parameters.memory_bytes.note", "YAML syntax error"),
      ProfileCase("empty_file", "", 1, "name", "empty"),

      // ---- model description YAML, named by the scenario ----
      ModelCase("kv_heads_not_dividing", Replace(kModel, "kv_heads: 8", "kv_heads: 7"), 9,
                "kv_heads", "must divide heads"),
      ModelCase("layers_zero", Replace(kModel, "layers: 32", "layers: 0"), 6, "layers",
                "out of range"),
      ModelCase("unknown_dtype", Replace(kModel, "dtype: bf16", "dtype: int8"), 13, "dtype",
                "bf16 | fp16 | fp32"),
      ModelCase("missing_field", Replace(kModel, "vocab: 128256        # vocab_size\n", ""), 3,
                "vocab", "missing (required)"),
      ModelCase("empty_file", "", 1, "name", "empty"),

      // ---- --set values ----
      SetCase("set_wrong_type", {"workload.requests=abc"}, "workload.requests",
              "expected an integer"),
      SetCase("set_unknown_selector", {"scheduler.selector=lifo"}, "scheduler.selector",
              "expected one of"),
      SetCase("set_negative_rate", {"workload.arrival.rate=-1"}, "workload.arrival.rate",
              "out of range"),
      SetCase("set_zero_limit", {"limits.max_requests=0"}, "limits.max_requests", "out of range"),
      SetCase("set_without_equals", {"workload.requests"}, "workload.requests",
              "expected key=value"),
      SetCase("set_not_utf8", {"name=caf\xe9"}, "name", "not valid UTF-8: byte 0xE9 at column 9"),
      SetCase("set_absurd_requests", {"workload.requests=20000000"}, "workload.requests",
              raise_requests),
      SetCase("set_unknown_new_section", {"foo.bar=1"}, "foo.bar", "'foo': unknown key"),
      SetCase("set_unknown_nested_new_map", {"workload.arival.rate=5"}, "workload.arival.rate",
              "'workload.arival': unknown key"),
      SetCase("set_name_climbs_out", {"name=../../victim"}, "name", "one plain path component"),
      SetCase("set_cross_field_rule", {"scheduler.heuristic.relaxed_loss_chunks=2"},
              "scheduler.heuristic.relaxed_loss_chunks", "must be >= max_loss_chunks (5)"),
  };
}

// gtest prints a failing case by its name, not as bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class BadInputCatalogueTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("feather_bad_input_" + GetParam().name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::optional<std::string>& text) const {
    if (text) std::ofstream(dir_ / name, std::ios::binary) << *text;
  }

  fs::path dir_;
};

TEST_P(BadInputCatalogueTest, ExitsTwoWithOneMessageNamingFileLineFieldAndWritesNothing) {
  const Case& c = GetParam();
  Write("s.yaml", c.scenario);
  Write("trace.jsonl", c.trace);
  Write("profile.yaml", c.profile);
  Write("model.yaml", c.model);
  const fs::path out = dir_ / "out";
  std::vector<std::string> args = {"run"};
  if (c.scenario) args.push_back((dir_ / "s.yaml").string());
  args.insert(args.end(), {"--out", out.string()});
  for (const std::string& set : c.sets) args.insert(args.end(), {"--set", set});

  const test::RunResult run = test::RunFeather(args);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << "one line:\n" << run.err;
  EXPECT_THAT(run.err, ::testing::StartsWith("feather: error: "));
  const std::string where = c.file == "--set" ? "--set: " + c.field + ": "
                                              : (dir_ / c.file).string() + ":" +
                                                    std::to_string(c.line) + ": " + c.field + ": ";
  EXPECT_THAT(run.err, HasSubstr(where));
  EXPECT_THAT(run.err, HasSubstr(c.also));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(run.out.empty()) << run.out;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInputCatalogueTest, ::testing::ValuesIn(Catalogue()),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

TEST(BadInputCatalogueSizeTest, HasAtLeastThirtyCases) { EXPECT_GE(Catalogue().size(), 30u); }

}  // namespace
}  // namespace feather
