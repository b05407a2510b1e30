// ratio_fit.cc: the joint fit of profile parameters to ratio rows (see ratio_fit.h).
#include "calib/ratio_fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>

#include "calib/solvers.h"

namespace feather::calib {
namespace {

constexpr std::array<std::string_view, 6> kNeverFitted = {
    "memory_bytes",      "activation_reserve_bytes", "dram_bw_bytes_per_s",
    "dense_flops_per_s", "sm_count",                 "weight_stream_bw_bytes_per_s"};

std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

bool IsLinear(std::string_view name) { return name == "reuse_hit_max"; }

// A floor physics sets that the loader's range does not: every decode KV read passes L2, so L2
// delivers at least what DRAM does (else the two-level roofline would price a hit slower than a
// miss). Without it the H100 cascade rows are met by an L2 of 1.4 GB/s that makes plain decoding
// absurdly slow and cascade "win" 23x.
double PhysicalFloor(std::string_view name, const DeviceProfile& base) {
  return name == "l2_bw_bytes_per_s" ? base.dram_bw_bytes_per_s : 0.0;
}

double Residual(const RatioRow& row, double predicted) {
  const double r = std::log(std::max(predicted, 1e-300) / row.measured);
  switch (row.relation) {
    case RatioRelation::kAbout:
      return r;
    case RatioRelation::kAtLeast:
      return kRatioBoundWeight * std::min(0.0, r - kRatioBoundMargin);
    case RatioRelation::kAtMost:
      return kRatioBoundWeight * std::max(0.0, r + kRatioBoundMargin);
  }
  return r;
}

}  // namespace

RatioFit FitRatioRows(const DeviceProfile& base, std::span<const RatioRow> rows,
                      std::span<const ModelConfig> models, std::span<const std::string> free,
                      const std::string& rows_label) {
  if (rows.empty()) throw std::invalid_argument("ratio fit: no ratio rows of this device");
  if (rows.size() != models.size()) throw std::logic_error("ratio fit: one model per row");
  const auto params = ProfileParameters();
  std::vector<const ProfileParameterInfo*> infos;
  for (const std::string& name : free) {
    const auto it = std::find_if(params.begin(), params.end(),
                                 [&](const ProfileParameterInfo& p) { return p.name == name; });
    if (it == params.end()) {
      throw std::invalid_argument("--fit-ratios: '" + name + "' is no profile parameter");
    }
    if (std::find(kNeverFitted.begin(), kNeverFitted.end(), name) != kNeverFitted.end()) {
      throw std::invalid_argument("--fit-ratios: " + name +
                                  " is never fitted (a capacity or peak figure)");
    }
    infos.push_back(&*it);
  }
  if (infos.empty()) throw std::invalid_argument("--fit-ratios: no parameter named");
  if (infos.size() > rows.size()) {
    throw std::invalid_argument("--fit-ratios: " + std::to_string(infos.size()) +
                                " parameters from " + std::to_string(rows.size()) +
                                " ratio rows; free at most as many as there are rows");
  }

  DeviceProfile profile = base;
  auto to_x = [&](size_t j, double v) {
    return IsLinear(infos[j]->name) ? v : std::log(std::max(v, 1e-300));
  };
  auto from_x = [&](size_t j, double x) {
    return IsLinear(infos[j]->name) ? std::clamp(x, 0.0, 1.0)
                                    : std::exp(std::clamp(x, -700.0, 700.0));
  };
  auto residuals_of = [&](const DeviceProfile& p, Eigen::VectorXd& r) {
    for (size_t i = 0; i < rows.size(); ++i) {
      const RatioCheck check = CheckRatio(rows[i], StepPricer(p, models[i]));
      const double value = Residual(rows[i], check.predicted);
      r(static_cast<Eigen::Index>(i)) = std::isfinite(value) ? value : 1e3;
    }
  };
  const auto n = static_cast<Eigen::Index>(rows.size());
  Eigen::VectorXd r(n);

  // Grid start: multiples of the base value (the hit rate on its own scale); a zero base value
  // starts from a small positive one, since the search runs in log space.
  std::vector<std::vector<double>> axes;
  for (const ProfileParameterInfo* info : infos) {
    const double v = base.*(info->field);
    if (IsLinear(info->name)) {
      axes.push_back({0.25, 0.5, 0.8, 0.95, 1.0});
    } else {
      const double start = v > 0 ? v : std::max(info->min, 1.0);
      axes.push_back({start / 256, start / 16, start / 4, start, start * 4, start * 16});
    }
  }
  // Every grid point's cost; Levenberg–Marquardt then starts from the kStarts best ones and
  // the lowest end point wins. The cost has kinks (a max of two roofs, one-sided rows, integer
  // rounding), so one start can stop in a shallow local minimum: on the RTX 6000 Ada rows a
  // single start left two inequality rows broken where another start keeps all ten.
  constexpr size_t kStarts = 8;
  constexpr int kPolishEvaluations = 2000;
  std::vector<std::pair<double, std::vector<double>>> grid;
  std::vector<size_t> at(infos.size(), 0);
  while (true) {
    std::vector<double> point(infos.size());
    for (size_t j = 0; j < infos.size(); ++j) {
      point[j] = axes[j][at[j]];
      profile.*(infos[j]->field) = point[j];
    }
    residuals_of(profile, r);
    grid.emplace_back(r.squaredNorm(), std::move(point));
    size_t j = 0;
    while (j < infos.size() && ++at[j] == axes[j].size()) at[j++] = 0;
    if (j == infos.size()) break;
  }
  const size_t starts = std::min(kStarts, grid.size());
  std::partial_sort(grid.begin(), grid.begin() + static_cast<std::ptrdiff_t>(starts), grid.end(),
                    [](const auto& a, const auto& b) { return a.first < b.first; });
  auto set = [&](const Eigen::VectorXd& x) {
    for (size_t j = 0; j < infos.size(); ++j) {
      const ProfileParameterInfo& info = *infos[j];
      double v = from_x(j, x(static_cast<Eigen::Index>(j)));
      const bool below = info.min_exclusive ? v <= info.min : v < info.min;
      if (below) v = info.min_exclusive ? std::nextafter(info.min, info.max) : info.min;
      profile.*(info.field) = std::max(std::min(v, info.max), PhysicalFloor(info.name, base));
    }
  };
  const ResidualFunction residuals = [&](const Eigen::VectorXd& x, Eigen::VectorXd& out) {
    set(x);
    residuals_of(profile, out);
  };
  auto cost_of = [&](const Eigen::VectorXd& x) {
    set(x);
    residuals_of(profile, r);
    return r.squaredNorm();
  };
  Eigen::VectorXd best_x;
  double best_cost = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < starts; ++k) {
    Eigen::VectorXd x0(static_cast<Eigen::Index>(infos.size()));
    for (size_t j = 0; j < infos.size(); ++j) {
      x0(static_cast<Eigen::Index>(j)) = to_x(j, grid[k].second[j]);
    }
    const LeastSquaresResult result = MinimizeLeastSquares(residuals, n, x0);
    const double cost = cost_of(result.x);
    if (cost < best_cost) {
      best_cost = cost;
      best_x = result.x;
    }
  }
  // Polish by compass search (try ±step on each coordinate, keep what lowers the cost, halve
  // the step when nothing does): it needs no gradient, so it crosses the kinks where LM stalls.
  {
    Eigen::VectorXd x = best_x;
    double step = 0.5;
    int evaluations = 0;
    while (step > 1e-3 && evaluations < kPolishEvaluations) {
      bool moved = false;
      for (Eigen::Index j = 0; j < x.size(); ++j) {
        for (const double sign : {1.0, -1.0}) {
          Eigen::VectorXd y = x;
          // The hit rate lives on [0, 1]: its steps are a tenth of the log-space ones.
          y(j) += sign * step * (IsLinear(infos[static_cast<size_t>(j)]->name) ? 0.1 : 1.0);
          const double c = cost_of(y);
          ++evaluations;
          if (c < best_cost - 1e-12) {
            best_cost = c;
            x = y;
            moved = true;
          }
        }
      }
      if (!moved) step /= 2;
    }
    best_x = x;
  }
  set(best_x);
  for (const ProfileParameterInfo* info : infos) {
    if (info->integer) profile.*(info->field) = std::max(info->min, std::round(profile.*(info->field)));
  }

