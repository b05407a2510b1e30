// model_engine_test.cc: the step-time cost model — each term hand-computed on a tiny model and a
// profile of round numbers, vLLM's cascade decision, the L2 reuse split, properties on the
// shipped Llama-3-8B / RTX 6000 Ada files (monotonicity, cascade wins, GEMM knee), KV pool
// sizes, and determinism.
#include "sim/engine/model_engine.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine/device_profile.h"
#include "sim/engine/model_config.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"

namespace feather {
namespace {

const std::string kSource = FEATHER_SOURCE_DIR;

// 2 layers, q width 64, kv width 32: linear params/layer = 64·(64+64) + 64·64 + 3·64·128 = 36864;
// LM head 64·1000 = 64000; KV bytes/token = 2·2·2·16·2 = 256; attention FLOPs/pair = 4·4·16·2
// = 512; streamed weights = (2·36864 + 64000)·2 = 275456 bytes.
ModelConfig TinyModel() {
  ModelConfig m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.intermediate = 128;
  m.vocab = 1000;
  m.dtype_bytes = 2;
  m.tied_embeddings = true;
  return m;
}

// 1 byte/ns of DRAM, 10 FLOP/ns, 4 bytes/ns of L2, every efficiency 1.
DeviceProfile RoundProfile() {
  DeviceProfile p;
  p.name = "round";
  p.memory_bytes = 1e9;
  p.activation_reserve_bytes = 0;
  p.dram_bw_bytes_per_s = 1e9;
  p.dense_flops_per_s = 1e10;
  p.sm_count = 8;
  p.gemm_bw_efficiency = 1;
  p.gemm_flops_efficiency = 1;
  p.attn_bw_efficiency = 1;
  p.attn_flops_efficiency = 1;
  p.l2_bw_bytes_per_s = 4e9;
  p.reuse_hit_max = 0.5;
  p.reuse_window_ctas = 4;  // 2 requests of 2 KV heads
  p.cascade_layer_ns = 100;
  p.cascade_merge_ns_per_request_layer = 10;
  p.step_fixed_ns = 1000;
  p.layer_fixed_ns = 50;
  p.per_request_ns = 20;
  return p;
}

// A plan over `requests`, with the aggregates the serving loop would fill.
struct PlanBuilder {
  std::vector<StepRequest> requests;
  BatchPlan plan;

