// fit.cc: the term-by-term calibration fit (see fit.h for the method).
#include "calib/fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>

#include "calib/solvers.h"
#include "hw/interleaved_passes.h"

namespace feather::calib {
namespace {

constexpr double kNsPerS = 1e9;
constexpr size_t kMinRowsPerSide = 2;  // rows on one side of a max() before it counts as seen
constexpr size_t kGridQuantiles = 11;
constexpr double kZeroFixedNs = 1e-3;  // a fitted fixed cost under this is written as 0

std::optional<size_t> FindParameter(std::string_view name) {
  const auto params = ProfileParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == name) return i;
  }
  return std::nullopt;
}

size_t ParameterIndex(std::string_view name) {
  const std::optional<size_t> index = FindParameter(name);
  if (!index) throw std::logic_error("calib: no profile parameter named " + std::string(name));
  return *index;
}

// Indices of the parameters the fit touches, in ProfileParameters() order.
struct Indices {
  size_t gemm_bw = ParameterIndex("gemm_bw_efficiency");
  size_t gemm_flops = ParameterIndex("gemm_flops_efficiency");
  size_t gemm_fixed = ParameterIndex("gemm_batched_fixed_ns");
  size_t gemm_exponent = ParameterIndex("gemm_roofline_exponent");
  size_t skinny_fixed = ParameterIndex("gemm_skinny_fixed_ns");
  size_t skinny_per_token = ParameterIndex("gemm_skinny_ns_per_token");
  size_t cta_fixed = ParameterIndex("decode_cta_fixed_ns");
  size_t decode_layer = ParameterIndex("decode_layer_fixed_ns");
  size_t attn_bw = ParameterIndex("attn_bw_efficiency");
  size_t attn_flops = ParameterIndex("attn_flops_efficiency");
  size_t prefill_query = ParameterIndex("prefill_query_fixed_ns");
  size_t l2_bw = ParameterIndex("l2_bw_bytes_per_s");
  size_t hit = ParameterIndex("reuse_hit_max");
  size_t window = ParameterIndex("reuse_window_ctas");
  size_t cascade_layer = ParameterIndex("cascade_layer_ns");
  size_t cascade_merge = ParameterIndex("cascade_merge_ns_per_request_layer");
  size_t step_fixed = ParameterIndex("step_fixed_ns");
  size_t layer_fixed = ParameterIndex("layer_fixed_ns");
  size_t per_request = ParameterIndex("per_request_ns");
};
const Indices& Ix() {
  static const Indices indices;
  return indices;
}

// Never fitted: capacity and peaks come from probes or datasheets, the skinny kernel's range from
// the build.
constexpr std::array<std::string_view, 7> kNeverFitted = {
    "memory_bytes",      "activation_reserve_bytes", "dram_bw_bytes_per_s",
    "dense_flops_per_s", "sm_count",                 "gemm_skinny_max_tokens",
    "weight_stream_bw_bytes_per_s"};

double& Field(DeviceProfile& p, size_t index) { return p.*(ProfileParameters()[index].field); }
double Value(const DeviceProfile& p, size_t index) { return p.*(ProfileParameters()[index].field); }

// The fitted terms, in StepTerm order, and the order they are fitted in (the decode fit gives
// attn_bw_efficiency to prefill, both attention rates go to the cascade prefix pass).
constexpr std::array<StepTerm, 5> kTerms = {StepTerm::kGemm, StepTerm::kDecodeAttention,
                                            StepTerm::kCascadePrefix, StepTerm::kPrefillAttention,
                                            StepTerm::kOverhead};

// The measured ns of `term` (nullopt: the total) in one timing; decode attention includes
// kv_reuse, which a real engine cannot time apart.
double TimingNs(const StepTiming& timing, std::optional<StepTerm> term) {
  if (!term) return static_cast<double>(timing.total_ns);
  if (*term == StepTerm::kDecodeAttention) {
    return static_cast<double>(timing.term(StepTerm::kDecodeAttention) +
                               timing.term(StepTerm::kKvReuse));
  }
  return static_cast<double>(timing.term(*term));
}

double MeasuredNs(const MeasuredStep& row, StepTerm term) { return TimingNs(row.measured, term); }

double PredictedNs(const std::array<double, kNumStepTerms>& terms, StepTerm term) {
  const double ns = terms[static_cast<size_t>(term)];
  return term == StepTerm::kDecodeAttention ? ns + terms[static_cast<size_t>(StepTerm::kKvReuse)]
                                            : ns;
}

int64_t PredictedNs(const StepTiming& timing, StepTerm term) {
  return term == StepTerm::kDecodeAttention
             ? timing.term(StepTerm::kDecodeAttention) + timing.term(StepTerm::kKvReuse)
             : timing.term(term);
}

// Rows whose measured term can inform the term's parameters.
bool Informs(StepTerm term, const MeasuredStep& row) {
  const StepShape& s = row.shape;
  if (s.requests <= 0 || !(MeasuredNs(row, term) > 0)) return false;
  switch (term) {
    case StepTerm::kGemm:
      return s.new_tokens > 0;
    case StepTerm::kDecodeAttention:
      return s.decode_requests > 0;
    case StepTerm::kCascadePrefix:
      return s.cascade();
    case StepTerm::kPrefillAttention:
      return s.prefill_requests > 0 && (s.prefill_pairs > 0 || s.prefill_kv_tokens > 0);
    default:
      return true;  // kOverhead
  }
}

struct RowSplit {
  std::vector<size_t> fit;
  std::vector<size_t> holdout;
};

std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100 * fraction);
  return text;
}

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

// The state of one fit run.
class Fitter {
 public:
  Fitter(const DeviceProfile& base, const ModelConfig& model, std::span<const MeasuredStep> rows,
         const FitOptions& options)
      : base_(base), model_(model), rows_(rows), options_(options), profile_(base) {
    held_.fill(false);
    for (const std::string_view name : kNeverFitted) held_[ParameterIndex(name)] = true;
    for (const std::string& name : options.hold) held_[ParameterIndex(name)] = true;
    // Rows of a cpu engine on packed weights (measured_on.gemm_weights): nothing is repacked,
    // so there is no batched fixed cost to fit (CpuBaseProfile sets it 0).
    packed_weights_ = base.measured_on && base.measured_on->gemm_weights == "packed";
    if (packed_weights_) held_[Ix().gemm_fixed] = true;
  }

  CalibrationFit Run();

 private:
  // Per-term bookkeeping while fitting.
  struct TermState {
    TermFit report;
    RowSplit rows;
    std::optional<DeviceProfile> unclamped;  // the profile at the first clamp
  };

  RowSplit RowsOf(StepTerm term) const;
  ParameterFit& Param(TermState& state, size_t index);

  // Relative residuals of `term` on `rows` with the working profile.
  void Residuals(StepTerm term, const std::vector<size_t>& rows, Eigen::VectorXd& out) const;
  double Cost(StepTerm term, const std::vector<size_t>& rows) const;
  // LM over `free` (log space, reuse_hit_max linear), in place on the working profile.
  void Minimize(StepTerm term, const std::vector<size_t>& rows, const std::vector<size_t>& free);
  // Minimize, then clamp out-of-range values to their bound and refit the rest, until all are
  // in range. reuse_window_ctas is left to the decode fit (its range is about W ≥ 1 request).
  void MinimizeInRange(TermState& state, const std::vector<size_t>& free);
  // The rows only say value ≥ bound: keep the base value when it satisfies that, else the bound.
  void ApplyLowerBound(TermState& state, size_t index, double bound, const std::string& why);
  // Tries each candidate (a vector of values for `params`) and keeps the cheapest.
  void GridStart(StepTerm term, const std::vector<size_t>& rows, const std::vector<size_t>& params,
                 const std::vector<std::vector<double>>& candidates);
  // The indices that are not held.
  std::vector<size_t> Free(std::initializer_list<size_t> indices) const;