  RatioFit fit;
  std::string ids;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RatioCheck check = CheckRatio(rows[i], StepPricer(profile, models[i]));
    fit.checks.push_back(check);
    fit.consistent_rows += check.consistent ? 1 : 0;
    if (rows[i].relation == RatioRelation::kAbout) {
      fit.mean_abs_error += std::abs(check.rel_error);
      ++fit.about_rows;
    }
    ids += (ids.empty() ? "" : ", ") + rows[i].id;
  }
  if (fit.about_rows > 0) fit.mean_abs_error /= static_cast<double>(fit.about_rows);

  // A parameter that no row moves is not fitted: check the cost's sensitivity to it.
  residuals_of(profile, r);
  const double cost = r.squaredNorm();
  for (size_t j = 0; j < infos.size(); ++j) {
    const ProfileParameterInfo& info = *infos[j];
    ParameterFit p;
    p.name = info.name;
    p.base_value = base.*(info.field);
    p.value = profile.*(info.field);
    p.unclamped_value = p.value;
    // Not informed: the cost at the base value is the cost at the fitted one.
    DeviceProfile at_base = profile;
    at_base.*(info.field) = p.base_value;
    residuals_of(at_base, r);
    const bool flat = std::abs(r.squaredNorm() - cost) <= 1e-9 * std::max(1.0, cost);
    // Saturated above (e.g. a window wider than every batch): any larger value prices the rows
    // the same, so keep the least value with the fitted cost, a lower bound.
    if (!flat && !IsLinear(info.name)) {
      auto cost_at = [&](double v) {
        DeviceProfile q = profile;
        q.*(info.field) = v;
        residuals_of(q, r);
        return r.squaredNorm();
      };
      auto same = [&](double v) {
        return std::abs(cost_at(v) - cost) <= 1e-9 * std::max(1.0, cost);
      };
      if (p.value < 1e-3 * std::max(p.base_value, 1e-300) && same(0)) {
        // At its floor: the rows want none of it.
        p.value = 0;
        profile.*(info.field) = 0;
      } else if (same(p.value * 1.5) && same(p.value * 1e3) && !same(p.value / 1e3)) {
        double hi = p.value, lo = p.value;
        while (lo > info.min + 1e-300 &&
               std::abs(cost_at(lo) - cost) <= 1e-9 * std::max(1.0, cost)) {
          hi = lo;
          lo /= 2;
        }
        for (int k = 0; k < 60; ++k) {
          const double mid = std::sqrt(lo * hi);
          (std::abs(cost_at(mid) - cost) <= 1e-9 * std::max(1.0, cost) ? hi : lo) = mid;
        }
        p.value = info.integer ? std::ceil(hi) : hi;
        profile.*(info.field) = p.value;
        p.lower_bound = true;
        p.why = "the rows price every value above this one the same: a lower bound";
      }
    }
    DeviceProfile::Origin& origin = profile.origins[static_cast<size_t>(&info - params.data())];
    if (flat) {
      profile.*(info.field) = p.base_value;
      p.value = p.base_value;
      p.why = "no ratio row moves it (its cost is flat); kept at the base value";
      fit.parameters.push_back(p);
      continue;
    }
    p.fitted = true;
    origin.source = ParameterSource::kPublished;
    origin.note = "joint ratio fit (calib/ratio_fit.h) on " + rows_label + " (" + ids +
                  "): " + std::to_string(fit.consistent_rows) + " of " +
                  std::to_string(rows.size()) + " rows consistent, mean |error| of the " +
                  std::to_string(fit.about_rows) + " 'about' rows " +
                  Percent(fit.mean_abs_error) + "; base value " + Number(p.base_value) +
                  (p.lower_bound ? "; " + p.why : "");
    fit.parameters.push_back(p);
  }
  fit.profile = profile;
  return fit;
}

}  // namespace feather::calib