  PlanBuilder& Decode(uint32_t context, uint32_t count = 1) {
    for (uint32_t i = 0; i < count; ++i) {
      requests.push_back({static_cast<RequestId>(requests.size()), context, 1, false, {}});
      ++plan.decode_requests;
      plan.decode_kv_tokens += context + 1;
    }
    return *this;
  }
  PlanBuilder& Prefill(uint32_t context, uint32_t new_tokens) {
    requests.push_back({static_cast<RequestId>(requests.size()), context, new_tokens, true, {}});
    plan.prefill_tokens += new_tokens;
    return *this;
  }
  PlanBuilder& Unique(uint64_t tokens) {
    plan.decode_kv_unique_tokens = tokens;
    return *this;
  }
  PlanBuilder& CommonPrefix(uint32_t tokens) {
    plan.common_prefix_tokens = tokens;
    return *this;
  }
  BatchPlan Build() {
    if (plan.decode_kv_unique_tokens == 0) plan.decode_kv_unique_tokens = plan.decode_kv_tokens;
    plan.requests = requests;
    return plan;
  }
};

int64_t Term(const StepTiming& t, StepTerm term) { return t.term(term); }

void ExpectTotalIsSumOfTerms(const StepTiming& t) {
  int64_t sum = 0;
  for (int64_t ns : t.term_ns) sum += ns;
  EXPECT_EQ(t.total_ns, sum);
}

// --- Each term by hand ------------------------------------------------------------------------

TEST(ModelEngine, SingleDecodeStepByHand) {
  ModelEngine engine(RoundProfile(), TinyModel());
  PlanBuilder b;
  const StepTiming t = engine.Execute(b.Decode(99).Build());
  // GEMM: max(275456 B / 1 B/ns, (147456 + 128000 FLOP) / 10 FLOP/ns) = 275456.
  EXPECT_EQ(Term(t, StepTerm::kGemm), 275456);
  // Decode: (100 reads + 1 write) tokens · 256 B / 1 B/ns.
  EXPECT_EQ(Term(t, StepTerm::kDecodeAttention), 25856);
  EXPECT_EQ(Term(t, StepTerm::kKvReuse), 0);
  EXPECT_EQ(Term(t, StepTerm::kCascadePrefix), 0);
  EXPECT_EQ(Term(t, StepTerm::kPrefillAttention), 0);
  // Overhead: 1000 + 2 layers · 50 + 1 request · 20.
  EXPECT_EQ(Term(t, StepTerm::kOverhead), 1120);
  EXPECT_EQ(t.total_ns, 275456 + 25856 + 1120);
  EXPECT_FALSE(t.cascade_used);
  EXPECT_EQ(engine.Name(), "model");
}

// A measured weight-stream bandwidth prices the weights, and only them: the KV reads stay at DRAM.
TEST(ModelEngine, WeightStreamBandwidthPricesTheWeightsAlone) {
  DeviceProfile p = RoundProfile();
  p.weight_stream_bw_bytes_per_s = 2e9;
  p.gemm_bw_efficiency = 0.5;
  PlanBuilder b;  // owns the requests the plan points at
  const BatchPlan plan = b.Decode(99).Build();
  const StepTiming t = ModelEngine(p, TinyModel()).Execute(plan);
  // GEMM: 275456 B / (2 B/ns · 0.5), as at 1 B/ns of DRAM and efficiency 1.
  EXPECT_EQ(Term(t, StepTerm::kGemm), 275456);
  EXPECT_EQ(Term(t, StepTerm::kDecodeAttention), 25856);
  p.gemm_bw_efficiency = 1;
  const StepTiming f = ModelEngine(p, TinyModel()).Execute(plan);
  EXPECT_EQ(Term(f, StepTerm::kGemm), 275456 / 2);
  EXPECT_EQ(Term(f, StepTerm::kDecodeAttention), 25856);
}

TEST(ModelEngine, GemmIsComputeBoundPastTheKnee) {
  ModelEngine engine(RoundProfile(), TinyModel());
  PlanBuilder b;
  const StepTiming t = engine.Execute(b.Decode(15, 100).Build());
  // 100 tokens · (14745.6 linear + 12800 LM head) ns.
  EXPECT_EQ(Term(t, StepTerm::kGemm), 2754560);
  ExpectTotalIsSumOfTerms(t);
}

TEST(ModelEngine, SharedBlocksWithoutCascadeAreServedPartlyByL2) {
  ModelEngine engine(RoundProfile(), TinyModel());
  PlanBuilder b;
  // 4 requests read the same 100 tokens: T = 400, U = 100, c = 4. Window W = 4 CTAs / 2 KV
  // heads = 2 requests, w = 2 windows: h = 2·(1 − 0.5⁴) = 1.875 DRAM reads per token;
  // L2 tokens = 0.5 · 100 · (4 − 1.875) = 106.25; DRAM tokens = 293.75.
  const StepTiming t = engine.Execute(b.Decode(99, 4).Unique(100).Build());
  EXPECT_EQ(Term(t, StepTerm::kDecodeAttention), 76224);  // (293.75 + 4 writes) · 256
  // Every read passes L2: 400 · 256 / 4 = 25600 ns, less than DRAM's: DRAM binds.
  EXPECT_EQ(Term(t, StepTerm::kKvReuse), 0);
  EXPECT_FALSE(t.cascade_used);  // 4 < 8 requests
  ExpectTotalIsSumOfTerms(t);
}

TEST(ModelEngine, WellSharedReadsAreBoundByL2NotByDram) {
  DeviceProfile profile = RoundProfile();
  profile.reuse_hit_max = 1;
  profile.reuse_window_ctas = 16;  // 8 requests: one window
  ModelEngine engine(profile, TinyModel());
  PlanBuilder b;
  // 8 requests read the same 100 tokens (T = 800, U = 100, one window): DRAM reads each token
  // once, (100 + 8 writes) · 256 = 27648 ns; L2 serves all 800 reads, 800 · 256 / 4 = 51200 ns.
  const StepTiming t = engine.Execute(b.Decode(99, 8).Unique(100).Build());
  ASSERT_FALSE(t.cascade_used);  // 100 < 256 shared tokens
  EXPECT_EQ(Term(t, StepTerm::kDecodeAttention), 27648);
  EXPECT_EQ(Term(t, StepTerm::kKvReuse), 51200 - 27648);  // the reads take max(DRAM, L2)
  ExpectTotalIsSumOfTerms(t);
}

TEST(StepPricer, DecodeReadsTakeTheLargerOfDramAndL2OnRandomShapes) {
  DeviceProfile profile = RoundProfile();
  profile.decode_cta_fixed_ns = 3;
  const ModelConfig model = TinyModel();
  const StepPricer pricer(profile, model);
  const double kv = static_cast<double>(model.KvBytesPerToken());
  uint64_t state = 99;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / static_cast<double>(1ULL << 53);
  };
  for (int i = 0; i < 2000; ++i) {
    StepShape s;
    s.requests = s.decode_requests = s.new_tokens = s.sampled_tokens = 1 + std::floor(next() * 64);
    s.decode_kv_tokens = s.decode_requests * (1 + std::floor(next() * 4000));
    s.decode_kv_unique_tokens = std::max(1.0, std::floor(s.decode_kv_tokens * next()));
    const KvReadSplit split =
        SplitKvReads(s.decode_kv_tokens, s.decode_kv_unique_tokens, s.decode_requests,
                     profile.reuse_window_ctas / model.kv_heads, profile.reuse_hit_max);
    const double dram = (split.dram_tokens + s.decode_requests) * kv;  // 1 byte/ns
    const double l2 = s.decode_kv_tokens * kv / 4;                     // 4 bytes/ns
    const double fixed = s.decode_requests * model.kv_heads * model.layers * 3;
    const auto t = pricer.Terms(s);
    const double reads = t[static_cast<size_t>(StepTerm::kDecodeAttention)] +
                         t[static_cast<size_t>(StepTerm::kKvReuse)];
    EXPECT_NEAR(reads, std::max(dram, l2) + fixed, 1e-6 * reads);
    EXPECT_GE(t[static_cast<size_t>(StepTerm::kKvReuse)], 0);
  }
}

TEST(ModelEngine, DecodeCtaFixedCostIsPerRequestKvHeadAndLayer) {
  DeviceProfile profile = RoundProfile();
  const StepTiming without = ModelEngine(profile, TinyModel()).Execute(PlanBuilder().Decode(99, 3).Build());
  profile.decode_cta_fixed_ns = 7;
  const StepTiming with = ModelEngine(profile, TinyModel()).Execute(PlanBuilder().Decode(99, 3).Build());
  // 3 requests · 2 KV heads · 2 layers · 7 ns.
  EXPECT_EQ(Term(with, StepTerm::kDecodeAttention) - Term(without, StepTerm::kDecodeAttention),
            3 * 2 * 2 * 7);
  EXPECT_EQ(Term(with, StepTerm::kGemm), Term(without, StepTerm::kGemm));
}

TEST(ModelEngine, GemmSoftMaximumByHand) {
  DeviceProfile profile = RoundProfile();
  profile.gemm_roofline_exponent = 1;  // the sum of the weight stream and the compute
  PlanBuilder b;
  const StepTiming t = ModelEngine(profile, TinyModel()).Execute(b.Decode(99).Build());
  // 275456 ns of weights + (147456 + 128000) FLOP / 10 = 27545.6 ns of compute.
  EXPECT_EQ(Term(t, StepTerm::kGemm), 303002);
}

// The skinny kernel's line replaces the roofline (and its repacking cost) from 2 to
// gemm_skinny_max_tokens tokens; one token and steps above the limit keep the roofline.
TEST(ModelEngine, SkinnyStepsCostTheWeightStreamPlusALineByHand) {
  DeviceProfile profile = RoundProfile();
  profile.gemm_batched_fixed_ns = 500000;
  ModelEngine roofline(profile, TinyModel());
  profile.gemm_skinny_max_tokens = 8;
  profile.gemm_skinny_fixed_ns = 1000;
  profile.gemm_skinny_ns_per_token = 300;
  ModelEngine skinny(profile, TinyModel());
  for (const uint32_t batch : {1u, 2u, 5u, 8u, 9u, 100u}) {
    SCOPED_TRACE(batch);
    PlanBuilder builder;  // the plan's spans point into it
    const BatchPlan plan = builder.Decode(15, batch).Build();
    const int64_t gemm = Term(skinny.Execute(plan), StepTerm::kGemm);
    if (batch >= 2 && batch <= 8) {
      // 275456 ns of weights + 1000 + batch · 300.
      EXPECT_EQ(gemm, 275456 + 1000 + 300 * int64_t{batch});
      EXPECT_TRUE(GemmRunsSkinny(profile, batch));
      EXPECT_FALSE(GemmRepacks(profile, batch));
    } else {
      EXPECT_EQ(gemm, Term(roofline.Execute(plan), StepTerm::kGemm));
      EXPECT_FALSE(GemmRunsSkinny(profile, batch));
      EXPECT_EQ(GemmRepacks(profile, batch), batch >= 2);
    }
  }
  // 9 tokens repack: max(275456, 9 · 27545.6 + 500000).
  PlanBuilder nine;
  EXPECT_EQ(Term(skinny.Execute(nine.Decode(15, 9).Build()), StepTerm::kGemm), 747910);
}

TEST(SoftMax, LiesBetweenTheMaxAndTheSumAndFallsWithTheExponent) {
  EXPECT_DOUBLE_EQ(SoftMax(3, 4, 0), 4);    // 0: the hard max
  EXPECT_DOUBLE_EQ(SoftMax(3, 4, 1), 7);    // 1: the sum
  EXPECT_DOUBLE_EQ(SoftMax(3, 4, 2), 5);    // the Euclidean norm
  EXPECT_DOUBLE_EQ(SoftMax(3, 4, 0.5), 7);  // below 1 read as 1
  EXPECT_DOUBLE_EQ(SoftMax(0, 0, 2), 0);
  EXPECT_DOUBLE_EQ(SoftMax(0, 5, 1.5), 5);
  // Property: for random pairs, max <= SoftMax(k) <= sum, and it does not grow with k.
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / static_cast<double>(1ULL << 53);
  };
  for (int i = 0; i < 1000; ++i) {
    const double a = next() * 1e6, b = next() * 1e6;
    double previous = a + b;
    for (const double k : {1.0, 1.1, 1.5, 2.0, 4.0, 16.0, 64.0}) {
      const double v = SoftMax(a, b, k);
      EXPECT_GE(v, std::max(a, b) * (1 - 1e-12));
      EXPECT_LE(v, previous * (1 + 1e-12));
      previous = v;
    }
  }
}

