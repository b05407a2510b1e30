// cpu_engine_test.cc: the real CPU engine on a toy model (tests/hw/data/cpu-tiny.yaml): timing
// terms on decode, prefill and mixed steps; the cascade decision is ShapeStep's; outputs are
// deterministic; cascade and plain decode compute the same logits; KV blocks written by one
// request are read by another through the block tables; the memory guard; and `feather run
// --set engine=cpu` end to end.
#include "hw/cpu_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "hw/synthetic_batch.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"
#include "sim/io/model_config_yaml.h"
#include "tests/cli/cli_test_support.h"

namespace feather::hw {
namespace {

const std::string kTinyModel = std::string(FEATHER_SOURCE_DIR) + "/tests/hw/data/cpu-tiny.yaml";
constexpr uint32_t kBlockTokens = 16;
// Two threads where the kernels' parallel paths matter (split-KV decode, the cascade merge);
// one elsewhere, which keeps the suite fast on a loaded machine (spinning OpenMP and OpenBLAS
// workers then compete for the same cores).
constexpr int kThreads = 2;

ModelConfig TinyModel() { return LoadModelConfig(kTinyModel); }

// Eigen GEMMs, as `feather run` uses the engine (cli/engines.cc); the tied-embeddings test runs
// OpenBLAS.
CpuEngineOptions Options(bool cascade, int threads = kThreads) {
  CpuEngineOptions options;
  options.gemm_backend = GemmBackend::kEigen;
  options.num_threads = threads;
  options.cascade_attention = cascade;
  return options;
}

int64_t Term(const StepTiming& t, StepTerm term) { return t.term(term); }

void ExpectSaneTiming(const StepTiming& t) {
  EXPECT_GT(t.total_ns, 0);
  int64_t sum = 0;
  for (size_t k = 0; k < kNumStepTerms; ++k) {
    EXPECT_GE(t.term_ns[k], 0) << StepTermName(static_cast<StepTerm>(k));
    if (static_cast<StepTerm>(k) != StepTerm::kOverhead) sum += t.term_ns[k];
  }
  EXPECT_LE(sum, t.total_ns);
  EXPECT_EQ(sum + Term(t, StepTerm::kOverhead), t.total_ns);
  EXPECT_EQ(Term(t, StepTerm::kKvReuse), 0);
  EXPECT_GT(Term(t, StepTerm::kGemm), 0);
}

// max |a − b| / max |b|.
double RelativeDiff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  double scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(double{a[i]} - double{b[i]}));
    scale = std::max(scale, std::abs(double{b[i]}));
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<float> Copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// A hand-built request over an explicit table.
StepRequest Request(RequestId id, uint32_t context, uint32_t new_tokens, bool prefill,
                    const std::vector<uint32_t>& table) {
  StepRequest r;
  r.id = id;
  r.context_tokens = context;
  r.new_tokens = new_tokens;
  r.is_prefill = prefill;
  r.block_table = table;
  return r;
}

BatchPlan Plan(const std::vector<StepRequest>& requests) {
  BatchPlan plan;
  plan.block_tokens = kBlockTokens;
  plan.requests = requests;
  FillPlanFields(plan);
  return plan;
}

std::vector<uint32_t> Blocks(uint32_t first, uint32_t count) {
  std::vector<uint32_t> blocks(count);
  std::iota(blocks.begin(), blocks.end(), first);
  return blocks;
}

// The KV every decode request of `batch` reads, written by real prefill steps: each group's
// prefix once (by its first member), then every decode request's private context.
void FillContexts(CpuEngine& engine, const SyntheticBatch& batch, uint32_t prefix_tokens) {
  std::vector<StepRequest> requests;
  std::vector<int32_t> done_groups;
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    const StepRequest& r = batch.requests[i];
    if (r.is_prefill || batch.group[i] < 0) continue;
    if (std::find(done_groups.begin(), done_groups.end(), batch.group[i]) != done_groups.end()) {
      continue;
    }
    done_groups.push_back(batch.group[i]);
    requests.push_back(Request(r.id, 0, prefix_tokens, true, batch.tables[i]));
  }
  if (!requests.empty()) (void)engine.Execute(Plan(requests));
  requests.clear();
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    const StepRequest& r = batch.requests[i];
    if (r.is_prefill) continue;
    const uint32_t start = batch.group[i] >= 0 ? prefix_tokens : 0;
    if (r.context_tokens > start) {
      requests.push_back(Request(r.id, start, r.context_tokens - start, true, batch.tables[i]));
    }
  }
  if (!requests.empty()) (void)engine.Execute(Plan(requests));
}