  void FitGemm(TermState& state);
  // The two efficiencies of the gemm roofline (and gemm_batched_fixed_ns when in `free`).
  void FitGemmEfficiencies(TermState& state, const std::vector<size_t>& free);
  // The soft maximum's exponent (gemm_roofline_exponent): tried from a few starting values with
  // the efficiencies refitted, kept only when it lowers the cost.
  void FitGemmExponent(TermState& state, const std::vector<size_t>& free);
  // The skinny kernel's line (gemm_skinny_fixed_ns, gemm_skinny_ns_per_token) on `rows`, the
  // gemm rows of 2 to gemm_skinny_max_tokens tokens, with the weight stream already fitted.
  void FitGemmSkinny(TermState& state, const std::vector<size_t>& rows);
  void FitDecode(TermState& state);
  void FitPrefill(TermState& state);
  void FitCascade(TermState& state);
  void FitOverhead(TermState& state);
  // Non-negative least squares of the linear parameters `free` (columns: the coefficient of each
  // parameter per row, in ns per unit) against measured − `fixed_part` (ns), relative weights.
  void FitLinear(TermState& state, const std::vector<size_t>& free,
                 const std::function<double(size_t row, size_t param)>& column,
                 const std::function<double(size_t row)>& fixed_part);

  void Finish(TermState& state);
  std::string Note(const TermState& state, const ParameterFit& p) const;

  const DeviceProfile& base_;
  const ModelConfig& model_;
  std::span<const MeasuredStep> rows_;
  const FitOptions& options_;
  DeviceProfile profile_;  // the working profile
  std::array<bool, kNumProfileParameters> held_{};
  bool packed_weights_ = false;  // the rows are a packed-weights engine's
};

RowSplit Fitter::RowsOf(StepTerm term) const {
  RowSplit split;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (!Informs(term, rows_[i])) continue;
    (IsHoldoutRow(i, options_.holdout_every) ? split.holdout : split.fit).push_back(i);
  }
  return split;
}

ParameterFit& Fitter::Param(TermState& state, size_t index) {
  for (ParameterFit& p : state.report.parameters) {
    if (p.name == ProfileParameters()[index].name) return p;
  }
  throw std::logic_error("calib: parameter not in its term's report");
}

std::vector<size_t> Fitter::Free(std::initializer_list<size_t> indices) const {
  std::vector<size_t> free;
  for (const size_t index : indices) {
    if (!held_[index]) free.push_back(index);
  }
  return free;
}

void Fitter::Residuals(StepTerm term, const std::vector<size_t>& rows, Eigen::VectorXd& out) const {
  const StepPricer pricer(profile_, model_);
  for (size_t k = 0; k < rows.size(); ++k) {
    const MeasuredStep& row = rows_[rows[k]];
    const double measured = MeasuredNs(row, term);
    const double predicted = PredictedNs(pricer.Terms(row.shape), term);
    const double r = (predicted - measured) / measured;
    out(static_cast<Eigen::Index>(k)) = std::isfinite(r) ? r : 1e6;
  }
}

double Fitter::Cost(StepTerm term, const std::vector<size_t>& rows) const {
  Eigen::VectorXd r(static_cast<Eigen::Index>(rows.size()));
  Residuals(term, rows, r);
  return r.squaredNorm();
}

void Fitter::Minimize(StepTerm term, const std::vector<size_t>& rows,
                      const std::vector<size_t>& free) {
  if (free.empty() || rows.size() < free.size()) return;
  const size_t hit = Ix().hit;
  auto to_x = [hit](size_t index, double value) {
    return index == hit ? value : std::log(std::max(value, 1e-300));
  };
  auto from_x = [hit](size_t index, double x) {
    return index == hit ? x : std::exp(std::clamp(x, -700.0, 700.0));
  };
  Eigen::VectorXd x0(static_cast<Eigen::Index>(free.size()));
  for (size_t j = 0; j < free.size(); ++j) {
    x0(static_cast<Eigen::Index>(j)) = to_x(free[j], Value(profile_, free[j]));
  }
  auto set = [&](const Eigen::VectorXd& x) {
    for (size_t j = 0; j < free.size(); ++j) {
      Field(profile_, free[j]) = from_x(free[j], x(static_cast<Eigen::Index>(j)));
    }
  };
  const ResidualFunction residuals = [&](const Eigen::VectorXd& x, Eigen::VectorXd& r) {
    set(x);
    Residuals(term, rows, r);
  };
  const LeastSquaresResult result =
      MinimizeLeastSquares(residuals, static_cast<Eigen::Index>(rows.size()), x0);
  set(result.x);
}

void Fitter::MinimizeInRange(TermState& state, const std::vector<size_t>& free_in) {
  std::vector<size_t> free = free_in;
  const auto params = ProfileParameters();
  while (!free.empty()) {
    Minimize(state.report.term, state.rows.fit, free);
    bool clamped_any = false;
    for (auto it = free.begin(); it != free.end();) {
      const ProfileParameterInfo& info = params[*it];
      const double value = Value(profile_, *it);
      const bool below = info.min_exclusive ? value <= info.min : value < info.min;
      if (*it == Ix().window || (!below && value <= info.max)) {
        ++it;
        continue;
      }
      if (!state.unclamped) state.unclamped = profile_;
      ParameterFit& p = Param(state, *it);
      p.clamped = true;
      p.unclamped_value = value;
      // (An exclusive minimum cannot be reached from log space; keep it exclusive regardless.)
      Field(profile_, *it) = !below               ? info.max
                             : info.min_exclusive ? std::nextafter(info.min, info.max)
                                                  : info.min;
      p.why = "unconstrained optimum " + Number(value) + " is outside the range " +
              (info.min_exclusive ? "(" : "[") + Number(info.min) + ", " + Number(info.max) +
              "]; clamped to " + Number(Value(profile_, *it)) + " and the rest refitted";
      it = free.erase(it);
      clamped_any = true;
    }
    if (!clamped_any) break;
  }
}

void Fitter::ApplyLowerBound(TermState& state, size_t index, double bound, const std::string& why) {
  const ProfileParameterInfo& info = ProfileParameters()[index];
  ParameterFit& p = Param(state, index);
  bound = std::min(bound, info.max);
  if (Value(base_, index) >= bound) {
    Field(profile_, index) = Value(base_, index);
    p.fitted = false;
    p.why = why + "; the base value satisfies that bound and is kept";
  } else {
    Field(profile_, index) = bound;
    p.fitted = true;
    p.lower_bound = true;
    p.why = why + "; raised from the base value to that bound";
  }
  p.unclamped_value = Value(profile_, index);
}

void Fitter::GridStart(StepTerm term, const std::vector<size_t>& rows,
                       const std::vector<size_t>& params,
                       const std::vector<std::vector<double>>& candidates) {
  double best_cost = std::numeric_limits<double>::infinity();
  std::vector<double> best;
  for (const std::vector<double>& candidate : candidates) {
    for (size_t j = 0; j < params.size(); ++j) Field(profile_, params[j]) = candidate[j];
    const double cost = Cost(term, rows);
    if (cost < best_cost) {
      best_cost = cost;
      best = candidate;
    }
  }
  if (best.empty()) return;
  for (size_t j = 0; j < params.size(); ++j) Field(profile_, params[j]) = best[j];
}

// Quantiles (0, 0.1, …, 1) of positive finite values, or {fallback} when there are none.
std::vector<double> Quantiles(std::vector<double> values, double fallback) {
  std::erase_if(values, [](double v) { return !(v > 0) || !std::isfinite(v); });
  if (values.empty()) return {fallback};
  std::sort(values.begin(), values.end());
  std::vector<double> q;
  for (size_t k = 0; k < kGridQuantiles; ++k) {
    q.push_back(values[(values.size() - 1) * k / (kGridQuantiles - 1)]);
  }
  q.erase(std::unique(q.begin(), q.end()), q.end());
  return q;
}