TEST(ModelEngine, CascadeStepByHand) {
  ModelEngine engine(RoundProfile(), TinyModel());
  PlanBuilder b;
  // 8 requests of 300 cached tokens sharing 288 (18 blocks), 12 own tokens each (+1 new).
  const StepTiming t =
      engine.Execute(b.Decode(300, 8).Unique(288 + 8 * 13).CommonPrefix(288).Build());
  ASSERT_TRUE(t.cascade_used);
  // Prefix pass: max(288 · 256 B, 8 · 288 · 512 FLOP / 10) = 117964.8; + 2 · 100 + 8 · 2 · 10.
  EXPECT_EQ(Term(t, StepTerm::kCascadePrefix), 118325);
  // Suffix: T = 2408 − 8·288 = 104, U = 392 − 288 = 104 → all DRAM, + 8 writes.
  EXPECT_EQ(Term(t, StepTerm::kDecodeAttention), (104 + 8) * 256);
  EXPECT_EQ(Term(t, StepTerm::kKvReuse), 0);
  EXPECT_EQ(Term(t, StepTerm::kGemm), 275456);
  EXPECT_EQ(Term(t, StepTerm::kOverhead), 1000 + 100 + 8 * 20);
  ExpectTotalIsSumOfTerms(t);
}

TEST(ModelEngine, CascadePrefixIsClampedToTheShortestContextAndToWholeBlocks) {
  ModelEngine engine(RoundProfile(), TinyModel());
  PlanBuilder b;
  // The serving loop says 400 common tokens, but one request has only 270 cached: vLLM uses
  // min(400, 270) rounded down to 16 → 256, still ≥ 256.
  b.Decode(300, 7).Decode(270);
  const StepTiming t = engine.Execute(b.Unique(300 + 7 * 1 + 1).CommonPrefix(400).Build());
  ASSERT_TRUE(t.cascade_used);
  // max(256 · 256, 8 · 256 · 512 / 10) + 200 + 160.
  EXPECT_EQ(Term(t, StepTerm::kCascadePrefix), std::llround(8 * 256 * 512 / 10.0) + 360);
  PlanBuilder short_context;
  short_context.Decode(300, 7).Decode(250);  // 250 → 240 < 256: no cascade
  EXPECT_FALSE(engine.Execute(short_context.CommonPrefix(400).Build()).cascade_used);
}

