// converge_policy.h: the `converge` stop policy (issue 15, beyond the paper): no table, no
// training; two rules on the batch's shape that keep batches homogeneous where cascade attention
// pays, and a gate from an online step-time fit that steps aside where batch size pays more.
//
// Why. With a shared prefix of P tokens, a decode step of n requests reads the prefix once under
// cascade attention and n times without it; on the default scenario (5K-token prefixes) that is
// most of the step's time. Cascade needs a prefix common to every request of the step (vLLM's
// rule, base/cascade_rule.h), so one candidate from another group ends it for the whole batch,
// for every step until the last request of either group finishes. The learning policies must
// discover this from a reward; here it is stated. Conversely, where requests do not wait
// (arrival-bound load) or groups are small, holding a candidate back only delays it, so both
// rules need a backlog and a group large enough to cascade.
//
// Decide(), with W = requests waiting (the candidate included), the batch = running + admitted
// this round, G = the batch's largest group of requests sharing their first
// kCascadeMinPrefixTokens tokens (StopContext::largest_groups[0]):
//   1. empty batch, or W < kMinBacklogRequests                → Add
//   2. guard: the batch shares a cascade-worthy prefix (≥ kCascadeMinPrefixTokens leading tokens
//      common to all its requests) and the candidate would end it → Stop, unless the gate opens
//      (the batch drains, then the next group starts a batch of its own: the CHT proposes a new
//      group's peers first)
//   3. converge: the batch is mixed, the candidate is outside G, G holds at least
//      kCascadeMinRequests requests                         → Stop, unless the gate opens (slots
//      go to G's peers only, so the batch converges to G and qualifies for cascade once the
//      others finish)
//   4. otherwise                                             → Add
// A Stop ends the round (stop_policy.h): rule 3 can only hold back, not pick G's peers, and the
// CHT proposes by fewest missing chunks, so convergence takes as many steps as the other groups'
// requests take to finish. kMinBacklogRequests (64) is an assumed constant, the same for every
// scenario (not tuned per scenario): below it the server keeps up with arrivals and a Stop only
// delays.
//
// The gate (`converge`; `converge-shape` has none and always stops in 2 and 3). Holding a group
// together pays only if the group can fill a batch: with 50-100 prefix groups of a few dozen
// requests each, a homogeneous batch holds a few dozen requests, and the mixed batch of hundreds
// that admitting leads to decodes faster even without cascade (its repeated prefix reads hit the
// GPU's L2; results/policy-suite/2026-11-24-refit: converge-shape 0.47x the oracle at 100
// groups). So rules 2 and 3 compare two decode steps, priced by the online fit that mpc uses
// (mpc_policy.h: t ≈ c0 + c1·n + c2·U + c3·(T − U), fitted from the steps executed, no training):
//   kept:  G's requests plus G's waiting peers (PrefixGroup::waiting), up to the mixed batch's
//          size, at the batch's mean sequence length, cascade over G's prefix;
//   mixed: the batch plus the waiting, up to max_batch_requests and to what the free KV holds of
//          requests like the batch's (MixedBatchRequests), no cascade; each added request reads
//          the candidate's sequence length and holds the batch's distinct tokens per request.
// The gate opens (Add) when the mixed step is predicted to decode more requests per ms. It stays
// shut (`converge` then decides as `converge-shape`, whose Stops make the cascade steps the fit
// needs) until the fit can tell what cascade saves: it has seen kMinStepsOfEachKind decode steps
// with cascade and as many without (see cascade_steps_), and it prices a repeated read above
// zero (c3 > 0: non-negative least squares sets c3 to 0 when the repeated reads are collinear
// with the other terms, and a gate that believed it would always mix: radix-2 0.88x the oracle
// in development); and where the caller does not report the step's shape in StepFeedback. The
// fit never forgets (forgetting 1): the hardware does not change within a run, and a policy that
// holds batches homogeneous stops seeing the mixed steps that pin c3.
// Known weakness (results/policy-suite/2026-11-24-gate: groups-50, 0.83x the oracle): rule 3 can
// hold a mixed batch of a dozen requests for a long time, because the CHT proposes the oldest
// candidate with nothing missing, often of another group already in the batch, and each Stop
// ends the round before G's waiting peers are proposed; steps that small do not separate c3 from
// c1, so the gate stays shut meanwhile. Two fixes were tried and measured on 2026-11-25 (groups-50
// of the suite's base scenario, scheduler_time zero: converge 2,787 tok/s, the oracle 3,343), and
// neither was kept:
//   - A Skip decision (hold this candidate back, take the selector's next; prototyped with a CHT
//     that parks a request for the rest of the round, up to 256 skips a round): 2,572 tok/s
//     (16 skips a round: 2,662), and the default scenario 4,623 against 4,791. The batch does
//     converge to G, but G holds 7-12 requests early on (two arrivals a second per group), too
//     few for cascade (kCascadeMinRequests); the gate then stays shut until ~190 s instead of
//     ~110 s. The selector's order is not what holds groups-50 back; the gate's evidence is.
//   - The gate opening once the repeated reads are identifiable (1 − R² of T − U on the other
//     terms >= 0.1, the textbook variance-inflation bound) instead of once c3 > 0: groups-50
//     2,372, groups-100 1,374 (2,812 before), default 4,665. Mixed steps leave T − U nearly
//     collinear with n here (1 − R² 0.004 over the first 2,000 steps), so that test opens later
//     than c3 > 0 does, not earlier.
//
// Frozen or learning makes no difference to the rules; the fit is refreshed either way (it is
// a model of the engine, not a learned preference). Needs the batch shape (WantsBatchShape).
// Under `serving.engine: sglang` there is no cascade path (sglang_batcher.h) and the simulator
// fills no batch shape, so converge admits like always-add there: nothing it guards exists.
// Complexity: Decide O(1) (two 4-term predictions; the fit is solved at most once per round,
// mpc_policy.h), allocation-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/cascade_rule.h"
#include "policies/mpc_policy.h"
#include "policies/stop_policy.h"