// --- gemm: max(weights / (stream bw · e_bw), flops / (peak · e_flops) + [n ≥ 2] · fixed) ---

void Fitter::FitGemm(TermState& state) {
  const Indices& ix = Ix();
  std::vector<size_t> free = Free({ix.gemm_bw, ix.gemm_flops});
  const std::vector<size_t>& rows = state.rows.fit;
  if (free.empty() || rows.size() < free.size()) return;
  FitGemmEfficiencies(state, free);
  if (held_[ix.gemm_fixed]) return;
  // The batched fixed cost (CPU weight repacking): tried at a few multiples of the weight-stream
  // time, kept only when it lowers the fit cost and both single-token and batched rows are there
  // to tell it apart from the weight stream.
  size_t single = 0, batched = 0;
  for (const size_t i : rows) {
    (GemmRepacks(profile_, rows_[i].shape.new_tokens) ? batched : single) += 1;
  }
  if (single < kMinRowsPerSide || batched < kMinRowsPerSide) {
    Param(state, ix.gemm_fixed).why =
        "needs at least 2 single-token and 2 batched gemm rows; kept at the base value";
    return;
  }
  const DeviceProfile profile_without = profile_;
  const TermState state_without = state;
  const double stream_ns = static_cast<double>(model_.StepWeightBytes()) * kNsPerS /
                           (WeightStreamBw(profile_) * profile_.gemm_bw_efficiency);
  double best_cost = Cost(StepTerm::kGemm, rows);
  DeviceProfile best_profile = profile_without;
  TermState best_state = state_without;
  for (const double multiple : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    profile_ = profile_without;
    state = state_without;
    profile_.gemm_batched_fixed_ns = multiple * stream_ns;
    std::vector<size_t> with_fixed = free;
    with_fixed.push_back(ix.gemm_fixed);
    FitGemmEfficiencies(state, with_fixed);
    const double cost = Cost(StepTerm::kGemm, rows);
    if (cost < best_cost) {
      best_cost = cost;
      best_profile = profile_;
      best_state = state;
    }
  }
  const bool kept = best_profile.gemm_batched_fixed_ns != profile_without.gemm_batched_fixed_ns;
  profile_ = best_profile;
  state = best_state;
  ParameterFit& fixed = Param(state, ix.gemm_fixed);
  fixed.fitted = kept;
  if (!kept) fixed.why = "the rows fit best without a batched fixed cost; kept at the base value";
}

void Fitter::FitGemmExponent(TermState& state, const std::vector<size_t>& free) {
  const Indices& ix = Ix();
  const std::vector<size_t>& rows = state.rows.fit;
  if (held_[ix.gemm_exponent]) return;
  ParameterFit& param = Param(state, ix.gemm_exponent);
  if (free.size() < 2) {
    param.why = "needs both gemm efficiencies free; kept at the base value";
    return;
  }
  const DeviceProfile profile_max = profile_;
  const TermState state_max = state;
  const double max_cost = Cost(StepTerm::kGemm, rows);
  double best_cost = max_cost;
  DeviceProfile best_profile = profile_max;
  TermState best_state = state_max;
  for (const double k : {1.0, 1.25, 1.5, 2.0, 3.0, 5.0}) {
    profile_ = profile_max;
    state = state_max;
    profile_.gemm_roofline_exponent = k;
    std::vector<size_t> with_exponent = free;
    with_exponent.push_back(ix.gemm_exponent);
    MinimizeInRange(state, with_exponent);
    // Below 1 the pricer reads the exponent as 1 (the sum): no gradient there.
    profile_.gemm_roofline_exponent = std::max(profile_.gemm_roofline_exponent, 1.0);
    const double cost = Cost(StepTerm::kGemm, rows);
    if (cost < best_cost) {
      best_cost = cost;
      best_profile = profile_;
      best_state = state;
    }
  }
  // Kept only for a clear gain (a tenth of the cost): noise alone buys a few percent.
  const bool kept = best_profile.gemm_roofline_exponent != profile_max.gemm_roofline_exponent &&
                    best_cost < 0.9 * max_cost;
  if (!kept) {
    best_profile = profile_max;
    best_state = state_max;
  }
  profile_ = best_profile;
  state = best_state;
  ParameterFit& exponent = Param(state, ix.gemm_exponent);
  exponent.fitted = kept;
  if (!kept) exponent.why = "the hard max fits the rows best; kept at the base value";
}

void Fitter::FitGemmEfficiencies(TermState& state, const std::vector<size_t>& free) {
  const Indices& ix = Ix();
  const std::vector<size_t>& rows = state.rows.fit;
  // ns at efficiency 1: the weight stream A and the compute F_i of each row.
  const double a =
      static_cast<double>(model_.StepWeightBytes()) * kNsPerS / WeightStreamBw(profile_);
  auto compute_ns = [&](const StepShape& s) {
    return (s.new_tokens * model_.LinearFlopsPerToken() +
            s.sampled_tokens * model_.LmHeadFlopsPerToken()) *
           kNsPerS / profile_.dense_flops_per_s;
  };
  std::vector<double> bw_candidates, flops_candidates;
  for (const size_t i : rows) {
    const double m = MeasuredNs(rows_[i], StepTerm::kGemm);
    bw_candidates.push_back(a / m);
    flops_candidates.push_back(compute_ns(rows_[i].shape) / m);
  }
  const std::vector<double> bw = Quantiles(bw_candidates, profile_.gemm_bw_efficiency);
  const std::vector<double> fl = Quantiles(flops_candidates, profile_.gemm_flops_efficiency);
  const bool both = !held_[ix.gemm_bw] && !held_[ix.gemm_flops];
  const std::vector<size_t> rates =
      both ? std::vector<size_t>{ix.gemm_bw, ix.gemm_flops} : std::vector<size_t>{free[0]};
  std::vector<std::vector<double>> grid;
  if (both) {
    for (const double b : bw) {
      for (const double f : fl) grid.push_back({b, f});
    }
  } else {
    for (const double v : rates[0] == ix.gemm_bw ? bw : fl) grid.push_back({v});
  }
  GridStart(StepTerm::kGemm, rows, rates, grid);
  MinimizeInRange(state, free);
  for (const size_t index : rates) Param(state, index).fitted = true;  // clamped ones too

  // Each side of the max() needs rows on it; otherwise the rows only bound that efficiency.
  size_t bw_side = 0, compute_side = 0;
  double max_ratio = 0, min_ratio = std::numeric_limits<double>::infinity();  // F_i / A
  for (const size_t i : rows) {
    const double f = compute_ns(rows_[i].shape);
    const double fixed =
        GemmRepacks(profile_, rows_[i].shape.new_tokens) ? profile_.gemm_batched_fixed_ns : 0.0;
    const bool compute_bound =
        f / profile_.gemm_flops_efficiency + fixed > a / profile_.gemm_bw_efficiency;
    (compute_bound ? compute_side : bw_side) += 1;
    max_ratio = std::max(max_ratio, f / a);
    min_ratio = std::min(min_ratio, f / a);
  }
  const bool flops_free = !held_[ix.gemm_flops], bw_free = !held_[ix.gemm_bw];
  if (flops_free && compute_side < kMinRowsPerSide && !Param(state, ix.gemm_flops).clamped) {
    ApplyLowerBound(state, ix.gemm_flops, max_ratio * profile_.gemm_bw_efficiency,
                    "fewer than 2 gemm rows are compute-bound (largest step: " + Number(max_ratio) +
                        "× the weight-stream time at equal efficiencies), so the rows only say "
                        "the FLOP efficiency is high enough to keep them weight-bound");
    if (bw_free) MinimizeInRange(state, {ix.gemm_bw});
  } else if (bw_free && bw_side < kMinRowsPerSide && !Param(state, ix.gemm_bw).clamped) {
    ApplyLowerBound(state, ix.gemm_bw, profile_.gemm_flops_efficiency / min_ratio,
                    "fewer than 2 gemm rows are weight-bandwidth-bound, so the rows only say "
                    "the bandwidth efficiency is high enough to keep them compute-bound");
    if (flops_free) MinimizeInRange(state, {ix.gemm_flops});
  }
}