TEST(ModelEngine, PrefillChunkByHand) {
  ModelEngine engine(RoundProfile(), TinyModel());
  PlanBuilder b;
  const StepTiming t = engine.Execute(b.Prefill(32, 64).Build());
  // GEMM: 64 · 14745.6 + 1 · 12800 = 956518.4.
  EXPECT_EQ(Term(t, StepTerm::kGemm), 956518);
  // Attention: max((32 + 2·64) · 256 B, 64 · (32 + 32.5) · 512 FLOP / 10) = 211353.6.
  EXPECT_EQ(Term(t, StepTerm::kPrefillAttention), 211354);
  EXPECT_EQ(Term(t, StepTerm::kDecodeAttention), 0);
  EXPECT_EQ(Term(t, StepTerm::kOverhead), 1120);
  ExpectTotalIsSumOfTerms(t);
}

// decode_layer_fixed_ns is paid once per layer by a step with decode requests, whatever their
// number, and not by a prefill-only step.
TEST(ModelEngine, DecodeLayerFixedCostIsPerLayerOfAStepWithDecode) {
  DeviceProfile profile = RoundProfile();
  PlanBuilder one, five, prefill;
  const BatchPlan one_plan = one.Decode(99).Build();
  const BatchPlan five_plan = five.Decode(99, 5).Build();
  const BatchPlan prefill_plan = prefill.Prefill(0, 16).Build();
  ModelEngine without(profile, TinyModel());
  const StepTiming one_without = without.Execute(one_plan);
  const StepTiming five_without = without.Execute(five_plan);
  profile.decode_layer_fixed_ns = 300;
  ModelEngine with(profile, TinyModel());
  // 2 layers · 300 ns, for 1 request or 5.
  EXPECT_EQ(Term(with.Execute(one_plan), StepTerm::kDecodeAttention) -
                Term(one_without, StepTerm::kDecodeAttention),
            600);
  EXPECT_EQ(Term(with.Execute(five_plan), StepTerm::kDecodeAttention) -
                Term(five_without, StepTerm::kDecodeAttention),
            600);
  EXPECT_EQ(Term(with.Execute(prefill_plan), StepTerm::kDecodeAttention), 0);
  ExpectTotalIsSumOfTerms(with.Execute(five_plan));
}

