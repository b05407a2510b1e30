// validate_test.cc: `feather validate` end to end on the toy CPU model (tests/hw/data/cpu-tiny.yaml):
// the layout of validation.json (the contract in cli/validate_command.h), the aggregation of
// repeated measured runs, and the refusal of a bad --repeat. Timings do not matter here; the
// figures in results/validation/ are made with the full-size scenarios.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

const std::string kSource = FEATHER_SOURCE_DIR;

// Host probes off unless asked for: they take about 2 s each and only one test is about them.
std::vector<std::string> TinyValidateArgs(const fs::path& out, const std::string& repeat,
                                          bool host_probes = false) {
  std::vector<std::string> args = {
      "validate",
      kSource + "/scenarios/validation/default.yaml",
      "--profile",
      kSource + "/results/profiles/cpu.yaml",
      "--out",
      out.string(),
      "--repeat",
      repeat,
      "--json",
      "--allow-foreign-profile",  // these tests check function on any machine
      "--set",
      "model=" + kSource + "/tests/hw/data/cpu-tiny.yaml",
      "--set",
      "workload.requests=16",
      "--set",
      "workload.sharing.prefix_tokens=64",
      "--set",
      "workload.output_tokens=6",
      "--set",
      "serving.kv_cache_blocks=2048",
      "--set",
      "scheduler_time=zero"};
  if (!host_probes) args.push_back("--no-host-probes");
  return args;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json ReadJson(const fs::path& path) { return nlohmann::json::parse(ReadText(path)); }

// A profile calibrated on another machine is refused before anything runs (issue 20), and
// accepted with --allow-foreign-profile.
TEST(ValidateCommandTest, AProfileOfAnotherMachineIsRefused) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_validate_foreign";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string yaml = ReadText(kSource + "/results/profiles/cpu.yaml");
  const size_t at = yaml.find("  cpu_model: ");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, yaml.find('\n', at) - at, "  cpu_model: \"Imaginary CPU 9000\"");
  std::ofstream(dir / "other.yaml") << yaml;
  std::vector<std::string> args = TinyValidateArgs(dir / "out", "1");
  args[3] = (dir / "other.yaml").string();
  args.erase(std::find(args.begin(), args.end(), "--allow-foreign-profile"));
  const test::RunResult run = test::RunFeather(args);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, ::testing::HasSubstr("measured on Imaginary CPU 9000"));
  EXPECT_THAT(run.err, ::testing::HasSubstr("--allow-foreign-profile"));
  EXPECT_FALSE(fs::exists(dir / "out"));
  fs::remove_all(dir);
}

// A profile calibrated with other KV pages than the scenario's is refused the same way, naming
// both page sizes and the calibration that would fit; with --allow-foreign-profile it runs and
// validation.json says so.
TEST(ValidateCommandTest, AProfileOfOtherPagesIsRefused) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_validate_pages";
  fs::remove_all(dir);
  std::vector<std::string> args = TinyValidateArgs(dir / "refused", "1");
  args.erase(std::find(args.begin(), args.end(), "--allow-foreign-profile"));
  args.insert(args.end(), {"--set", "serving.block_tokens=32"});
  const test::RunResult refused = test::RunFeather(args);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err,
              ::testing::HasSubstr("calibrated with 16-token KV pages; this run uses 32"));
  EXPECT_THAT(refused.err, ::testing::HasSubstr("feather calibrate --block-tokens 32"));
  EXPECT_FALSE(fs::exists(dir / "refused"));

  std::vector<std::string> allowed = TinyValidateArgs(dir / "allowed", "1");
  allowed.insert(allowed.end(), {"--set", "serving.block_tokens=32"});
  const test::RunResult run = test::RunFeather(allowed);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json validation = ReadJson(dir / "allowed" / "validation.json");
  EXPECT_THAT(validation["profile_block_tokens_check"].get<std::string>(),
              ::testing::StartsWith("foreign: calibrated with 16-token KV pages"));
  const nlohmann::json same = ReadJson([&] {
    const test::RunResult plain = test::RunFeather(TinyValidateArgs(dir / "same", "1"));
    EXPECT_EQ(plain.exit_code, 0) << plain.err;
    return dir / "same" / "validation.json";
  }());
  EXPECT_EQ(same["profile_block_tokens_check"], "same pages (16 tokens)");
  fs::remove_all(dir);
}