void Fitter::FitGemmSkinny(TermState& state, const std::vector<size_t>& rows) {
  const Indices& ix = Ix();
  std::vector<size_t> free = Free({ix.skinny_fixed, ix.skinny_per_token});
  if (free.empty()) return;
  if (profile_.gemm_skinny_max_tokens < 2) {
    for (const size_t index : free) {
      Param(state, index).why =
          "no skinny kernel in this profile (gemm_skinny_max_tokens < 2); kept at the base value";
    }
    return;
  }
  std::vector<double> sizes;
  for (const size_t i : rows) sizes.push_back(rows_[i].shape.new_tokens);
  std::sort(sizes.begin(), sizes.end());
  const auto distinct = std::unique(sizes.begin(), sizes.end()) - sizes.begin();
  if (rows.size() < kMinRowsPerSide) {
    for (const size_t index : free) {
      Param(state, index).why =
          "needs at least 2 gemm rows of 2 to gemm_skinny_max_tokens tokens; kept at the base "
          "value";
    }
    return;
  }
  if (distinct < 2 && free.size() == 2) {
    free = {ix.skinny_fixed};
    Param(state, ix.skinny_per_token).why =
        "every skinny gemm row has the same token count, so the cost per token cannot be told "
        "apart from the fixed cost";
  }
  const double stream_ns = static_cast<double>(model_.StepWeightBytes()) * kNsPerS /
                           (WeightStreamBw(profile_) * profile_.gemm_bw_efficiency);
  const bool fixed_free = std::find(free.begin(), free.end(), ix.skinny_fixed) != free.end();
  const bool token_free = std::find(free.begin(), free.end(), ix.skinny_per_token) != free.end();
  // FitLinear fits on state.rows.fit: point it at the skinny rows for the call.
  const std::vector<size_t> all_rows = std::exchange(state.rows.fit, rows);
  FitLinear(
      state, free,
      [&](size_t row, size_t param) {
        return param == ix.skinny_fixed ? 1.0 : rows_[row].shape.new_tokens;
      },
      [&](size_t row) {
        double fixed = stream_ns;
        if (!fixed_free) fixed += profile_.gemm_skinny_fixed_ns;
        if (!token_free) fixed += rows_[row].shape.new_tokens * profile_.gemm_skinny_ns_per_token;
        return fixed;
      });
  state.rows.fit = all_rows;
}

// --- decode attention (+ L2 reuse) ---

void Fitter::FitDecode(TermState& state) {
  const Indices& ix = Ix();
  const std::vector<size_t>& rows = state.rows.fit;
  if (rows.empty()) return;
  const double kv_heads = std::max(1u, model_.kv_heads);
  const double ctas_per_request = kv_heads * model_.layers;
  // Rows where decode requests share KV: the only ones that inform the reuse parameters.
  double max_sharing_batch = 0;
  size_t sharing_rows = 0;
  std::vector<double> contexts;  // KV tokens per request: the CTA fixed cost needs two or more
  for (const size_t i : rows) {
    const StepShape& s = rows_[i].shape;
    if (s.decode_requests > 0) contexts.push_back(s.decode_kv_tokens / s.decode_requests);
    if (s.decode_requests > 1 && s.decode_kv_unique_tokens > 0 &&
        s.decode_kv_tokens > s.decode_kv_unique_tokens * (1 + 1e-9)) {
      ++sharing_rows;
      max_sharing_batch = std::max(max_sharing_batch, s.decode_requests);
    }
  }
  std::sort(contexts.begin(), contexts.end());
  const bool contexts_vary =
      !contexts.empty() && contexts.back() > contexts.front() * (1 + 1e-6);
  // The per-layer fixed cost is told apart from the per-request one by batches of different
  // sizes.
  double min_batch = std::numeric_limits<double>::infinity(), max_batch = 0;
  for (const size_t i : rows) {
    min_batch = std::min(min_batch, rows_[i].shape.decode_requests);
    max_batch = std::max(max_batch, rows_[i].shape.decode_requests);
  }
  const bool batches_vary = max_batch > min_batch;
  const bool reuse_seen = sharing_rows >= kMinRowsPerSide;
  std::vector<size_t> free = Free({ix.attn_bw});
  // A fixed cost is freed when the rows vary in what tells it apart, else kept with the reason.
  auto free_if = [&](size_t index, bool informed, const char* why) {
    if (held_[index]) return false;
    if (informed) {
      free.push_back(index);
    } else {
      Param(state, index).why = why;
    }
    return informed;
  };
  const bool cta_free =
      free_if(ix.cta_fixed, contexts_vary && rows.size() >= 3,
              "needs 3 or more decode rows of different context lengths; kept at the base value");
  const bool layer_free =
      free_if(ix.decode_layer, batches_vary && rows.size() >= 4,
              "needs 4 or more decode rows of different batch sizes; kept at the base value");
  if (reuse_seen) {
    for (const size_t index : Free({ix.hit, ix.window, ix.l2_bw})) free.push_back(index);
  } else {
    for (const size_t index : {ix.hit, ix.window, ix.l2_bw}) {
      if (held_[index]) continue;
      Param(state, index).why = "fewer than 2 decode rows where requests share KV blocks";
    }
  }
  if (free.empty() || rows.size() < free.size()) return;

  // Start: for each window on a grid, the DRAM side is linear in α = DRAM ns per token,
  // β = reuse_hit_max · α, γ = CTA ns and φ = the per-layer fixed ns:
  // pred = (T + B)·α − S(W)·β + B·kv_heads·layers·γ + layers·φ, S = repeat reads. (The L2
  // side, T · L2 ns, is left to the LM that follows.)
  const double kv_bytes = static_cast<double>(model_.KvBytesPerToken());
  const double dram_ns = kv_bytes * kNsPerS / profile_.dram_bw_bytes_per_s;  // at efficiency 1
  std::vector<double> windows = {profile_.reuse_window_ctas / kv_heads};
  if (reuse_seen && !held_[ix.window]) {
    windows.clear();
    for (double w = 1; w <= 2 * max_sharing_batch; w *= std::sqrt(2.0)) windows.push_back(w);
  }
  double best_cost = std::numeric_limits<double>::infinity();
  double best_window = windows.front(), best_alpha = 0, best_beta = 0, best_gamma = 0;
  double best_phi = 0;
  for (const double w : windows) {
    Eigen::MatrixXd a(static_cast<Eigen::Index>(rows.size()), 4);
    Eigen::VectorXd ones = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(rows.size()));
    for (size_t k = 0; k < rows.size(); ++k) {
      const StepShape& s = rows_[rows[k]].shape;
      const double m = MeasuredNs(rows_[rows[k]], StepTerm::kDecodeAttention);
      const double repeats =
          SplitKvReads(s.decode_kv_tokens, s.decode_kv_unique_tokens, s.decode_requests, w, 1)
              .l2_tokens;
      const auto r = static_cast<Eigen::Index>(k);
      a(r, 0) = (s.decode_kv_tokens + s.decode_requests) / m;
      a(r, 1) = reuse_seen ? -repeats / m : 0;
      a(r, 2) = cta_free ? s.decode_requests * ctas_per_request / m : 0;
      a(r, 3) = layer_free ? model_.layers / m : 0;
    }
    Eigen::VectorXd coef = a.colPivHouseholderQr().solve(ones);
    for (Eigen::Index j = 1; j < 4; ++j) coef(j) = std::max(coef(j), 0.0);
    const double cost = (a * coef - ones).squaredNorm();
    if (cost < best_cost) {
      best_cost = cost;
      best_window = w;
      best_alpha = coef(0);
      best_beta = coef(1);
      best_gamma = coef(2);
      best_phi = coef(3);
    }
  }
  if (!held_[ix.attn_bw] && best_alpha > 0) {
    profile_.attn_bw_efficiency = std::min(1.0, dram_ns / best_alpha);
  }
  // LM works in log space: start a free fixed cost above 0.
  if (cta_free) profile_.decode_cta_fixed_ns = std::max(best_gamma, 1e-3);
  if (layer_free) profile_.decode_layer_fixed_ns = std::max(best_phi, 1e-3);
  if (reuse_seen) {
    if (!held_[ix.window]) profile_.reuse_window_ctas = best_window * kv_heads;
    if (!held_[ix.hit]) {
      profile_.reuse_hit_max = best_alpha > 0 ? std::clamp(best_beta / best_alpha, 0.0, 1.0) : 0.5;
    }
  }
  MinimizeInRange(state, free);
  for (const size_t index : free) Param(state, index).fitted = true;  // clamped ones too
  if (!reuse_seen) return;

  // L2 bandwidth: the rows pin it only where the L2 side of the max is the larger.
  if (!held_[ix.l2_bw]) {
    const StepPricer pricer(profile_, model_);
    size_t l2_bound = 0;
    for (const size_t i : rows) {
      if (pricer.Terms(rows_[i].shape)[static_cast<size_t>(StepTerm::kKvReuse)] > 0) ++l2_bound;
    }
    if (l2_bound < kMinRowsPerSide) {
      ParameterFit& l2 = Param(state, ix.l2_bw);
      profile_.l2_bw_bytes_per_s = base_.l2_bw_bytes_per_s;
      l2.fitted = false;
      l2.why = "fewer than 2 decode rows are bound by L2 (all reads) rather than DRAM (the "
               "misses); kept at the base value";
      std::vector<size_t> rest;
      for (const size_t index : free) {
        if (index != ix.l2_bw) rest.push_back(index);
      }
      MinimizeInRange(state, rest);
    }
  }
  if (!held_[ix.window]) {
    ParameterFit& window = Param(state, ix.window);
    const double window_requests = profile_.reuse_window_ctas / kv_heads;
    if (profile_.reuse_hit_max <= 1e-6) {
      profile_.reuse_window_ctas = base_.reuse_window_ctas;
      window.fitted = false;
      window.why = "no L2 reuse seen (reuse_hit_max fitted to 0), so the window does not matter";
    } else if (window_requests >= max_sharing_batch) {
      ApplyLowerBound(state, ix.window, std::ceil(max_sharing_batch * kv_heads),
                      "the fitted window holds every sharing batch (up to " +
                          Number(max_sharing_batch) +
                          " requests), and any wider window prices these rows the same");
    } else {
      const double ctas =
          std::clamp(std::round(std::max(profile_.reuse_window_ctas, kv_heads)),
                     ProfileParameters()[ix.window].min, ProfileParameters()[ix.window].max);
      profile_.reuse_window_ctas = ctas;
      window.unclamped_value = ctas;
    }
  }
}