// prefill_query_fixed_ns is paid per prefill query token, query head and layer, on top of the
// max, and never by the decode requests of the same step.
TEST(ModelEngine, PrefillQueryFixedCostIsPerPrefillTokenHeadAndLayer) {
  DeviceProfile profile = RoundProfile();
  PlanBuilder b;  // owns the requests the plan points at
  const BatchPlan plan = b.Decode(99, 3).Prefill(32, 64).Prefill(0, 5).Build();
  const StepTiming without = ModelEngine(profile, TinyModel()).Execute(plan);
  profile.prefill_query_fixed_ns = 7;
  const StepTiming with = ModelEngine(profile, TinyModel()).Execute(plan);
  // (64 + 5) prefill tokens · 4 heads · 2 layers · 7 ns = 3864; the 3 decode tokens pay nothing.
  EXPECT_EQ(Term(with, StepTerm::kPrefillAttention) - Term(without, StepTerm::kPrefillAttention),
            3864);
  for (const StepTerm term : {StepTerm::kGemm, StepTerm::kDecodeAttention, StepTerm::kOverhead}) {
    EXPECT_EQ(Term(with, term), Term(without, term));
  }
  ExpectTotalIsSumOfTerms(with);
  // A decode-only step has no prefill term with or without it.
  PlanBuilder decode;
  EXPECT_EQ(Term(ModelEngine(profile, TinyModel()).Execute(decode.Decode(99, 3).Build()),
                 StepTerm::kPrefillAttention),
            0);
}