TEST(ValidateCommandTest, RepeatedMeasuredRunsAreAveragedAndKept) {
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_repeat";
  fs::remove_all(out);
  setenv("OMP_WAIT_POLICY", "passive", 1);  // see cpu_engine_test.cc: functional, not timed
  const test::RunResult run = test::RunFeather(TinyValidateArgs(out, "2"));
  ASSERT_EQ(run.exit_code, 0) << run.err;

  const nlohmann::json validation = ReadJson(out / "validation.json");
  EXPECT_EQ(nlohmann::json::parse(run.out), validation);  // --json prints what it wrote
  const std::vector<std::string> expected_runs = {"measured-1", "measured-2"};
  EXPECT_EQ(validation["runs"]["measured"].get<std::vector<std::string>>(), expected_runs);
  EXPECT_EQ(validation["runs"]["predicted"], "predicted");
  // The committed cpu.yaml (calibrated before step_noise existed) has no spread to draw from.
  EXPECT_TRUE(validation["runs"]["predicted_noise"].empty());
  for (const char* name : {"measured-1", "measured-2", "predicted"}) {
    EXPECT_TRUE(fs::exists(out / name / "summary.json")) << name;
    EXPECT_TRUE(fs::exists(out / name / "results.h5")) << name;
  }
  EXPECT_FALSE(fs::exists(out / "measured"));

  const std::vector<std::string> metrics = {"throughput_tok_s", "mean_tbt_ms", "p99_tbt_ms",
                                            "mean_batch_size", "mean_ttft_ms"};
  ASSERT_EQ(validation["metrics"].size(), metrics.size());
  const nlohmann::json first = ReadJson(out / "measured-1" / "summary.json");
  const nlohmann::json second = ReadJson(out / "measured-2" / "summary.json");
  const nlohmann::json predicted = ReadJson(out / "predicted" / "summary.json");
  for (const std::string& name : metrics) {
    SCOPED_TRACE(name);
    const nlohmann::json& m = validation["metrics"][name];
    const double a = first[name].get<double>();
    const double b = second[name].get<double>();
    const std::vector<double> expected_values = {a, b};
    EXPECT_EQ(m["measured_runs"].get<std::vector<double>>(), expected_values);
    const double mean = (a + b) / 2;
    EXPECT_DOUBLE_EQ(m["measured"].get<double>(), mean);
    EXPECT_DOUBLE_EQ(m["predicted"].get<double>(), predicted[name].get<double>());
    const double signed_error = (predicted[name].get<double>() - mean) / mean;
    EXPECT_DOUBLE_EQ(m["signed_error"].get<double>(), signed_error);
    EXPECT_DOUBLE_EQ(m["rel_error"].get<double>(), std::fabs(signed_error));
    EXPECT_DOUBLE_EQ(m["measured_spread"].get<double>(), std::fabs(a - b) / mean);
  }
  // Same-plan totals cover the steps of both measured runs.
  EXPECT_EQ(validation["same_plans"]["steps"].get<uint64_t>(),
            first["steps"].get<uint64_t>() + second["steps"].get<uint64_t>());
  fs::remove_all(out);
}

// cpu.yaml with a step_noise section appended, written under `dir`.
std::string NoisyProfile(const fs::path& dir) {
  std::string yaml = ReadText(kSource + "/results/profiles/cpu.yaml");
  if (yaml.find("\nstep_noise:") == std::string::npos) {
    yaml +=
        "step_noise:\n  source: measured\n  note: \"test\"\n  steps: 10\n  repetitions: 5\n"
        "  terms:\n    gemm:\n      rel_stdev: 0.05\n      rms: 0.1\n      p05: -0.05\n      p95: "
        "0.08\n"
        "      samples: 50\n      drift_rel_stdev: 0.03\n    decode_attention:\n      rel_stdev: "
        "0.2\n      rms: 0.5\n      p05: -0.2\n"
        "      p95: 0.3\n      samples: 50\n";
  }
  fs::create_directories(dir);
  const fs::path path = dir / "noisy.yaml";
  std::ofstream(path) << yaml;
  return path.string();
}

