// harness.cc: MeasureSteps (see harness.h).
#include "calib/harness.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

#include "base/check.h"
#include "hw/interleaved_passes.h"

namespace feather::calib {
namespace {

// Adds `b`'s counts to `a`'s; a count either side lacks stays absent.
void Accumulate(hw::PerfCounts& a, const hw::PerfCounts& b, bool first) {
  auto add = [first](std::optional<uint64_t>& x, const std::optional<uint64_t>& y) {
    if (first) {
      x = y;
    } else if (x && y) {
      *x += *y;
    } else {
      x.reset();
    }
  };
  add(a.cycles, b.cycles);
  add(a.instructions, b.instructions);
  add(a.llc_loads, b.llc_loads);
  add(a.llc_load_misses, b.llc_load_misses);
  add(a.task_clock_ns, b.task_clock_ns);
  a.multiplexed = a.multiplexed || b.multiplexed;
}

void DivideCounts(hw::PerfCounts& counts, int repetitions) {
  for (std::optional<uint64_t>* value : {&counts.cycles, &counts.instructions, &counts.llc_loads,
                                         &counts.llc_load_misses, &counts.task_clock_ns}) {
    if (*value) **value /= static_cast<uint64_t>(repetitions);
  }
}

}  // namespace

std::vector<StepMeasurement> MeasureSteps(std::span<const MeasuredEngine> engines,
                                          std::span<const HarnessStep> steps,
                                          const ModelConfig& model,
                                          const HarnessOptions& options) {
  FEATHER_CHECK(options.repetitions >= 1, "MeasureSteps needs at least one repetition");
  std::vector<StepMeasurement> measured(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    FEATHER_CHECK(steps[i].engine < engines.size() && engines[steps[i].engine].engine != nullptr &&
                      steps[i].plan != nullptr,
                  "a harness step names no engine or no plan");
    const MeasuredEngine& e = engines[steps[i].engine];
    measured[i].row.shape = ShapeStep(*steps[i].plan, model, e.cascade_attention, e.sm_count);
  }
  std::optional<hw::PerfCounterGroup> counters;  // opened after the warm-up: threads exist then
  const auto execute = [&](size_t i, int pass) {
    Engine& engine = *engines[steps[i].engine].engine;
    const BatchPlan& plan = *steps[i].plan;
    if (pass > 0 && options.primed) {
      measured[i].unprimed.push_back(engine.Execute(plan));
      if (options.after_step) options.after_step();
    }
    StepTiming timing;
    if (pass == 0 || !options.perf_counters) {
      timing = engine.Execute(plan);
    } else {
      if (!counters) counters.emplace(hw::PerfScope::kProcess);
      counters->Start();
      timing = engine.Execute(plan);
      Accumulate(measured[i].counts, counters->Stop(), pass == 1);
    }
    if (pass == 0) {
      FEATHER_CHECK(timing.cascade_used == measured[i].row.shape.cascade(),
                    "the engine's cascade decision differs from ShapeStep's");
    }
    if (options.after_step) options.after_step();
    return timing;
  };
  const std::vector<std::vector<StepTiming>> timings =
      hw::RunInterleavedPasses(steps.size(), options.repetitions, execute, options.after_pass);
  for (size_t i = 0; i < steps.size(); ++i) {
    measured[i].row.measured = hw::MedianByTotal(timings[i]);
    measured[i].repetitions = timings[i];
    measured[i].spread = hw::RelativeSpread(timings[i]);
    if (options.perf_counters) DivideCounts(measured[i].counts, options.repetitions);
  }
  return measured;
}

ProfileStepNoise StepNoiseOf(std::span<const StepMeasurement> measurements, std::string note) {
  ProfileStepNoise noise;
  noise.source = ParameterSource::kMeasured;
  noise.note = std::move(note);
  noise.steps = measurements.size();
  for (const StepMeasurement& m : measurements) {
    noise.repetitions = std::max<uint64_t>(noise.repetitions, m.repetitions.size());
  }
  // decode_attention stands for decode_attention + kv_reuse (ProfileFitTermNames).
  const auto term_ns = [](const StepTiming& timing, std::string_view name) {
    if (name == StepTermName(StepTerm::kDecodeAttention)) {
      return static_cast<double>(timing.term(StepTerm::kDecodeAttention) +
                                 timing.term(StepTerm::kKvReuse));
    }
    const std::optional<StepTerm> term = StepTermFromName(name);
    return term ? static_cast<double>(timing.term(*term)) : 0.0;
  };
  std::vector<double> ratios;
  // by_pass[k]: the ratios of timed pass k (repetition k of every step: MeasureSteps keeps them
  // in pass order), whose median is that pass's drift (device_profile.h, drift_rel_stdev).
  std::vector<std::vector<double>> by_pass(noise.repetitions);
  for (const std::string_view name : ProfileFitTermNames()) {
    ratios.clear();
    for (std::vector<double>& pass : by_pass) pass.clear();
    for (const StepMeasurement& m : measurements) {
      const double median = term_ns(m.row.measured, name);
      if (median <= 0) continue;
      for (size_t k = 0; k < m.repetitions.size(); ++k) {
        const double r = term_ns(m.repetitions[k], name) / median - 1.0;
        ratios.push_back(r);
        by_pass[k].push_back(r);
      }
    }
    if (ratios.empty()) continue;
    std::vector<double> pass_medians;
    for (std::vector<double>& pass : by_pass) {
      if (pass.empty()) continue;
      const auto middle = pass.begin() + static_cast<std::ptrdiff_t>(pass.size() / 2);
      std::nth_element(pass.begin(), middle, pass.end());
      double median = *middle;
      if (pass.size() % 2 == 0) median = (median + *std::max_element(pass.begin(), middle)) / 2;
      pass_medians.push_back(median);
    }
    double drift = 0;
    if (pass_medians.size() >= 2) {
      double mean = 0;
      for (const double d : pass_medians) mean += d;
      mean /= static_cast<double>(pass_medians.size());
      for (const double d : pass_medians) drift += (d - mean) * (d - mean);
      drift = std::sqrt(drift / static_cast<double>(pass_medians.size() - 1));
    }
    double sum_squares = 0;
    for (const double r : ratios) sum_squares += r * r;
    std::sort(ratios.begin(), ratios.end());
    const auto quantile = [&ratios](double q) {  // linear between order statistics
      const double at = q * static_cast<double>(ratios.size() - 1);
      const auto low = static_cast<size_t>(at);
      const size_t high = std::min(low + 1, ratios.size() - 1);
      return ratios[low] + (at - static_cast<double>(low)) * (ratios[high] - ratios[low]);
    };
    // ±1 sigma of a normal spread: the 15.87th and 84.13th percentiles.
    noise.terms.push_back({.term = std::string(name),
                           .rel_stdev = (quantile(0.8413447) - quantile(0.1586553)) / 2,
                           .rms = std::sqrt(sum_squares / static_cast<double>(ratios.size())),
                           .p05 = quantile(0.05),
                           .p95 = quantile(0.95),
                           .samples = ratios.size(),
                           .drift_rel_stdev = drift});
  }
  return noise;
}

std::vector<MeasuredStep> RowsOf(std::span<const StepMeasurement> measurements) {
  std::vector<MeasuredStep> rows;
  rows.reserve(measurements.size());
  for (const StepMeasurement& m : measurements) rows.push_back(m.row);
  return rows;
}

std::vector<MeasuredStep> UnprimedRowsOf(std::span<const StepMeasurement> measurements) {
  std::vector<MeasuredStep> rows;
  rows.reserve(measurements.size());
  for (const StepMeasurement& m : measurements) {
    if (m.unprimed.empty()) return {};
    rows.push_back({m.row.shape, hw::MedianByTotal(m.unprimed)});
  }
  return rows;
}

}  // namespace feather::calib