namespace feather {

class ConvergePolicy final : public StopPolicy {
 public:
  explicit ConvergePolicy(bool gated = true) : gated_(gated) {}

  // Requests waiting below which neither rule holds a candidate back (assumed).
  static constexpr uint32_t kMinBacklogRequests = 64;
  // Fitted decode steps of each kind (with and without cascade) before the gate may open.
  static constexpr uint64_t kMinStepsOfEachKind = 16;

  [[nodiscard]] std::string_view Name() const override {
    return gated_ ? "converge" : "converge-shape";
  }
  [[nodiscard]] bool gated() const { return gated_; }
  void BeginRound() override {}
  [[nodiscard]] StopDecision Decide(const StopContext& context) override;
  [[nodiscard]] bool WantsBatchShape() const override { return true; }
  void OnStepExecuted(const StepFeedback& feedback) override;

  // The batch that admitting would lead to: the running requests plus the waiting, up to
  // max_batch_requests and to what the free KV holds of requests like the candidate.
  [[nodiscard]] static uint32_t MixedBatchRequests(const StopContext& context);

 private:
  // Whether the gate may open: gated, and the fit can tell what cascade saves (see below).
  [[nodiscard]] bool GateCanOpen();
  // The predicted decode rate (requests per ms) of the mixed batch of `big` requests that
  // admitting leads to, without cascade; nullopt when the fit gives no positive time.
  [[nodiscard]] std::optional<double> MixedRate(const StopContext& context, uint32_t big);

  bool gated_;
  // Decode steps fitted with and without cascade: the gate opens only once both kinds have
  // been seen (kMinStepsOfEachKind each), as the repeated-read cost that cascade saves is not
  // identifiable from steps of one kind (in mixed batches of one prompt length T − U grows
  // with n, and the fit gives the cost to the per-request term).
  uint64_t cascade_steps_ = 0;
  uint64_t plain_steps_ = 0;
  MpcPolicy model_{MpcConfig{.forgetting = 1.0}};  // only its online decode-step fit is used
};

}  // namespace feather
