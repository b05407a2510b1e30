// run_output_test.cc: summary.json (golden bytes, key order, non-finite values), results.h5
// (round trips of small, empty and 50K-row tables, determinism, compression, reader errors) and
// the atomic directory write (replacement, failures leave nothing behind).
//
// To refresh the golden file after an intended format change:
//   FEATHER_UPDATE_GOLDEN=1 build/release/tests/run_output_test --gtest_filter='*Golden*'
#include "sim/io/run_output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/io/hdf5_table.h"
#include "base/rng.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kGoldenSummary = fs::path(FEATHER_SOURCE_DIR) / "tests/sim/data/golden/summary.json";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// "line N: expected ... / actual ..." for the first differing line, so a golden failure says
// what changed instead of dumping two whole files.
std::string FirstDifference(const std::string& expected, const std::string& actual) {
  std::istringstream e(expected), a(actual);
  std::string el, al;
  for (int line = 1;; ++line) {
    const bool has_e = static_cast<bool>(std::getline(e, el));
    const bool has_a = static_cast<bool>(std::getline(a, al));
    if (!has_e && !has_a) return "files differ only in the final newline";
    if (!has_e || !has_a || el != al) {
      return "first difference at line " + std::to_string(line) +
             "\n  expected: " + (has_e ? el : "<end of file>") +
             "\n  actual:   " + (has_a ? al : "<end of file>");
    }
  }
}

RunSummary FixedSummary() {
  RunSummary s;
  s.requests = 500;
  s.requests_finished = 480;
  s.requests_unservable = 3;
  s.output_tokens = 96000;
  s.duration_s = 12.5;
  s.throughput_tok_s = 7680.0;
  s.mean_tbt_ms = 21.25;
  s.p99_tbt_ms = 48.125;
  s.mean_ttft_ms = 310.5;
  s.p99_ttft_ms = 1200.75;
  s.mean_latency_ms = 4520.0625;
  s.mean_batch_size = 173.3;
  s.scheduler_cpu_s = 0.0421;
  s.engine_busy_s = 12.1;
  s.steps = 1234;
  s.preemptions = 7;
  s.evictions = 19;
  s.cached_prompt_tokens = 2400000;
  s.cascade_step_fraction = 0.625;
  s.term_s = {6.5, 3.25, 0.5, 1.0, 0.75, 0.1};
  return s;
}

RunOutputMeta FixedMeta() {
  RunOutputMeta meta;
  meta.scenario = {{"name", "default"},
                   {"seed", 42},
                   {"workload", {{"groups", 5}, {"prefix_tokens", 5000}, {"rate", 100.0}}},
                   {"scheduler", {{"selector", "cht"}, {"stop", "heuristic"}}},
                   {"engine", "model"}};
  meta.provenance = {{"feather_version", "0.1.0"},
                     {"git_rev", "abcdef012345"},
                     {"build", "Release"},
                     {"host", "test-host"}};
  meta.engine = "model";
  meta.selector = "cht";
  meta.stop_policy = "heuristic";
  return meta;
}

// ---- records ------------------------------------------------------------------------------