// With a profile that has step_noise, --repeat 2 adds two noisy model runs; every metric gets
// its predicted interval and a verdict; the same-plan steps are written as calibration rows.
TEST(ValidateCommandTest, NoisyModelRunsGiveEachMetricAnIntervalAndAVerdict) {
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_noisy";
  fs::remove_all(out);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  std::vector<std::string> args = TinyValidateArgs(out / "run", "2");
  args[3] = NoisyProfile(out);
  args.push_back("--model-repeat");
  args.push_back("3");
  const test::RunResult run = test::RunFeather(args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json validation = ReadJson(out / "run" / "validation.json");
  const std::vector<std::string> noisy = {"predicted-noise-1", "predicted-noise-2",
                                          "predicted-noise-3"};
  EXPECT_EQ(validation["runs"]["predicted_noise"].get<std::vector<std::string>>(), noisy);
  std::vector<nlohmann::json> summaries;
  for (const std::string& name : noisy) {
    summaries.push_back(ReadJson(out / "run" / name / "summary.json"));
    EXPECT_EQ(summaries.back()["scenario"]["step_noise"]["enabled"], true) << name;
  }
  EXPECT_EQ(ReadJson(out / "run" / "predicted" / "summary.json")["scenario"]["step_noise"]
                ["enabled"],
            false);
  for (const auto& [name, m] : validation["metrics"].items()) {
    SCOPED_TRACE(name);
    ASSERT_EQ(m["predicted_runs"].size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(m["predicted_runs"][k].get<double>(), summaries[k][name].get<double>());
    }
    EXPECT_LE(m["predicted_interval"][0].get<double>(), m["predicted_mean"].get<double>());
    EXPECT_GE(m["predicted_interval"][1].get<double>(), m["predicted_mean"].get<double>());
    EXPECT_TRUE(m.contains("verdict"));
  }
  EXPECT_TRUE(validation["verdict"].contains("pass"));
  // What the noisy runs drew from: gemm drifts (one factor per run, different between runs),
  // decode_attention has no drift (factor 1).
  const nlohmann::json& drawn = validation["predicted_noise"];
  EXPECT_EQ(drawn["terms"]["gemm"]["drift_rel_stdev"].get<double>(), 0.03);
  EXPECT_EQ(drawn["terms"]["decode_attention"]["drift_rel_stdev"].get<double>(), 0.0);
  ASSERT_EQ(drawn["run_factors"].size(), 3u);
  for (const nlohmann::json& run_factors : drawn["run_factors"]) {
    EXPECT_GT(run_factors["gemm"].get<double>(), 0.0);
    EXPECT_NE(run_factors["gemm"].get<double>(), 1.0);
    EXPECT_EQ(run_factors["decode_attention"].get<double>(), 1.0);
  }
  EXPECT_NE(drawn["run_factors"][0]["gemm"], drawn["run_factors"][1]["gemm"]);
  // The noise moves the model's step times: the noisy runs' engine time differs from the point.
  EXPECT_NE(summaries[0]["throughput_tok_s"], summaries[1]["throughput_tok_s"]);

  const std::string rows = [&] {
    std::ifstream in(out / "run" / "same-plan-rows.csv");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }();
  EXPECT_EQ(static_cast<uint64_t>(std::count(rows.begin(), rows.end(), '\n')),
            validation["same_plans"]["steps"].get<uint64_t>() + 1);  // + the header
  EXPECT_EQ(rows.rfind("label,holdout,", 0), 0u);
  EXPECT_NE(rows.find("\"measured-2 step 1 "), std::string::npos);
  fs::remove_all(out);
}

// `feather run` with the step_noise key: off by default; on, the same seed gives the same
// summary.json and another seed another one; a profile without step_noise is refused (exit 2).
TEST(ValidateCommandTest, RunStepNoiseIsSeededAndOffByDefault) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_run_noise";
  fs::remove_all(dir);
  const std::string profile = NoisyProfile(dir);
  const auto run = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run",        kSource + "/scenarios/validation/default.yaml",
                                     "--out",      (dir / name).string(),
                                     "--set",      "profile=" + profile,
                                     "--set",      "model=" + kSource + "/tests/hw/data/cpu-tiny.yaml",
                                     "--set",      "workload.requests=16",
                                     "--set",      "serving.kv_cache_blocks=2048",
                                     "--set",      "scheduler_time=zero",
                                     "--set",      "engine=model"};
    for (const std::string& e : extra) {
      args.push_back("--set");
      args.push_back(e);
    }
    const test::RunResult result = test::RunFeather(args);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    nlohmann::json summary = ReadJson(dir / name / "summary.json");
    summary.erase("provenance");
    summary.erase("wall_time_s");
    return summary;
  };
  const nlohmann::json plain = run("plain", {});
  EXPECT_EQ(plain["scenario"]["step_noise"]["enabled"], false);
  const nlohmann::json a = run("a", {"step_noise.enabled=true", "step_noise.seed=4"});
  const nlohmann::json b = run("b", {"step_noise.enabled=true", "step_noise.seed=4"});
  const nlohmann::json c = run("c", {"step_noise.enabled=true", "step_noise.seed=5"});
  EXPECT_EQ(a, b);
  EXPECT_NE(a["throughput_tok_s"], c["throughput_tok_s"]);
  EXPECT_NE(a["throughput_tok_s"], plain["throughput_tok_s"]);

  const test::RunResult refused = test::RunFeather(
      {"run", kSource + "/scenarios/validation/default.yaml", "--out", (dir / "r").string(),
       "--set", "profile=" + kSource + "/results/profiles/h100-sxm.yaml", "--set",
       "engine=model", "--set", "step_noise.enabled=true"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, ::testing::HasSubstr("no step_noise section"));
  // A real engine cannot take it: a problem of the scenario, naming the key.
  const test::RunResult real = test::RunFeather(
      {"run", kSource + "/scenarios/validation/default.yaml", "--out", (dir / "r").string(),
       "--set", "step_noise.enabled=true"});
  EXPECT_EQ(real.exit_code, 2);
  EXPECT_THAT(real.err, ::testing::HasSubstr("step_noise.enabled: step-time noise is drawn by "
                                             "the model engine only"));
  fs::remove_all(dir);
}