// --- prefill attention: max(kv tokens · DRAM ns, pairs · pair ns) + query tokens · row ns ---

void Fitter::FitPrefill(TermState& state) {
  const Indices& ix = Ix();
  const std::vector<size_t>& rows = state.rows.fit;
  if (rows.empty()) return;
  const double pair_ns = model_.AttentionFlopsPerPair() * kNsPerS / profile_.dense_flops_per_s;
  const double rows_per_token = static_cast<double>(model_.heads) * model_.layers;
  // The per-row fixed cost is told apart from the pairs only by rows whose pairs per query
  // token differ (chunks of different lengths or contexts).
  std::vector<double> pairs_per_token;
  for (const size_t i : rows) {
    const StepShape& s = rows_[i].shape;
    if (s.prefill_tokens() > 0) pairs_per_token.push_back(s.prefill_pairs / s.prefill_tokens());
  }
  std::sort(pairs_per_token.begin(), pairs_per_token.end());
  const bool shapes_vary = pairs_per_token.size() >= 3 &&
                           pairs_per_token.back() > pairs_per_token.front() * (1 + 1e-6);
  bool query_free = !held_[ix.prefill_query] && shapes_vary;
  if (!held_[ix.prefill_query] && !shapes_vary) {
    Param(state, ix.prefill_query).why =
        "needs 3 or more prefill rows with different pairs per query token (chunk lengths or "
        "contexts); kept at the base value";
  }
  const bool flops_free = !held_[ix.attn_flops];
  if (!flops_free && !query_free) return;

  // Start: the compute side is linear in 1/attn_flops_efficiency and prefill_query_fixed_ns,
  // measured ≈ pairs · pair_ns / e + tokens · heads · layers · q (relative weights).
  if (flops_free && query_free) {
    Eigen::MatrixXd a(static_cast<Eigen::Index>(rows.size()), 2);
    Eigen::VectorXd ones = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(rows.size()));
    for (size_t k = 0; k < rows.size(); ++k) {
      const StepShape& s = rows_[rows[k]].shape;
      const double m = MeasuredNs(rows_[rows[k]], StepTerm::kPrefillAttention);
      a(static_cast<Eigen::Index>(k), 0) = s.prefill_pairs * pair_ns / m;
      a(static_cast<Eigen::Index>(k), 1) = s.prefill_tokens() * rows_per_token / m;
    }
    const NnlsResult start = NonNegativeLeastSquares(a, ones);
    if (start.x(0) > 0) profile_.attn_flops_efficiency = 1 / start.x(0);
    if (start.x(1) > 0) {
      profile_.prefill_query_fixed_ns = start.x(1);
    } else {
      // The rows put no weight on a per-row cost: 0, and the pairs alone are fitted.
      profile_.prefill_query_fixed_ns = 0;
      ParameterFit& q = Param(state, ix.prefill_query);
      q.fitted = true;
      q.why = "non-negative least squares puts no cost on the query rows beyond their pairs";
      query_free = false;
    }
  }
  std::vector<size_t> free;
  if (flops_free) free.push_back(ix.attn_flops);
  if (query_free) free.push_back(ix.prefill_query);
  if (flops_free && !query_free) {
    std::vector<double> candidates;
    for (const size_t i : rows) {
      const StepShape& s = rows_[i].shape;
      const double rest = MeasuredNs(rows_[i], StepTerm::kPrefillAttention) -
                          s.prefill_tokens() * rows_per_token * profile_.prefill_query_fixed_ns;
      if (rest > 0) candidates.push_back(s.prefill_pairs * pair_ns / rest);
    }
    std::vector<std::vector<double>> grid;
    for (const double e : Quantiles(candidates, profile_.attn_flops_efficiency)) {
      grid.push_back({e});
    }
    GridStart(StepTerm::kPrefillAttention, rows, {ix.attn_flops}, grid);
  }
  if (query_free && !flops_free && !(profile_.prefill_query_fixed_ns > 0)) {
    profile_.prefill_query_fixed_ns = 1;  // LM works in log space: start above 0
  }
  MinimizeInRange(state, free);
  for (const size_t index : free) Param(state, index).fitted = true;  // clamped ones too
  if (!flops_free || Param(state, ix.attn_flops).clamped) return;
  const double dram_ns = static_cast<double>(model_.KvBytesPerToken()) * kNsPerS /
                         (profile_.dram_bw_bytes_per_s * profile_.attn_bw_efficiency);
  size_t compute_side = 0;
  double bound = 0;  // the efficiency above which every row is bandwidth-bound
  for (const size_t i : rows) {
    const StepShape& s = rows_[i].shape;
    const double bw = s.prefill_kv_tokens * dram_ns;
    if (s.prefill_pairs * pair_ns / profile_.attn_flops_efficiency > bw) ++compute_side;
    if (bw > 0) bound = std::max(bound, s.prefill_pairs * pair_ns / bw);
  }
  if (compute_side < kMinRowsPerSide) {
    ApplyLowerBound(state, ix.attn_flops, bound,
                    "fewer than 2 prefill rows are compute-bound, so the rows only say the "
                    "attention FLOP efficiency is high enough to keep them bandwidth-bound");
    if (query_free) MinimizeInRange(state, {ix.prefill_query});
  }
}

