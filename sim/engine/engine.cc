// engine.cc: names of the cost model's step terms.
#include "sim/engine/engine.h"

namespace feather {

std::string_view StepTermName(StepTerm term) {
  switch (term) {
    case StepTerm::kGemm: return "gemm";
    case StepTerm::kDecodeAttention: return "decode_attention";
    case StepTerm::kKvReuse: return "kv_reuse";
    case StepTerm::kCascadePrefix: return "cascade_prefix";
    case StepTerm::kPrefillAttention: return "prefill_attention";
    case StepTerm::kOverhead: return "overhead";
    case StepTerm::kCount: break;
  }
  return "unknown";
}

std::optional<StepTerm> StepTermFromName(std::string_view name) {
  for (size_t t = 0; t < kNumStepTerms; ++t) {
    if (StepTermName(static_cast<StepTerm>(t)) == name) return static_cast<StepTerm>(t);
  }
  return std::nullopt;
}

}  // namespace feather