// The fit differentiates Terms: the fractions Price rounds away must be there, and Price must be
// Terms rounded term by term.
TEST(StepPricer, TermsAreUnroundedAndPriceRoundsThem) {
  const ModelConfig model = TinyModel();
  PlanBuilder b;
  const StepShape shape = ShapeStep(b.Prefill(32, 64).Build(), model, true, 8);
  const StepPricer pricer(RoundProfile(), model);
  const std::array<double, kNumStepTerms> terms = pricer.Terms(shape);
  EXPECT_NEAR(terms[static_cast<size_t>(StepTerm::kGemm)], 956518.4, 1e-6);
  EXPECT_NEAR(terms[static_cast<size_t>(StepTerm::kPrefillAttention)], 211353.6, 1e-6);
  const StepTiming timing = pricer.Price(shape);
  for (size_t term = 0; term < kNumStepTerms; ++term) {
    EXPECT_EQ(timing.term_ns[term], std::llround(terms[term])) << term;
  }
  ExpectTotalIsSumOfTerms(timing);
  // A relative step of 1e-9 in the FLOP rate moves the prefill term by 2e-4 ns: visible to the
  // fit in Terms, invisible after rounding.
  DeviceProfile nudged = RoundProfile();
  nudged.dense_flops_per_s *= 1 - 1e-9;
  const StepPricer nudged_pricer(nudged, model);
  EXPECT_GT(nudged_pricer.Terms(shape)[static_cast<size_t>(StepTerm::kPrefillAttention)],
            terms[static_cast<size_t>(StepTerm::kPrefillAttention)]);
  EXPECT_EQ(nudged_pricer.Price(shape).term_ns, timing.term_ns);
  EXPECT_EQ(pricer.Terms(StepShape{}), (std::array<double, kNumStepTerms>{}));
}

TEST(ModelEngine, EmptyPlanCostsNothing) {
  ModelEngine engine(RoundProfile(), TinyModel());
  const StepTiming t = engine.Execute(BatchPlan{});
  EXPECT_EQ(t.total_ns, 0);
}

// --- vLLM's cascade decision and the L2 split ---------------------------------------------------

TEST(VllmUsesCascade, FollowsTheCtaWaveHeuristic) {
  // Llama-3-8B on 142 SMs, 5000-token prefix (40 tiles): cascade takes 1 wave · 40 tiles;
  // flash-decoding takes ceil(R · 8 · 40 / 142) waves.
  EXPECT_FALSE(VllmUsesCascade(5000, 17, true, 32, 8, 142));  // 39 < 40
  EXPECT_TRUE(VllmUsesCascade(5000, 18, true, 32, 8, 142));   // 41 > 40
  EXPECT_TRUE(VllmUsesCascade(5000, 100, true, 32, 8, 142));
  // Thresholds.
  EXPECT_FALSE(VllmUsesCascade(255, 100, true, 32, 8, 142));
  EXPECT_FALSE(VllmUsesCascade(5000, 7, false, 40, 40, 142));
  // No GQA (LongChat) or a multi-token query: flash-decoding is off, so cascade always.
  EXPECT_TRUE(VllmUsesCascade(256, 8, true, 40, 40, 142));
  EXPECT_TRUE(VllmUsesCascade(256, 8, false, 32, 8, 142));
}