void ExpectSameRecords(const RunRecords& expected, const RunRecords& actual) {
  ASSERT_EQ(expected.requests.size(), actual.requests.size());
  ASSERT_EQ(expected.steps.size(), actual.steps.size());
  for (size_t i = 0; i < expected.requests.size(); ++i) {
    const RequestRecord& e = expected.requests[i];
    const RequestRecord& a = actual.requests[i];
    const bool same = e.arrival_ns == a.arrival_ns && e.first_token_ns == a.first_token_ns &&
                      e.finish_ns == a.finish_ns && e.prompt_tokens == a.prompt_tokens &&
                      e.output_tokens == a.output_tokens && e.cached_tokens == a.cached_tokens &&
                      e.preemptions == a.preemptions && e.prefix_group == a.prefix_group;
    ASSERT_TRUE(same) << "request row " << i << " differs";
  }
  for (size_t i = 0; i < expected.steps.size(); ++i) {
    const StepRecord& e = expected.steps[i];
    const StepRecord& a = actual.steps[i];
    const bool same = e.start_ns == a.start_ns && e.step_ns == a.step_ns &&
                      e.scheduler_ns == a.scheduler_ns && e.batch_size == a.batch_size &&
                      e.decode_tokens == a.decode_tokens && e.prefill_tokens == a.prefill_tokens &&
                      e.admitted == a.admitted && e.waiting == a.waiting &&
                      e.common_prefix_tokens == a.common_prefix_tokens &&
                      e.kv_used_blocks == a.kv_used_blocks && e.cascade_used == a.cascade_used &&
                      e.term_ns == a.term_ns;
    ASSERT_TRUE(same) << "step row " << i << " differs";
  }
}

// Hand-picked rows: -1 markers, extremes of every type, both cascade values.
RunRecords SmallRecords() {
  RunRecords r;
  r.requests.push_back({0, 1'500'000, 9'000'000, 5020, 200, 5000, 0, 3});
  r.requests.push_back({2'000'000, -1, -1, 20, 0, 0, 2, 0});  // never started
  r.requests.push_back({std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                        -1, std::numeric_limits<uint32_t>::max(), 1, 0,
                        std::numeric_limits<uint32_t>::max(),
                        std::numeric_limits<uint32_t>::max()});
  StepRecord a;
  a.start_ns = 1'000'000;
  a.step_ns = 25'000'000;
  a.scheduler_ns = 12'345;
  a.batch_size = 128;
  a.decode_tokens = 120;
  a.prefill_tokens = 4096;
  a.admitted = 8;
  a.waiting = 300;
  a.common_prefix_tokens = 4992;
  a.kv_used_blocks = std::numeric_limits<uint64_t>::max();
  a.cascade_used = true;
  for (size_t t = 0; t < kNumStepTerms; ++t) a.term_ns[t] = static_cast<int64_t>(t * 1000 + 1);
  StepRecord b;  // all defaults
  StepRecord c = a;
  c.cascade_used = false;
  c.term_ns[kNumStepTerms - 1] = -1;
  r.steps = {a, b, c};
  return r;
}

