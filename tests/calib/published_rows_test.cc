// published_rows_test.cc: the readers of published rows (calib/published_rows.h) on small
// fixtures (golden values), the decode restatement against the cost model (differential), the
// committed data files, bad files named by line and column, and the refit on Vidur's H100
// Llama-2-7B TP1 GEMM rows with its hold-out error.
#include "calib/published_rows.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "base/input_error.h"
#include "base/input_text.h"
#include "calib/fit.h"
#include "sim/engine/device_profile.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/model_config_yaml.h"

namespace feather::calib {
namespace {

using ::testing::HasSubstr;
const std::string kSource = FEATHER_SOURCE_DIR;

std::string VidurHeader() {
  std::string h;
  for (const char* op : {"emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                         "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj",
                         "add"}) {
    for (const char* stat : {"min", "max", "mean", "median", "std"}) {
      h += std::string("time_stats.") + op + "." + stat + ",";
    }
  }
  return h + "n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,"
             "num_tensor_parallel_workers\n";
}

// One Vidur row: every statistic of op k is `ms[k]` (only the median is read).
std::string VidurRow(const std::array<double, 10>& ms, const std::string& dims) {
  std::string row;
  for (const double v : ms) {
    for (int s = 0; s < 5; ++s) row += std::to_string(v) + ",";
  }
  return row + dims + "\n";
}

TEST(PublishedRowsTest, VidurRowsPinTheGemmTermOfTheShard) {
  // emb, ln, qkv, rope, o, ln2, up, act, down, add (ms)
  const std::string text =
      VidurHeader() +
      VidurRow({0.1, 0.01, 0.5, 0.02, 0.2, 0.01, 1.0, 0.1, 0.4, 0.03},
               "32,32,4096,11008,32768,True,4096,1") +
      VidurRow({0.1, 0.01, 0.25, 0.02, 0.1, 0.01, 0.5, 0.1, 0.2, 0.03},
               "64,8,8192,28672,32768,True,16,8");
  const std::vector<PublishedTermRow> rows = ParseVidurMlpCsv(text, "mlp.csv", "h100");
  ASSERT_EQ(rows.size(), 2u);
  const PublishedTermRow& r = rows[0];
  EXPECT_EQ(r.device, "h100");
  EXPECT_EQ(r.tensor_parallel, 1u);
  EXPECT_EQ(r.citation, "mlp.csv:2");
  EXPECT_EQ(r.step.measured.term(StepTerm::kGemm), 2'100'000);  // 0.5 + 0.2 + 1.0 + 0.4 ms
  EXPECT_EQ(r.step.measured.total_ns, 0);
  EXPECT_EQ(r.step.measured.term(StepTerm::kOverhead), 0);
  EXPECT_EQ(r.step.shape.new_tokens, 4096);
  EXPECT_EQ(r.step.shape.sampled_tokens, 0);
  EXPECT_THAT(r.label, HasSubstr("0.27 ms left out"));  // 0.1 + 0.01 + 0.02 + 0.01 + 0.1 + 0.03
  EXPECT_EQ(r.model.layers, 1u);
  EXPECT_EQ(r.model.vocab, 0u);
  EXPECT_EQ(r.model.head_dim, 128u);
  // One Llama-2-7B layer: QKV 3·4096², O 4096², gated MLP 3·4096·11008.
  EXPECT_EQ(r.model.LayerLinearParams(), 4ull * 4096 * 4096 + 3ull * 4096 * 11008);
  EXPECT_EQ(r.model.StepWeightBytes(), 2 * r.model.LayerLinearParams());
  // TP 8 of a 70B-like layer: heads 64/8, kv 8/8, intermediate 28672/8.
  const ModelConfig& s = rows[1].model;
  EXPECT_EQ(rows[1].tensor_parallel, 8u);
  EXPECT_EQ(s.heads, 8u);
  EXPECT_EQ(s.kv_heads, 1u);
  EXPECT_EQ(s.intermediate, 3584u);
  EXPECT_EQ(s.hidden, 8192u);
  EXPECT_EQ(rows[1].step.measured.term(StepTerm::kGemm), 1'050'000);
}

TEST(PublishedRowsTest, DecodePointsGiveTheKernelTimeAndRestateExactly) {
  const std::string text =
      "# feather published-decode-attention v1\n"
      "# a comment\n"
      "id,device,kernel,kv_heads,head_dim,dtype_bytes,batch,context_tokens,time_us,"
      "achieved_bytes_per_s,source\n"
      "bw,h100-sxm,k,8,128,2,64,512,,2e12,README:18\n"
      "t,h100-sxm,k,32,128,2,16,4000,567,,README:20\n";
  EXPECT_EQ(DetectRowsFileKind(text, "p.csv"), RowsFileKind::kDecodePoints);
  const std::vector<PublishedTermRow> rows = ParseDecodePointsCsv(text, "p.csv");
  ASSERT_EQ(rows.size(), 2u);
  // 64 · 512 tokens · 4096 B = 134,217,728 B at 2e12 B/s = 67,108.864 ns.
  EXPECT_EQ(rows[0].step.measured.term(StepTerm::kDecodeAttention), 67'109);
  EXPECT_EQ(rows[1].step.measured.term(StepTerm::kDecodeAttention), 567'000);
  EXPECT_EQ(rows[0].citation, "p.csv:4 (README:18)");
  EXPECT_EQ(rows[0].model.KvBytesPerToken(), 4096u);

  // Differential: the decode term priced on the restated shape is the same for any fit model
  // (it depends on KV bytes only), and equals the source's bytes through the profile's rate.
  DeviceProfile profile;
  profile.dram_bw_bytes_per_s = 3.35e12;
  profile.attn_bw_efficiency = 0.7;
  profile.l2_bw_bytes_per_s = 1e13;
  profile.reuse_window_ctas = 8;
  profile.dense_flops_per_s = 1e15;
  profile.gemm_bw_efficiency = profile.gemm_flops_efficiency = 1;
  profile.attn_flops_efficiency = 1;
  profile.decode_cta_fixed_ns = 5;
  const ModelConfig llama = ParseModelConfig(
      ReadTextFile(kSource + "/scenarios/models/llama-3-8b.yaml", "model"), "llama-3-8b.yaml");
  for (const PublishedTermRow& row : rows) {
    const double source_bytes =
        (row.step.shape.decode_kv_tokens + row.step.shape.decode_requests) *
        static_cast<double>(row.model.KvBytesPerToken());
    // + the per-CTA fixed cost: the restatement keeps sequences · KV heads · layers (the head
    // width and dtype of both models match).
    const double expected = source_bytes * 1e9 / (3.35e12 * 0.7) +
                            row.step.shape.decode_requests * row.model.kv_heads * 5;
    for (const ModelConfig& model : {row.model, llama}) {
      const MeasuredStep restated = RestateDecodeRow(row, model);
      const double ns = StepPricer(profile, model)
                            .Terms(restated.shape)[static_cast<size_t>(StepTerm::kDecodeAttention)];
      EXPECT_NEAR(ns, expected, 1e-9 * expected) << model.name;
      EXPECT_EQ(restated.measured.term_ns, row.step.measured.term_ns);
    }
  }
}

TEST(PublishedRowsTest, RatioRowsParseAndCheckAgainstThePricer) {
  const std::string text =
      "# feather published-ratios v1\n"
      "id,device,model,quantity,a_requests,a_context_tokens,a_unique_kv_tokens,"
      "a_cascade_prefix_tokens,b_requests,b_context_tokens,b_unique_kv_tokens,"
      "b_cascade_prefix_tokens,measured,relation,source,quote\n"
      "r,rtx6000-ada,llama-3-8b,step_time,10,100,1000,0,10,100,100,0,2,about,tex:1,\"q, q\"\n"
      "c,rtx6000-ada,llama-3-8b,attention_time,10,100,100,0,10,100,100,64,1,at_least,tex:2,q\n";
  EXPECT_EQ(DetectRowsFileKind(text, "r.csv"), RowsFileKind::kRatios);
  const std::vector<RatioRow> rows = ParseRatioRowsCsv(text, "r.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].citation, "r.csv:3 (tex:1: \"q, q\")");
  const StepShape cascade = DecodeShape(rows[1].b);
  EXPECT_EQ(cascade.cascade_prefix_tokens, 64);
  EXPECT_EQ(cascade.decode_kv_tokens, 360);
  EXPECT_EQ(cascade.decode_kv_unique_tokens, 36);
  const DeviceProfile profile = LoadDeviceProfile(kSource + "/results/profiles/rtx6000-ada.yaml");
  const ModelConfig llama = ParseModelConfig(
      ReadTextFile(kSource + "/scenarios/models/llama-3-8b.yaml", "model"), "llama-3-8b.yaml");
  const StepPricer pricer(profile, llama);
  auto total = [&](const DecodeBatch& b) {
    double ns = 0;
    for (const double t : pricer.Terms(DecodeShape(b))) ns += t;
    return ns / b.requests;
  };
  const RatioCheck check = CheckRatio(rows[0], pricer);
  EXPECT_DOUBLE_EQ(check.predicted, total(rows[0].a) / total(rows[0].b));
  EXPECT_DOUBLE_EQ(check.rel_error, check.predicted / 2 - 1);
}

TEST(PublishedRowsTest, CommittedDataFilesRead) {
  const std::string dir = kSource + "/results/published/";
  EXPECT_EQ(ParseDecodePointsCsv(ReadTextFile(dir + "h100-decode-attention.csv", "f"), "d").size(),
            9u);
  EXPECT_EQ(ParseRatioRowsCsv(ReadTextFile(dir + "cascade-speedups.csv", "f"), "c").size(), 5u);
  const std::vector<RatioRow> paper =
      ParseRatioRowsCsv(ReadTextFile(dir + "paper-s3-rtx6000-ada.csv", "f"), "p");
  EXPECT_EQ(paper.size(), 10u);
  for (const RatioRow& row : paper) EXPECT_THAT(row.citation, HasSubstr("feather-paper.tex:"));
}

// The paper's rows give a batch a cascade prefix exactly when vLLM would take cascade for it:
// every request shares that prefix and VllmUsesCascade says yes on the RTX 6000 Ada (142 SMs).
TEST(PublishedRowsTest, PaperRowsTakeCascadeWhereVllmWould) {
  const std::string dir = kSource + "/results/published/";
  for (const RatioRow& row :
       ParseRatioRowsCsv(ReadTextFile(dir + "paper-s3-rtx6000-ada.csv", "f"), "p")) {
    const ModelConfig model =
        ParseModelConfig(ReadTextFile(kSource + "/scenarios/models/" + row.model + ".yaml", "m"),
                         row.model);
    for (const DecodeBatch& batch : {row.a, row.b}) {
      if (batch.cascade_prefix_tokens == 0) continue;
      const auto prefix = static_cast<uint32_t>(batch.cascade_prefix_tokens);
      EXPECT_EQ(prefix % 16, 0u) << row.id;
      EXPECT_LE(batch.cascade_prefix_tokens, batch.context_tokens) << row.id;
      EXPECT_TRUE(VllmUsesCascade(prefix, static_cast<uint32_t>(batch.requests), true,
                                  model.heads, model.kv_heads, 142))
          << row.id;
    }
  }
}

std::string ProblemsOf(const std::string& text, int kind) {
  try {
    if (kind == 0) (void)ParseVidurMlpCsv(text, "bad.csv", "h100");
    if (kind == 1) (void)ParseDecodePointsCsv(text, "bad.csv");
    if (kind == 2) (void)ParseRatioRowsCsv(text, "bad.csv");
    if (kind == 3) (void)DetectRowsFileKind(text, "bad.csv");
  } catch (const InputError& error) {
    return error.what();
  }
  return "no error";
}

TEST(PublishedRowsTest, BadFilesNameLineAndColumn) {
  EXPECT_THAT(ProblemsOf(VidurHeader() + VidurRow({1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                                                  "32,32,4096,11008,32768,False,16,1"),
                         0),
              HasSubstr("bad.csv:2: use_gated_mlp: expected True"));
  EXPECT_THAT(ProblemsOf(VidurHeader() + VidurRow({1, 1, -1, 1, 1, 1, 1, 1, 1, 1},
                                                  "32,32,4096,11008,32768,True,16,3"),
                         0),
              HasSubstr("bad.csv:2: time_stats.attn_pre_proj.median: expected a finite number"));
  EXPECT_THAT(ProblemsOf("time_stats.attn_pre_proj.median\n1\n", 0),
              HasSubstr("bad.csv:1: time_stats.mlp_up_proj.median: missing column"));
  const std::string decode_header =
      "id,device,kernel,kv_heads,head_dim,dtype_bytes,batch,context_tokens,time_us,"
      "achieved_bytes_per_s,source\n";
  EXPECT_THAT(ProblemsOf(decode_header + "a,h,k,8,128,2,64,512,5,2e12,s\n", 1),
              HasSubstr("bad.csv:2: time_us: give exactly one"));
  EXPECT_THAT(ProblemsOf(decode_header + "a,h,k,8,x,2,64,512,5,,s\n", 1),
              HasSubstr("bad.csv:2: head_dim: expected a finite number > 0, got 'x'"));
  const std::string ratio_header =
      "id,device,model,quantity,a_requests,a_context_tokens,a_unique_kv_tokens,"
      "a_cascade_prefix_tokens,b_requests,b_context_tokens,b_unique_kv_tokens,"
      "b_cascade_prefix_tokens,measured,relation,source,quote\n";
  EXPECT_THAT(ProblemsOf(ratio_header + "r,d,m,step_time,10,100,5000,0,10,100,100,0,2,nearly,s,q\n",
                         2),
              HasSubstr("bad.csv:2: relation: expected about | at_least | at_most"));
  EXPECT_THAT(ProblemsOf(ratio_header + "r,d,m,step_time,10,100,5000,0,10,100,100,0,2,about,s,q\n",
                         2),
              HasSubstr("bad.csv:2: a_unique_kv_tokens: distinct KV tokens"));
  EXPECT_THAT(ProblemsOf("a,b\n1,2\n", 3), HasSubstr("bad.csv:1: not a rows file"));
}

// The target: a refit on Vidur's H100 Llama-2-7B TP1 rows recovers the GEMM time of
// held-out rows within 5 %. Measured (2026-11-24): holdout MAPE 11.2 % (fit 11.5 %): the max()
// roofline misses its 5 % target on a real GPU's GEMMs (the knee between weight streaming and
// compute is smooth, and small token counts run below both sides). The bound below records
// that figure; it is not the target.
TEST(PublishedRowsTest, VidurH100Llama7bTp1RefitHoldoutGemmError) {
  const std::string path = kSource + "/results/published/vidur/h100/Llama-2-7b-hf/mlp-tp1.csv";
  const std::vector<PublishedTermRow> vidur =
      ParseVidurMlpCsv(ReadTextFile(path, "vidur"), path, "h100");
  ASSERT_EQ(vidur.size(), 261u);
  std::vector<MeasuredStep> rows;
  for (const PublishedTermRow& row : vidur) rows.push_back(row.step);
  const DeviceProfile base = LoadDeviceProfile(kSource + "/results/profiles/spec/h100-sxm.yaml");
  FitOptions options;
  options.fitted_source = ParameterSource::kPublished;
  options.rows_label = "mlp-tp1.csv";
  const CalibrationFit fit = FitProfile(base, vidur.front().model, rows, options);
  const TermFit& gemm = fit.terms[0];
  ASSERT_EQ(gemm.term, StepTerm::kGemm);
  EXPECT_EQ(gemm.fit_rows, 209u);
  EXPECT_EQ(gemm.holdout_rows, 52u);
  ASSERT_TRUE(gemm.holdout_mape.has_value());
  std::printf("Vidur H100 Llama-2-7B TP1 gemm: fit MAPE %.2f%%, holdout MAPE %.2f%% (target 5%%)\n",
              100 * *gemm.fit_mape, 100 * *gemm.holdout_mape);
  EXPECT_LT(*gemm.holdout_mape, 0.05);  // the soft roofline (0.112 with the hard max)
  EXPECT_EQ(fit.fit_rows, 0u);  // term rows only: no whole step
  const auto params = ProfileParameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const bool gemm_rate = params[i].name == "gemm_bw_efficiency" ||
                           params[i].name == "gemm_flops_efficiency" ||
                           params[i].name == "gemm_roofline_exponent";
    EXPECT_EQ(fit.profile.origins[i].source == ParameterSource::kPublished, gemm_rate)
        << params[i].name;
    if (gemm_rate) {
      EXPECT_THAT(fit.profile.origins[i].note, HasSubstr("mlp-tp1.csv"));
    }
  }
  // The fitted profile writes and reads back (fit_rows 0, sources `published`).
  EXPECT_EQ(ParseDeviceProfile(DeviceProfileToYaml(fit.profile), "refit.yaml"), fit.profile);
}

}  // namespace
}  // namespace feather::calib
