// mpc_policy.cc: see mpc_policy.h for the step-time model and the decision rule.
#include "policies/mpc_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace feather {
namespace {

constexpr size_t kN = DecodeTimeFit::kTerms;

// x = (1, n, U, T − U) of a decode step.
std::array<double, kN> Features(double n, double reads, double unique) {
  return {1.0, n, unique, std::max(0.0, reads - unique)};
}

// Solves the normal equations restricted to the terms in `mask` (ridge applied) by Cholesky;
// false when singular. Terms outside the mask get 0.
bool SolveSubset(const std::array<double, kN * kN>& xtx, const std::array<double, kN>& xty,
                 double ridge, unsigned mask, std::array<double, kN>& c) {
  std::array<size_t, kN> idx{};
  size_t m = 0;
  for (size_t i = 0; i < kN; ++i) {
    if (mask & (1u << i)) idx[m++] = i;
  }
  std::array<double, kN * kN> l{};
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double sum = xtx[idx[i] * kN + idx[j]];
      if (i == j) sum = sum * (1.0 + ridge) + 1e-12;
      for (size_t k = 0; k < j; ++k) sum -= l[i * kN + k] * l[j * kN + k];
      if (i == j) {
        if (!(sum > 0)) return false;
        l[i * kN + i] = std::sqrt(sum);
      } else {
        l[i * kN + j] = sum / l[j * kN + j];
      }
    }
  }
  std::array<double, kN> y{};
  for (size_t i = 0; i < m; ++i) {
    double sum = xty[idx[i]];
    for (size_t k = 0; k < i; ++k) sum -= l[i * kN + k] * y[k];
    y[i] = sum / l[i * kN + i];
  }
  std::array<double, kN> z{};
  for (size_t i = m; i-- > 0;) {
    double sum = y[i];
    for (size_t k = i + 1; k < m; ++k) sum -= l[k * kN + i] * z[k];
    z[i] = sum / l[i * kN + i];
  }
  c = {};
  for (size_t i = 0; i < m; ++i) c[idx[i]] = z[i];
  for (const double v : c) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// KV reads of a decode step: with cascade, the P-token prefix is read once instead of n times.
double Reads(uint32_t n, uint64_t kv_tokens, uint32_t prefix, bool cascade) {
  double reads = static_cast<double>(kv_tokens);
  if (cascade && n > 0) reads -= static_cast<double>(n - 1) * prefix;
  return std::max(reads, 0.0);
}

// Non-negative least squares by enumeration over the subsets of the terms in `terms`: of the
// subsets whose unconstrained solution is non-negative, the one with the smallest residual
// Σw(t − x·c)² = tᵀt − 2cᵀXᵀt + cᵀXᵀXc. Terms outside the winning subset get 0.
bool Nnls(const std::array<double, kN * kN>& xtx, const std::array<double, kN>& xty, double tty,
          double ridge, unsigned terms, std::array<double, kN>& out) {
  double best = std::numeric_limits<double>::infinity();
  bool found = false;
  for (unsigned mask = 1; mask < (1u << kN); ++mask) {
    if ((mask & ~terms) != 0) continue;
    std::array<double, kN> c{};
    if (!SolveSubset(xtx, xty, ridge, mask, c)) continue;
    if (std::any_of(c.begin(), c.end(), [](double v) { return v < 0; })) continue;
    double rss = tty;
    for (size_t i = 0; i < kN; ++i) {
      rss -= 2 * c[i] * xty[i];
      for (size_t j = 0; j < kN; ++j) rss += c[i] * xtx[i * kN + j] * c[j];
    }
    if (rss < best) {
      best = rss;
      out = c;
      found = true;
    }
  }
  return found;
}

}  // namespace

std::span<const ConfigField<MpcConfig>> MpcConfig::Fields() {
  using C = MpcConfig;
  static constexpr std::array<ConfigField<C>, 6> kFields = {{
      {"forgetting", &C::forgetting, ConfigField<C>::Real(0, 1, true)},
      {"ridge", &C::ridge, ConfigField<C>::Real(0, 1)},
      {"min_steps", &C::min_steps, ConfigField<C>::Integer(1, 1 << 20)},
      {"margin", &C::margin, ConfigField<C>::Real(0, 0.99)},
      {"cascade_min_prefix_tokens", &C::cascade_min_prefix_tokens,
       ConfigField<C>::Integer(0, 1 << 30)},
      {"cascade_min_requests", &C::cascade_min_requests, ConfigField<C>::Integer(1, 1 << 20)},
  }};
  return kFields;
}

std::vector<ConfigRuleProblem> MpcConfig::RuleProblems() const { return {}; }

std::optional<std::array<double, DecodeTimeFit::kTerms>> MpcPolicy::TiedReadCoefficients() {
  if (!tied_solved_) {
    tied_solved_ = true;
    tied_usable_ = false;
    if (fit_.observed >= config_.min_steps) {
      // Features (1, n, T): the U and T − U columns of the normal equations summed.
      std::array<double, kN * kN> xtx{};
      std::array<double, kN> xty{};
      constexpr std::array<size_t, kN> kTo = {0, 1, 2, 2};
      for (size_t i = 0; i < kN; ++i) {
        xty[kTo[i]] += fit_.xty[i];
        for (size_t j = 0; j < kN; ++j) xtx[kTo[i] * kN + kTo[j]] += fit_.xtx[i * kN + j];
      }
      tied_usable_ = Nnls(xtx, xty, fit_.tty, config_.ridge, 0b0111, tied_coefficients_);
      tied_coefficients_[3] = tied_coefficients_[2];
    }
  }
  if (!tied_usable_) return std::nullopt;
  return tied_coefficients_;
}

