// mpc_policy.h: a model-predictive stop policy (issue 15 item 4, beyond the paper): it fits the
// decode step's time from the steps it has seen and admits a candidate while the batch's
// predicted decode throughput does not fall.
//
// Why decode throughput, and why not the admission's prefill. Every request must be prefilled
// once whatever the policy does: stopping defers a prefill, it does not save it. What a stop can
// change is how fast the batch decodes for the many steps that follow: a larger batch shares the
// weight stream among more requests (throughput rises), but a candidate outside the batch's
// common prefix ends cascade attention for everyone (each request then reads the shared prefix
// itself, and decode attention grows by (b − 1)·P reads). A policy that prices the prefill into
// the comparison (the bandit's whole-step reward) learns to stop whenever admissions prefill,
// and collapses where sharing is absent (results/policy-suite/README.md); one that ignores
// cascade (the decode-only reward) never stops. This policy compares the two decode steps that
// the decision chooses between, one with and one without the candidate.
//
// The step-time model, fitted online. For a decode step of n requests, with T the KV tokens
// its attention reads and U the distinct ones among them:
//   t ≈ c0 + c1·n + c2·U + c3·(T − U)
// c0 the fixed cost (the weight stream, launches), c1 the per-request cost (GEMM rows,
// sampling), c2 a KV token read from memory, c3 a repeated read of a token another request
// of the step also reads (served partly from cache on a GPU: a separate coefficient). With
// cascade the shared prefix of P tokens is read once: T becomes T − (n − 1)·P. Fitted by
// non-negative least squares (every term is a cost) with exponential forgetting (weight
// `forgetting` per step) and a small ridge term (relative to each feature's scale: it keeps a
// feature that never varied, such as the redundant reads of a workload without sharing, from
// making the system singular), on every step's decode part (StepFeedback::decode_ns; on an
// engine that cannot price it, on the steps without prefill). It needs no training and runs on
// a real engine alike.
//
// Decide() for a candidate joining a batch of n requests (those running and those admitted
// this round), with T, U and the common prefix P of the batch, and the candidate's sequence
// length L, its prefix-cache hit H and the prefix P' it shares with the batch:
//   * n = 0, or fewer than `min_steps` fitted steps, or a fit that is not positive → Add;
//   * before:  n requests, (T, U),                cascade iff P  ≥ cascade_min_prefix_tokens
//                                                  and n ≥ cascade_min_requests;
//   * after:   n + 1,      (T + L, U + L − H),    cascade by the same rule with P' = min(P, ·);
//   * converged, for each depth of StopContext::kPrefixGroupDepths whose largest group of the
//     batch (m requests sharing P_g tokens) does not hold the candidate: the batch reduced to
//     that group, m requests of the batch's mean length, with cascade over P_g;
//   * Add iff (n + 1) / t_after ≥ (1 − margin) · max(n / t_before, m / t_converged ...).
// A larger batch of one prefix is always accepted; a candidate that ends cascade is accepted
// only when the batch is small enough that sharing the weight stream gains more than the
// repeated prefix reads cost, which is when a drained batch hands over to the next prefix; in a
// mixed batch, a candidate outside a large group is held back so the batch can converge to it.
// Known weakness (results/policy-suite/2026-11-24-mpc/): a Stop ends the round, and the
// selector may keep proposing a group other than the one the batch should converge to.
//
// Complexity: Decide O(depths) (a 4-term dot product each); OnStepExecuted O(1) (4×4 normal
// equations, solved on demand at most once per round: Cholesky on each of the 15 term subsets).
// Allocation-free.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/cascade_rule.h"
#include "policies/config_fields.h"
#include "policies/stop_policy.h"

namespace feather {

struct MpcConfig {
  double forgetting = 0.999;               // per-step decay of past steps in the fit, (0, 1]
  double ridge = 1e-6;                     // ridge term, relative to each feature's Σ x²
  uint32_t min_steps = 16;                 // fitted steps before the model decides
  double margin = 0.0;                     // tolerated predicted throughput loss, [0, 1)
  // vLLM's use_cascade_attention thresholds (base/cascade_rule.h)
  uint32_t cascade_min_prefix_tokens = kCascadeMinPrefixTokens;
  uint32_t cascade_min_requests = kCascadeMinRequests;

  static constexpr std::string_view kSection = "mpc";
  [[nodiscard]] static std::span<const ConfigField<MpcConfig>> Fields();
  [[nodiscard]] std::vector<ConfigRuleProblem> RuleProblems() const;
};

// The fit's weighted normal equations over features x = (1, n, U, T − U), t in ms.
struct DecodeTimeFit {
  static constexpr size_t kTerms = 4;
  std::array<double, kTerms * kTerms> xtx{};  // row-major Σ w·x·xᵀ
  std::array<double, kTerms> xty{};           // Σ w·x·t
  double tty = 0;                             // Σ w·t² (the residual of a candidate solution)
  double steps = 0;                           // Σ w (forgetting applied)
  uint64_t observed = 0;                      // steps fitted, no forgetting
};

class MpcPolicy final : public StopPolicy {
 public:
  explicit MpcPolicy(const MpcConfig& config = {}) : config_(config) {}

  [[nodiscard]] std::string_view Name() const override { return "mpc"; }
  void BeginRound() override { solved_ = tied_solved_ = false; }
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  [[nodiscard]] bool WantsBatchShape() const override { return true; }
  void OnStepExecuted(const StepFeedback& feedback) override;

  // Predicted decode step time (ms) of n requests reading T KV tokens, U of them distinct, with
  // cascade over a P-token prefix when the rule above says so; nullopt before the fit decides.
  [[nodiscard]] std::optional<double> PredictDecodeMs(uint32_t n, uint64_t kv_tokens,
                                                      uint64_t unique_tokens,
                                                      uint32_t common_prefix_tokens);
  // The same prediction with the given coefficients (c0, c1, c2, c3) in place of the fit's.
  [[nodiscard]] double PredictDecodeMsWith(
      const std::array<double, DecodeTimeFit::kTerms>& coefficients, uint32_t n, uint64_t kv_tokens,
      uint64_t unique_tokens, uint32_t common_prefix_tokens) const;
  // The same steps fitted with one price for every KV read, repeated or not (features 1, n, T;
  // returned with c3 = c2), or nullopt before min_steps; solved at most once per step.
  [[nodiscard]] std::optional<std::array<double, DecodeTimeFit::kTerms>> TiedReadCoefficients();
  // The fitted coefficients (c0, c1, c2, c3) in ms, or nullopt.
  [[nodiscard]] std::optional<std::array<double, DecodeTimeFit::kTerms>> Coefficients();

  [[nodiscard]] const MpcConfig& config() const { return config_; }
  [[nodiscard]] const DecodeTimeFit& fit() const { return fit_; }
  void Restore(const MpcConfig& config, const DecodeTimeFit& fit);

 private:
  bool Solve();

  MpcConfig config_;
  DecodeTimeFit fit_;
  std::array<double, DecodeTimeFit::kTerms> coefficients_{};
  bool solved_ = false;
  bool usable_ = false;
  std::array<double, DecodeTimeFit::kTerms> tied_coefficients_{};
  bool tied_solved_ = false;
  bool tied_usable_ = false;
};

}  // namespace feather
