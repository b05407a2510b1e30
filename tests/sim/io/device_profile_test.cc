// device_profile_test.cc: the profile and model-description loaders — golden values of every
// shipped file, and every error path named with file, line and key (all problems at once).
#include "sim/engine/device_profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "sim/engine/model_config.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"

namespace feather {
namespace {

const std::string kSource = FEATHER_SOURCE_DIR;

// The problems a parse reports (empty when it succeeds).
template <typename Parse>
std::vector<InputProblem> ProblemsOf(Parse parse) {
  try {
    parse();
  } catch (const InputError& e) {
    return e.problems();
  }
  return {};
}

bool Has(const std::vector<InputProblem>& problems, uint32_t line, const std::string& key,
         const std::string& message_part) {
  for (const InputProblem& p : problems) {
    if (p.line == line && p.key == key && p.message.find(message_part) != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::string Render(const std::vector<InputProblem>& problems) {
  std::string text;
  for (const InputProblem& p : problems) text += p.ToString() + "\n";
  return text;
}

// A valid profile, one line per parameter, so tests can break one line at a time.
std::string ValidProfile() {
  std::string text =
      "name: test\n"                                              // line 1
      "device: Test GPU\n"                                        // line 2
      "provenance:\n"                                             // line 3
      "  - \"a datasheet\"\n"                                     // line 4
      "parameters:\n";                                            // line 5
  for (const ProfileParameterInfo& info : ProfileParameters()) {  // lines 6..5 + count
    const double value = info.min_exclusive ? 1 : std::max(info.min, 1.0);
    text += "  " + std::string(info.name) + ": {value: " + std::to_string(value) +
            ", source: assumed, note: \"n\"}\n";
  }
  return text;
}

// --- Shipped files --------------------------------------------------------------------------

TEST(DeviceProfile, LoadsRtx6000AdaWithItsDatasheetFigures) {
  // The hand-written base of the refit (the shipped profile is its refit, tested below).
  const DeviceProfile p = LoadDeviceProfile(kSource + "/results/profiles/spec/rtx6000-ada.yaml");
  EXPECT_EQ(p.name, "rtx6000-ada");
  EXPECT_DOUBLE_EQ(p.memory_bytes, 48.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(p.dram_bw_bytes_per_s, 960e9);
  EXPECT_DOUBLE_EQ(p.dense_flops_per_s, 364.2e12);
  EXPECT_DOUBLE_EQ(p.sm_count, 142);
  EXPECT_DOUBLE_EQ(p.reuse_window_ctas, 1136);
  EXPECT_FALSE(p.provenance.empty());
  // Datasheet figures are `spec` (and that a GPU runs no CPU skinny kernel and streams its
  // weights at the DRAM peak), everything a datasheet does not give is `assumed`.
  const auto params = ProfileParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const bool spec = params[i].name == "memory_bytes" || params[i].name == "dram_bw_bytes_per_s" ||
                      params[i].name == "dense_flops_per_s" || params[i].name == "sm_count" ||
                      params[i].name == "gemm_skinny_max_tokens" ||
                      params[i].name == "weight_stream_bw_bytes_per_s";
    EXPECT_EQ(p.origins[i].source, spec ? ParameterSource::kSpec : ParameterSource::kAssumed)
        << params[i].name;
    EXPECT_FALSE(p.origins[i].note.empty()) << params[i].name;
  }
}

TEST(DeviceProfile, LoadsH100SxmWithItsDatasheetFigures) {
  const DeviceProfile p = LoadDeviceProfile(kSource + "/results/profiles/h100-sxm.yaml");
  EXPECT_EQ(p.name, "h100-sxm");
  EXPECT_DOUBLE_EQ(p.memory_bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(p.dram_bw_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(p.dense_flops_per_s, 989.4e12);
  EXPECT_DOUBLE_EQ(p.sm_count, 132);
  EXPECT_EQ(p.origins[2].source, ParameterSource::kSpec);  // dram_bw_bytes_per_s
  EXPECT_EQ(ParameterSourceName(p.origins[5].source), "published");  // gemm_bw_efficiency
}

// The shipped GPU profiles are refits on published rows: every parameter is spec, published or
// assumed; a published one names its rows; the assumed ones are listed in the notes.
TEST(DeviceProfile, ShippedGpuProfilesArePublishedRefitsThatListWhatIsAssumed) {
  for (const char* name : {"rtx6000-ada", "h100-sxm", "a100-80gb"}) {
    SCOPED_TRACE(name);
    const DeviceProfile p =
        LoadDeviceProfile(kSource + "/results/profiles/" + std::string(name) + ".yaml");
    EXPECT_EQ(p.name, name);
    const auto params = ProfileParameters();
    size_t published = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const ParameterSource source = p.origins[i].source;
      EXPECT_NE(source, ParameterSource::kMeasured) << params[i].name;
      if (source == ParameterSource::kPublished) {
        ++published;
        EXPECT_NE(p.origins[i].note.find(".csv"), std::string::npos) << params[i].name;
      }
      if (source == ParameterSource::kAssumed) {
        EXPECT_NE(p.notes.find(std::string(params[i].name)), std::string::npos) << params[i].name;
      }
    }
    EXPECT_GE(published, 3u);
    EXPECT_NE(p.notes.find("Assumed (nothing published informs them)"), std::string::npos);
  }
}

TEST(DeviceProfile, ParameterTableCoversEveryFieldOnce) {
  const auto params = ProfileParameters();
  ASSERT_EQ(params.size(), kNumProfileParameters);
  DeviceProfile p;
  for (size_t i = 0; i < params.size(); ++i) p.*params[i].field = static_cast<double>(i + 1);
  double sum = 0;
  for (const ProfileParameterInfo& info : params) sum += p.*info.field;
  EXPECT_DOUBLE_EQ(sum, kNumProfileParameters * (kNumProfileParameters + 1) / 2.0);
  EXPECT_DOUBLE_EQ(p.memory_bytes + p.per_request_ns + p.reuse_hit_max, 0.0 + 1 + 17 + 11);
}

TEST(DeviceProfile, ValidTextParses) {
  const DeviceProfile p = ParseDeviceProfile(ValidProfile(), "t.yaml");
  EXPECT_EQ(p.device, "Test GPU");
  EXPECT_DOUBLE_EQ(p.sm_count, 1);
  EXPECT_DOUBLE_EQ(p.reuse_hit_max, 1);
}

// --- Profile error paths ---------------------------------------------------------------------

TEST(DeviceProfile, ReportsEveryProblemOfAFileAtOnce) {
  std::string text = ValidProfile();
  // Break four parameters and add an unknown top-level key.
  auto replace = [&text](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("dram_bw_bytes_per_s: {value: 1000000000.000000", "dram_bw_bytes_per_s: {value: -5");
  replace("sm_count: {value: 1.000000", "sm_count: {value: 1.5");
  replace("gemm_bw_efficiency: {value: 1.000000, source: assumed",
          "gemm_bw_efficiency: {value: fast, source: guessed");
  replace("  per_request_ns: {value: 1.000000, source: assumed, note: \"n\"}\n", "");
  // The line after the parameters, one fewer with per_request_ns removed.
  const uint32_t colour_line = 5 + kNumProfileParameters;
  text += "colour: green\n";
  const std::vector<InputProblem> problems =
      ProblemsOf([&] { (void)ParseDeviceProfile(text, "bad.yaml"); });
  const std::string all = Render(problems);
  EXPECT_EQ(problems.size(), 6u) << all;
  const uint32_t dram_line = 6 + 2, sm_line = 6 + 4, gemm_line = 6 + 5;
  EXPECT_TRUE(Has(problems, dram_line, "parameters.dram_bw_bytes_per_s.value", "out of range"))
      << all;
  EXPECT_TRUE(Has(problems, sm_line, "parameters.sm_count.value", "must be an integer")) << all;
  EXPECT_TRUE(Has(problems, gemm_line, "parameters.gemm_bw_efficiency.value", "expected a number"))
      << all;
  EXPECT_TRUE(
      Has(problems, gemm_line, "parameters.gemm_bw_efficiency.source", "spec | assumed | measured"))
      << all;
  EXPECT_TRUE(Has(problems, 6, "parameters.per_request_ns", "missing")) << all;
  EXPECT_TRUE(Has(problems, colour_line, "colour", "unknown key")) << all;
  for (const InputProblem& p : problems) EXPECT_EQ(p.file, "bad.yaml");
}

// gemm_batched_fixed_ns came after the first profiles were written: a file without it loads,
// with the parameter at 0 and `assumed`, and every other parameter stays required.
TEST(DeviceProfile, OptionalParameterMayBeAbsent) {
  std::string text = ValidProfile();
  const std::string line = "  gemm_batched_fixed_ns: {value: 1.000000, source: assumed, note: \"n\"}\n";
  ASSERT_NE(text.find(line), std::string::npos) << text;
  text.erase(text.find(line), line.size());
  const DeviceProfile p = ParseDeviceProfile(text, "old.yaml");
  EXPECT_EQ(p.gemm_batched_fixed_ns, 0.0);
  size_t optional = 0;
  for (const ProfileParameterInfo& info : ProfileParameters()) optional += info.optional ? 1 : 0;
  // gemm_batched_fixed_ns, gemm_roofline_exponent, decode_cta_fixed_ns, the three gemm_skinny_*,
  // weight_stream_bw_bytes_per_s, prefill_query_fixed_ns and decode_layer_fixed_ns.
  EXPECT_EQ(optional, 9u);
}

TEST(DeviceProfile, RejectsNonPositiveBandwidthAndEfficiencyAboveOne) {
  std::string text = ValidProfile();
  const std::string from = "dense_flops_per_s: {value: 1000000000.000000";
  text.replace(text.find(from), from.size(), "dense_flops_per_s: {value: 0");
  const std::string eff = "attn_bw_efficiency: {value: 1.000000";
  text.replace(text.find(eff), eff.size(), "attn_bw_efficiency: {value: 1.2");
  const auto problems = ProblemsOf([&] { (void)ParseDeviceProfile(text, "p.yaml"); });
  EXPECT_TRUE(Has(problems, 6 + 3, "parameters.dense_flops_per_s.value", "out of range"));
  EXPECT_TRUE(Has(problems, 6 + 7, "parameters.attn_bw_efficiency.value", "out of range"));
  EXPECT_EQ(problems.size(), 2u) << Render(problems);
}

TEST(DeviceProfile, RejectsUnknownParameterAndFieldAndMissingNote) {
  std::string text = ValidProfile();
  const uint32_t unknown_line = 6 + kNumProfileParameters;  // the line after the parameters
  text += "  l2_bytes: {value: 1, source: spec, note: \"x\"}\n";
  const std::string from = "step_fixed_ns: {value: 1.000000, source: assumed, note: \"n\"}";
  ASSERT_NE(text.find(from), std::string::npos) << text;
  text.replace(text.find(from), from.size(),
               "step_fixed_ns: {value: 0.5, source: assumed, units: ns}");
  const auto problems = ProblemsOf([&] { (void)ParseDeviceProfile(text, "p.yaml"); });
  EXPECT_TRUE(Has(problems, unknown_line, "parameters.l2_bytes", "unknown key"))
      << Render(problems);
  EXPECT_TRUE(Has(problems, 6 + 14, "parameters.step_fixed_ns.units", "unknown key"))
      << Render(problems);
  EXPECT_TRUE(Has(problems, 6 + 14, "parameters.step_fixed_ns.note", "missing"))
      << Render(problems);
  EXPECT_EQ(problems.size(), 3u) << Render(problems);
}

TEST(DeviceProfile, RejectsWrongShapesAndMissingTopLevelKeys) {
  const std::string text =
      "name: [a, b]\n"        // 1: not a string
      "provenance: []\n"      // 2: empty
      "parameters:\n"         // 3
      "  memory_bytes: 5\n";  // 4: not a map
  const auto problems = ProblemsOf([&] { (void)ParseDeviceProfile(text, "p.yaml"); });
  EXPECT_TRUE(Has(problems, 1, "name", "non-empty string")) << Render(problems);
  EXPECT_TRUE(Has(problems, 1, "device", "missing")) << Render(problems);
  EXPECT_TRUE(Has(problems, 2, "provenance", "non-empty list")) << Render(problems);
  EXPECT_TRUE(Has(problems, 4, "parameters.memory_bytes", "expected a map")) << Render(problems);
  EXPECT_TRUE(Has(problems, 4, "parameters.sm_count", "missing")) << Render(problems);
}

TEST(DeviceProfile, DuplicateKeyAndSyntaxErrorAndNonMap) {
  auto problems = ProblemsOf([] { (void)ParseDeviceProfile("name: a\nname: b\n", "p.yaml"); });
  EXPECT_TRUE(Has(problems, 2, "name", "duplicate key")) << Render(problems);
  problems = ProblemsOf([] { (void)ParseDeviceProfile("name: a\n  bad: [\n", "p.yaml"); });
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("YAML syntax error"), std::string::npos);
  EXPECT_GT(problems[0].line, 0u);
  problems = ProblemsOf([] { (void)ParseDeviceProfile("- 1\n- 2\n", "p.yaml"); });
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("YAML map"), std::string::npos);
}

TEST(DeviceProfile, MissingFileAndFixtureFileNameTheFile) {
  auto problems = ProblemsOf([] { (void)LoadDeviceProfile("/nonexistent/p.yaml"); });
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].file, "/nonexistent/p.yaml");
  const std::string fixture = kSource + "/tests/sim/data/profiles/bad_source.yaml";
  problems = ProblemsOf([&] { (void)LoadDeviceProfile(fixture); });
  EXPECT_TRUE(Has(problems, 9, "parameters.dram_bw_bytes_per_s.source", "got 'datasheet'"))
      << Render(problems);
  ASSERT_FALSE(problems.empty());
  EXPECT_EQ(problems[0].file, fixture);
  EXPECT_NE(problems[0].ToString().find(fixture + ":"), std::string::npos);
}

// --- Writer (DeviceProfileToYaml) and the calibration sections --------------------------------
//
// To refresh the golden file after an intended format change:
//   FEATHER_UPDATE_GOLDEN=1 build/release/tests/device_profile_test --gtest_filter='*Golden*'

const std::string kWrittenGolden = kSource + "/tests/sim/data/golden/written_profile.yaml";

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A small profile with every kind of field: awkward strings, numbers that need all 17 digits,
// integers, tiny and huge values, the three calibration sections (one term without holdout rows).
DeviceProfile SmallWrittenProfile() {
  DeviceProfile p;
  p.name = "cpu-test";
  p.device = "Test CPU \"quoted\", back\\slash: colon # hash";
  p.notes = "line one\nline two\ttabbed; unicode: µs ≈ 1e-6 s; bell \x07";
  p.provenance = {"STREAM triad probe", "yes"};
  const auto params = ProfileParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    p.*params[i].field =
        params[i].integer ? static_cast<double>(i + 1) : 0.1 * static_cast<double>(i + 1);
    p.origins[i] = {i % 4 == 0   ? ParameterSource::kMeasured
                    : i % 4 == 1 ? ParameterSource::kSpec
                    : i % 4 == 2 ? ParameterSource::kAssumed
                                 : ParameterSource::kPublished,
                    "note " + std::to_string(i)};
  }
  p.memory_bytes = 68719476736;  // 64 GiB
  p.dram_bw_bytes_per_s = 23456789012.345678;
  p.dense_flops_per_s = 1e15 / 3;
  p.l2_bw_bytes_per_s = 1.5e9;
  p.reuse_hit_max = 1.0 / 3;
  p.cascade_layer_ns = 1e-300;
  p.measured_on = ProfileMeasuredOn{"box-1",
                                    "AMD EPYC 7B13 64-Core Processor",
                                    "2025-05-01T12:00:00Z",
                                    {"GNU 12.2.0", "Release", "0123456789ab"},
                                    "avx2+fma, openmp 2 threads, gemm=blas",
                                    2};
  p.measured_on->probes = "quick";
  p.measured_on->read_bw_bytes_per_s = 30e9;
  p.measured_on->read_bw_low_bytes_per_s = 21.5e9;
  p.measured_on->decode_prefetch_bytes = 4096;
  p.measured_on->gemm_weights = "packed";
  p.measured_on->row_order = "primed";
  p.measured_on->block_tokens = 128;
  ProfileFit fit;
  fit.fit_mape = 0.0123456789012345678;
  fit.holdout_mape = 0.02;
  fit.fit_rows = 400;
  fit.holdout_rows = 100;
  fit.holdout_noise_floor = 0.0078125;
  fit.terms = {{"gemm", 0.01, 0.011, 400, 100, 0.00390625},
               {"cascade_prefix", 0.05, std::nullopt, 3, 0, std::nullopt},
               {"overhead", 0.1, 0.2, 400, 100, std::nullopt}};
  p.fit = fit;
  ProfileStepNoise noise;
  noise.note = "repetitions of 3 steps";
  noise.steps = 3;
  noise.repetitions = 5;
  noise.terms = {{"decode_attention", 0.031, 0.25, -0.04, 0.05, 15, 0.0125},
                 {"overhead", 1.0 / 3, 3.5, -0.5, 2.5, 15}};
  p.step_noise = noise;
  return p;
}

TEST(DeviceProfileWriter, MatchesGoldenTextAndReadsBack) {
  const DeviceProfile profile = SmallWrittenProfile();
  const std::string actual = DeviceProfileToYaml(profile);
  if (std::getenv("FEATHER_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(kWrittenGolden, std::ios::binary) << actual;
    GTEST_SKIP() << "golden file rewritten: " << kWrittenGolden;
  }
  const std::string expected = ReadWhole(kWrittenGolden);
  ASSERT_FALSE(expected.empty()) << kWrittenGolden << " is missing";
  EXPECT_EQ(expected, actual) << "(FEATHER_UPDATE_GOLDEN=1 rewrites it if the change is meant)";
  EXPECT_EQ(ParseDeviceProfile(actual, "written.yaml"), profile);
  EXPECT_EQ(LoadDeviceProfile(kWrittenGolden), profile);
}

TEST(DeviceProfileWriter, ShippedProfilesRoundTripExactly) {
  for (const char* name : {"rtx6000-ada", "h100-sxm", "a100-80gb"}) {
    SCOPED_TRACE(name);
    const DeviceProfile shipped =
        LoadDeviceProfile(kSource + "/results/profiles/" + std::string(name) + ".yaml");
    // Refits on published rows: no machine of ours measured them (a `fit` section records the
    // term rows' errors where there were term rows).
    EXPECT_FALSE(shipped.measured_on.has_value());
    const std::string text = DeviceProfileToYaml(shipped);
    EXPECT_EQ(ParseDeviceProfile(text, "written.yaml"), shipped);
    EXPECT_EQ(text.find("measured_on"), std::string::npos);
  }
}

TEST(DeviceProfileWriter, NumbersRoundTripBitForBit) {
  DeviceProfile p = SmallWrittenProfile();
  const double values[] = {
      0.1,    0.7,  1.0 / 3,       2.0 / 3, 0.30000000000000004, std::nextafter(1.0, 0.0),
      5e-324, 1e-7, 0.999999999999};
  for (const double v : values) {
    p.gemm_bw_efficiency = v;
    p.fit->fit_mape = v;
    const DeviceProfile back = ParseDeviceProfile(DeviceProfileToYaml(p), "n.yaml");
    EXPECT_EQ(back.gemm_bw_efficiency, v);
    EXPECT_EQ(back.fit->fit_mape, v);
  }
}

// The text of the golden profile with `from` replaced by `to` (which must occur once).
std::string GoldenWith(const std::string& from, const std::string& to) {
  std::string text = DeviceProfileToYaml(SmallWrittenProfile());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// `text` with `from` (which must occur once) replaced by `to`.
std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

uint32_t LineOfText(const std::string& text, const std::string& part) {
  const size_t at = text.find(part);
  return static_cast<uint32_t>(
      std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1);
}

TEST(DeviceProfileWriter, MeasuredOnErrorsNameLineAndKey) {
  std::string text =
      GoldenWith("  date_utc: \"2025-05-01T12:00:00Z\"\n", "  date_utc: \"2025-13-01 12:00\"\n");
  text = Replaced(text, "    git_rev: \"0123456789ab\"\n", "    git_sha: x\n");
  text = Replaced(text, "  threads: 2\n", "  threads: 0\n  cores: 2\n");
  text = Replaced(text, "  probes: quick\n", "  probes: fast\n");
  text = Replaced(text, "  row_order: primed\n", "  row_order: shuffled\n");
  text = Replaced(text, "  block_tokens: 128\n", "  block_tokens: 0\n");
  const auto problems = ProblemsOf([&] { (void)ParseDeviceProfile(text, "m.yaml"); });
  const std::string all = Render(problems);
  EXPECT_TRUE(
      Has(problems, LineOfText(text, "date_utc"), "measured_on.date_utc", "YYYY-MM-DDTHH:MM:SSZ"))
      << all;
  EXPECT_TRUE(
      Has(problems, LineOfText(text, "git_sha"), "measured_on.build.git_sha", "unknown key"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "compiler"), "measured_on.build.git_rev", "missing"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "threads: 0"), "measured_on.threads", "out of range"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "cores"), "measured_on.cores", "unknown key")) << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "probes: fast"), "measured_on.probes",
                  "expected full or quick, got 'fast'"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "row_order: shuffled"), "measured_on.row_order",
                  "expected primed or interleaved, got 'shuffled'"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "block_tokens: 0"), "measured_on.block_tokens",
                  "out of range"))
      << all;
  EXPECT_EQ(problems.size(), 8u) << all;

  const auto missing = ProblemsOf([] {
    (void)ParseDeviceProfile(GoldenWith("  kernel_variant: \"avx2+fma, openmp 2 threads, "
                                        "gemm=blas\"\n",
                                        ""),
                             "m.yaml");
  });
  EXPECT_EQ(missing.size(), 1u) << Render(missing);
  EXPECT_TRUE(Has(missing, LineOfText(DeviceProfileToYaml(SmallWrittenProfile()), "host:"),
                  "measured_on.kernel_variant", "missing"))
      << Render(missing);
  const std::string scalar_build = GoldenWith(
      "  build:\n    compiler: \"GNU 12.2.0\"\n    build_type: \"Release\"\n    git_rev: "
      "\"0123456789ab\"\n",
      "  build: gcc\n");
  const auto not_a_map = ProblemsOf([&] { (void)ParseDeviceProfile(scalar_build, "m.yaml"); });
  EXPECT_EQ(not_a_map.size(), 1u) << Render(not_a_map);
  EXPECT_TRUE(Has(not_a_map, LineOfText(scalar_build, "build: gcc"), "measured_on.build",
                  "expected a map, got 'gcc'"))
      << Render(not_a_map);
}