TEST(CpuEngineTest, DecodePrefillAndMixedStepsReportSaneTerms) {
  const ModelConfig model = TinyModel();
  SyntheticBatchSpec spec;
  spec.decode_requests = 6;
  spec.suffix_tokens = 100;
  spec.prefill_requests = 2;
  spec.prefill_context_tokens = 48;
  spec.prefill_chunk_tokens = 40;
  spec.pool_blocks = 512;
  const SyntheticBatch mixed = MakeSyntheticBatch(spec);
  spec.prefill_requests = 0;
  const SyntheticBatch decode = MakeSyntheticBatch(spec);
  spec.decode_requests = 0;
  spec.prefill_requests = 3;
  const SyntheticBatch prefill = MakeSyntheticBatch(spec);

  CpuEngine engine(model, 512, kBlockTokens, Options(true));
  EXPECT_EQ(engine.num_threads(), kThreads);
  EXPECT_EQ(engine.weight_bytes(), CpuEngineWeightBytes(model));
  EXPECT_EQ(engine.kv_bytes(), CpuEngineKvBytes(model, 512, kBlockTokens));
  EXPECT_EQ(engine.kv_bytes(), size_t{512} * kBlockTokens * model.KvBytesPerToken());

  const StepTiming d = engine.Execute(decode.plan);
  ExpectSaneTiming(d);
  EXPECT_GT(Term(d, StepTerm::kDecodeAttention), 0);
  EXPECT_EQ(Term(d, StepTerm::kPrefillAttention), 0);
  EXPECT_EQ(engine.last_argmax().size(), 6u);
  EXPECT_EQ(engine.last_logits().size(), 6u * model.vocab);

  const StepTiming p = engine.Execute(prefill.plan);
  ExpectSaneTiming(p);
  EXPECT_GT(Term(p, StepTerm::kPrefillAttention), 0);
  EXPECT_EQ(Term(p, StepTerm::kDecodeAttention), 0);
  EXPECT_EQ(engine.last_argmax().size(), 3u);

  const StepTiming m = engine.Execute(mixed.plan);
  ExpectSaneTiming(m);
  EXPECT_GT(Term(m, StepTerm::kDecodeAttention), 0);
  EXPECT_GT(Term(m, StepTerm::kPrefillAttention), 0);
  EXPECT_FALSE(m.cascade_used);
  EXPECT_EQ(engine.last_argmax().size(), 8u);
  for (const float v : engine.last_logits()) ASSERT_TRUE(std::isfinite(v));

  // The recorded shape is ShapeStep's with sm_count = threads.
  const StepShape expected = ShapeStep(mixed.plan, model, true, kThreads);
  EXPECT_EQ(engine.last_shape().requests, expected.requests);
  EXPECT_EQ(engine.last_shape().prefill_pairs, expected.prefill_pairs);
  EXPECT_EQ(engine.last_shape().decode_kv_tokens, expected.decode_kv_tokens);

  // An empty step runs nothing.
  const StepTiming empty = engine.Execute(BatchPlan{});
  EXPECT_GE(empty.total_ns, 0);
  EXPECT_TRUE(engine.last_argmax().empty());
  EXPECT_TRUE(engine.last_logits().empty());
}

TEST(CpuEngineTest, CascadeUsedExactlyWhenShapeStepSaysSo) {
  const ModelConfig model = TinyModel();
  for (const uint32_t groups : {0u, 1u, 3u}) {
    for (const bool cascade : {false, true}) {
      SyntheticBatchSpec spec;
      spec.decode_requests = 12;
      spec.groups = groups;
      spec.shared_prefix_tokens = 320;
      spec.suffix_tokens = 24;
      spec.seed = groups + 1;
      const SyntheticBatch batch = MakeSyntheticBatch(spec);
      CpuEngine engine(model, batch.pool_blocks, kBlockTokens, Options(cascade, 1));
      const StepTiming t = engine.Execute(batch.plan);
      const bool expected = ShapeStep(batch.plan, model, cascade, 1).cascade();
      SCOPED_TRACE(testing::Message() << "groups " << groups << " cascade " << cascade);
      EXPECT_EQ(expected, cascade && groups == 1);
      EXPECT_EQ(t.cascade_used, expected);
      EXPECT_EQ(engine.last_shape().cascade(), expected);
      ExpectSaneTiming(t);
      if (expected) {
        EXPECT_GT(Term(t, StepTerm::kCascadePrefix), 0);
      } else {
        EXPECT_EQ(Term(t, StepTerm::kCascadePrefix), 0);
      }
      EXPECT_GT(Term(t, StepTerm::kDecodeAttention), 0);
    }
  }
}