// --- linear terms: cascade prefix and overhead ---

void Fitter::FitLinear(TermState& state, const std::vector<size_t>& free,
                       const std::function<double(size_t row, size_t param)>& column,
                       const std::function<double(size_t row)>& fixed_part) {
  const std::vector<size_t>& rows = state.rows.fit;
  if (free.empty() || rows.size() < free.size()) return;
  const auto n = static_cast<Eigen::Index>(free.size());
  Eigen::MatrixXd a(static_cast<Eigen::Index>(rows.size()), n);
  Eigen::VectorXd b(static_cast<Eigen::Index>(rows.size()));
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto r = static_cast<Eigen::Index>(k);
    const double m = MeasuredNs(rows_[rows[k]], state.report.term);
    for (Eigen::Index j = 0; j < n; ++j) {
      a(r, j) = column(rows[k], free[static_cast<size_t>(j)]) / m;
    }
    b(r) = (m - fixed_part(rows[k])) / m;
  }
  const NnlsResult nnls = NonNegativeLeastSquares(a, b);
  const Eigen::VectorXd unconstrained = a.colPivHouseholderQr().solve(b);
  const bool any_negative = (unconstrained.array() < 0).any();
  if (any_negative) {
    state.unclamped = profile_;
    for (Eigen::Index j = 0; j < n; ++j) {
      Field(*state.unclamped, free[static_cast<size_t>(j)]) = unconstrained(j);
    }
  }
  for (Eigen::Index j = 0; j < n; ++j) {
    const size_t index = free[static_cast<size_t>(j)];
    const ProfileParameterInfo& info = ProfileParameters()[index];
    ParameterFit& p = Param(state, index);
    double value = nnls.x(j);
    p.unclamped_value = unconstrained(j);
    if (value > info.max) value = info.max;
    Field(profile_, index) = value;
    p.fitted = true;
    if (unconstrained(j) < 0 || unconstrained(j) > info.max) {
      p.clamped = true;
      p.why = "unconstrained least squares gives " + Number(unconstrained(j)) +
              "; non-negative least squares keeps it in [0, " + Number(info.max) + "]";
    }
  }
}

void Fitter::FitCascade(TermState& state) {
  const Indices& ix = Ix();
  std::vector<size_t> free = Free({ix.cascade_layer, ix.cascade_merge});
  if (state.rows.fit.empty()) return;
  std::vector<double> requests;
  for (const size_t i : state.rows.fit) requests.push_back(rows_[i].shape.requests);
  std::sort(requests.begin(), requests.end());
  const bool one_size = std::unique(requests.begin(), requests.end()) - requests.begin() < 2;
  if (one_size && free.size() == 2) {
    free = {ix.cascade_layer};
    Param(state, ix.cascade_merge).why =
        "every cascade row has the same number of requests, so the merge cost per request "
        "cannot be told apart from the per-layer cost";
  }
  const double layers = model_.layers;
  // The prefix pass (at the fitted attention rates) is the fixed part, with held parameters.
  DeviceProfile pass = profile_;
  for (const size_t index : free) Field(pass, index) = 0;
  const StepPricer pricer(pass, model_);
  FitLinear(
      state, free,
      [&](size_t row, size_t param) {
        return param == ix.cascade_layer ? layers : layers * rows_[row].shape.requests;
      },
      [&](size_t row) {
        return pricer.Terms(rows_[row].shape)[static_cast<size_t>(StepTerm::kCascadePrefix)];
      });
}

void Fitter::FitOverhead(TermState& state) {
  const Indices& ix = Ix();
  std::vector<size_t> free = Free({ix.step_fixed, ix.per_request});
  if (state.rows.fit.empty()) return;
  std::vector<double> requests;
  for (const size_t i : state.rows.fit) requests.push_back(rows_[i].shape.requests);
  std::sort(requests.begin(), requests.end());
  const bool one_size = std::unique(requests.begin(), requests.end()) - requests.begin() < 2;
  if (one_size && free.size() == 2) {
    free = {ix.step_fixed};
    Param(state, ix.per_request).why =
        "every row has the same number of requests, so the per-request cost cannot be told "
        "apart from the fixed cost";
  }
  const bool step_free = std::find(free.begin(), free.end(), ix.step_fixed) != free.end();
  if (step_free && !held_[ix.layer_fixed] && !state.rows.fit.empty()) {
    profile_.layer_fixed_ns = 0;
    ParameterFit& layer = Param(state, ix.layer_fixed);
    layer.fitted = true;
    layer.unclamped_value = 0;
    layer.why =
        "fixed at 0: with one model, layers · layer_fixed_ns is a constant per step that "
        "step_fixed_ns absorbs (fit rows of two models of different depth to separate them)";
  }
  const double layers = model_.layers;
  FitLinear(
      state, free,
      [&](size_t row, size_t param) {
        return param == ix.step_fixed ? 1.0 : rows_[row].shape.requests;
      },
      [&](size_t row) {
        double fixed = layers * profile_.layer_fixed_ns;
        if (!step_free) fixed += profile_.step_fixed_ns;
        if (std::find(free.begin(), free.end(), ix.per_request) == free.end()) {
          fixed += rows_[row].shape.requests * profile_.per_request_ns;
        }
        return fixed;
      });
}

// --- reporting ---

double Mape(const StepPricer& pricer, std::span<const MeasuredStep> rows,
            const std::vector<size_t>& indices, std::optional<StepTerm> term) {
  double sum = 0;
  for (const size_t i : indices) {
    const StepTiming timing = pricer.Price(rows[i].shape);
    const double measured =
        term ? MeasuredNs(rows[i], *term) : static_cast<double>(rows[i].measured.total_ns);
    const double predicted =
        static_cast<double>(term ? PredictedNs(timing, *term) : timing.total_ns);
    sum += std::abs(predicted - measured) / measured;
  }
  return indices.empty() ? 0 : sum / static_cast<double>(indices.size());
}

// Per row: for each fitted term (kTerms order) and then the total, the bootstrap mean of
// |resample's median by total / the row's − 1| (FitOptions::repetitions). A row or term whose own
// value is 0 gets 0 (it is in no hold-out of that term).
std::vector<std::array<double, kTerms.size() + 1>> RowNoise(
    std::span<const MeasuredStep> rows, std::span<const std::vector<StepTiming>> repetitions) {
  std::vector<std::array<double, kTerms.size() + 1>> noise(rows.size());
  std::vector<StepTiming> resample;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<StepTiming>& reps = repetitions[i];
    std::mt19937_64 rng(0x9e3779b97f4a7c15ULL ^ i);
    std::uniform_int_distribution<size_t> pick(0, reps.size() - 1);
    std::array<double, kTerms.size() + 1>& sums = noise[i];
    auto term_of = [](size_t t) {
      return t < kTerms.size() ? std::optional<StepTerm>(kTerms[t]) : std::nullopt;
    };
    std::array<double, kTerms.size() + 1> own{};  // the row's own value of each column
    for (size_t t = 0; t <= kTerms.size(); ++t) own[t] = TimingNs(rows[i].measured, term_of(t));
    for (uint32_t b = 0; b < kNoiseFloorResamples; ++b) {
      resample.clear();
      for (size_t k = 0; k < reps.size(); ++k) resample.push_back(reps[pick(rng)]);
      const StepTiming median = hw::MedianByTotal(resample);
      for (size_t t = 0; t <= kTerms.size(); ++t) {
        if (own[t] > 0) sums[t] += std::abs(TimingNs(median, term_of(t)) / own[t] - 1);
      }
    }
    for (double& v : sums) v /= kNoiseFloorResamples;
  }
  return noise;
}

