// Tests for hw/cuda/step_plans.h: the CUDA backend's wiring of a step — its plans and the
// per-form pointer offsets — run through the kernel's host emulation on real step layouts
// (hw/synthetic_batch.h → LayOutPlan: decode requests sharing a prefix, prefill chunks after
// cached contexts, scattered pages), against the double-precision CPU references on the same
// pools: plain decode, cascade (suffix pass + prefix pass + merge, prefix page-aligned or not),
// and the prefill rows at their offset. Bound as attention_emulation_test: 5e-5 + 1e-4·|want|.
#include "hw/cuda/step_plans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/rng.h"
#include "hw/attention_reference.h"
#include "hw/cuda/attention_cases.h"
#include "hw/cuda/attention_emulation.h"
#include "hw/plan_layout.h"
#include "hw/synthetic_batch.h"

namespace feather::hw::cuda {
namespace {

struct Shape {
  uint32_t heads, kv_heads, head_dim;
  KvDtype dtype;
  uint32_t cascade_tokens;  // 0: no cascade
  uint32_t max_ctas;
};

void CheckStep(const Shape& shape, uint64_t seed) {
  SyntheticBatchSpec spec;
  spec.decode_requests = 7;
  spec.groups = 1;
  spec.shared_prefix_tokens = 64;
  spec.suffix_tokens = 30;
  spec.suffix_jitter_tokens = 29;
  spec.prefill_requests = 3;
  spec.prefill_context_tokens = 40;
  spec.prefill_chunk_tokens = 21;
  spec.seed = seed;
  const SyntheticBatch batch = MakeSyntheticBatch(spec);
  StepLayout layout;
  LayOutPlan(batch.plan, shape.cascade_tokens, static_cast<uint32_t>(batch.pool_blocks), layout);

  const PagedKvLayout kv_layout{.num_blocks = static_cast<uint32_t>(batch.pool_blocks),
                                .kv_heads = shape.kv_heads,
                                .block_tokens = 16,
                                .head_dim = shape.head_dim,
                                .dtype = shape.dtype};
  Rng rng(seed);
  std::vector<uint8_t> k(kv_layout.PoolBytes()), v(kv_layout.PoolBytes());
  const size_t elems = kv_layout.BlockElems() * kv_layout.num_blocks;
  for (auto* pool : {&k, &v}) {
    for (size_t i = 0; i < elems; ++i) {
      const auto value = static_cast<float>(2 * rng.NextDouble() - 1);
      if (shape.dtype == KvDtype::kFp32) {
        std::memcpy(pool->data() + 4 * i, &value, 4);
      } else {
        const uint16_t bits = FloatToBf16(value);
        std::memcpy(pool->data() + 2 * i, &bits, 2);
      }
    }
  }
  const uint32_t q_width = shape.heads * shape.head_dim;
  std::vector<float> q(size_t{layout.num_rows} * q_width);
  for (float& x : q) x = static_cast<float>(2 * rng.NextDouble() - 1);
  const float scale = 1.0F / std::sqrt(static_cast<float>(shape.head_dim));

  // Expected: the CPU references over the layout's own views.
  std::vector<float> want(q.size(), 0.0F);
  DecodeAttentionParams decode{.q = q.data(),
                               .out = want.data(),
                               .lse = nullptr,
                               .kv = layout.DecodeKv(k.data(), v.data(), kv_layout),
                               .kv_begin = nullptr,
                               .num_heads = shape.heads,
                               .scale = scale,
                               .num_threads = 1};
  ReferenceDecodeAttention(decode);
  const size_t first_prefill = layout.qo_indptr[layout.num_decode];
  PrefillAttentionParams prefill{.q = q.data() + first_prefill * q_width,
                                 .out = want.data() + first_prefill * q_width,
                                 .kv = layout.PrefillKv(k.data(), v.data(), kv_layout),
                                 .qo_indptr = layout.prefill_qo_indptr.data(),
                                 .num_heads = shape.heads,
                                 .scale = scale,
                                 .num_threads = 1};
  ReferencePrefillAttention(prefill);

  // Got: the backend's wiring through the emulation.
  StepAttentionPlans plans;
  ASSERT_EQ(
      PlanStepAttention(layout, shape.heads, shape.kv_heads, shape.head_dim, shape.max_ctas, plans),
      "");
  ASSERT_EQ(plans.has_prefix, shape.cascade_tokens > 0);
  ASSERT_TRUE(plans.has_decode && plans.has_prefill);
  std::vector<float> attn(q.size(), 0.0F), suffix_lse(size_t{layout.num_decode} * shape.heads);
  std::vector<float> prefix_out(size_t{layout.num_decode} * q_width);
  std::vector<float> prefix_lse(suffix_lse.size());
  StepPointers pointers{.q = q.data(),
                        .attn = attn.data(),
                        .suffix_lse = suffix_lse.data(),
                        .prefix_out = prefix_out.data(),
                        .prefix_lse = prefix_lse.data(),
                        .kv_indptr = layout.kv_indptr.data(),
                        .kv_indices = layout.kv_indices.data(),
                        .cascade_indptr = layout.cascade_indptr.data()};
  auto run = [&](StepForm form, const AttentionPlan& plan) {
    std::vector<float> partial_out(size_t{plan.num_slots} * q_width);
    std::vector<float> partial_lse(size_t{plan.num_slots} * shape.heads);
    PagedAttentionArgs a;
    a.k_pool = k.data();
    a.v_pool = v.data();
    a.dtype = shape.dtype == KvDtype::kFp32 ? KvElement::kFp32 : KvElement::kBf16;
    a.stride_page = kv_layout.StridePage();
    a.stride_head = kv_layout.StrideHead();
    a.page_size = 16;
    a.head_dim = shape.head_dim;
    a.num_heads = shape.heads;
    a.kv_heads = shape.kv_heads;
    a.scale = scale;
    a.partial_out = partial_out.data();
    a.partial_lse = partial_lse.data();
    a.items = plan.items.data();
    a.num_items = static_cast<uint32_t>(plan.items.size());
    a.row_list = plan.row_list.data();
    a.merge_rows = plan.merge_rows.data();
    a.merge_indptr = plan.merge_indptr.data();
    a.merge_slots = plan.merge_slots.data();
    a.num_merge_rows = static_cast<uint32_t>(plan.merge_rows.size());
    ApplyStepForm(form, layout, q_width, pointers, a);
    EmulatePagedAttention(a);
  };
  run(StepForm::kDecode, plans.decode);
  if (plans.has_prefix) {
    run(StepForm::kPrefix, plans.prefix);
    EmulateMergeStates(attn.data(), suffix_lse.data(), prefix_out.data(), prefix_lse.data(),
                       layout.num_decode, shape.heads, shape.head_dim);
  }
  run(StepForm::kPrefill, plans.prefill);

  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double{attn[i]} - want[i]);
    worst = std::max(worst, err);
    ASSERT_LE(err, kCaseAbsTolerance + kCaseRelTolerance * std::fabs(want[i]))
        << "element " << i << " of " << want.size() << " (row " << i / q_width << "), seed " << seed
        << ", cascade " << shape.cascade_tokens;
  }
  EXPECT_LT(worst, 1e-5);
}

TEST(StepPlansTest, DecodeCascadeAndPrefillMatchTheCpuReference) {
  for (const Shape& shape :
       {Shape{8, 2, 128, KvDtype::kBf16, 0, 264}, Shape{8, 2, 128, KvDtype::kBf16, 64, 264},
        Shape{4, 4, 64, KvDtype::kFp32, 40, 16},  // prefix ends mid-page
        Shape{16, 2, 64, KvDtype::kFp32, 48, 0}}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) CheckStep(shape, seed);
  }
}

}  // namespace
}  // namespace feather::hw::cuda