TEST(CpuEngineTest, SamePlanAndKvGiveTheSameOutput) {
  const ModelConfig model = TinyModel();
  SyntheticBatchSpec spec;
  spec.decode_requests = 5;
  spec.groups = 1;
  spec.shared_prefix_tokens = 64;
  spec.suffix_tokens = 30;
  const SyntheticBatch batch = MakeSyntheticBatch(spec);
  CpuEngine engine(model, batch.pool_blocks, kBlockTokens, Options(true, 1));
  FillContexts(engine, batch, 64);
  (void)engine.Execute(batch.plan);
  const std::vector<uint32_t> argmax(engine.last_argmax().begin(), engine.last_argmax().end());
  const std::vector<float> logits = Copy(engine.last_logits());
  (void)engine.Execute(batch.plan);  // rewrites the same new KV, reads the same context
  EXPECT_EQ(std::vector<uint32_t>(engine.last_argmax().begin(), engine.last_argmax().end()),
            argmax);
  EXPECT_LE(RelativeDiff(engine.last_logits(), logits), 1e-6);
  // A second engine with the same seed computes the same; another seed does not.
  CpuEngine twin(model, batch.pool_blocks, kBlockTokens, Options(true, 1));
  FillContexts(twin, batch, 64);
  (void)twin.Execute(batch.plan);
  EXPECT_LE(RelativeDiff(twin.last_logits(), logits), 1e-6);
  CpuEngineOptions other = Options(true, 1);
  other.weight_seed = 2;
  CpuEngine different(model, batch.pool_blocks, kBlockTokens, other);
  FillContexts(different, batch, 64);
  (void)different.Execute(batch.plan);
  EXPECT_GT(RelativeDiff(different.last_logits(), logits), 1e-2);
}

// Cascade (shared-prefix pass + suffix pass + merge) and plain paged decode compute the same
// attention, so the logits agree; for fp32 and bf16 KV.
TEST(CpuEngineTest, CascadeAndPlainDecodeGiveTheSameLogits) {
  for (const uint32_t dtype_bytes : {4u, 2u}) {
    ModelConfig model = TinyModel();
    model.dtype_bytes = dtype_bytes;
    SyntheticBatchSpec spec;
    spec.decode_requests = 12;
    spec.groups = 1;
    spec.shared_prefix_tokens = 320;
    spec.suffix_tokens = 40;
    spec.suffix_jitter_tokens = 25;
    spec.pool_blocks = 600;
    const SyntheticBatch batch = MakeSyntheticBatch(spec);
    const int threads = dtype_bytes == 4 ? kThreads : 1;  // both paths, at half the time
    CpuEngine on(model, 600, kBlockTokens, Options(true, threads));
    CpuEngine off(model, 600, kBlockTokens, Options(false, threads));
    FillContexts(on, batch, 320);
    FillContexts(off, batch, 320);
    const StepTiming t_on = on.Execute(batch.plan);
    const StepTiming t_off = off.Execute(batch.plan);
    SCOPED_TRACE(testing::Message() << "dtype bytes " << dtype_bytes);
    ASSERT_TRUE(t_on.cascade_used);
    ASSERT_FALSE(t_off.cascade_used);
    EXPECT_LE(RelativeDiff(on.last_logits(), off.last_logits()), 1e-3);
    // The logits depend on the context at all (the fill steps mattered).
    CpuEngine empty_kv(model, 600, kBlockTokens, Options(false, 1));
    (void)empty_kv.Execute(batch.plan);
    EXPECT_GT(RelativeDiff(empty_kv.last_logits(), off.last_logits()), 1e-2);
  }
}

