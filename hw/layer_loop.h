// layer_loop.h: one forward step of a decoder-only transformer over any Backend
// (hw/backend.h), timed per cost-model term. The model is written here once; the CPU engine and
// the coming CUDA engine differ only in the backend they pass.
//
// TermTimer attributes wall time to a StepTerm between Start and Stop, calling the backend's
// Synchronize at each mark so that asynchronous work lands in the term that issued it. What the
// loop attributes (the same boundaries the CPU engine always had, cpu_engine.h):
//   gemm               per layer [RMSNorm → QKV → RoPE/split] and [O → residual → RMSNorm →
//                      gate/up → SiLU·up → down → residual]; then [gather → final RMSNorm → LM head
//                      → argmax]
//   decode_attention   the decode entries' KV appends and plain decode attention, or cascade's
//                      suffix pass
//   cascade_prefix     cascade's shared-prefix pass and its merge
//   prefill_attention  the prefill chunks' KV appends and prefill attention
// kv_reuse stays 0 (reuse cannot be told apart from DRAM reads by timing) and overhead is the
// caller's: the step's wall time less the attributed terms (BeginStep — layout upload, embedding
// — lands there).
//
// Cost: 2 clock reads and 2 Synchronize calls per term section, ~6 sections per layer.
#pragma once

#include <chrono>
#include <cstdint>

#include "hw/backend.h"
#include "hw/plan_layout.h"
#include "sim/engine/engine.h"

namespace feather::hw {

[[nodiscard]] inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class TermTimer {
 public:
  TermTimer(Backend& backend, StepTiming& timing) : backend_(backend), timing_(timing) {}
  // Ends the running section (if any) and starts one of `term`.
  void Start(StepTerm term);
  // Ends the running section.
  void Stop();

 private:
  Backend& backend_;
  StepTiming& timing_;
  bool running_ = false;
  StepTerm term_ = StepTerm::kOverhead;
  int64_t since_ns_ = 0;
};

// Runs the step `layout` describes (LayOutPlan) on `backend` for a model of `layers` layers,
// adding each section's time to timing.term_ns. Everything but BeginStep is timed.
void RunLayerLoop(Backend& backend, const StepLayout& layout, uint32_t layers,
                  StepTiming& timing);

// timing.term_ns[kOverhead] = max(0, total_ns − Σ other terms).
void SetOverheadFromTotal(StepTiming& timing);

}  // namespace feather::hw
