// engine.h: the interface between the serving loop and whatever prices or runs a step.
//
// The serving loop turns the scheduler's decisions into a BatchPlan (who runs this step, how many
// tokens each computes, which KV blocks each reads) and hands it to an Engine. The model engine
// (sim/engine/model_engine.h) prices the plan with the cost model; the real engines (hw/, later) execute
// it and time it. Both return a StepTiming split into the cost model's terms, so a measured step
// and a modelled one can be compared term by term.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/types.h"

namespace feather {

// One request's share of a step.
struct StepRequest {
  RequestId id = kNoRequest;
  uint32_t context_tokens = 0;  // KV tokens already in the cache before this step (hits included)
  uint32_t new_tokens = 0;      // tokens computed this step: 1 for decode, a chunk for prefill
  bool is_prefill = false;      // true while the prompt is not fully computed
  std::span<const uint32_t> block_table;  // physical KV blocks, in order (context + new tokens)
};

// What the engine executes in one step. Filled by the serving loop; spans valid for the call.
struct BatchPlan {
  std::span<const StepRequest> requests;
  uint32_t block_tokens = 16;
  uint32_t decode_requests = 0;        // requests with is_prefill == false
  uint64_t prefill_tokens = 0;         // Σ new_tokens over prefill requests
  // Decode attention reads: Σ context_tokens (+1) over decode requests, and the number of
  // distinct physical KV tokens behind those reads (shared prefix blocks counted once).
  uint64_t decode_kv_tokens = 0;
  uint64_t decode_kv_unique_tokens = 0;
  // Leading KV tokens that every request of the step shares physically (vLLM's
  // num_common_prefix_blocks × block size); the basis of the cascade decision.
  uint32_t common_prefix_tokens = 0;

  [[nodiscard]] uint32_t num_requests() const { return static_cast<uint32_t>(requests.size()); }
  [[nodiscard]] uint64_t total_new_tokens() const { return prefill_tokens + decode_requests; }
};

// The cost model's terms (DESIGN.md, "Why batches of one prefix run faster"). The model engine
// fills each; a real engine fills what it can attribute and puts the rest in kOverhead.
enum class StepTerm : uint8_t {
  kGemm = 0,           // linear layers (QKV, O, MLP, LM head) over all new tokens
  kDecodeAttention,    // decode attention KV reads served from DRAM/HBM
  kKvReuse,            // redundant decode KV reads served from L2/LLC (shared blocks, no cascade)
  kCascadePrefix,      // cascade's shared-prefix pass plus its merge
  kPrefillAttention,   // causal attention of prefill chunks against their context
  kOverhead,           // fixed per-step cost plus per-request bookkeeping
  kCount,
};
inline constexpr size_t kNumStepTerms = static_cast<size_t>(StepTerm::kCount);

// Stable snake_case names, used as HDF5 dataset and JSON field names.
[[nodiscard]] std::string_view StepTermName(StepTerm term);
// The term StepTermName names `name`; nullopt for any other text.
[[nodiscard]] std::optional<StepTerm> StepTermFromName(std::string_view name);

struct StepTiming {
  int64_t total_ns = 0;  // what the step cost in simulated (or measured) time
  std::array<int64_t, kNumStepTerms> term_ns{};
  bool cascade_used = false;

  [[nodiscard]] int64_t term(StepTerm t) const { return term_ns[static_cast<size_t>(t)]; }
};

class Engine {
 public:
  virtual ~Engine() = default;
  [[nodiscard]] virtual std::string_view Name() const = 0;
  // Prices (model engine) or executes (real engines) one step.
  [[nodiscard]] virtual StepTiming Execute(const BatchPlan& plan) = 0;
  // What a step of only the decode requests would cost, without running anything: the stop
  // policies' reward is decode throughput, and a step that also prefills a newly admitted prompt
  // must not make the admission look slow. Engines that cannot price a hypothetical step return
  // nullopt, and the reward falls back to the executed step's time.
  [[nodiscard]] virtual std::optional<int64_t> PriceDecodeOnly(const BatchPlan& decode_plan) {
    (void)decode_plan;
    return std::nullopt;
  }
};

}  // namespace feather