TEST(DeviceProfileWriter, FitErrorsNameLineAndKey) {
  std::string text =
      GoldenWith("      holdout_rows: 0\n", "      holdout_rows: 0\n      holdout_mape: 0.5\n");
  text = Replaced(text, "  fit_mape: 0.0", "  fit_mape: -0.0");
  text = Replaced(text, "    overhead:\n      rows: 400\n", "    overhead:\n      rows: 0\n");
  text = Replaced(text, "    gemm:\n", "    kv_reuse:\n");
  const auto problems = ProblemsOf([&] { (void)ParseDeviceProfile(text, "f.yaml"); });
  const std::string all = Render(problems);
  EXPECT_TRUE(Has(problems, LineOfText(text, "holdout_mape: 0.5"),
                  "fit.terms.cascade_prefix.holdout_mape", "must be absent"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "fit_mape: -"), "fit.fit_mape", "out of range"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "rows: 0\n      holdout_rows: 100"),
                  "fit.terms.overhead.rows", "out of range"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "kv_reuse"), "fit.terms.kv_reuse", "unknown key"))
      << all;
  EXPECT_EQ(problems.size(), 4u) << all;

  // So is a noise floor there; and one out of range elsewhere is named.
  std::string floors = GoldenWith("      holdout_rows: 0\n",
                                  "      holdout_rows: 0\n      holdout_noise_floor: 0.01\n");
  floors = Replaced(floors, "  holdout_noise_floor: 0.0078125", "  holdout_noise_floor: -1");
  const auto floor_problems = ProblemsOf([&] { (void)ParseDeviceProfile(floors, "f.yaml"); });
  EXPECT_TRUE(Has(floor_problems, LineOfText(floors, "holdout_noise_floor: 0.01"),
                  "fit.terms.cascade_prefix.holdout_noise_floor", "must be absent"))
      << Render(floor_problems);
  EXPECT_TRUE(Has(floor_problems, LineOfText(floors, "holdout_noise_floor: -1"),
                  "fit.holdout_noise_floor", "out of range"))
      << Render(floor_problems);
  EXPECT_EQ(floor_problems.size(), 2u) << Render(floor_problems);

  // holdout_mape is required when there are holdout rows.
  const std::string no_holdout_mape = GoldenWith("  holdout_mape: 0.02\n", "");
  const auto missing = ProblemsOf([&] { (void)ParseDeviceProfile(no_holdout_mape, "f.yaml"); });
  ASSERT_EQ(missing.size(), 1u) << Render(missing);
  EXPECT_EQ(missing[0].key, "fit.holdout_mape");
  EXPECT_NE(missing[0].message.find("missing"), std::string::npos);

  // An empty term map (nothing fitted had rows) is valid; a list is not.
  DeviceProfile empty_terms = SmallWrittenProfile();
  empty_terms.fit->terms.clear();
  EXPECT_EQ(ParseDeviceProfile(DeviceProfileToYaml(empty_terms), "f.yaml"), empty_terms);
  const std::string listed =
      Replaced(DeviceProfileToYaml(empty_terms), "  terms: {}", "  terms: [gemm]");
  const auto list_problems = ProblemsOf([&] { (void)ParseDeviceProfile(listed, "f.yaml"); });
  ASSERT_EQ(list_problems.size(), 1u) << Render(list_problems);
  EXPECT_EQ(list_problems[0].key, "fit.terms");
  EXPECT_EQ(list_problems[0].line, LineOfText(listed, "terms: [gemm]"));
}