// Packed weights (every linear layer by GemmPackedB on panels packed at construction) and
// row-major ones (Eigen's product and the skinny kernel) give the same logits within rounding,
// for decode steps of 1 to 12 requests and a prefill chunk (GEMMs of 1 to 64 rows); the packed
// copies cost as many bytes as CpuPackedWeightBytes says.
TEST(CpuEngineTest, PackedAndRowMajorWeightsGiveTheSameLogits) {
  const ModelConfig model = TinyModel();
  CpuEngineOptions packed_options = Options(false, 1);
  packed_options.packed_weights = true;
  CpuEngineOptions row_major_options = Options(false, 1);
  row_major_options.packed_weights = false;
  CpuEngine packed(model, 600, kBlockTokens, packed_options);
  CpuEngine row_major(model, 600, kBlockTokens, row_major_options);
  EXPECT_FALSE(row_major.packed_weights());
  if (DefaultGemmBackend() != GemmBackend::kEigen) {
    EXPECT_FALSE(packed.packed_weights());
    GTEST_SKIP() << "without avx2 + fma the engine runs OpenBLAS on row-major weights";
  }
  ASSERT_TRUE(packed.packed_weights());
  // The memory guard's estimate is what packing allocated.
  EXPECT_EQ(packed.packed_weight_bytes(), CpuPackedWeightBytes(model));
  EXPECT_EQ(row_major.packed_weight_bytes(), 0u);
  for (const uint32_t requests : {1u, 2u, 5u, 12u}) {
    SyntheticBatchSpec spec;
    spec.decode_requests = requests;
    spec.suffix_tokens = 40;
    spec.pool_blocks = 600;
    spec.seed = requests;
    const SyntheticBatch batch = MakeSyntheticBatch(spec);
    (void)packed.Execute(batch.plan);
    (void)row_major.Execute(batch.plan);
    EXPECT_LE(RelativeDiff(packed.last_logits(), row_major.last_logits()), 1e-4) << requests;
  }
  SyntheticBatchSpec prefill;
  prefill.prefill_requests = 1;
  prefill.prefill_chunk_tokens = 64;
  prefill.pool_blocks = 600;
  const SyntheticBatch chunk = MakeSyntheticBatch(prefill);
  (void)packed.Execute(chunk.plan);
  (void)row_major.Execute(chunk.plan);
  EXPECT_LE(RelativeDiff(packed.last_logits(), row_major.last_logits()), 1e-4);
}

// Request 100 computes a 128-token prompt into blocks 0..7. Request 7, which never wrote them,
// decodes through a table that points at them, alone and beside request 100 (both reading the
// same physical blocks); the result equals request 7 reading a private copy of the same
// content (blocks 20..27, written by request 100's same prompt again), and differs from reading
// another request's prompt (blocks 40..47).
TEST(CpuEngineTest, BlocksWrittenByOneRequestAreReadByAnother) {
  const ModelConfig model = TinyModel();
  CpuEngine engine(model, 64, kBlockTokens, Options(true));
  const std::vector<uint32_t> shared = Blocks(0, 8);
  const std::vector<uint32_t> copy = Blocks(20, 8);
  const std::vector<uint32_t> other = Blocks(40, 8);
  auto with = [](std::vector<uint32_t> table, uint32_t extra) {
    table.push_back(extra);
    return table;
  };
  const std::vector<StepRequest> writes = {Request(100, 0, 128, true, shared),
                                           Request(100, 0, 128, true, copy),
                                           Request(200, 0, 128, true, other)};
  (void)engine.Execute(Plan(writes));

  const std::vector<uint32_t> b_shared = with(shared, 60);
  const std::vector<uint32_t> b_copy = with(copy, 61);
  const std::vector<uint32_t> b_other = with(other, 62);
  const std::vector<uint32_t> a_shared = with(shared, 63);
  const std::vector<StepRequest> alone = {Request(7, 128, 1, false, b_shared)};
  (void)engine.Execute(Plan(alone));
  const std::vector<float> via_shared = Copy(engine.last_logits());
  const std::vector<StepRequest> from_copy = {Request(7, 128, 1, false, b_copy)};
  (void)engine.Execute(Plan(from_copy));
  EXPECT_LE(RelativeDiff(engine.last_logits(), via_shared), 1e-5);
  const std::vector<StepRequest> from_other = {Request(7, 128, 1, false, b_other)};
  (void)engine.Execute(Plan(from_other));
  EXPECT_GT(RelativeDiff(engine.last_logits(), via_shared), 1e-2);

  const std::vector<StepRequest> together = {Request(100, 128, 1, false, a_shared),
                                             Request(7, 128, 1, false, b_shared)};
  const BatchPlan plan = Plan(together);
  EXPECT_EQ(plan.common_prefix_tokens, 128u);
  (void)engine.Execute(plan);
  const std::span<const float> second = engine.last_logits().subspan(model.vocab, model.vocab);
  EXPECT_LE(RelativeDiff(second, via_shared), 1e-4);
}