TEST(SplitKvReads, LimitsAndMonotonicity) {
  // Nothing shared, or one request: everything from DRAM.
  KvReadSplit s = SplitKvReads(1000, 1000, 10, 2, 0.9);
  EXPECT_DOUBLE_EQ(s.dram_tokens, 1000);
  EXPECT_DOUBLE_EQ(s.l2_tokens, 0);
  s = SplitKvReads(1000, 100, 1, 2, 0.9);
  EXPECT_DOUBLE_EQ(s.dram_tokens, 1000);
  // One window: each token once from DRAM, the other reads hit at hit_max.
  s = SplitKvReads(1000, 100, 10, 50, 1.0);
  EXPECT_DOUBLE_EQ(s.dram_tokens, 100);
  EXPECT_DOUBLE_EQ(s.l2_tokens, 900);
  // More sharing (fewer unique tokens for the same reads) never adds DRAM traffic.
  double previous = 1e18;
  for (double unique = 10000; unique >= 100; unique /= 2) {
    s = SplitKvReads(10000, unique, 100, 10, 0.9);
    EXPECT_LE(s.dram_tokens, previous + 1e-9);
    EXPECT_NEAR(s.dram_tokens + s.l2_tokens, 10000, 1e-6);
    previous = s.dram_tokens;
  }
}

// --- Properties on the shipped files ----------------------------------------------------------

class Llama3OnAda : public ::testing::Test {
 protected:
  Llama3OnAda()
      : profile_(LoadDeviceProfile(kSource + "/results/profiles/rtx6000-ada.yaml")),
        model_(LoadModelConfig(kSource + "/scenarios/models/llama-3-8b.yaml")),
        engine_(profile_, model_) {}

  DeviceProfile profile_;
  ModelConfig model_;
  ModelEngine engine_;
};

TEST_F(Llama3OnAda, MoreDecodeKvIsNeverFaster) {
  int64_t previous = 0;
  for (uint32_t context = 0; context <= 20000; context += 1000) {
    PlanBuilder b;
    const StepTiming t = engine_.Execute(b.Decode(context, 64).Build());
    EXPECT_GE(t.total_ns, previous) << context;
    previous = t.total_ns;
  }
  // The same with sharing: more shared tokens read by everyone, still never faster.
  previous = 0;
  for (uint32_t shared = 0; shared <= 8000; shared += 500) {
    PlanBuilder b;
    const StepTiming t =
        engine_.Execute(b.Decode(shared + 100, 64).Unique(shared + 64 * 101).Build());
    EXPECT_GE(t.total_ns, previous) << shared;
    previous = t.total_ns;
  }
}

TEST_F(Llama3OnAda, HomogeneousBatchUsesCascadeAndBeatsTheSameBatchWithoutIt) {
  PlanBuilder with_prefix;
  with_prefix.Decode(5100, 64).Unique(5000 + 64 * 101).CommonPrefix(5000);
  const StepTiming cascade = engine_.Execute(with_prefix.Build());
  PlanBuilder without;
  without.Decode(5100, 64).Unique(5000 + 64 * 101).CommonPrefix(0);
  const StepTiming plain = engine_.Execute(without.Build());
  EXPECT_TRUE(cascade.cascade_used);
  EXPECT_FALSE(plain.cascade_used);
  EXPECT_LT(cascade.total_ns, plain.total_ns);
  EXPECT_GT(cascade.term(StepTerm::kCascadePrefix), 0);
  EXPECT_GT(plain.term(StepTerm::kKvReuse), 0);  // the plain batch still reuses through L2
  // With cascade disabled (vLLM --disable-cascade-attn) the same plan prices as plain.
  ModelEngine no_cascade(profile_, model_, ModelEngineOptions{false});
  const StepTiming disabled = no_cascade.Execute(with_prefix.Build());
  EXPECT_FALSE(disabled.cascade_used);
  EXPECT_EQ(disabled.total_ns, plain.total_ns);
}