bool MpcPolicy::Solve() {
  solved_ = true;
  usable_ = false;
  if (fit_.observed < config_.min_steps) return false;
  // Non-negative least squares by enumeration: every term is a cost, so a negative coefficient
  // is collinearity, not physics (a batch that is always full makes the fixed and per-request
  // terms trade off).
  usable_ = Nnls(fit_.xtx, fit_.xty, fit_.tty, config_.ridge, (1u << kN) - 1, coefficients_);
  return usable_;
}

std::optional<std::array<double, DecodeTimeFit::kTerms>> MpcPolicy::Coefficients() {
  if (!solved_) Solve();
  if (!usable_) return std::nullopt;
  return coefficients_;
}

std::optional<double> MpcPolicy::PredictDecodeMs(uint32_t n, uint64_t kv_tokens,
                                                 uint64_t unique_tokens,
                                                 uint32_t common_prefix_tokens) {
  if (!solved_) Solve();
  if (!usable_) return std::nullopt;
  return PredictDecodeMsWith(coefficients_, n, kv_tokens, unique_tokens, common_prefix_tokens);
}

double MpcPolicy::PredictDecodeMsWith(const std::array<double, DecodeTimeFit::kTerms>& coefficients,
                                      uint32_t n, uint64_t kv_tokens, uint64_t unique_tokens,
                                      uint32_t common_prefix_tokens) const {
  const bool cascade = common_prefix_tokens >= config_.cascade_min_prefix_tokens &&
                       n >= config_.cascade_min_requests && common_prefix_tokens > 0;
  const double reads = Reads(n, kv_tokens, common_prefix_tokens, cascade);
  const std::array<double, kN> x =
      Features(n, reads, std::min(static_cast<double>(unique_tokens), reads));
  double t = 0;
  for (size_t i = 0; i < kN; ++i) t += coefficients[i] * x[i];
  return t;
}

StopDecision MpcPolicy::Decide(const StopContext& c) {
  const uint32_t n = c.batch_size;
  if (n == 0) return StopDecision::kAdd;
  const double avg_tokens = static_cast<double>(c.batch_kv_tokens) / n;
  const std::optional<double> now =
      PredictDecodeMs(n, c.batch_kv_tokens, c.batch_unique_kv_tokens, c.batch_common_prefix_tokens);
  const uint64_t own = c.candidate_tokens - std::min(c.candidate_tokens, c.candidate_cached_tokens);
  const std::optional<double> added =
      PredictDecodeMs(n + 1, c.batch_kv_tokens + c.candidate_tokens,
                      c.batch_unique_kv_tokens + own, c.candidate_common_prefix_tokens);
  if (!now || !added || !(*now > 0) || !(*added > 0)) return StopDecision::kAdd;
  const double rate_added = static_cast<double>(n + 1) / *added;
  double rate_kept = static_cast<double>(n) / *now;
  // Outside the largest prefix group at some depth, the alternative is also to let the batch
  // converge to that group: its members alone, decoding with cascade over their shared prefix.
  for (const StopContext::PrefixGroup& g : c.largest_groups) {
    if (g.candidate_in || g.requests == 0) continue;
    const uint32_t m = g.requests;
    const double prefix = g.prefix_tokens;
    const double tokens = avg_tokens * m;
    const double unique = prefix + std::max(0.0, avg_tokens - prefix) * m;
    const std::optional<double> converged =
        PredictDecodeMs(m, static_cast<uint64_t>(tokens), static_cast<uint64_t>(unique),
                        g.prefix_tokens);
    if (converged && *converged > 0) {
      rate_kept = std::max(rate_kept, static_cast<double>(m) / *converged);
    }
  }
  return rate_added >= (1.0 - config_.margin) * rate_kept ? StopDecision::kAdd
                                                          : StopDecision::kStop;
}

void MpcPolicy::OnStepExecuted(const StepFeedback& f) {
  if (!learning() || f.decode_requests == 0) return;
  // A decode reads at least its own token: no KV reads means the caller did not report the
  // step's shape (the vLLM plugin today), and the step cannot be fitted.
  if (f.decode_kv_tokens == 0) return;
  // The decode part's time: priced apart by the engine, or the whole step when it prefilled
  // nothing; a mixed step an engine cannot split teaches nothing.
  int64_t ns = f.decode_ns;
  if (ns < 0) ns = f.prefill_tokens == 0 ? (f.whole_step_ns > 0 ? f.whole_step_ns : f.step_ns) : 0;
  if (ns <= 0) return;
  const double reads = Reads(f.decode_requests, f.decode_kv_tokens, f.common_prefix_tokens,
                             f.cascade_used);
  const std::array<double, kN> x =
      Features(f.decode_requests, reads,
               std::min(static_cast<double>(f.decode_kv_unique_tokens), reads));
  const double t = static_cast<double>(ns) * 1e-6;
  const double keep = config_.forgetting;
  fit_.tty = keep * fit_.tty + t * t;
  for (size_t i = 0; i < kN; ++i) {
    fit_.xty[i] = keep * fit_.xty[i] + x[i] * t;
    for (size_t j = 0; j < kN; ++j) {
      fit_.xtx[i * kN + j] = keep * fit_.xtx[i * kN + j] + x[i] * x[j];
    }
  }
  fit_.steps = keep * fit_.steps + 1;
  ++fit_.observed;
  solved_ = tied_solved_ = false;
}

void MpcPolicy::Restore(const MpcConfig& config, const DecodeTimeFit& fit) {
  config_ = config;
  fit_ = fit;
  solved_ = tied_solved_ = false;
}

}  // namespace feather