// TinyValidateArgs with the host probes on and the committed cpu.yaml marked as a `calibrate
// --quick` profile (measured_on.probes: quick), written into dir: the probes then take the
// quick settings, seconds where the full ones take over a minute under ASan.
std::vector<std::string> QuickProbedValidateArgs(const fs::path& dir) {
  std::string profile = ReadText(kSource + "/results/profiles/cpu.yaml");
  const size_t threads = profile.find("\n  threads: ");
  EXPECT_NE(threads, std::string::npos);
  profile.insert(profile.find('\n', threads + 1) + 1, "  probes: quick\n");
  std::ofstream(dir / "cpu-quick.yaml") << profile;
  std::vector<std::string> args = TinyValidateArgs(dir / "out", "1", /*host_probes=*/true);
  *std::find(args.begin(), args.end(), kSource + "/results/profiles/cpu.yaml") =
      (dir / "cpu-quick.yaml").string();
  return args;
}

// One measured run keeps the plain directory name; the host is probed before it and after it,
// each probe with its ratio to the figure the profile recorded (null where it recorded none).
// A `calibrate --quick` profile is probed with the quick settings, whose GEMM peak comes from
// the same smaller products as the profile's.
TEST(ValidateCommandTest, OneRunKeepsTheMeasuredDirectoryNameAndProbesTheHostAroundIt) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_validate_once";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path out = dir / "out";
  setenv("OMP_WAIT_POLICY", "passive", 1);
  const test::RunResult run = test::RunFeather(QuickProbedValidateArgs(dir));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json validation = ReadJson(out / "validation.json");
  EXPECT_EQ(validation["runs"]["measured"].get<std::vector<std::string>>(),
            std::vector<std::string>{"measured"});
  EXPECT_TRUE(fs::exists(out / "measured" / "summary.json"));
  EXPECT_EQ(validation["metrics"]["throughput_tok_s"]["measured_spread"].get<double>(), 0.0);

  const nlohmann::json& host = validation["host_probes"];
  ASSERT_TRUE(host.is_object()) << host;
  const nlohmann::json& probes = host["probes"];
  ASSERT_EQ(probes.size(), 2u);
  EXPECT_EQ(probes[0]["at"], "before measured");
  EXPECT_EQ(probes[1]["at"], "after measured");
  // Each ratio is the probe over the profile's figure, or null where the profile has none (the
  // committed cpu.yaml predates the read probe in measured_on).
  for (const auto& [figure, probe_field, ratio_field, range_field] :
       {std::array<const char*, 4>{"read_bw_bytes_per_s", "read_bw_bytes_per_s", "read_bw_ratio",
                                   "read_bw_ratio_range"},
        std::array<const char*, 4>{"dense_flops_per_s", "gemm_peak_flops_per_s", "gemm_peak_ratio",
                                   "gemm_peak_ratio_range"}}) {
    SCOPED_TRACE(figure);
    const nlohmann::json& reference = host["profile"][figure];
    double low = 1e300, high = 0;
    for (const nlohmann::json& p : probes) {
      const double value = p[probe_field].get<double>();
      EXPECT_GT(value, 0);
      if (reference.is_null()) {
        EXPECT_TRUE(p[ratio_field].is_null());
        continue;
      }
      const double ratio = value / reference.get<double>();
      EXPECT_DOUBLE_EQ(p[ratio_field].get<double>(), ratio);
      low = std::min(low, ratio);
      high = std::max(high, ratio);
    }
    if (reference.is_null()) {
      EXPECT_TRUE(host[range_field].is_null());
    } else {
      EXPECT_DOUBLE_EQ(host[range_field][0].get<double>(), low);
      EXPECT_DOUBLE_EQ(host[range_field][1].get<double>(), high);
    }
  }
  EXPECT_FALSE(host["profile"]["dense_flops_per_s"].is_null());  // every CPU profile has one
  // The step probe: four grid steps on the real engine against the profile's price of them,
  // for the total, the gemm term and the one step of <= 8 tokens, with their ranges. The measured
  // time is real (and the tiny model is far from the cpu-small steps the profile was fitted to),
  // so only a positive, finite ratio is checked.
  ASSERT_EQ(host["step_probe_grid"].size(), 4u) << host;
  for (const char* field : {"step_ratio", "step_gemm_ratio", "small_step_ratio"}) {
    SCOPED_TRACE(field);
    double low = 1e300, high = 0;
    for (const nlohmann::json& p : probes) {
      const double ratio = p[field].get<double>();
      EXPECT_GT(ratio, 0.0);
      EXPECT_LT(ratio, 1000.0);
      low = std::min(low, ratio);
      high = std::max(high, ratio);
    }
    const nlohmann::json& range = host[std::string(field) + "_range"];
    EXPECT_DOUBLE_EQ(range[0].get<double>(), low);
    EXPECT_DOUBLE_EQ(range[1].get<double>(), high);
  }
  EXPECT_EQ(host["settings"], "quick");
  fs::remove_all(dir);
}