// step_noise (issue 20): every problem by line and key; an empty term map is valid.
TEST(DeviceProfileWriter, StepNoiseErrorsNameLineAndKey) {
  std::string text = GoldenWith("  source: measured\n  note: \"repetitions of 3 steps\"\n",
                                "  source: guessed\n");
  text = Replaced(text, "      p95: 0.05\n", "      p95: -0.2\n");
  text = Replaced(text, "      rel_stdev: 0.33", "      rel_stdev: -0.33");
  text = Replaced(text, "  repetitions: 5\n", "  repetitions: 0\n");
  text = Replaced(text, "drift_rel_stdev: 0.0125", "drift_rel_stdev: -0.0125");
  const auto problems = ProblemsOf([&] { (void)ParseDeviceProfile(text, "n.yaml"); });
  const std::string all = Render(problems);
  EXPECT_TRUE(Has(problems, LineOfText(text, "source: guessed"), "step_noise.source", "guessed"))
      << all;
  // A missing key is reported at the map's first line.
  EXPECT_TRUE(Has(problems, LineOfText(text, "source: guessed"), "step_noise.note", "missing"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "p95: -0.2"), "step_noise.terms.decode_attention.p95",
                  "below p05"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "rel_stdev: -0.33"),
                  "step_noise.terms.overhead.rel_stdev", "out of range"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "repetitions: 0"), "step_noise.repetitions",
                  "out of range"))
      << all;
  EXPECT_TRUE(Has(problems, LineOfText(text, "drift_rel_stdev: -0.0125"),
                  "step_noise.terms.decode_attention.drift_rel_stdev", "out of range"))
      << all;
  EXPECT_EQ(problems.size(), 6u) << all;

  // drift_rel_stdev is optional: a profile written before it reads as 0 (no run-level factor).
  const std::string without =
      Replaced(DeviceProfileToYaml(SmallWrittenProfile()), "      drift_rel_stdev: 0.0125\n", "");
  EXPECT_EQ(ParseDeviceProfile(without, "n.yaml").step_noise->terms[0].drift_rel_stdev, 0.0);

  DeviceProfile empty_terms = SmallWrittenProfile();
  empty_terms.step_noise->terms.clear();
  EXPECT_EQ(ParseDeviceProfile(DeviceProfileToYaml(empty_terms), "n.yaml"), empty_terms);
}

