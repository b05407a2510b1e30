// Tests for hw/layer_loop.h over a recording Backend: the order of the layer operations (the model
// every backend runs), which term each lands in, and that Synchronize brackets every timed
// section, so an asynchronous backend's work is attributed to the section that issued it.
#include "hw/layer_loop.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hw/backend.h"
#include "hw/plan_layout.h"

namespace feather::hw {
namespace {

// Records every call as a short name; Synchronize as "|".
class RecordingBackend final : public Backend {
 public:
  std::vector<std::string> calls;

  void BeginStep(const StepLayout&) override { calls.push_back("begin"); }
  void RmsNorm(Buffer, Weight w, uint32_t, Buffer, uint32_t rows) override {
    calls.push_back("norm" + std::to_string(static_cast<int>(w)) + "x" + std::to_string(rows));
  }
  void Linear(Buffer, Weight w, uint32_t, Buffer, uint32_t rows) override {
    calls.push_back("linear" + std::to_string(static_cast<int>(w)) + "x" + std::to_string(rows));
  }
  void RopeSplitQkv() override { calls.push_back("rope"); }
  void AddInPlace(Buffer, Buffer) override { calls.push_back("add"); }
  void SiluMul() override { calls.push_back("silu"); }
  void AppendKv(uint32_t, uint32_t first, uint32_t count) override {
    calls.push_back("append" + std::to_string(first) + "+" + std::to_string(count));
  }
  void DecodeAttention(uint32_t, bool suffix_only) override {
    calls.push_back(suffix_only ? "suffix" : "decode");
  }
  void CascadePrefix(uint32_t) override { calls.push_back("prefix"); }
  void CascadeMerge() override { calls.push_back("merge"); }
  void PrefillAttention(uint32_t) override { calls.push_back("prefill"); }
  void GatherSampledRows() override { calls.push_back("gather"); }
  void Argmax() override { calls.push_back("argmax"); }
  void Synchronize() override { calls.push_back("|"); }
};

std::string Joined(const std::vector<std::string>& calls) {
  std::string text;
  for (const std::string& call : calls) text += (text.empty() ? "" : " ") + call;
  return text;
}

StepLayout Layout(uint32_t decode, uint32_t prefill, uint32_t rows, uint32_t cascade) {
  StepLayout layout;
  layout.num_decode = decode;
  layout.num_prefill = prefill;
  layout.num_rows = rows;
  layout.sampled_row.assign(decode + prefill, 0);
  layout.cascade_prefix_tokens = cascade;
  return layout;
}

TEST(LayerLoopTest, MixedStepRunsTheModelInOrder) {
  RecordingBackend backend;
  StepTiming timing;
  RunLayerLoop(backend, Layout(2, 1, 7, 0), 1, timing);
  EXPECT_EQ(Joined(backend.calls),
            "begin | norm0x7 linear1x7 rope | | append0+2 decode | | append2+1 prefill | "
            "| linear2x7 add norm3x7 linear4x7 silu linear5x7 add | "
            "| gather norm6x3 linear7x3 argmax |");
  EXPECT_GE(timing.term(StepTerm::kGemm), 0);
  EXPECT_EQ(timing.term(StepTerm::kCascadePrefix), 0);
  EXPECT_EQ(timing.term(StepTerm::kOverhead), 0);
}

TEST(LayerLoopTest, CascadeSplitsPrefixSuffixAndMergeAcrossTerms) {
  RecordingBackend backend;
  StepTiming timing;
  RunLayerLoop(backend, Layout(4, 0, 4, 32), 2, timing);
  const std::string calls = Joined(backend.calls);
  const std::string attention = "| append0+4 | | prefix | | suffix | | merge |";
  const size_t first = calls.find(attention);
  ASSERT_NE(first, std::string::npos) << calls;
  EXPECT_NE(calls.find(attention, first + 1), std::string::npos) << "one per layer: " << calls;
  EXPECT_EQ(calls.find("prefill"), std::string::npos);
}

TEST(LayerLoopTest, OverheadIsTheUnattributedRest) {
  StepTiming timing;
  timing.total_ns = 100;
  timing.term_ns[static_cast<size_t>(StepTerm::kGemm)] = 60;
  timing.term_ns[static_cast<size_t>(StepTerm::kDecodeAttention)] = 30;
  SetOverheadFromTotal(timing);
  EXPECT_EQ(timing.term(StepTerm::kOverhead), 10);
  timing.total_ns = 50;
  SetOverheadFromTotal(timing);
  EXPECT_EQ(timing.term(StepTerm::kOverhead), 0);
}

}  // namespace
}  // namespace feather::hw
