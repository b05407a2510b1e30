// harness_test.cc: the engine-agnostic measurement harness (calib/harness.h) over a fake Engine:
// shapes named by ShapeStep with the engine's switches, the median repetition kept whole, the
// per-step and per-pass hooks, primed runs, a cascade decision that disagrees with the shape
// caught, and the rows written by calib/rows_csv.h read back as `calibrate --refit` reads them.
#include "calib/harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "calib/rows_csv.h"
#include "hw/synthetic_batch.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"

namespace feather::calib {
namespace {

const std::string kSource = FEATHER_SOURCE_DIR;

// Returns 100, 300, 200, 100, ... ns per call (gemm the same), and cascade_used as configured.
class FakeEngine final : public Engine {
 public:
  explicit FakeEngine(bool cascade_used) : cascade_used_(cascade_used) {}
  [[nodiscard]] std::string_view Name() const override { return "fake"; }
  [[nodiscard]] StepTiming Execute(const BatchPlan&) override {
    static constexpr int64_t kTotals[] = {100, 300, 200};
    StepTiming timing;
    timing.total_ns = kTotals[calls_++ % 3];
    timing.term_ns[static_cast<size_t>(StepTerm::kGemm)] = timing.total_ns;
    timing.cascade_used = cascade_used_;
    return timing;
  }
  int calls_ = 0;

