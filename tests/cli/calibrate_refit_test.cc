// calibrate_refit_test.cc: `feather calibrate --refit ROWS...` through the binary: the committed
// CPU rows refit to a profile without measuring anything, its rows beside it read back the same
// way, and the usage errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "calib/rows_csv.h"
#include "sim/engine/device_profile.h"
#include "sim/io/device_profile_yaml.h"
#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test::ReadFile;
using test::RunFeather;
using test::RunResult;

const std::string kRows = std::string(FEATHER_SOURCE_DIR) + "/results/profiles/cpu-rows.csv";

class CalibrateRefitTest : public test::TempDirTest {
 protected:
  CalibrateRefitTest() : TempDirTest("refit") {}
};

TEST_F(CalibrateRefitTest, CommittedRowsRefitIntoAProfileAndRowsThatReadBack) {
  const fs::path out = dir_ / "refit.yaml";
  const RunResult run = RunFeather({"calibrate", "--refit", kRows, "--out", out.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("refitting 245 rows"));
  const DeviceProfile profile = LoadDeviceProfile(out.string());
  ASSERT_TRUE(profile.fit.has_value());
  EXPECT_EQ(profile.fit->holdout_rows, 49u);
  // The base's peaks and provenance are kept; the provenance names the refit.
  const DeviceProfile base =
      LoadDeviceProfile(std::string(FEATHER_SOURCE_DIR) + "/results/profiles/cpu.yaml");
  EXPECT_EQ(profile.dram_bw_bytes_per_s, base.dram_bw_bytes_per_s);
  EXPECT_EQ(profile.measured_on, base.measured_on);
  ASSERT_FALSE(profile.provenance.empty());
  EXPECT_THAT(profile.provenance.back(), HasSubstr("cpu-rows.csv (refit, base"));
  EXPECT_EQ(calib::LoadRowsCsv((dir_ / "refit-rows.csv").string()).size(), 245u);
}

// --hold keeps parameters at the base's values: here the prefill row cost, which the committed
// base (written before it existed) has at 0, so the refit is the pairs-only prefill model; a fit
// that may use it fits the prefill rows better. A name that is no parameter exits 2 before
// anything is read.
TEST_F(CalibrateRefitTest, HoldKeepsTheBaseValueAndBadNamesExit2) {
  const fs::path held = dir_ / "held.yaml";
  const RunResult run_held = RunFeather(
      {"calibrate", "--refit", kRows, "--hold", "prefill_query_fixed_ns", "--out", held.string()});
  ASSERT_EQ(run_held.exit_code, 0) << run_held.err;
  const fs::path free = dir_ / "free.yaml";
  const RunResult run_free = RunFeather({"calibrate", "--refit", kRows, "--out", free.string()});
  ASSERT_EQ(run_free.exit_code, 0) << run_free.err;
  const DeviceProfile with_hold = LoadDeviceProfile(held.string());
  const DeviceProfile without = LoadDeviceProfile(free.string());
  EXPECT_EQ(with_hold.prefill_query_fixed_ns, 0);
  EXPECT_GT(without.prefill_query_fixed_ns, 0);
  auto prefill_fit = [](const DeviceProfile& p) {
    for (const ProfileTermFit& t : p.fit->terms) {
      if (t.term == "prefill_attention") return t.mape;
    }
    return -1.0;
  };
  EXPECT_LT(prefill_fit(without), prefill_fit(with_hold));

  const RunResult bad = RunFeather({"calibrate", "--refit", kRows, "--hold", "prefill_qeury",
                                    "--out", (dir_ / "bad.yaml").string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--hold: 'prefill_qeury' is no profile parameter"));
  EXPECT_FALSE(fs::exists(dir_ / "bad.yaml"));
  // A capacity or peak figure is never fitted: nothing to hold.
  const RunResult peak = RunFeather({"calibrate", "--refit", kRows, "--hold",
                                     "dram_bw_bytes_per_s", "--out", (dir_ / "bad.yaml").string()});
  EXPECT_EQ(peak.exit_code, 2);
  EXPECT_THAT(peak.err, HasSubstr("--hold: dram_bw_bytes_per_s is never fitted"));
  EXPECT_FALSE(fs::exists(dir_ / "bad.yaml"));
}

// X-passes.csv beside X-rows.csv gives the refit its hold-out noise floor; a passes file of
// other rows exits 2 naming it, and writes nothing; rows without one say there is no floor.
TEST_F(CalibrateRefitTest, PassesBesideTheRowsGiveTheNoiseFloor) {
  const std::string dir = std::string(FEATHER_SOURCE_DIR) + "/results/validation/issue-20-zen4-1201/a/";
  fs::copy_file(dir + "cpu-rows.csv", dir_ / "x-rows.csv");
  fs::copy_file(dir + "cpu-passes.csv", dir_ / "x-passes.csv");
  auto refit = [&](const fs::path& out) {
    return RunFeather({"calibrate", "--refit", (dir_ / "x-rows.csv").string(), "--base",
                       dir + "cpu.yaml", "--out", out.string()});
  };
  const fs::path out = dir_ / "floor.yaml";
  const RunResult run = refit(out);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("repetitions for the noise floor: "));
  EXPECT_THAT(run.out, HasSubstr("(noise floor "));
  const DeviceProfile profile = LoadDeviceProfile(out.string());
  ASSERT_TRUE(profile.fit && profile.fit->holdout_noise_floor);
  EXPECT_GT(*profile.fit->holdout_noise_floor, 0);
  EXPECT_LT(*profile.fit->holdout_noise_floor, *profile.fit->holdout_mape);

  // The first row's five passes (lines 2-6) three times as long: their median is not the row's.
  std::string passes = ReadFile(dir_ / "x-passes.csv");
  size_t line = passes.find('\n') + 1;
  for (int pass = 0; pass < 5; ++pass) {
    const size_t end = passes.find('\n', line);
    const size_t comma = passes.rfind(',', end);
    const std::string tripled =
        std::to_string(std::stoll(passes.substr(comma + 1, end - comma - 1)) * 3);
    passes.replace(comma + 1, end - comma - 1, tripled);
    line = passes.find('\n', line) + 1;
  }
  test::WriteFile(dir_ / "x-passes.csv", passes);
  const fs::path bad_out = dir_ / "bad.yaml";
  const RunResult bad = refit(bad_out);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_THAT(bad.err, HasSubstr("x-passes.csv:"));
  EXPECT_THAT(bad.err, HasSubstr("the files are not of the same calibration"));
  EXPECT_FALSE(fs::exists(bad_out));

  const RunResult none = RunFeather({"calibrate", "--refit", kRows, "--out", (dir_ / "n.yaml").string()});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_THAT(none.out, HasSubstr("no hold-out noise floor: no "));
}

TEST_F(CalibrateRefitTest, UsageErrors) {
  const RunResult no_out = RunFeather({"calibrate", "--refit", kRows});
  EXPECT_EQ(no_out.exit_code, 2);
  EXPECT_THAT(no_out.err, HasSubstr("--refit needs --out"));

  const RunResult both = RunFeather({"calibrate", "--target", "cpu", "--refit", kRows});
  EXPECT_EQ(both.exit_code, 2);

  const RunResult neither = RunFeather({"calibrate"});
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_THAT(neither.err, HasSubstr("--target cpu"));

  // Rows without a profile beside them need --base.
  const fs::path alone = dir_ / "alone.csv";
  fs::copy_file(kRows, alone);
  const RunResult no_base =
      RunFeather({"calibrate", "--refit", alone.string(), "--out", (dir_ / "p.yaml").string()});
  EXPECT_EQ(no_base.exit_code, 2);
  EXPECT_THAT(no_base.err, HasSubstr("--base PROFILE.yaml"));
  const RunResult with_base = RunFeather({"calibrate", "--refit", alone.string(), "--base", "cpu",
                                          "--out", (dir_ / "p.yaml").string()});
  EXPECT_EQ(with_base.exit_code, 0) << with_base.err;

  // --out may not overwrite the rows it reads.
  const fs::path rows = dir_ / "p-rows.csv";
  const RunResult clobber =
      RunFeather({"calibrate", "--refit", rows.string(), "--base", "cpu", "--out",
                  (dir_ / "p.yaml").string()});
  EXPECT_EQ(clobber.exit_code, 2);
  EXPECT_THAT(clobber.err, HasSubstr("would overwrite the rows"));
}

TEST_F(CalibrateRefitTest, PublishedRowsRefitAsPublishedAndBadFilesExit2) {
  const std::string dir = std::string(FEATHER_SOURCE_DIR) + "/results/published/";
  const fs::path out = dir_ / "h100.yaml";
  const RunResult run = RunFeather(
      {"calibrate", "--refit", dir + "vidur/h100/Llama-2-7b-hf/mlp-tp1.csv",
       dir + "h100-decode-attention.csv", dir + "cascade-speedups.csv", "--base", "h100-sxm",
       "--out", out.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("refitting 270 rows"));
  EXPECT_THAT(run.out, HasSubstr("ratio rows under profile h100-sxm"));
  const DeviceProfile profile = LoadDeviceProfile(out.string());
  EXPECT_EQ(profile.origins[0].source, ParameterSource::kSpec);  // memory_bytes kept
  bool published = false;
  for (const DeviceProfile::Origin& o : profile.origins) {
    published = published || o.source == ParameterSource::kPublished;
  }
  EXPECT_TRUE(published);

  const fs::path bad = dir_ / "bad.csv";
  test::WriteFile(bad,
                  "# feather published-ratios v1\n"
                  "id,device,model,quantity,a_requests,a_context_tokens,a_unique_kv_tokens,"
                  "a_cascade_prefix_tokens,b_requests,b_context_tokens,b_unique_kv_tokens,"
                  "b_cascade_prefix_tokens,measured,relation,source,quote\n"
                  "r,d,m,step_time,10,100,100,0,10,100,100,0,-2,about,s,q\n");
  const RunResult failed = RunFeather(
      {"calibrate", "--refit", bad.string(), "--base", "h100-sxm", "--out", out.string()});
  EXPECT_EQ(failed.exit_code, 2);
  EXPECT_THAT(failed.err, HasSubstr("bad.csv:3: measured: expected a finite number > 0"));
}

// --fit-ratios: the paper's §3 rows alone give a profile (no term rows, so no rows file); the
// fitted parameters are `published` and name the rows; the others keep the base's sources; the
// assumed ones are listed in the notes. Bad parameter names and row ids exit 2.
TEST_F(CalibrateRefitTest, RatioRowsFitJointlyAndBadNamesExit2) {
  const std::string rows =
      std::string(FEATHER_SOURCE_DIR) + "/results/published/paper-s3-rtx6000-ada.csv";
  const std::string base =
      std::string(FEATHER_SOURCE_DIR) + "/results/profiles/spec/rtx6000-ada.yaml";
  const fs::path out = dir_ / "rtx.yaml";
  const RunResult run =
      RunFeather({"calibrate", "--refit", rows, "--fit-ratios",
                  "l2_bw_bytes_per_s,reuse_hit_max,reuse_window_ctas,cascade_layer_ns", "--base",
                  base, "--out", out.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("joint ratio fit on 10 rows of rtx6000-ada"));
  EXPECT_THAT(run.out, HasSubstr("exp1-f0.002-vs-homogeneous"));
  EXPECT_FALSE(fs::exists(dir_ / "rtx-rows.csv"));
  const DeviceProfile profile = LoadDeviceProfile(out.string());
  const DeviceProfile spec = LoadDeviceProfile(base);
  const auto params = ProfileParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == "l2_bw_bytes_per_s") {
      EXPECT_EQ(profile.origins[i].source, ParameterSource::kPublished);
      EXPECT_THAT(profile.origins[i].note, HasSubstr("paper-s3-rtx6000-ada.csv"));
    }
    if (params[i].name == "gemm_bw_efficiency") {
      EXPECT_EQ(profile.origins[i], spec.origins[i]);
    }
  }
  EXPECT_THAT(profile.notes, HasSubstr("Assumed (nothing published informs them): "));
  EXPECT_THAT(profile.notes, HasSubstr("gemm_bw_efficiency"));
  // The shipped profile is this fit (results/profiles/README.md's command): the same values.
  const DeviceProfile shipped =
      LoadDeviceProfile(std::string(FEATHER_SOURCE_DIR) + "/results/profiles/rtx6000-ada.yaml");
  for (const ProfileParameterInfo& info : params) {
    EXPECT_EQ(profile.*(info.field), shipped.*(info.field)) << info.name;
  }

  const RunResult bad_name = RunFeather({"calibrate", "--refit", rows, "--fit-ratios",
                                         "l2_bandwidth", "--base", base, "--out", out.string()});
  EXPECT_EQ(bad_name.exit_code, 2);
  EXPECT_THAT(bad_name.err, HasSubstr("'l2_bandwidth' is no profile parameter"));
  const RunResult bad_id =
      RunFeather({"calibrate", "--refit", rows, "--fit-ratios", "cascade_layer_ns",
                  "--ratio-rows", "exp9", "--base", base, "--out", out.string()});
  EXPECT_EQ(bad_id.exit_code, 2);
  EXPECT_THAT(bad_id.err, HasSubstr("no ratio row has the id 'exp9'"));
}

// --block-tokens belongs to a live CPU calibration: out of range, beside --refit (the rows were
// measured already) or with the cuda target (whose grid runs 16-token pages) it exits 2 before
// anything is measured, and writes nothing.
TEST_F(CalibrateRefitTest, BlockTokensIsRefusedWhereNoLiveCpuGridRuns) {
  const fs::path out = dir_ / "never.yaml";
  const RunResult zero = RunFeather({"calibrate", "--block-tokens", "0", "--out", out.string()});
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  const RunResult refit =
      RunFeather({"calibrate", "--refit", kRows, "--block-tokens", "128", "--out", out.string()});
  EXPECT_EQ(refit.exit_code, 2) << refit.err;
  EXPECT_THAT(refit.err, HasSubstr("--block-tokens"));
  const RunResult cuda =
      RunFeather({"calibrate", "--target", "cuda", "--block-tokens", "128", "--out", out.string()});
  EXPECT_EQ(cuda.exit_code, 2) << cuda.err;
  EXPECT_THAT(cuda.err, HasSubstr("16-token pages only"));
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace feather