RunRecords RandomRecords(size_t requests, size_t steps, uint64_t seed) {
  Rng rng(seed);
  RunRecords r;
  r.requests.resize(requests);
  for (RequestRecord& q : r.requests) {
    q.arrival_ns = rng.UniformInt(0, 1'000'000'000'000);
    q.first_token_ns = rng.Uniform(10) == 0 ? -1 : q.arrival_ns + rng.UniformInt(0, 1'000'000'000);
    q.finish_ns = q.first_token_ns < 0 || rng.Uniform(10) == 0
                      ? -1
                      : q.first_token_ns + rng.UniformInt(0, 10'000'000'000);
    q.prompt_tokens = static_cast<uint32_t>(rng.Uniform(20'000));
    q.output_tokens = static_cast<uint32_t>(rng.Uniform(200));
    q.cached_tokens = static_cast<uint32_t>(rng.Uniform(q.prompt_tokens + 1));
    q.preemptions = static_cast<uint32_t>(rng.Uniform(3));
    q.prefix_group = static_cast<uint32_t>(rng.Uniform(100));
  }
  r.steps.resize(steps);
  int64_t now = 0;
  for (StepRecord& s : r.steps) {
    s.scheduler_ns = rng.UniformInt(0, 100'000);
    s.start_ns = now + s.scheduler_ns;
    s.step_ns = rng.UniformInt(1'000'000, 80'000'000);
    now = s.start_ns + s.step_ns;
    s.batch_size = static_cast<uint32_t>(rng.Uniform(500));
    s.decode_tokens = static_cast<uint32_t>(rng.Uniform(s.batch_size + 1));
    s.prefill_tokens = static_cast<uint32_t>(rng.Uniform(32'768));
    s.admitted = static_cast<uint32_t>(rng.Uniform(64));
    s.waiting = static_cast<uint32_t>(rng.Uniform(10'000));
    s.common_prefix_tokens = static_cast<uint32_t>(rng.Uniform(6000));
    s.kv_used_blocks = rng.Uniform(1u << 20);
    s.cascade_used = rng.Uniform(2) == 1;
    for (int64_t& t : s.term_ns) t = rng.UniformInt(0, s.step_ns);
  }
  return r;
}

// ---- fixture: a scratch directory per test ------------------------------------------------

class RunOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("run_output_test-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  // Names in `dir` containing `part` (".partial-", ".old-").
  static std::vector<std::string> EntriesContaining(const fs::path& dir, const std::string& part) {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.find(part) != std::string::npos) found.push_back(name);
    }
    return found;
  }

  fs::path root_;
};

// ---- summary.json -------------------------------------------------------------------------

TEST_F(RunOutputTest, SummaryMatchesGoldenBytes) {
  const std::string actual = SummaryJsonText(FixedSummary(), FixedMeta());
  if (std::getenv("FEATHER_UPDATE_GOLDEN") != nullptr) {
    fs::create_directories(kGoldenSummary.parent_path());
    std::ofstream(kGoldenSummary, std::ios::binary) << actual;
    GTEST_SKIP() << "golden file rewritten: " << kGoldenSummary;
  }
  ASSERT_TRUE(fs::exists(kGoldenSummary)) << kGoldenSummary << " is missing";
  const std::string expected = ReadFile(kGoldenSummary);
  EXPECT_TRUE(expected == actual)
      << kGoldenSummary << ": " << FirstDifference(expected, actual)
      << "\n(FEATHER_UPDATE_GOLDEN=1 rewrites it if the change is meant)";

  // The file WriteRunOutputs leaves is exactly that text.
  const fs::path dir = root_ / "run";
  WriteRunOutputs(dir.string(), SmallRecords(), FixedSummary(), FixedMeta());
  EXPECT_EQ(ReadFile(dir / "summary.json"), actual);
}

TEST_F(RunOutputTest, SummaryKeysComeInTheDocumentedOrder) {
  const nlohmann::ordered_json json = SummaryToJson(FixedSummary(), FixedMeta());
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  const std::vector<std::string> expected = {"requests",
                                             "requests_finished",
                                             "requests_unservable",
                                             "output_tokens",
                                             "duration_s",
                                             "throughput_tok_s",
                                             "mean_tbt_ms",
                                             "p99_tbt_ms",
                                             "mean_ttft_ms",
                                             "p99_ttft_ms",
                                             "mean_latency_ms",
                                             "mean_batch_size",
                                             "scheduler_cpu_s",
                                             "engine_busy_s",
                                             "steps",
                                             "preemptions",
                                             "evictions",
                                             "cached_prompt_tokens",
                                             "cascade_step_fraction",
                                             "step_time_s_by_term",
                                             "engine",
                                             "selector",
                                             "stop",
                                             "scenario",
                                             "provenance"};
  EXPECT_EQ(keys, expected);

  std::vector<std::string> terms;
  for (const auto& item : json["step_time_s_by_term"].items()) terms.push_back(item.key());
  ASSERT_EQ(terms.size(), kNumStepTerms);
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    EXPECT_EQ(terms[t], StepTermName(static_cast<StepTerm>(t)));
  }
  EXPECT_EQ(json["step_time_s_by_term"]["gemm"].get<double>(), 6.5);
  EXPECT_EQ(json["requests_unservable"].get<uint64_t>(), 3u);
  EXPECT_EQ(json["stop"], "heuristic");
  EXPECT_EQ(json["scenario"]["workload"]["groups"], 5);
}

TEST_F(RunOutputTest, SummaryRunUnservedReadsTheRunsVerdict) {
  // FixedSummary: 3 unservable of 500, 480 finished; the scenario does not allow them.
  RunOutputMeta meta = FixedMeta();
  EXPECT_TRUE(SummaryRunUnserved(SummaryToJson(FixedSummary(), meta)));
  meta.scenario["limits"] = {{"allow_unservable", true}};
  EXPECT_FALSE(SummaryRunUnserved(SummaryToJson(FixedSummary(), meta)));
  RunSummary none_finished = FixedSummary();
  none_finished.requests_finished = 0;
  EXPECT_TRUE(SummaryRunUnserved(SummaryToJson(none_finished, meta)));  // allowed or not
  RunSummary all_served = FixedSummary();
  all_served.requests_unservable = 0;
  EXPECT_FALSE(SummaryRunUnserved(SummaryToJson(all_served, FixedMeta())));
  nlohmann::ordered_json older = SummaryToJson(FixedSummary(), FixedMeta());
  older.erase("requests_unservable");
  EXPECT_FALSE(SummaryRunUnserved(older));
}

TEST_F(RunOutputTest, NonFiniteValuesBecomeNull) {
  RunSummary s = FixedSummary();
  s.mean_tbt_ms = std::nan("");
  s.p99_tbt_ms = std::numeric_limits<double>::infinity();
  s.throughput_tok_s = -std::numeric_limits<double>::infinity();
  s.term_s[0] = std::nan("");
  const nlohmann::ordered_json json = SummaryToJson(s, FixedMeta());
  EXPECT_TRUE(json["mean_tbt_ms"].is_null());
  EXPECT_TRUE(json["p99_tbt_ms"].is_null());
  EXPECT_TRUE(json["throughput_tok_s"].is_null());
  EXPECT_TRUE(json["step_time_s_by_term"]["gemm"].is_null());
  const std::string text = SummaryJsonText(s, FixedMeta());
  EXPECT_THAT(text, HasSubstr("\"mean_tbt_ms\": null,"));
  EXPECT_THAT(text, HasSubstr("\"p99_tbt_ms\": null,"));
  // And the text is valid JSON.
  EXPECT_TRUE(nlohmann::json::parse(text).is_object());
}

TEST_F(RunOutputTest, SummaryIsDeterministic) {
  EXPECT_EQ(SummaryJsonText(FixedSummary(), FixedMeta()),
            SummaryJsonText(FixedSummary(), FixedMeta()));
}

// ---- results.h5 ---------------------------------------------------------------------------

TEST_F(RunOutputTest, SmallTablesRoundTrip) {
  const RunRecords records = SmallRecords();
  const std::string path = (root_ / "results.h5").string();
  WriteResultsH5(path, records, FixedMeta());
  ExpectSameRecords(records, ReadResultsH5(path));

  const RunOutputMeta meta = ReadResultsH5Meta(path);
  EXPECT_EQ(meta.scenario, FixedMeta().scenario);
  EXPECT_EQ(meta.provenance, FixedMeta().provenance);
  EXPECT_EQ(meta.engine, "model");
  EXPECT_EQ(meta.selector, "cht");
  EXPECT_EQ(meta.stop_policy, "heuristic");
}

TEST_F(RunOutputTest, EmptyTablesRoundTrip) {
  const std::string path = (root_ / "results.h5").string();
  WriteResultsH5(path, RunRecords{}, RunOutputMeta{});
  const RunRecords back = ReadResultsH5(path);
  EXPECT_TRUE(back.requests.empty());
  EXPECT_TRUE(back.steps.empty());
  // Every dataset exists, with zero rows.
  const H5TableReader reader(path);
  EXPECT_EQ(reader.ColumnRows("/requests/prefix_group"), 0u);
  EXPECT_EQ(reader.ColumnRows("/steps/cascade_used"), 0u);
  EXPECT_EQ(reader.ColumnRows("/steps/term/overhead"), 0u);
  // A null scenario and provenance come back as null.
  const RunOutputMeta meta = ReadResultsH5Meta(path);
  EXPECT_TRUE(meta.scenario.is_null());
  EXPECT_TRUE(meta.provenance.is_null());
  EXPECT_EQ(meta.engine, "");
}

TEST_F(RunOutputTest, LargeTablesRoundTrip) {
  const RunRecords records = RandomRecords(50'000, 50'000, 7);
  const std::string path = (root_ / "results.h5").string();
  WriteResultsH5(path, records, FixedMeta());
  ExpectSameRecords(records, ReadResultsH5(path));
}

TEST_F(RunOutputTest, TablesOnEitherSideOfTheChunkThresholdRoundTrip) {
  for (const size_t rows : {kChunkThresholdRows, kChunkThresholdRows + 1}) {
    const RunRecords records = RandomRecords(rows, rows, rows);
    std::string name = "r";  // built in steps: GCC 12 misreports "r" + to_string() (-Wrestrict)
    name += std::to_string(rows);
    const std::string path = (root_ / name).string();
    WriteResultsH5(path, records, FixedMeta());
    ExpectSameRecords(records, ReadResultsH5(path));
  }
}

TEST_F(RunOutputTest, TimeDatasetsCarryTheirUnit) {
  const std::string path = (root_ / "results.h5").string();
  WriteResultsH5(path, SmallRecords(), FixedMeta());
  const H5TableReader reader(path);
  for (const char* dataset :
       {"/requests/arrival_ns", "/requests/first_token_ns", "/requests/finish_ns",
        "/steps/start_ns", "/steps/step_ns", "/steps/scheduler_ns", "/steps/term/gemm"}) {
    EXPECT_EQ(reader.StringAttribute(dataset, "units"), "ns") << dataset;
  }
  EXPECT_EQ(reader.IntAttribute("/", "format_version"), kResultsFormatVersion);
  EXPECT_EQ(nlohmann::json::parse(reader.StringAttribute("/", "scenario")), FixedMeta().scenario);
}

TEST_F(RunOutputTest, LargeRegularTablesAreCompressed) {
  // 50K rows of zeros: about 4.6 MB uncompressed; chunked + deflate stores a small fraction.
  RunRecords records;
  records.requests.resize(50'000);
  records.steps.resize(50'000);
  const fs::path path = root_ / "results.h5";
  WriteResultsH5(path.string(), records, FixedMeta());
  EXPECT_LT(fs::file_size(path), 500'000u);
}

TEST_F(RunOutputTest, SameInputGivesSameDatasetsAndSameBytes) {
  const RunRecords records = RandomRecords(3000, 20'000, 11);
  const fs::path a = root_ / "a.h5";
  const fs::path b = root_ / "b.h5";
  WriteResultsH5(a.string(), records, FixedMeta());
  WriteResultsH5(b.string(), records, FixedMeta());
  ExpectSameRecords(ReadResultsH5(a.string()), ReadResultsH5(b.string()));
  // No timestamps in the file: the bytes match too.
  EXPECT_TRUE(ReadFile(a) == ReadFile(b));
}

// ---- reader errors ------------------------------------------------------------------------

TEST_F(RunOutputTest, ReadingAMissingFileNamesIt) {
  const std::string path = (root_ / "nope.h5").string();
  try {
    static_cast<void>(ReadResultsH5(path));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

TEST_F(RunOutputTest, ReadingAnotherFormatVersionFails) {
  const std::string path = (root_ / "v2.h5").string();
  {
    H5TableWriter writer(path);
    writer.SetIntAttribute("/", "format_version", 2);
    writer.Close();
  }
  try {
    static_cast<void>(ReadResultsH5(path));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("format_version 2"));
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

TEST_F(RunOutputTest, ReadingAFileWithoutFormatVersionFails) {
  const std::string path = (root_ / "bare.h5").string();
  {
    H5TableWriter writer(path);
    writer.Close();
  }
  EXPECT_THROW(static_cast<void>(ReadResultsH5(path)), std::runtime_error);
}

TEST_F(RunOutputTest, ReadingColumnsOfUnequalLengthFails) {
  // Rewrite one request column with a row missing.
  const std::string path = (root_ / "ragged.h5").string();
  const RunRecords records = SmallRecords();
  {
    H5TableWriter writer(path);
    writer.SetIntAttribute("/", "format_version", kResultsFormatVersion);
    writer.CreateGroup("/requests");
    const std::vector<int64_t> times = {1, 2, 3};
    const std::vector<uint32_t> short_column = {1, 2};
    for (const char* name : {"arrival_ns", "first_token_ns", "finish_ns"}) {
      writer.WriteColumn(std::string("/requests/") + name, H5ColumnType::kInt64,
                         reinterpret_cast<const std::byte*>(times.data()), sizeof(int64_t), 3);
    }
    writer.WriteColumn("/requests/prompt_tokens", H5ColumnType::kUInt32,
                       reinterpret_cast<const std::byte*>(short_column.data()), sizeof(uint32_t),
                       2);
    writer.Close();
  }
  try {
    static_cast<void>(ReadResultsH5(path));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/requests/prompt_tokens"));
    EXPECT_THAT(e.what(), HasSubstr("has 2 rows, expected 3"));
  }
}

TEST_F(RunOutputTest, ReadingAColumnOfTheWrongTypeFails) {
  const std::string path = (root_ / "typed.h5").string();
  {
    H5TableWriter writer(path);
    const std::vector<uint32_t> column = {1, 2};
    writer.WriteColumn("/c", H5ColumnType::kUInt32,
                       reinterpret_cast<const std::byte*>(column.data()), sizeof(uint32_t), 2);
    writer.Close();
  }
  H5TableReader reader(path);
  std::vector<int64_t> out(2);
  try {
    reader.ReadColumn("/c", H5ColumnType::kInt64, reinterpret_cast<std::byte*>(out.data()),
                      sizeof(int64_t), 2);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not stored as int64"));
  }
  EXPECT_FALSE(reader.Exists("/missing/deeper"));
  EXPECT_TRUE(reader.Exists("/c"));
}

// ---- the atomic directory write -----------------------------------------------------------

TEST_F(RunOutputTest, WritesBothFilesAndCreatesParents) {
  const fs::path dir = root_ / "a" / "b" / "run";
  WriteRunOutputs(dir.string() + "/", SmallRecords(), FixedSummary(), FixedMeta());
  EXPECT_TRUE(fs::is_regular_file(dir / "summary.json"));
  ExpectSameRecords(SmallRecords(), ReadResultsH5((dir / "results.h5").string()));
  EXPECT_TRUE(EntriesContaining(dir.parent_path(), ".partial-").empty());
}

TEST_F(RunOutputTest, RelativeDirectoryWithoutParentWorks) {
  // `feather run --out run1`: the parent is the working directory.
  const fs::path previous = fs::current_path();
  fs::current_path(root_);
  WriteRunOutputs("run1", SmallRecords(), FixedSummary(), FixedMeta());
  fs::current_path(previous);
  EXPECT_TRUE(fs::is_regular_file(root_ / "run1" / "summary.json"));
  EXPECT_TRUE(fs::is_regular_file(root_ / "run1" / "results.h5"));
  EXPECT_TRUE(EntriesContaining(root_, ".partial-").empty());
}

TEST_F(RunOutputTest, WritingOverAnEarlierRunReplacesIt) {
  const fs::path dir = root_ / "run";
  fs::create_directories(dir / "nested");
  std::ofstream(dir / "stale.txt") << "from an earlier run";
  // An earlier run is known by its summary.json: feather's provenance names its version.
  std::ofstream(dir / "summary.json") << "{\"provenance\": {\"feather_version\": \"0.1\"}}";

  WriteRunOutputs(dir.string(), SmallRecords(), FixedSummary(), FixedMeta());

  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(dir)) {
    entries.push_back(entry.path().filename().string());
  }
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"results.h5", "summary.json"}));
  EXPECT_EQ(ReadFile(dir / "summary.json"), SummaryJsonText(FixedSummary(), FixedMeta()));
  EXPECT_TRUE(EntriesContaining(root_, ".partial-").empty());
  EXPECT_TRUE(EntriesContaining(root_, ".old-").empty());
}

// A folder that does not hold a feather run is the user's: refused before and at install time,
// never deleted, whatever it holds.
TEST_F(RunOutputTest, AFolderThatIsNotAFeatherRunIsNeverReplaced) {
  const fs::path dir = root_ / "mine";
  for (const std::string& summary :
       std::vector<std::string>{"", "{}", "{\"provenance\": {}}", "[1]", "not json",
                                std::string(100000, '[')}) {
    SCOPED_TRACE(summary.substr(0, 20));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "notes.md") << "keep";
    if (!summary.empty()) std::ofstream(dir / "summary.json") << summary;
    EXPECT_THROW(PrepareOutputDir(dir.string()), std::runtime_error);
    try {
      WriteRunOutputs(dir.string(), SmallRecords(), FixedSummary(), FixedMeta());
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("'" + dir.string() + "' exists and does not hold a feather run"));
    }
    EXPECT_EQ(ReadFile(dir / "notes.md"), "keep");
    EXPECT_TRUE(EntriesContaining(root_, ".partial-").empty());
  }
  // The same folder once it held a run of feather's (and an empty one) is replaced.
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_NO_THROW(PrepareOutputDir(dir.string()));
  WriteRunOutputs(dir.string(), SmallRecords(), FixedSummary(), FixedMeta());
  EXPECT_NO_THROW(PrepareOutputDir(dir.string()));
  WriteRunOutputs(dir.string(), SmallRecords(), FixedSummary(), FixedMeta());
  EXPECT_EQ(ReadFile(dir / "summary.json"), SummaryJsonText(FixedSummary(), FixedMeta()));
}

TEST_F(RunOutputTest, ParentThatIsAFileFailsAndLeavesNothing) {
  // Works as root too, unlike a directory without write permission.
  const fs::path blocker = root_ / "blocker";
  std::ofstream(blocker) << "a regular file";
  const fs::path dir = blocker / "run";
  try {
    WriteRunOutputs(dir.string(), SmallRecords(), FixedSummary(), FixedMeta());
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.string()));
  }
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(EntriesContaining(root_, ".partial-").empty());
  EXPECT_EQ(ReadFile(blocker), "a regular file");
}

TEST_F(RunOutputTest, TargetThatIsAFileFailsAfterWritingAndCleansUp) {
  // Everything is written to the temp directory before the rename refuses: exercises the
  // cleanup of a populated temp directory.
  const fs::path dir = root_ / "run";
  std::ofstream(dir) << "not a directory";
  try {
    WriteRunOutputs(dir.string(), SmallRecords(), FixedSummary(), FixedMeta());
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.string()));
    EXPECT_THAT(e.what(), HasSubstr("not a directory"));
  }
  EXPECT_EQ(ReadFile(dir), "not a directory");
  EXPECT_TRUE(EntriesContaining(root_, ".partial-").empty());
}

TEST_F(RunOutputTest, UnusableDirectoryNamesAreRejected) {
  EXPECT_THROW(WriteRunOutputs("", SmallRecords(), FixedSummary(), FixedMeta()),
               std::runtime_error);
  EXPECT_THROW(
      WriteRunOutputs((root_ / "..").string(), SmallRecords(), FixedSummary(), FixedMeta()),
      std::runtime_error);
}

}  // namespace
}  // namespace feather