TEST_F(Llama3OnAda, GemmStartsAtTheWeightStreamAndRisesThroughASoftKnee) {
  auto gemm = [this](uint32_t batch) {
    PlanBuilder b;
    return engine_.Execute(b.Decode(100, batch).Build()).term(StepTerm::kGemm);
  };
  // One token: the weight stream, 15.0 GB at 0.77 · 960 GB/s ≈ 20.3 ms (the compute side is
  // ~1e-4 of it, invisible through the soft maximum).
  const int64_t one = gemm(1);
  EXPECT_NEAR(static_cast<double>(one) * 1e-6, 20.3, 0.1);
  int64_t previous = one;
  for (uint32_t batch : {2u, 8u, 32u, 64u, 128u, 512u, 1024u, 2048u}) {
    EXPECT_GE(gemm(batch), previous) << batch;  // never falls with more tokens
    previous = gemm(batch);
  }
  EXPECT_GT(gemm(2048), 2 * one);  // compute-bound far past the knee
}

TEST_F(Llama3OnAda, ExecuteIsDeterministic) {
  PlanBuilder b;
  b.Decode(5100, 40).Unique(5000 + 40 * 101).CommonPrefix(5000).Prefill(128, 512);
  const BatchPlan plan = b.Build();
  const StepTiming first = engine_.Execute(plan);
  ModelEngine other(profile_, model_);
  for (int i = 0; i < 100; ++i) {
    const StepTiming again = (i % 2 == 0 ? engine_ : other).Execute(plan);
    EXPECT_EQ(again.total_ns, first.total_ns);
    EXPECT_EQ(again.term_ns, first.term_ns);
    EXPECT_EQ(again.cascade_used, first.cascade_used);
  }
  ExpectTotalIsSumOfTerms(first);
}

// --- KV pool size -----------------------------------------------------------------------------

TEST(KvCacheBlocks, Llama3_8BOnBothGpus) {
  const ModelConfig llama = LoadModelConfig(kSource + "/scenarios/models/llama-3-8b.yaml");
  const DeviceProfile ada = LoadDeviceProfile(kSource + "/results/profiles/rtx6000-ada.yaml");
  const DeviceProfile h100 = LoadDeviceProfile(kSource + "/results/profiles/h100-sxm.yaml");
  // Ada: 48 GiB · 0.9 − 14.96 GiB weights − 2 GiB = 26.24 GiB; / 2 MiB blocks.
  const uint64_t ada_blocks = KvCacheBlocks(ada, llama, 16, 0.9);
  const double expected_ada = std::floor(
      (48.0 * (1 << 30) * 0.9 - 8'030'261'248.0 * 2 - 2.0 * (1 << 30)) / (16.0 * 131072));
  EXPECT_EQ(ada_blocks, static_cast<uint64_t>(expected_ada));
  EXPECT_GT(ada_blocks * 16, 200'000u);  // ~215K tokens: ~21 prefixes of 10K
  EXPECT_LT(ada_blocks * 16, 230'000u);
  const uint64_t h100_blocks = KvCacheBlocks(h100, llama, 16, 0.9);
  EXPECT_GT(h100_blocks * 16, 430'000u);  // 80 GiB: ~450K tokens
  EXPECT_LT(h100_blocks * 16, 470'000u);
  EXPECT_GT(KvCacheBlocks(ada, llama, 16, 0.95), ada_blocks);
  EXPECT_EQ(KvCacheBlocks(ada, llama, 32, 0.9), ada_blocks / 2);
}

TEST(KvCacheBlocks, ModelThatDoesNotFitIsAnError) {
  const ModelConfig longchat = LoadModelConfig(kSource + "/scenarios/models/longchat-13b.yaml");
  const DeviceProfile ada = LoadDeviceProfile(kSource + "/results/profiles/rtx6000-ada.yaml");
  EXPECT_GT(KvCacheBlocks(ada, longchat, 16, 0.9), 0u);
  try {
    (void)KvCacheBlocks(ada, longchat, 16, 0.5);  // 24 GiB < 24.3 GiB of weights
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("longchat-13b"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)KvCacheBlocks(ada, longchat, 0, 0.9), std::invalid_argument);
  EXPECT_THROW((void)KvCacheBlocks(ada, longchat, 16, 1.5), std::invalid_argument);
}

}  // namespace
}  // namespace feather
