// layer_loop.cc: RunLayerLoop and TermTimer (see layer_loop.h).
#include "hw/layer_loop.h"

#include <algorithm>
#include <cstddef>

namespace feather::hw {

void TermTimer::Start(StepTerm term) {
  Stop();
  backend_.Synchronize();
  term_ = term;
  since_ns_ = SteadyNowNs();
  running_ = true;
}

void TermTimer::Stop() {
  if (!running_) return;
  backend_.Synchronize();
  timing_.term_ns[static_cast<size_t>(term_)] += SteadyNowNs() - since_ns_;
  running_ = false;
}

void RunLayerLoop(Backend& backend, const StepLayout& layout, uint32_t layers,
                  StepTiming& timing) {
  Backend& b = backend;
  const uint32_t rows = layout.num_rows;
  const uint32_t decode = layout.num_decode;
  const uint32_t prefill = layout.num_prefill;
  const auto requests = static_cast<uint32_t>(layout.sampled_row.size());
  b.BeginStep(layout);
  TermTimer timer(b, timing);
  for (uint32_t l = 0; l < layers; ++l) {
    // Attention input: RMSNorm → QKV → RoPE on q and k, split into q and the new K, V rows.
    timer.Start(StepTerm::kGemm);
    b.RmsNorm(Buffer::kHidden, Weight::kAttnNorm, l, Buffer::kNormed, rows);
    b.Linear(Buffer::kNormed, Weight::kQkv, l, Buffer::kQkv, rows);
    b.RopeSplitQkv();
    timer.Stop();

    if (decode > 0) {
      timer.Start(StepTerm::kDecodeAttention);
      b.AppendKv(l, 0, decode);
      if (layout.cascade_prefix_tokens == 0) {
        b.DecodeAttention(l, /*suffix_only=*/false);
      } else {
        // vLLM's batch-wide cascade, its three parts timed apart: the prefix pass and the merge
        // are cascade_prefix, the suffix pass decode_attention.
        timer.Start(StepTerm::kCascadePrefix);
        b.CascadePrefix(l);
        timer.Start(StepTerm::kDecodeAttention);
        b.DecodeAttention(l, /*suffix_only=*/true);
        timer.Start(StepTerm::kCascadePrefix);
        b.CascadeMerge();
      }
      timer.Stop();
    }
    if (prefill > 0) {
      // Under cascade the prefill chunks still attend to their whole context: the cost model's
      // prefill term takes the prefix P out (its pass is priced in cascade_prefix), but the n·P
      // pairs that moves are negligible next to the prefix pass itself.
      timer.Start(StepTerm::kPrefillAttention);
      b.AppendKv(l, decode, prefill);
      b.PrefillAttention(l);
      timer.Stop();
    }

    // O projection, residual, MLP, residual.
    timer.Start(StepTerm::kGemm);
    b.Linear(Buffer::kAttn, Weight::kO, l, Buffer::kTmp, rows);
    b.AddInPlace(Buffer::kHidden, Buffer::kTmp);
    b.RmsNorm(Buffer::kHidden, Weight::kMlpNorm, l, Buffer::kNormed, rows);
    b.Linear(Buffer::kNormed, Weight::kGateUp, l, Buffer::kGateUp, rows);
    b.SiluMul();
    b.Linear(Buffer::kAct, Weight::kDown, l, Buffer::kTmp, rows);
    b.AddInPlace(Buffer::kHidden, Buffer::kTmp);
    timer.Stop();
  }

  // LM head over the sampled rows (plan order), argmax per row.
  timer.Start(StepTerm::kGemm);
  b.GatherSampledRows();
  b.RmsNorm(Buffer::kSampled, Weight::kFinalNorm, 0, Buffer::kSampled, requests);
  b.Linear(Buffer::kSampled, Weight::kLmHead, 0, Buffer::kLogits, requests);
  b.Argmax();
  timer.Stop();
}

void SetOverheadFromTotal(StepTiming& timing) {
  const auto overhead = static_cast<size_t>(StepTerm::kOverhead);
  int64_t attributed = 0;
  for (size_t k = 0; k < kNumStepTerms; ++k) {
    if (k != overhead) attributed += timing.term_ns[k];
  }
  timing.term_ns[overhead] = std::max<int64_t>(0, timing.total_ns - attributed);
}

}  // namespace feather::hw
