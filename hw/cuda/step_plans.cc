// step_plans.cc: a step's attention plans and their pointer offsets (see step_plans.h).
#include "hw/cuda/step_plans.h"

namespace feather::hw::cuda {

std::string PlanStepAttention(const StepLayout& layout, uint32_t heads, uint32_t kv_heads,
                              uint32_t head_dim, uint32_t max_ctas, StepAttentionPlans& plans) {
  AttentionPlanInput base;
  base.page_size = layout.page_size;
  base.num_heads = heads;
  base.kv_heads = kv_heads;
  base.head_dim = head_dim;
  base.max_ctas = max_ctas;
  plans.has_decode = plans.has_prefix = plans.has_prefill = false;
  const bool cascade = layout.cascade_prefix_tokens > 0;
  if (layout.num_decode > 0) {
    AttentionPlanInput in = base;
    in.num_entries = layout.num_decode;
    in.kv_indptr = layout.kv_indptr.data();
    in.kv_last_page_len = layout.kv_last_page_len.data();
    in.kv_begin = cascade ? layout.cascade_kv_begin.data() : nullptr;
    if (std::string why = BuildAttentionPlan(in, plans.decode); !why.empty())
      return "decode: " + why;
    plans.has_decode = true;
  }
  if (cascade && layout.num_decode > 0) {
    AttentionPlanInput in = base;
    in.num_entries = 1;
    in.kv_indptr = layout.cascade_indptr.data();
    in.kv_last_page_len = layout.cascade_last_page_len.data();
    const uint32_t qo[2] = {0, layout.num_decode};
    in.qo_indptr = qo;
    if (std::string why = BuildAttentionPlan(in, plans.prefix); !why.empty()) {
      return "cascade prefix: " + why;
    }
    plans.has_prefix = true;
  }
  if (layout.num_prefill > 0) {
    AttentionPlanInput in = base;
    in.num_entries = layout.num_prefill;
    in.kv_indptr = layout.kv_indptr.data() + layout.num_decode;
    in.kv_last_page_len = layout.kv_last_page_len.data() + layout.num_decode;
    in.qo_indptr = layout.prefill_qo_indptr.data();
    in.causal = true;
    if (std::string why = BuildAttentionPlan(in, plans.prefill); !why.empty()) {
      return "prefill: " + why;
    }
    plans.has_prefill = true;
  }
  return "";
}

void ApplyStepForm(StepForm form, const StepLayout& layout, uint32_t q_width, const StepPointers& p,
                   PagedAttentionArgs& a) {
  a.kv_indices = p.kv_indices;
  switch (form) {
    case StepForm::kDecode:
      a.q = p.q;
      a.out = p.attn;
      a.lse = layout.cascade_prefix_tokens > 0 ? p.suffix_lse : nullptr;
      a.kv_indptr = p.kv_indptr;
      return;
    case StepForm::kPrefix:
      a.q = p.q;
      a.out = p.prefix_out;
      a.lse = p.prefix_lse;
      a.kv_indptr = p.cascade_indptr;
      return;
    case StepForm::kPrefill: {
      const size_t first_row = layout.qo_indptr[layout.num_decode];
      a.q = p.q + first_row * q_width;
      a.out = p.attn + first_row * q_width;
      a.lse = nullptr;
      a.kv_indptr = p.kv_indptr + layout.num_decode;
      return;
    }
  }
}

}  // namespace feather::hw::cuda
