// validation_report.cc: metric verdicts and the same-plan comparison (see validation_report.h).
#include "cli/validation_report.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

namespace feather {
namespace {

using OrderedJson = nlohmann::ordered_json;

struct Moments {
  double mean = 0;
  double stdev = 0;  // sample (n − 1); 0 for fewer than 2 values
};

Moments MomentsOf(std::span<const double> values) {
  Moments m;
  if (values.empty()) return m;
  for (const double v : values) m.mean += v;
  m.mean /= static_cast<double>(values.size());
  if (values.size() < 2) return m;
  double squares = 0;
  for (const double v : values) squares += (v - m.mean) * (v - m.mean);
  m.stdev = std::sqrt(squares / static_cast<double>(values.size() - 1));
  return m;
}

double RelativeTo(double value, double reference) {
  return reference != 0 ? (value - reference) / reference : 0.0;
}

}  // namespace

OrderedJson CompareMetric(std::span<const double> measured_runs, double predicted,
                          std::span<const double> predicted_runs,
                          std::optional<double> target_rel_error) {
  const Moments measured = MomentsOf(measured_runs);
  const auto [low, high] = std::minmax_element(measured_runs.begin(), measured_runs.end());
  const double spread =
      measured_runs.empty() || measured.mean == 0 ? 0.0 : (*high - *low) / measured.mean;
  Moments model{predicted, 0};
  if (!predicted_runs.empty()) model = MomentsOf(predicted_runs);
  // Every metric validate compares is non-negative: a skewed spread (p99 TBT) must not give a
  // negative lower bound.
  const double interval_low = std::max(0.0, model.mean - 2 * model.stdev);
  const double interval_high = model.mean + 2 * model.stdev;
  const double signed_error = RelativeTo(predicted, measured.mean);
  const double mean_rel_error = std::fabs(RelativeTo(model.mean, measured.mean));
  const bool inside = measured.mean >= interval_low && measured.mean <= interval_high;
  const bool has_target = target_rel_error.has_value();
  const bool within = has_target && mean_rel_error <= *target_rel_error;
  const char* verdict = inside ? "inside_interval" : within ? "within_target" : "outside";
  OrderedJson out;
  out["measured"] = measured.mean;
  out["measured_stdev"] = measured.stdev;
  out["measured_spread"] = spread;
  out["measured_runs"] = std::vector<double>(measured_runs.begin(), measured_runs.end());
  out["predicted"] = predicted;
  out["rel_error"] = std::fabs(signed_error);
  out["signed_error"] = signed_error;
  out["predicted_mean"] = model.mean;
  out["predicted_stdev"] = model.stdev;
  out["predicted_interval"] = {interval_low, interval_high};
  out["predicted_runs"] = std::vector<double>(predicted_runs.begin(), predicted_runs.end());
  out["mean_rel_error"] = mean_rel_error;
  out["target_rel_error"] = target_rel_error ? OrderedJson(*target_rel_error) : OrderedJson();
  out["inside_interval"] = inside;
  out["within_target"] = has_target ? OrderedJson(within) : OrderedJson();
  out["verdict"] = verdict;
  out["pass"] = std::string_view(verdict) != "outside";
  return out;
}

std::optional<double> MetricTarget(std::string_view metric) {
  if (metric == "throughput_tok_s") return 0.05;
  if (metric == "mean_tbt_ms") return 0.10;
  return std::nullopt;
}

StepKind KindOf(const StepShape& shape) {
  if (shape.prefill_requests == 0) return StepKind::kDecode;
  if (shape.decode_requests == 0) return StepKind::kPrefill;
  return StepKind::kMixed;
}

std::string_view StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kDecode:
      return "decode";
    case StepKind::kPrefill:
      return "prefill";
    case StepKind::kMixed:
      return "mixed";
    case StepKind::kCount:
      break;
  }
  return "?";
}

