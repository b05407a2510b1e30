// Differential tests of the CUDA kernel's algorithm, run on the host
// (hw/cuda/attention_emulation.h) through the plans (hw/cuda/attention_plan.h), against the
// double-precision CPU references (hw/attention_reference.h), over the self-check's standard shapes
// (hw/cuda/attention_cases.h: decode, prefill, batch-wide and multi-level cascade; fp32, bf16, fp16
// KV; head dim 64 and 128; GQA groups 1 to 16; split-KV on and off) and random ones over many
// seeds. Bound: |got − want| ≤ 5e-5 + 1e-4·|want| (kCaseAbsTolerance, kCaseRelTolerance); the fp32
// emulation is ~1e-6 from the reference here.
#include "hw/cuda/attention_emulation.h"

#include <gtest/gtest.h>

#include <string>

#include "base/rng.h"
#include "hw/cuda/attention_cases.h"

namespace feather::hw::cuda {
namespace {

void ExpectMatchesReference(const AttentionCaseShape& shape) {
  const AttentionCase c = MakeAttentionCase(shape);
  const CaseError error = CompareToExpected(c, EmulateAttentionCase(c));
  EXPECT_LE(error.worst_excess, 0.0) << shape.Name() << ": " << error.first_failure
                                     << " (max abs error " << error.max_abs_error << ")";
  EXPECT_LT(error.max_abs_error, 1e-5) << shape.Name();
}

TEST(AttentionEmulationTest, StandardCasesMatchTheCpuReference) {
  for (const AttentionCaseShape& shape : StandardAttentionCases()) ExpectMatchesReference(shape);
}

TEST(AttentionEmulationTest, RandomShapesMatchTheCpuReference) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Rng rng(seed * 7919);
    AttentionCaseShape s;
    s.form = static_cast<AttentionForm>(rng.Uniform(3));
    s.dtype = static_cast<KvElement>(rng.Uniform(3));
    s.head_dim = rng.Uniform(2) ? 64 : 128;
    s.kv_heads = 1 + static_cast<uint32_t>(rng.Uniform(3));
    s.num_heads = s.kv_heads * (1u << rng.Uniform(4));
    s.split_kv = rng.Uniform(3) != 0;
    s.max_ctas = 1 + static_cast<uint32_t>(rng.Uniform(64));
    s.seed = seed;
    const auto batch = 1 + static_cast<uint32_t>(rng.Uniform(5));
    s.prefix_tokens = 16 * (1 + static_cast<uint32_t>(rng.Uniform(3)));
    s.groups = 1 + static_cast<uint32_t>(rng.Uniform(batch));
    for (uint32_t r = 0; r < batch; ++r) {
      const uint32_t floor = s.form == AttentionForm::kCascade ? s.prefix_tokens : 1;
      const auto len = floor + static_cast<uint32_t>(rng.Uniform(120));
      s.seq_lens.push_back(len);
      s.new_tokens.push_back(1 + static_cast<uint32_t>(rng.Uniform(len)));
    }
    ExpectMatchesReference(s);
  }
}

// A wrong merge (dropping the prefix state) must be caught: the comparison can fail.
TEST(AttentionEmulationTest, ComparisonCatchesAWrongAnswer) {
  const AttentionCase c = MakeAttentionCase(StandardAttentionCases().back());
  CaseOutput wrong = EmulateAttentionCase(c);
  wrong.out[5] += 1e-3F;
  const CaseError error = CompareToExpected(c, wrong);
  EXPECT_GT(error.worst_excess, 0.0);
  EXPECT_NE(error.first_failure.find("out[5]"), std::string::npos) << error.first_failure;
}

TEST(AttentionEmulationTest, BadShapeIsNamed) {
  AttentionCaseShape s;
  s.form = AttentionForm::kCascade;
  s.seq_lens = {10, 40};
  s.prefix_tokens = 16;
  EXPECT_THROW((void)MakeAttentionCase(s), std::invalid_argument);
  s.prefix_tokens = 12;
  s.seq_lens = {20, 40};
  try {
    (void)MakeAttentionCase(s);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the page size"), std::string::npos);
  }
}

}  // namespace
}  // namespace feather::hw::cuda
