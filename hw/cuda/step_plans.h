// step_plans.h: how the CUDA backend turns one step's host layout (hw/plan_layout.h) into its
// attention calls — the plans and the per-form pointer offsets — in host code, so the CPU tests
// can run the very same wiring through the kernel's emulation against the CPU kernels.
//
// Three forms per step (FlashInfer's plan per wrapper):
//   decode   the decode entries [0, num_decode) over their whole KV, or with a cascade prefix
//            from cascade_kv_begin (the suffix pass, writing its lse for the merge);
//   prefix   cascade's shared-prefix pass: one entry (cascade_indptr over kv_indices) whose rows
//            are every decode row, into (prefix_out, prefix_lse);
//   prefill  the prefill entries: the step's CSR from entry num_decode on (kv_indptr offset,
//            kv_indices absolute), rows prefill_qo_indptr relative to the first prefill row, so
//            q and out are offset by qo_indptr[num_decode] rows; causal.
// ApplyStepForm fills one form's q / out / lse / kv_indptr into args that already hold the
// pools, dimensions and plan arrays. O(entries + pages + rows) per step (BuildAttentionPlan).
#pragma once

#include <cstdint>
#include <string>

#include "hw/cuda/attention_plan.h"
#include "hw/cuda/paged_attention_args.h"
#include "hw/plan_layout.h"

namespace feather::hw::cuda {

enum class StepForm : uint8_t { kDecode, kPrefix, kPrefill };

struct StepAttentionPlans {
  AttentionPlan decode, prefix, prefill;
  bool has_decode = false, has_prefix = false, has_prefill = false;
};

// Builds the step's plans (heads, kv_heads, head_dim of the model; max_ctas the split-KV budget).
// Returns "" or BuildAttentionPlan's reason.
[[nodiscard]] std::string PlanStepAttention(const StepLayout& layout, uint32_t heads,
                                            uint32_t kv_heads, uint32_t head_dim, uint32_t max_ctas,
                                            StepAttentionPlans& plans);

// The step's buffers, on the host or the device: [rows][heads·head_dim] q and attention output,
// [decode][heads] lse buffers, [decode][heads·head_dim] prefix output, the layout's CSR arrays.
struct StepPointers {
  const float* q = nullptr;
  float* attn = nullptr;
  float* suffix_lse = nullptr;
  float* prefix_out = nullptr;
  float* prefix_lse = nullptr;
  const uint32_t* kv_indptr = nullptr;
  const uint32_t* kv_indices = nullptr;
  const uint32_t* cascade_indptr = nullptr;
};

void ApplyStepForm(StepForm form, const StepLayout& layout, uint32_t q_width, const StepPointers& p,
                   PagedAttentionArgs& args);

}  // namespace feather::hw::cuda
