// attention_cases.h: random paged-attention problems with their expected answers from the
// double-precision CPU references (hw/attention_reference.h), and the plans that solve them —
// shared by the CPU tests of the emulation (tests/hw/cuda/) and by `feather selfcheck --target
// cuda`, which runs the same cases on the GPU kernels.
//
// A case is a batch over one random paged-KV pool (pages shuffled, so tables are scattered):
//   decode    one query row per request over its whole KV;
//   prefill   chunks of new_tokens rows per request, causal, their K and V already in the pool;
//   cascade   requests in `groups` groups; every request of group g starts with the group's
//             prefix_tokens tokens on the same physical pages (a multiple of the page size),
//             then its own pages. Solved as FlashInfer's multi-level cascade: the shared-prefix
//             pass (one entry per group, the group's rows) into (out_p, lse_p), the suffix pass
//             (decode from kv_begin = prefix) into (out, lse), then out ← merge(out, out_p).
//             groups = 1 is vLLM's batch-wide cascade. Expected: plain decode over the full KV.
// Values: q, K, V uniform in ±1. The reference reads the pool the kernel reads (bf16 as is; fp16
// widened exactly to fp32). Tolerance: |got − want| ≤ kCaseAbsTolerance + kCaseRelTolerance·|want|.
//
// Cost: O(pool) to build, O(tokens · heads · head_dim) for the reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/cuda/attention_plan.h"
#include "hw/cuda/paged_attention_args.h"
#include "hw/paged_kv.h"

namespace feather::hw::cuda {

inline constexpr double kCaseAbsTolerance = 5e-5;
inline constexpr double kCaseRelTolerance = 1e-4;

enum class AttentionForm : uint8_t { kDecode, kPrefill, kCascade };

struct AttentionCaseShape {
  AttentionForm form = AttentionForm::kDecode;
  KvElement dtype = KvElement::kBf16;
  uint32_t head_dim = 128;
  uint32_t num_heads = 8;
  uint32_t kv_heads = 2;
  uint32_t page_size = 16;
  std::vector<uint32_t> seq_lens;    // per request: tokens in the KV (prefill: context + chunk)
  std::vector<uint32_t> new_tokens;  // prefill: chunk length per request (≤ seq_lens)
  uint32_t prefix_tokens = 0;        // cascade: shared tokens per group (a multiple of page_size)
  uint32_t groups = 1;               // cascade: requests are split into this many groups
  bool split_kv = true;
  uint32_t max_ctas = 132 * 2;  // split-KV budget (an H100's SMs × 2)
  uint64_t seed = 1;

  [[nodiscard]] std::string Name() const;
};

struct AttentionCase {
  AttentionCaseShape shape;
  PagedKvLayout ref_layout;                 // the reference's view of the pool (fp32 or bf16)
  std::vector<uint8_t> k_ref, v_ref;        // pool bytes the reference reads
  std::vector<uint8_t> k_kernel, v_kernel;  // pool bytes in shape.dtype (same values)
  std::vector<uint32_t> kv_indptr, kv_indices, kv_last_page_len;
  std::vector<uint32_t> qo_indptr;  // prefill
  uint32_t num_rows = 0;
  std::vector<float> q;             // [num_rows][num_heads][head_dim]
  std::vector<float> expected_out;  // same shape
  std::vector<float> expected_lse;  // [num_rows][num_heads] (empty for prefill: it has none)
  // Cascade: prefix CSR (one entry per group), the rows of each group, and the suffix start.
  std::vector<uint32_t> prefix_indptr, prefix_indices, prefix_last_page_len;
  std::vector<uint32_t> group_indptr, group_rows, suffix_begin;

  [[nodiscard]] size_t StridePage() const { return ref_layout.StridePage(); }
  [[nodiscard]] size_t StrideHead() const { return ref_layout.StrideHead(); }
};

// Builds a case; throws std::invalid_argument for an inconsistent shape (naming it).
[[nodiscard]] AttentionCase MakeAttentionCase(const AttentionCaseShape& shape);

// The plans that solve it, in order: decode / prefill one; cascade two (prefix pass, suffix
// pass). Throws std::invalid_argument with BuildAttentionPlan's reason.
[[nodiscard]] std::vector<AttentionPlan> PlanAttentionCase(const AttentionCase& c);

// Args of plan `index` over host copies of the case's arrays (the device runner swaps in device
// pointers): outputs out / lse, partial buffers as given.
[[nodiscard]] PagedAttentionArgs CaseArgs(const AttentionCase& c, const AttentionPlan& plan,
                                          size_t index, float* out, float* lse, float* partial_out,
                                          float* partial_lse);

struct CaseOutput {
  std::vector<float> out;
  std::vector<float> lse;
};

// Runs the case through EmulatePagedAttention (and EmulateMergeStates for cascade).
[[nodiscard]] CaseOutput EmulateAttentionCase(const AttentionCase& c);

struct CaseError {
  double max_abs_error = 0;   // over out (and lse where finite)
  double worst_excess = 0;    // max of |err| − tolerance(|want|); ≤ 0 means within tolerance
  std::string first_failure;  // "" or where the first element out of tolerance is
};
[[nodiscard]] CaseError CompareToExpected(const AttentionCase& c, const CaseOutput& got);

// The awkward shapes the self-check and the tests run: page-straddling lengths (1, 15, 16, 17,
// 33), an empty suffix, GQA groups 1, 4 and 8, head dims 64 and 128, every dtype, split on and off.
[[nodiscard]] std::vector<AttentionCaseShape> StandardAttentionCases();

}  // namespace feather::hw::cuda