double MeanOver(const std::vector<std::array<double, kTerms.size() + 1>>& noise,
                const std::vector<size_t>& indices, size_t column) {
  double sum = 0;
  for (const size_t i : indices) sum += noise[i][column];
  return indices.empty() ? 0 : sum / static_cast<double>(indices.size());
}

std::string Fitter::Note(const TermState& state, const ParameterFit& p) const {
  const TermFit& t = state.report;
  std::string note =
      "calibration fit (calib/fit.h) on " +
      (options_.rows_label.empty() ? std::string("the calibration rows") : options_.rows_label) +
      ": " + std::to_string(t.fit_rows) + " " + std::string(StepTermName(t.term)) + " rows";
  if (t.term == StepTerm::kDecodeAttention) note += " (kv_reuse included)";
  if (options_.holdout_every > 0) {
    note += ", " + std::to_string(t.holdout_rows) + " more held out (1 row in " +
            std::to_string(options_.holdout_every) + ")";
  }
  note += "; term MAPE " + Percent(t.fit_mape.value_or(0)) + " fit";
  if (t.holdout_mape) note += ", " + Percent(*t.holdout_mape) + " holdout";
  if (p.clamped) {
    note += "; " + p.why;
    if (t.unclamped_fit_mape)
      note += " (fit MAPE unclamped: " + Percent(*t.unclamped_fit_mape) + ")";
  } else if (p.lower_bound || !p.why.empty()) {
    note += "; " + p.why;
  }
  return note;
}

void Fitter::Finish(TermState& state) {
  for (const ParameterFit& p : state.report.parameters) {
    if (p.fitted) state.report.fitted = true;
  }
}

CalibrationFit Fitter::Run() {
  const Indices& ix = Ix();
  std::array<std::vector<size_t>, 5> term_params = {{
      {ix.gemm_bw, ix.gemm_flops, ix.gemm_fixed, ix.gemm_exponent, ix.skinny_fixed,
       ix.skinny_per_token},
      {ix.attn_bw, ix.cta_fixed, ix.decode_layer, ix.hit, ix.window, ix.l2_bw},
      {ix.cascade_layer, ix.cascade_merge},
      {ix.attn_flops, ix.prefill_query},
      {ix.step_fixed, ix.layer_fixed, ix.per_request},
  }};
  std::array<TermState, 5> states;
  for (size_t t = 0; t < kTerms.size(); ++t) {
    TermState& s = states[t];
    s.report.term = kTerms[t];
    s.rows = RowsOf(kTerms[t]);
    s.report.fit_rows = s.rows.fit.size();
    s.report.holdout_rows = s.rows.holdout.size();
    for (const size_t index : term_params[t]) {
      ParameterFit p;
      p.name = ProfileParameters()[index].name;
      p.base_value = Value(base_, index);
      p.unclamped_value = p.base_value;
      if (held_[index]) {
        p.why = packed_weights_ && index == ix.gemm_fixed
                    ? "held at the base value: the rows' engine ran on packed weights, which it "
                      "never repacks (measured_on.gemm_weights)"
                    : "held at the base value (FitOptions::hold)";
      }
      if (s.rows.fit.empty() && !held_[index]) {
        p.why = "no " + std::string(StepTermName(kTerms[t])) + " rows";
      }
      s.report.parameters.push_back(p);
    }
  }
  // Fit order: gemm, decode (attn_bw_efficiency), prefill (attn_flops_efficiency), cascade
  // (both attention rates), overhead.
  // The roofline on the gemm rows the skinny kernel does not take, then the kernel's line on the
  // rest (it reads the fitted weight stream).
  std::vector<size_t> skinny_rows;
  {
    std::vector<size_t> roofline_rows;
    for (const size_t i : states[0].rows.fit) {
      (GemmRunsSkinny(base_, rows_[i].shape.new_tokens) ? skinny_rows : roofline_rows).push_back(i);
    }
    const std::vector<size_t> all_rows = std::exchange(states[0].rows.fit, roofline_rows);
    FitGemm(states[0]);
    // After the batched fixed cost: a CPU's repacking is a sharper explanation of its rows than
    // a soft knee, which could otherwise imitate it.
    if (const std::vector<size_t> rates = Free({ix.gemm_bw, ix.gemm_flops});
        !states[0].rows.fit.empty() && states[0].rows.fit.size() >= rates.size()) {
      FitGemmExponent(states[0], rates);
    }
    states[0].rows.fit = all_rows;
  }
  FitGemmSkinny(states[0], skinny_rows);
  FitDecode(states[1]);
  FitPrefill(states[3]);
  FitCascade(states[2]);
  FitOverhead(states[4]);
  // A fixed cost the rows want at 0 reaches only a tiny positive value in log space (1e-17 ns
  // on noiseless rows, 1e-300 on a loaded machine's): below a picosecond it is written as 0.
  for (TermState& s : states) {
    for (ParameterFit& p : s.report.parameters) {
      const size_t index = ParameterIndex(p.name);
      const double value = Value(profile_, index);
      if (!p.fitted || p.clamped || p.lower_bound || !p.name.ends_with("_ns") || !(value > 0) ||
          value >= kZeroFixedNs) {
        continue;
      }
      Field(profile_, index) = 0;
      p.why = "fitted to 0: the least-squares optimum is under " + Number(kZeroFixedNs) +
              " ns, the rows want no such cost";
    }
  }

  CalibrationFit result;
  const StepPricer pricer(profile_, model_);
  for (TermState& s : states) {
    for (ParameterFit& p : s.report.parameters) {
      p.value = Value(profile_, ParameterIndex(p.name));
      if (!p.clamped && p.fitted && !p.lower_bound) p.unclamped_value = p.value;
    }
    Finish(s);
    if (!s.rows.fit.empty()) s.report.fit_mape = Mape(pricer, rows_, s.rows.fit, s.report.term);
    if (!s.rows.holdout.empty()) {
      s.report.holdout_mape = Mape(pricer, rows_, s.rows.holdout, s.report.term);
    }
    if (s.unclamped) {
      s.report.unclamped_fit_mape =
          Mape(StepPricer(*s.unclamped, model_), rows_, s.rows.fit, s.report.term);
    }
  }
  // Origins: fitted parameters become `measured`, the rest keep the base's.
  for (TermState& s : states) {
    for (const ParameterFit& p : s.report.parameters) {
      if (!p.fitted) continue;
      DeviceProfile::Origin& origin = profile_.origins[ParameterIndex(p.name)];
      origin.source = options_.fitted_source;
      origin.note = Note(s, p);
    }
    std::string summary;
    for (const ParameterFit& p : s.report.parameters) {
      summary += (summary.empty() ? "" : ", ") + std::string(p.name) + " " +
                 (p.fitted ? (p.lower_bound ? "bounded"
                              : p.clamped   ? "clamped"
                                            : "fitted")
                           : "kept");
    }
    s.report.summary = summary;
  }

  // The whole step.
  std::vector<size_t> fit_rows, holdout_rows;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (!(rows_[i].measured.total_ns > 0) || rows_[i].shape.requests <= 0) continue;
    (IsHoldoutRow(i, options_.holdout_every) ? holdout_rows : fit_rows).push_back(i);
  }
  result.fit_rows = fit_rows.size();
  result.holdout_rows = holdout_rows.size();
  result.fit_mape = Mape(pricer, rows_, fit_rows, std::nullopt);
  if (!holdout_rows.empty()) result.holdout_mape = Mape(pricer, rows_, holdout_rows, std::nullopt);
  if (!options_.repetitions.empty()) {
    const auto noise = RowNoise(rows_, options_.repetitions);
    if (!holdout_rows.empty()) {
      result.holdout_noise_floor = MeanOver(noise, holdout_rows, kTerms.size());
    }
    for (size_t t = 0; t < kTerms.size(); ++t) {
      if (!states[t].rows.holdout.empty()) {
        states[t].report.holdout_noise_floor = MeanOver(noise, states[t].rows.holdout, t);
      }
    }
  }

  ProfileFit summary;
  summary.fit_rows = result.fit_rows;
  summary.holdout_rows = result.holdout_rows;
  summary.fit_mape = result.fit_mape;
  summary.holdout_mape = result.holdout_mape;
  summary.holdout_noise_floor = result.holdout_noise_floor;
  for (const StepTerm term : kTerms) {  // StepTerm order, as the profile schema wants
    for (const TermState& s : states) {
      if (s.report.term != term || s.rows.fit.empty()) continue;
      ProfileTermFit t;
      t.term = std::string(StepTermName(term));
      t.mape = s.report.fit_mape.value_or(0);
      t.holdout_mape = s.report.holdout_mape;
      t.holdout_noise_floor = s.report.holdout_noise_floor;
      t.rows = s.rows.fit.size();
      t.holdout_rows = s.rows.holdout.size();
      summary.terms.push_back(std::move(t));
    }
  }
  profile_.fit = std::move(summary);
  // The fit is a source of the profile's numbers: say so (and keep a profile whose base had no
  // provenance loadable: the loader wants a non-empty list).
  std::string source =
      "calibration fit (calib/fit.h) on " +
      (options_.rows_label.empty() ? std::string("the calibration rows") : options_.rows_label) +
      ": " + std::to_string(result.fit_rows) + " steps, step-time MAPE " + Percent(result.fit_mape);
  if (result.holdout_mape) {
    source += "; " + std::to_string(result.holdout_rows) + " held-out steps, MAPE " +
              Percent(*result.holdout_mape);
  }
  profile_.provenance.push_back(std::move(source));
  for (const TermState& s : states) result.terms.push_back(s.report);
  result.profile = profile_;
  return result;
}