TEST(DeviceProfileWriter, FitTermNamesAreTheFittedStepTerms) {
  const auto names = ProfileFitTermNames();
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names[0], "gemm");
  EXPECT_EQ(names[1], "decode_attention");
  EXPECT_EQ(names[4], "overhead");
}

// --- Model descriptions ----------------------------------------------------------------------

struct ModelGolden {
  const char* file;
  const char* name;
  uint32_t layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
  bool tied;
  uint64_t kv_bytes_per_token;
  double billions_of_params;  // TotalParams / 1e9, as published (±1%)
};

TEST(ModelConfig, LoadsEveryShippedModel) {
  const ModelGolden goldens[] = {
      {"qwen2.5-0.5b", "qwen2.5-0.5b", 24, 896, 14, 2, 64, 4864, 151936, true, 12288, 0.494},
      {"qwen2.5-1.5b", "qwen2.5-1.5b", 28, 1536, 12, 2, 128, 8960, 151936, true, 28672, 1.54},
      {"llama-3-8b", "llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, false, 131072, 8.03},
      {"qwen3-8b", "qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, false, 147456, 8.19},
      {"longchat-13b", "longchat-13b", 40, 5120, 40, 40, 128, 13824, 32000, false, 819200, 13.0},
  };
  for (const ModelGolden& g : goldens) {
    SCOPED_TRACE(g.file);
    const ModelConfig m =
        LoadModelConfig(kSource + "/scenarios/models/" + std::string(g.file) + ".yaml");
    EXPECT_EQ(m.name, g.name);
    EXPECT_NE(m.source.find("huggingface.co"), std::string::npos);
    EXPECT_EQ(m.layers, g.layers);
    EXPECT_EQ(m.hidden, g.hidden);
    EXPECT_EQ(m.heads, g.heads);
    EXPECT_EQ(m.kv_heads, g.kv_heads);
    EXPECT_EQ(m.head_dim, g.head_dim);
    EXPECT_EQ(m.intermediate, g.intermediate);
    EXPECT_EQ(m.vocab, g.vocab);
    EXPECT_EQ(m.dtype_bytes, 2u);
    EXPECT_EQ(m.tied_embeddings, g.tied);
    EXPECT_EQ(m.KvBytesPerToken(), g.kv_bytes_per_token);
    EXPECT_NEAR(static_cast<double>(m.TotalParams()) / 1e9, g.billions_of_params,
                0.01 * g.billions_of_params);
  }
}

TEST(ModelConfig, DerivedSizesOfLlama3_8B) {
  const ModelConfig m = LoadModelConfig(kSource + "/scenarios/models/llama-3-8b.yaml");
  EXPECT_EQ(m.KvBytesPerToken(), 131072u);
  EXPECT_EQ(m.KvBytesPerTokenPerLayer(), 4096u);
  EXPECT_EQ(m.LayerLinearParams(), 218'103'808u);
  EXPECT_EQ(m.LmHeadParams(), 525'336'576u);
  EXPECT_EQ(m.TotalParams(), 8'030'261'248u);  // the published 8,030,261,248
  EXPECT_EQ(m.StepWeightBytes(), 2 * (32 * 218'103'808ull + 525'336'576ull));
  EXPECT_DOUBLE_EQ(m.AttentionFlopsPerPair(), 4.0 * 32 * 128 * 32);
}

TEST(ModelConfig, ReportsEveryProblemOfAFileAtOnce) {
  const std::string text =
      "name: m\n"               // 1
      "layers: 0\n"             // 2: out of range
      "hidden: 4096.5\n"        // 3: not an integer
      "heads: 32\n"             // 4
      "kv_heads: 5\n"           // 5: does not divide heads
      "head_dim: 128\n"         // 6
      "intermediate: 100\n"     // 7
      "vocab: 1000\n"           // 8
      "dtype: int8\n"           // 9: bad choice
      "tied_embeddings: yes\n"  // 10: not true/false
      "layer_count: 3\n";       // 11: unknown
  const auto problems = ProblemsOf([&] { (void)ParseModelConfig(text, "m.yaml"); });
  EXPECT_TRUE(Has(problems, 1, "source", "missing")) << Render(problems);
  EXPECT_TRUE(Has(problems, 2, "layers", "out of range")) << Render(problems);
  EXPECT_TRUE(Has(problems, 3, "hidden", "expected an integer")) << Render(problems);
  EXPECT_TRUE(Has(problems, 5, "kv_heads", "must divide heads")) << Render(problems);
  EXPECT_TRUE(Has(problems, 9, "dtype", "bf16 | fp16 | fp32")) << Render(problems);
  EXPECT_TRUE(Has(problems, 10, "tied_embeddings", "true or false")) << Render(problems);
  EXPECT_TRUE(Has(problems, 11, "layer_count", "unknown key")) << Render(problems);
  EXPECT_EQ(problems.size(), 7u) << Render(problems);
}

TEST(ModelConfig, AnEmptyRequiredValueIsMissing) {
  const auto problems = ProblemsOf([] {
    (void)ParseModelConfig(
        "name: m\nsource: s\nlayers:\nhidden: 8\nheads: 2\nkv_heads: 2\nhead_dim: 4\n"
        "intermediate: 8\nvocab: 10\ndtype: bf16\ntied_embeddings: false\n",
        "m.yaml");
  });
  ASSERT_EQ(problems.size(), 1u) << Render(problems);
  EXPECT_TRUE(Has(problems, 3, "layers", "missing")) << Render(problems);
}

TEST(ModelConfig, DuplicateKeySyntaxErrorAndMissingFile) {
  auto problems = ProblemsOf([] { (void)ParseModelConfig("vocab: 1\nvocab: 2\n", "m.yaml"); });
  EXPECT_TRUE(Has(problems, 2, "vocab", "duplicate key")) << Render(problems);
  problems = ProblemsOf([] { (void)ParseModelConfig("a: {b\n", "m.yaml"); });
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("YAML syntax error"), std::string::npos);
  problems = ProblemsOf([] { (void)LoadModelConfig("/nonexistent/m.yaml"); });
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].file, "/nonexistent/m.yaml");
}

}  // namespace
}  // namespace feather