// The serving loop lets a request hit prefix blocks that another request of the same step fills
// (sim/serving/simulator.cc, RegisterScheduledBlocks, as vLLM v1): its prefill must read them after they
// are written, whatever the order of the two in the plan.
TEST(CpuEngineTest, APrefillReadsAPrefixWrittenInTheSameStep) {
  const ModelConfig model = TinyModel();
  const std::vector<uint32_t> prefix = Blocks(0, 8);
  std::vector<uint32_t> reader_table = prefix;
  reader_table.push_back(60);
  const StepRequest writer = Request(100, 0, 128, true, prefix);
  const StepRequest reader = Request(7, 128, 16, true, reader_table);

  CpuEngine earlier(model, 64, kBlockTokens, Options(false));
  (void)earlier.Execute(Plan({writer}));
  (void)earlier.Execute(Plan({reader}));
  const std::vector<float> expected = Copy(earlier.last_logits());

  CpuEngine same_step(model, 64, kBlockTokens, Options(false));
  (void)same_step.Execute(Plan({reader, writer}));  // the reader first in plan order
  const std::span<const float> reader_row = same_step.last_logits().subspan(0, model.vocab);
  EXPECT_LE(RelativeDiff(reader_row, expected), 1e-4);

  // Control: without the writer the reader's prefix blocks hold nothing it could match.
  CpuEngine never_written(model, 64, kBlockTokens, Options(false));
  (void)never_written.Execute(Plan({reader}));
  EXPECT_GT(RelativeDiff(never_written.last_logits(), expected), 1e-2);
}

TEST(CpuEngineTest, TiedEmbeddingsDefaultThreadsAndOpenBlas) {
  ModelConfig model = TinyModel();
  model.tied_embeddings = true;
  CpuEngineOptions options;
  options.num_threads = 0;
  options.gemm_backend = GemmBackend::kBlas;
  CpuEngine engine(model, 64, kBlockTokens, options);
  EXPECT_GE(engine.num_threads(), 1);
  EXPECT_EQ(engine.weight_bytes(), model.TotalParams() * sizeof(float));
  SyntheticBatchSpec spec;
  spec.decode_requests = 3;
  spec.suffix_tokens = 20;
  spec.pool_blocks = 64;
  const SyntheticBatch batch = MakeSyntheticBatch(spec);
  ExpectSaneTiming(engine.Execute(batch.plan));
  for (const float v : engine.last_logits()) ASSERT_TRUE(std::isfinite(v));
}

TEST(CpuEngineTest, RefusesAPoolBeyondHalfOfMemory) {
  const ModelConfig model = TinyModel();
  try {
    CpuEngine engine(model, (uint64_t{1} << 32) - 1, kBlockTokens);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("half of this machine"));
    EXPECT_THAT(e.what(), testing::HasSubstr("cpu-tiny"));
    EXPECT_THAT(e.what(), testing::HasSubstr("kv_cache_blocks"));
  }
  EXPECT_THROW(CpuEngine(model, 0, kBlockTokens), std::invalid_argument);
  EXPECT_THROW(CpuEngine(model, uint64_t{1} << 33, kBlockTokens), std::invalid_argument);
  EXPECT_THROW(CpuEngine(model, 16, 0), std::invalid_argument);
}

TEST(CpuEngineTest, FeatherRunOnTheCpuEngineWritesASummary) {
  namespace fs = std::filesystem;
  const fs::path out = fs::path(::testing::TempDir()) / "feather_cpu_engine_run";
  fs::remove_all(out);
  // The child inherits this: OpenMP workers that sleep at once instead of spinning keep the run
  // well under a second on a loaded 2-core machine, where spinning OpenMP and OpenBLAS workers
  // otherwise fight over the cores (a functional test; timings do not matter here).
  setenv("OMP_WAIT_POLICY", "passive", 1);
  const test::RunResult run = test::RunFeather({"run",
                                                "--out",
                                                out.string(),
                                                "--set",
                                                "engine=cpu",
                                                "--set",
                                                "model=" + kTinyModel,
                                                "--set",
                                                "serving.kv_cache_blocks=2048",
                                                "--set",
                                                "workload.requests=24",
                                                "--set",
                                                "workload.arrival.rate=200",
                                                "--set",
                                                "workload.sharing.prefix_tokens=300",
                                                "--set",
                                                "workload.prompt_tokens=20",
                                                "--set",
                                                "workload.output_tokens=12",
                                                "--set",
                                                "scheduler_time=zero"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::ifstream in(out / "summary.json");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const auto summary = nlohmann::json::parse(text.str());
  EXPECT_EQ(summary["requests_finished"], 24);
  EXPECT_EQ(summary["output_tokens"], 24 * 12);
  EXPECT_GT(summary["engine_busy_s"].get<double>(), 0);
  EXPECT_EQ(summary["scenario"]["engine"], "cpu");
  EXPECT_TRUE(fs::exists(out / "results.h5"));
  fs::remove_all(out);
}

}  // namespace
}  // namespace feather::hw