 private:
  bool cascade_used_;
};

hw::SyntheticBatch SharedBatch() {
  hw::SyntheticBatchSpec spec;
  spec.decode_requests = 16;
  spec.groups = 1;
  spec.shared_prefix_tokens = 512;
  spec.suffix_tokens = 16;
  return hw::MakeSyntheticBatch(spec);
}

TEST(Harness, RowsCarryTheShapeAndTheMedianRepetition) {
  const ModelConfig model = LoadModelConfig(kSource + "/scenarios/models/cpu-small.yaml");
  const hw::SyntheticBatch batch = SharedBatch();
  // Engine 0 runs without cascade, engine 1 with (ShapeStep: one group of 16 on 2 "SMs").
  FakeEngine plain(false), cascade(ShapeStep(batch.plan, model, true, 2).cascade());
  ASSERT_TRUE(ShapeStep(batch.plan, model, true, 2).cascade());
  const std::vector<MeasuredEngine> engines = {{&plain, false, 2}, {&cascade, true, 2}};
  const std::vector<HarnessStep> steps = {{&batch.plan, 0}, {&batch.plan, 1}};
  int step_calls = 0;
  std::vector<int> passes;
  HarnessOptions options;
  options.repetitions = 3;
  options.after_step = [&] { ++step_calls; };
  options.after_pass = [&](int pass) { passes.push_back(pass); };
  const std::vector<StepMeasurement> measured = MeasureSteps(engines, steps, model, options);
  ASSERT_EQ(measured.size(), 2u);
  EXPECT_EQ(step_calls, 8);  // (1 warm-up + 3) passes × 2 steps
  EXPECT_EQ(passes, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(measured[0].row.shape.cascade());
  EXPECT_TRUE(measured[1].row.shape.cascade());
  EXPECT_EQ(measured[1].row.shape.decode_requests, 16);
  for (const StepMeasurement& m : measured) {
    EXPECT_EQ(m.row.measured.total_ns, 200);  // the median of {x, y, z} drawn from 100/300/200
    EXPECT_EQ(m.row.measured.term(StepTerm::kGemm), m.row.measured.total_ns);
    EXPECT_DOUBLE_EQ(m.spread, 1.0);  // (300 − 100) / 200
    ASSERT_EQ(m.repetitions.size(), 3u);  // every timed repetition kept, in pass order
    EXPECT_FALSE(m.counts.cycles.has_value());
  }

  // The rows are what `calibrate` writes and `calibrate --refit` reads back.
  const DeviceProfile profile = LoadDeviceProfile(kSource + "/results/profiles/cpu.yaml");
  const std::vector<MeasuredStep> rows = RowsOf(measured);
  const std::vector<std::string> labels = {"plain", "cascade"};
  const std::vector<LabeledRow> back =
      ParseRowsCsv(RowsToCsv(labels, rows, StepPricer(profile, model), 5), "rows.csv");
  ASSERT_EQ(back.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back[i].label, labels[i]);
    EXPECT_EQ(back[i].step.shape.cascade_prefix_tokens, rows[i].shape.cascade_prefix_tokens);
    EXPECT_EQ(back[i].step.measured.term_ns, rows[i].measured.term_ns);
    EXPECT_EQ(back[i].step.measured.total_ns, rows[i].measured.total_ns);
  }
}

StepTiming Timing(int64_t gemm, int64_t decode, int64_t kv_reuse) {
  StepTiming t;
  t.term_ns[static_cast<size_t>(StepTerm::kGemm)] = gemm;
  t.term_ns[static_cast<size_t>(StepTerm::kDecodeAttention)] = decode;
  t.term_ns[static_cast<size_t>(StepTerm::kKvReuse)] = kv_reuse;
  t.total_ns = gemm + decode + kv_reuse;
  return t;
}

// The profile's step_noise: per term, repetition / median repetition − 1 pooled over steps;
// decode_attention with kv_reuse; a term no step spent time in left out; a 100× outlier moves
// rms, not rel_stdev.
TEST(Harness, StepNoiseOfPoolsTheRepetitionsPerTerm) {
  std::vector<StepMeasurement> m(2);
  m[0].row.measured = Timing(200, 100, 0);
  m[0].repetitions = {Timing(100, 60, 50), Timing(300, 100, 0), Timing(200, 100, 0)};
  m[1].row.measured = Timing(200, 0, 0);
  m[1].repetitions = {Timing(180, 0, 0), Timing(200, 0, 0), Timing(220, 0, 0)};
  const ProfileStepNoise noise = StepNoiseOf(m, "two steps");
  EXPECT_EQ(noise.source, ParameterSource::kMeasured);
  EXPECT_EQ(noise.note, "two steps");
  EXPECT_EQ(noise.steps, 2u);
  EXPECT_EQ(noise.repetitions, 3u);
  ASSERT_EQ(noise.terms.size(), 2u);
  // gemm ratios: −0.5, 0.5, 0, −0.1, 0, 0.1 (sorted −0.5 −0.1 0 0 0.1 0.5).
  EXPECT_EQ(noise.terms[0].term, "gemm");
  EXPECT_EQ(noise.terms[0].samples, 6u);
  // rel_stdev = (p84.13 − p15.87) / 2: at 4.2067 and 0.7933 of the 5 gaps, ±0.1826894.
  EXPECT_NEAR(noise.terms[0].rel_stdev, 0.1 + 0.2067236 * 0.4, 1e-6);
  EXPECT_NEAR(noise.terms[0].rms, std::sqrt(0.52 / 6), 1e-12);
  EXPECT_NEAR(noise.terms[0].p05, -0.4, 1e-12);  // between −0.5 and −0.1, a quarter of the way
  EXPECT_NEAR(noise.terms[0].p95, 0.4, 1e-12);
  // decode_attention (+ kv_reuse) of the first step only: 0.1, 0, 0.
  EXPECT_EQ(noise.terms[1].term, "decode_attention");
  EXPECT_EQ(noise.terms[1].samples, 3u);
  EXPECT_NEAR(noise.terms[1].rel_stdev, 0.6826894 * 0.1 / 2, 1e-6);
  EXPECT_NEAR(noise.terms[1].rms, std::sqrt(0.01 / 3), 1e-12);
  EXPECT_NEAR(noise.terms[1].p95, 0.09, 1e-12);
  // Drift: gemm's passes hold {−0.5, −0.1}, {0.5, 0}, {0, 0.1}: medians −0.3, 0.25, 0.05, mean 0,
  // sample stdev sqrt(0.155 / 2). decode_attention's passes: 0.1, 0, 0 (one step each).
  EXPECT_NEAR(noise.terms[0].drift_rel_stdev, std::sqrt(0.155 / 2), 1e-12);
  EXPECT_NEAR(noise.terms[1].drift_rel_stdev,
              std::sqrt((0.0044444444444 + 0.0011111111111 * 2) / 2), 1e-9);

  // One descheduled repetition among many steady ones.
  std::vector<StepMeasurement> steady(10);
  for (size_t i = 0; i < steady.size(); ++i) {
    steady[i].row.measured = Timing(1000, 0, 0);
    steady[i].repetitions = {Timing(980, 0, 0), Timing(1000, 0, 0), Timing(1020, 0, 0)};
  }
  steady[3].repetitions[2] = Timing(100000, 0, 0);
  const ProfileStepNoise robust = StepNoiseOf(steady, "");
  EXPECT_LT(robust.terms[0].rel_stdev, 0.03);
  EXPECT_GT(robust.terms[0].rms, 10.0);
  // Drift: here every step runs 2 % fast in the first pass and 2 % slow in the last, so the
  // passes' medians are −0.02, 0, 0.02 (the descheduled repetition does not move its pass's).
  EXPECT_NEAR(robust.terms[0].drift_rel_stdev, 0.02, 1e-12);

  // The same pooled ratios with no pass faster than another (each step's fast repetition in a
  // different pass, in turn): a per-step spread, no drift.
  std::vector<StepMeasurement> rotating(9);
  const std::vector<int64_t> ns = {980, 1000, 1020};
  for (size_t i = 0; i < rotating.size(); ++i) {
    rotating[i].row.measured = Timing(1000, 0, 0);
    for (size_t k = 0; k < 3; ++k) {
      rotating[i].repetitions.push_back(Timing(ns[(i + k) % 3], 0, 0));
    }
  }
  const ProfileStepNoise mixed = StepNoiseOf(rotating, "");
  EXPECT_EQ(mixed.terms[0].drift_rel_stdev, 0.0);
  EXPECT_NEAR(mixed.terms[0].rel_stdev, 0.02, 1e-12);  // 9 each of −0.02, 0, 0.02
}

// Primed: every timed run follows an untimed run of the same step (after the warm-up pass), so
// the fake's sequence 100, 300, 200, 100, ... gives the warm-up 100, then primers 300 / 100 / 200
// and timed runs 200 / 300 / 100; unprimed, the timed runs would be 300 / 200 / 100.
TEST(Harness, PrimedRunsTimeEachStepRightAfterAnUntimedRunOfItself) {
  const ModelConfig model = LoadModelConfig(kSource + "/scenarios/models/cpu-small.yaml");
  const hw::SyntheticBatch batch = SharedBatch();
  for (const bool primed : {false, true}) {
    FakeEngine engine(false);
    const std::vector<MeasuredEngine> engines = {{&engine, false, 2}};
    const std::vector<HarnessStep> steps = {{&batch.plan, 0}};
    int step_calls = 0;
    HarnessOptions options;
    options.repetitions = 3;
    options.primed = primed;
    options.after_step = [&] { ++step_calls; };
    const std::vector<StepMeasurement> measured = MeasureSteps(engines, steps, model, options);
    ASSERT_EQ(measured.size(), 1u);
    std::vector<int64_t> totals;
    for (const StepTiming& t : measured[0].repetitions) totals.push_back(t.total_ns);
    EXPECT_EQ(engine.calls_, primed ? 7 : 4);
    EXPECT_EQ(step_calls, engine.calls_);
    EXPECT_EQ(totals, primed ? (std::vector<int64_t>{200, 300, 100})
                             : (std::vector<int64_t>{300, 200, 100}));
    std::vector<int64_t> primers;
    for (const StepTiming& t : measured[0].unprimed) primers.push_back(t.total_ns);
    EXPECT_EQ(primers, primed ? (std::vector<int64_t>{300, 100, 200}) : std::vector<int64_t>{});
    // Their rows: the shape, and the median priming run (200) whole.
    const std::vector<MeasuredStep> unprimed_rows = UnprimedRowsOf(measured);
    ASSERT_EQ(unprimed_rows.size(), primed ? 1u : 0u);
    if (primed) {
      EXPECT_EQ(unprimed_rows[0].shape.decode_requests, measured[0].row.shape.decode_requests);
      EXPECT_EQ(unprimed_rows[0].measured.total_ns, 200);
      EXPECT_EQ(unprimed_rows[0].measured.term(StepTerm::kGemm), 200);
    }
  }
}

TEST(HarnessDeathTest, AnEngineThatDisagreesWithItsShapeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ModelConfig model = LoadModelConfig(kSource + "/scenarios/models/cpu-small.yaml");
  const hw::SyntheticBatch batch = SharedBatch();
  FakeEngine never_cascades(false);
  const std::vector<MeasuredEngine> engines = {{&never_cascades, true, 2}};
  const std::vector<HarnessStep> steps = {{&batch.plan, 0}};
  HarnessOptions options;
  options.repetitions = 1;
  EXPECT_DEATH((void)MeasureSteps(engines, steps, model, options), "cascade decision");
}

}  // namespace
}  // namespace feather::calib