void SamePlanComparison::Add(const StepShape& shape, const StepTiming& measured,
                             const StepTiming& predicted) {
  ++steps_;
  measured_ns_ += static_cast<double>(measured.total_ns);
  predicted_ns_ += static_cast<double>(predicted.total_ns);
  const auto total = static_cast<double>(measured.total_ns);
  size_t bin = 0;
  while (bin + 1 < kSizeBins && shape.new_tokens >= static_cast<double>(size_t{2} << bin)) ++bin;
  ShapeBin& shape_bin = shapes_[static_cast<size_t>(KindOf(shape))][bin];
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    const auto m = static_cast<double>(measured.term_ns[t]);
    const auto p = static_cast<double>(predicted.term_ns[t]);
    measured_term_ns_[t] += m;
    predicted_term_ns_[t] += p;
    if (total > 0) {
      error_share_sum_[t] += std::fabs(p - m) / total;
      signed_share_sum_[t] += (p - m) / total;
      shape_bin.signed_share_sum[t] += (p - m) / total;
    }
    if (m > 0) {
      term_ape_sum_[t] += std::fabs(p - m) / m;
      ++term_steps_[t];
    }
  }
  const auto predicted_total = static_cast<double>(predicted.total_ns);
  if (noise_cv_ && predicted_total > 0) {
    const double mean_abs_normal = std::sqrt(2 / std::numbers::pi);
    double variance = 0;
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      const double spread = (*noise_cv_)[t] * static_cast<double>(predicted.term_ns[t]);
      variance += spread * spread;
      floor_share_sum_[t] += mean_abs_normal * spread / predicted_total;
    }
    floor_sum_ += mean_abs_normal * std::sqrt(variance) / predicted_total;
  }
  if (total <= 0) return;
  const double signed_error = (static_cast<double>(predicted.total_ns) - total) / total;
  abs_rel_error_sum_ += std::fabs(signed_error);
  Group& group = groups_[static_cast<size_t>(KindOf(shape))][shape.cascade() ? 1 : 0];
  ++group.steps;
  group.abs_rel_error_sum += std::fabs(signed_error);
  group.signed_rel_error_sum += signed_error;
  ++shape_bin.group.steps;
  shape_bin.group.abs_rel_error_sum += std::fabs(signed_error);
  shape_bin.group.signed_rel_error_sum += signed_error;
  shape_bin.measured_ns += total;
}

OrderedJson SamePlanComparison::Report() const {
  const auto per_step = [this](double sum) {
    return steps_ > 0 ? sum / static_cast<double>(steps_) : 0.0;
  };
  OrderedJson terms = OrderedJson::object();
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    terms[std::string(StepTermName(static_cast<StepTerm>(t)))] = {
        {"measured_s", measured_term_ns_[t] * 1e-9},
        {"predicted_s", predicted_term_ns_[t] * 1e-9},
        {"error_share", per_step(error_share_sum_[t])},
        {"signed_share", per_step(signed_share_sum_[t])},
        {"mape", term_steps_[t] > 0 ? term_ape_sum_[t] / static_cast<double>(term_steps_[t]) : 0.0},
        {"steps", term_steps_[t]}};
  }
  OrderedJson by_kind = OrderedJson::object();
  for (size_t k = 0; k < groups_.size(); ++k) {
    OrderedJson kind = OrderedJson::object();
    for (size_t cascade = 0; cascade < 2; ++cascade) {
      const Group& g = groups_[k][cascade];
      if (g.steps == 0) continue;
      const auto n = static_cast<double>(g.steps);
      kind[cascade ? "cascade" : "no_cascade"] = {
          {"steps", g.steps},
          {"step_time_mape", g.abs_rel_error_sum / n},
          {"signed_mean_error", g.signed_rel_error_sum / n}};
    }
    if (!kind.empty()) by_kind[std::string(StepKindName(static_cast<StepKind>(k)))] = kind;
  }
  OrderedJson by_shape = OrderedJson::object();
  for (size_t k = 0; k < shapes_.size(); ++k) {
    OrderedJson kind = OrderedJson::object();
    for (size_t bin = 0; bin < kSizeBins; ++bin) {
      const ShapeBin& b = shapes_[k][bin];
      if (b.group.steps == 0) continue;
      const auto n = static_cast<double>(b.group.steps);
      OrderedJson shares = OrderedJson::object();
      for (size_t t = 0; t < kNumStepTerms; ++t) {
        shares[std::string(StepTermName(static_cast<StepTerm>(t)))] = b.signed_share_sum[t] / n;
      }
      const size_t low = size_t{1} << bin;
      const std::string name = bin + 1 == kSizeBins ? "n>=" + std::to_string(low)
                               : bin == 0
                                   ? std::string("n=1")
                                   : "n=" + std::to_string(low) + "-" + std::to_string(2 * low - 1);
      kind[name] = {{"steps", b.group.steps},
                    {"step_time_mape", b.group.abs_rel_error_sum / n},
                    {"signed_mean_error", b.group.signed_rel_error_sum / n},
                    {"measured_ms", b.measured_ns / n * 1e-6},
                    {"signed_share", shares}};
    }
    if (!kind.empty()) by_shape[std::string(StepKindName(static_cast<StepKind>(k)))] = kind;
  }
  OrderedJson report = {
      {"steps", steps_},
      {"step_time_mape", per_step(abs_rel_error_sum_)},
      {"engine_time_s", {{"measured", measured_ns_ * 1e-9}, {"predicted", predicted_ns_ * 1e-9}}},
      {"terms", terms},
      {"by_kind", by_kind},
      {"by_shape", by_shape}};
  if (noise_cv_) {
    OrderedJson floor_terms = OrderedJson::object();
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      floor_terms[std::string(StepTermName(static_cast<StepTerm>(t)))] =
          per_step(floor_share_sum_[t]);
    }
    report["noise_floor"] = {{"step_time_mape", per_step(floor_sum_)}, {"terms", floor_terms}};
  }
  return report;
}

}  // namespace feather