// The committed profile records no probe settings: it is read as a full calibration's and probed
// with the full settings.
TEST(ValidateCommandTest, AProfileWithoutProbeSettingsIsProbedWithTheFullSettings) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the full-size probes take over a minute under ASan; the release build runs "
                  "this test, and OneRunKeepsTheMeasuredDirectoryNameAndProbesTheHostAroundIt "
                  "runs the same probe code with the quick settings here";
#endif
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_full_probes";
  fs::remove_all(out);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  const test::RunResult run = test::RunFeather(TinyValidateArgs(out, "1", /*host_probes=*/true));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json host = ReadJson(out / "validation.json")["host_probes"];
  EXPECT_EQ(host["settings"], "full") << host;
  EXPECT_EQ(host["probes"].size(), 2u) << host;
  fs::remove_all(out);
}

TEST(ValidateCommandTest, NoHostProbesSaysSo) {
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_no_probes";
  fs::remove_all(out);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  const test::RunResult run = test::RunFeather(TinyValidateArgs(out, "1"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ReadJson(out / "validation.json")["host_probes"], "off (--no-host-probes)");
  fs::remove_all(out);
}

TEST(ValidateCommandTest, RefusesARepeatBelowOne) {
  const fs::path out = fs::path(::testing::TempDir()) / "feather_validate_zero";
  fs::remove_all(out);
  const test::RunResult run = test::RunFeather(TinyValidateArgs(out, "0"));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("--repeat"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(out / "validation.json"));
}

}  // namespace
}  // namespace feather
