// rows_csv_test.cc: the calibration rows' CSV format: written and read back bit for bit, the
// committed CPU rows refit to the committed profile's errors, and bad files named cell by cell.
#include "calib/rows_csv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "calib/fit.h"
#include "sim/engine/device_profile.h"
#include "base/input_error.h"
#include "sim/engine/model_config.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"

namespace feather::calib {
namespace {

using ::testing::HasSubstr;

const std::string kSource = FEATHER_SOURCE_DIR;

TEST(RowsCsv, WrittenRowsReadBackBitForBit) {
  const ModelConfig model = LoadModelConfig(kSource + "/scenarios/models/cpu-small.yaml");
  const DeviceProfile profile = LoadDeviceProfile(kSource + "/results/profiles/cpu.yaml");
  const std::vector<LabeledRow> committed =
      LoadRowsCsv(kSource + "/results/profiles/cpu-rows.csv");
  ASSERT_GT(committed.size(), 100u);
  std::vector<std::string> labels;
  std::vector<MeasuredStep> rows;
  for (const LabeledRow& r : committed) {
    labels.push_back(r.label);
    rows.push_back(r.step);
  }
  rows[3].shape.prefill_pairs = 1.0 / 3.0;  // a value with no short decimal form
  labels[0] = "a \"quoted\", label";
  const std::string text = RowsToCsv(labels, rows, StepPricer(profile, model), 5);
  const std::vector<LabeledRow> back = ParseRowsCsv(text, "rows.csv");
  ASSERT_EQ(back.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(back[i].label, labels[i]);
    for (size_t f = 0; f < 10; ++f) {
      EXPECT_EQ(reinterpret_cast<const double*>(&back[i].step.shape)[f],
                reinterpret_cast<const double*>(&rows[i].shape)[f]);
    }
    EXPECT_EQ(back[i].step.measured.term_ns, rows[i].measured.term_ns);
    EXPECT_EQ(back[i].step.measured.total_ns, rows[i].measured.total_ns);
    EXPECT_EQ(back[i].step.measured.cascade_used, rows[i].shape.cascade());
  }
  EXPECT_EQ(RowsToCsv(labels, rows, StepPricer(profile, model), 5),
            RowsToCsv(labels, rows, StepPricer(profile, model), 5));
}

// A repetition of a small step: gemm `gemm_ns`, decode 20, overhead 5 ns.
StepTiming Repetition(int64_t gemm_ns) {
  StepTiming t;
  t.term_ns = {gemm_ns, 20, 0, 0, 0, 5};
  t.total_ns = gemm_ns + 25;
  return t;
}

// Golden: one line per timed repetition, labels quoted (a quote doubled), passes from 1.
TEST(RowsCsv, PassesListEveryRepetitionInPassOrder) {
  const StepTiming a = Repetition(10);
  const StepTiming b = Repetition(40);
  const std::vector<std::string> labels = {"decode B=1", "say \"x\""};
  const std::vector<std::vector<StepTiming>> repetitions = {{a, b}, {b}};
  EXPECT_EQ(PassesToCsv(labels, repetitions),
            "label,pass,measured_gemm_ns,measured_decode_attention_ns,measured_kv_reuse_ns,"
            "measured_cascade_prefix_ns,measured_prefill_attention_ns,measured_overhead_ns,"
            "measured_total_ns\n"
            "\"decode B=1\",1,10,20,0,0,0,5,35\n"
            "\"decode B=1\",2,40,20,0,0,0,5,65\n"
            "\"say \"\"x\"\"\",1,40,20,0,0,0,5,65\n");
}

// A passes file reads back as its rows' repetitions; the committed Zen 4 calibration's pair
// belongs together (every row 5 passes, its median the row).
TEST(RowsCsv, PassesReadBackAsTheRowsRepetitions) {
  const StepTiming a = Repetition(10);
  const StepTiming b = Repetition(40);
  const StepTiming c = Repetition(30);
  std::vector<LabeledRow> rows(2);
  rows[0].label = "decode B=1";
  rows[0].step.measured = c;  // the median by total of {a, b, c}
  rows[1].label = "say \"x\"";
  rows[1].step.measured = a;  // of {a, a}
  const std::vector<std::string> labels = {rows[0].label, rows[1].label};
  const std::vector<std::vector<StepTiming>> repetitions = {{a, b, c}, {a, a}};
  const std::vector<std::vector<StepTiming>> back =
      ParsePassesCsv(PassesToCsv(labels, repetitions), "p.csv", rows);
  ASSERT_EQ(back.size(), 2u);
  ASSERT_EQ(back[0].size(), 3u);
  EXPECT_EQ(back[0][1].term_ns, b.term_ns);
  EXPECT_EQ(back[0][1].total_ns, b.total_ns);
  EXPECT_EQ(back[1].size(), 2u);

  const std::string dir = kSource + "/results/validation/issue-20-zen4-1201/a/";
  const std::vector<LabeledRow> committed = LoadRowsCsv(dir + "cpu-rows.csv");
  const std::vector<std::vector<StepTiming>> passes = LoadPassesCsv(dir + "cpu-passes.csv", committed);
  ASSERT_EQ(passes.size(), committed.size());
  for (const std::vector<StepTiming>& reps : passes) EXPECT_EQ(reps.size(), 5u);
}

TEST(RowsCsv, PassesOfOtherRowsAreRefusedWithLineAndColumn) {
  const StepTiming a = Repetition(10);
  StepTiming b = a;
  b.total_ns = 45;
  std::vector<LabeledRow> rows(2);
  rows[0].label = "r0";
  rows[0].step.measured = a;
  rows[1].label = "r1";
  rows[1].step.measured = a;
  const auto error_of = [&](const std::vector<std::string>& labels,
                            const std::vector<std::vector<StepTiming>>& reps) -> std::string {
    try {
      (void)ParsePassesCsv(PassesToCsv(labels, reps), "p.csv", rows);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of({"r0", "r1"}, {{a, a}, {a, b, a}}), "no error");
  EXPECT_THAT(error_of({"r0", "rX"}, {{a, a}, {a, a}}),
              HasSubstr("p.csv:4: label: row 2 of the rows file is 'r1', this line's is 'rX'"));
  EXPECT_THAT(error_of({"r0", "r1"}, {{a}, {a, a}}),
              HasSubstr("p.csv:3: pass: row 1 ('r0') has 1 pass(es)"));
  EXPECT_THAT(error_of({"r0", "r1"}, {{a, a}, {b, b}}),
              HasSubstr("took 45 ns, the rows file says 35 ns: the files are not of the same "
                        "calibration"));
  EXPECT_THAT(error_of({"r0"}, {{a, a}}), HasSubstr("passes for 1 rows, the rows file has 2"));
  EXPECT_THAT(error_of({"r0", "r1", "r2"}, {{a, a}, {a, a}, {a, a}}),
              HasSubstr("p.csv:6: label: more rows than the rows file's 2"));
  const std::vector<std::string> two = {"r0", "r1"};
  const std::vector<std::vector<StepTiming>> pairs = {{a, a}, {a, a}};
  std::string text = PassesToCsv(two, pairs);
  text.replace(text.find(",2,"), 3, ",3,");
  try {
    (void)ParsePassesCsv(text, "p.csv", rows);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("p.csv:3: pass: expected pass 2 of row 1, got 3"));
  }
  try {
    (void)ParsePassesCsv("label,pass\n", "p.csv", rows);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("p.csv:1: expected the header label,pass,measured_gemm_ns"));
  }
}

// The refit of the committed rows on the committed profile reaches the errors the live
// calibration recorded (same rows, same split; the fit starts from the fitted values, so the
// optimum may move a little, never the error by much).
TEST(RowsCsv, TheCommittedRowsRefitToTheCommittedErrors) {
  const ModelConfig model = LoadModelConfig(kSource + "/scenarios/models/cpu-small.yaml");
  const DeviceProfile profile = LoadDeviceProfile(kSource + "/results/profiles/cpu.yaml");
  std::vector<MeasuredStep> rows;
  for (const LabeledRow& r : LoadRowsCsv(kSource + "/results/profiles/cpu-rows.csv")) {
    rows.push_back(r.step);
  }
  const CalibrationFit fit = FitProfile(profile, model, rows);
  ASSERT_TRUE(profile.fit.has_value());
  EXPECT_EQ(fit.fit_rows, profile.fit->fit_rows);
  EXPECT_EQ(fit.holdout_rows, profile.fit->holdout_rows);
  EXPECT_NEAR(fit.fit_mape, profile.fit->fit_mape, 0.005);
  ASSERT_TRUE(fit.holdout_mape.has_value());
  ASSERT_TRUE(profile.fit->holdout_mape.has_value());
  EXPECT_NEAR(*fit.holdout_mape, *profile.fit->holdout_mape, 0.005);
}

TEST(RowsCsv, BadFilesNameLineAndColumn) {
  const std::string header =
      "label,holdout,requests,decode_requests,prefill_requests,new_tokens,sampled_tokens,"
      "cascade_prefix_tokens,decode_kv_tokens,decode_kv_unique_tokens,prefill_pairs,"
      "prefill_kv_tokens,measured_gemm_ns,measured_decode_attention_ns,measured_kv_reuse_ns,"
      "measured_cascade_prefix_ns,measured_prefill_attention_ns,measured_overhead_ns,"
      "measured_total_ns,predicted_total_ns\n";
  const std::string good = "\"d\",0,1,1,0,1,1,0,72,72,0,0,10,20,0,0,0,5,35,30\n";
  EXPECT_EQ(ParseRowsCsv(header + good, "r.csv").size(), 1u);
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      (void)ParseRowsCsv(text, "r.csv");
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error_of(header + "\"d\",0,1,1,0,1,1,0,72,-72,0,0,10,20,0,0,0,5,35,30\n"),
              HasSubstr("r.csv:2: decode_kv_unique_tokens: expected a finite number >= 0"));
  EXPECT_THAT(error_of(header + good + "\"d\",0,1,1,0,1,1,0,72,72,0,0,10,2.5,0,0,0,5,35,30\n"),
              HasSubstr("r.csv:3: measured_decode_attention_ns: expected whole nanoseconds"));
  EXPECT_THAT(error_of(header + "\"d\",0,1\n"), HasSubstr("r.csv:2: 3 cells, the header has 20"));
  EXPECT_THAT(error_of(header + "\"d,0,1\n"), HasSubstr("r.csv:2: unterminated quote"));
  std::string renamed = header;
  renamed.replace(renamed.find("new_tokens"), 10, "new_tokenz");
  const std::string both = error_of(renamed + good);
  EXPECT_THAT(both, HasSubstr("r.csv:1: new_tokenz: unknown column"));
  EXPECT_THAT(both, HasSubstr("r.csv:1: new_tokens: missing column"));
  EXPECT_THAT(error_of(header), HasSubstr("no rows after the header"));
  EXPECT_THAT(error_of(""), HasSubstr("empty"));
  std::string many = header;
  for (int i = 0; i < 100; ++i) many += "\"d\",0,x,1,0,1,1,0,72,72,0,0,10,20,0,0,0,5,35,30\n";
  EXPECT_THAT(error_of(many), HasSubstr("80 more problems not shown"));
}

}  // namespace
}  // namespace feather::calib