void ValidateInputs(const DeviceProfile& base, std::span<const MeasuredStep> rows,
                    const FitOptions& options) {
  if (options.holdout_every == 1) {
    throw std::invalid_argument(
        "calibration: holdout_every = 1 would hold out every row "
        "(use 0 for no holdout, or k >= 2)");
  }
  if (!options.repetitions.empty()) {
    if (options.repetitions.size() != rows.size()) {
      throw std::invalid_argument("calibration: " + std::to_string(options.repetitions.size()) +
                                  " rows of repetitions for " + std::to_string(rows.size()) +
                                  " rows (FitOptions::repetitions: one entry per row)");
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      if (options.repetitions[i].size() < 2) {
        throw std::invalid_argument("calibration: row " + std::to_string(i) + " has " +
                                    std::to_string(options.repetitions[i].size()) +
                                    " repetitions; a noise floor needs 2 or more");
      }
    }
  }
  for (const std::string& name : options.hold) {
    switch (CheckHoldable(name)) {
      case HoldCheck::kHoldable:
        break;
      case HoldCheck::kUnknown:
        throw std::invalid_argument("calibration: FitOptions::hold names '" + name +
                                    "', which is no profile parameter");
      case HoldCheck::kNeverFitted:
        throw std::invalid_argument("calibration: FitOptions::hold names " + name +
                                    ", which is never fitted (a capacity or peak figure)");
    }
  }
  for (const ProfileParameterInfo& info : ProfileParameters()) {
    const double value = base.*info.field;
    const bool below = info.min_exclusive ? value <= info.min : value < info.min;
    if (!std::isfinite(value) || below || value > info.max) {
      throw std::invalid_argument("calibration: base profile " + std::string(info.name) + " = " +
                                  Number(value) + " is outside its range " +
                                  (info.min_exclusive ? "(" : "[") + Number(info.min) + ", " +
                                  Number(info.max) + "]");
    }
  }
  size_t timed = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepShape& s = rows[i].shape;
    const std::array<std::pair<const char*, double>, 10> fields = {{
        {"requests", s.requests},
        {"decode_requests", s.decode_requests},
        {"prefill_requests", s.prefill_requests},
        {"new_tokens", s.new_tokens},
        {"sampled_tokens", s.sampled_tokens},
        {"cascade_prefix_tokens", s.cascade_prefix_tokens},
        {"decode_kv_tokens", s.decode_kv_tokens},
        {"decode_kv_unique_tokens", s.decode_kv_unique_tokens},
        {"prefill_pairs", s.prefill_pairs},
        {"prefill_kv_tokens", s.prefill_kv_tokens},
    }};
    for (const auto& [name, value] : fields) {
      if (!std::isfinite(value) || value < 0) {
        throw std::invalid_argument("calibration row " + std::to_string(i) + ": shape." + name +
                                    " = " + Number(value) + " (must be finite and >= 0)");
      }
    }
    for (size_t t = 0; t < kNumStepTerms; ++t) {
      if (rows[i].measured.term_ns[t] < 0) {
        throw std::invalid_argument("calibration row " + std::to_string(i) + ": measured " +
                                    std::string(StepTermName(static_cast<StepTerm>(t))) + " = " +
                                    std::to_string(rows[i].measured.term_ns[t]) +
                                    " ns (must be >= 0)");
      }
    }
    bool any_term = rows[i].measured.total_ns > 0;
    for (const int64_t ns : rows[i].measured.term_ns) any_term = any_term || ns > 0;
    if (any_term && s.requests > 0) ++timed;
  }
  if (timed == 0) {
    throw std::invalid_argument(
        "calibration: no row with requests and a positive measured "
        "total_ns or term (" +
        std::to_string(rows.size()) + " rows)");
  }
}

}  // namespace

HoldCheck CheckHoldable(std::string_view name) {
  if (!FindParameter(name)) return HoldCheck::kUnknown;
  if (std::find(kNeverFitted.begin(), kNeverFitted.end(), name) != kNeverFitted.end()) {
    return HoldCheck::kNeverFitted;
  }
  return HoldCheck::kHoldable;
}

bool IsHoldoutRow(size_t index, uint32_t holdout_every) {
  return holdout_every >= 2 && index % holdout_every == holdout_every - 1;
}

CalibrationFit FitProfile(const DeviceProfile& base, const ModelConfig& model,
                          std::span<const MeasuredStep> rows, const FitOptions& options) {
  ValidateInputs(base, rows, options);
  return Fitter(base, model, rows, options).Run();
}

std::string FormatFitReport(const CalibrationFit& fit) {
  std::string out;
  char line[256];
  auto floor = [](const std::optional<double>& f) {
    return f ? "  (noise floor " + Percent(*f) + ")" : std::string();
  };
  std::snprintf(line, sizeof line, "step total: %zu fit rows, MAPE %s; %zu holdout rows%s%s%s\n",
                fit.fit_rows, Percent(fit.fit_mape).c_str(), fit.holdout_rows,
                fit.holdout_mape ? ", MAPE " : "",
                fit.holdout_mape ? Percent(*fit.holdout_mape).c_str() : "",
                floor(fit.holdout_noise_floor).c_str());
  out += line;
  for (const TermFit& t : fit.terms) {
    std::snprintf(line, sizeof line,
                  "%-18s rows %5zu + %4zu held  MAPE fit %8s  holdout %8s%s%s\n",
                  std::string(StepTermName(t.term)).c_str(), t.fit_rows, t.holdout_rows,
                  t.fit_mape ? Percent(*t.fit_mape).c_str() : "-",
                  t.holdout_mape ? Percent(*t.holdout_mape).c_str() : "-",
                  floor(t.holdout_noise_floor).c_str(), t.fitted ? "" : "  (not fitted)");
    out += line;
    for (const ParameterFit& p : t.parameters) {
      const char* state = !p.fitted       ? "kept"
                          : p.lower_bound ? "bounded"
                          : p.clamped     ? "clamped"
                                          : "fitted";
      std::snprintf(line, sizeof line, "  %-36s %-8s %14s (base %s)", std::string(p.name).c_str(),
                    state, Number(p.value).c_str(), Number(p.base_value).c_str());
      out += line;
      if (!p.why.empty()) out += ": " + p.why;
      out += "\n";
    }
  }
  return out;
}

}  // namespace feather::calib
