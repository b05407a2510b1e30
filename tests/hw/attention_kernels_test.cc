// Tests for the CPU attention kernels (hw/paged_kv.h, hw/decode_attention.h,
// hw/cascade_attention.h, hw/prefill_attention.h): differential tests of every kernel against the
// naive double-precision reference (hw/attention_reference.h) over random seeds and shapes, on
// every tile step the CPU supports (scalar, AVX2, AVX-512, AVX-512 BF16; the others are skipped,
// naming the missing feature) and on the AVX-512 BF16 step's logic emulated on AVX2, with 1 and 2
// threads.
//
// Error bounds asserted (kernel in fp32 vs the reference in double on the very values the pool
// stores, so bf16 pools are compared against the reference run on the bf16-rounded values):
//   out: |got − want| ≤ 3e-5 + 1e-5·|want|   (outputs are convex mixes of V ∈ [−1, 1])
//   lse: |got − want| ≤ 3e-5 + 1e-5·|want|, and −inf exactly where the range is empty.
// The kernels' own rounding is ~1e-6 here (fp32 dot products of ≤ 128 terms, a 2e-7 exp2).
// Kernels in bf16 math (TileKernels::bf16_math: the AVX-512 BF16 step on bf16 pools) round q and
// the softmax weights p to bf16. The tests give both sides the q such kernels see (KernelQ), so
// scores and lse keep the bounds above; p's rounding (relative ≤ 2^-9, the running sum keeps the
// fp32 p) moves out by at most 2^-9·max|v| = 2^-9, which out's bound adds (OutBound), twice
// where two kernel results are compared with each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "base/rng.h"
#include "hw/attention_internal.h"
#include "hw/attention_reference.h"
#include "hw/cascade_attention.h"
#include "hw/decode_attention.h"
#include "hw/paged_kv.h"
#include "hw/prefill_attention.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace feather::hw {
namespace {

using attention_internal::AttentionIsa;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr float kAbsTolerance = 3e-5f;
constexpr float kRelTolerance = 1e-5f;

// Every tile step there is; the tests run those the CPU supports and name the others as skipped.
constexpr AttentionIsa kIsas[] = {AttentionIsa::kScalar, AttentionIsa::kAvx2, AttentionIsa::kAvx512,
                                  AttentionIsa::kAvx512Bf16};

// A tile step the differential tests run: an ISA's own, or (emulated_dot) the AVX-512 BF16
// step's logic on AVX2 — bf16 K scored against q's bf16 terms, each vdpbf16ps replaced by the two
// FMAs of its definition (attention_tile_simd.h) — so that logic is checked on AVX2-only CPUs.
struct TilePath {
  AttentionIsa isa;
  bool emulated_dot = false;
};
constexpr TilePath kPaths[] = {{AttentionIsa::kScalar},
                               {AttentionIsa::kAvx2},
                               {AttentionIsa::kAvx2, true},
                               {AttentionIsa::kAvx512},
                               {AttentionIsa::kAvx512Bf16}};
std::string PathName(TilePath path) {
  return path.emulated_dot ? "avx512bf16_emulated_on_avx2"
                           : attention_internal::AttentionIsaName(path.isa);
}

// Forces one tile step for the life of the object; the CPU must support it (checked).
class ScopedIsa {
 public:
  explicit ScopedIsa(AttentionIsa isa) {
    const bool forced = attention_internal::SetAttentionIsaForTesting(isa);
    EXPECT_TRUE(forced) << "could not force " << attention_internal::AttentionIsaName(isa);
    if (isa != AttentionIsa::kAuto) {
      EXPECT_EQ(attention_internal::ActiveAttentionIsa(), isa);
    }
  }
  explicit ScopedIsa(TilePath path) : ScopedIsa(path.isa) {
    if (path.emulated_dot) {
      attention_internal::SetTileKernelsForTesting(
          &attention_internal::Avx2EmulatedBf16DotTileKernels());
    }
  }
  ~ScopedIsa() {
    attention_internal::SetTileKernelsForTesting(nullptr);
    attention_internal::SetAttentionIsaForTesting(AttentionIsa::kAuto);
  }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
};

float UniformFloat(Rng& rng, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(rng.NextDouble());
}

std::vector<float> RandomFloats(Rng& rng, size_t count, float magnitude) {
  std::vector<float> values(count);
  for (float& value : values) value = UniformFloat(rng, -magnitude, magnitude);
  return values;
}

// A K and a V pool of random values in [−1, 1], and a free list of physical blocks in random
// order, so block tables are scattered through the pool.
class Pools {
 public:
  Pools(Rng& rng, uint32_t num_blocks, uint32_t kv_heads, uint32_t head_dim, uint32_t block_tokens,
        KvDtype dtype) {
    layout_.num_blocks = num_blocks;
    layout_.kv_heads = kv_heads;
    layout_.head_dim = head_dim;
    layout_.block_tokens = block_tokens;
    layout_.dtype = dtype;
    const size_t elems = layout_.BlockElems() * num_blocks;
    k32_ = RandomFloats(rng, elems, 1.0f);
    v32_ = RandomFloats(rng, elems, 1.0f);
    if (dtype == KvDtype::kBf16) {
      k16_.resize(elems);
      v16_.resize(elems);
      for (size_t i = 0; i < elems; ++i) {
        k16_[i] = FloatToBf16(k32_[i]);
        v16_[i] = FloatToBf16(v32_[i]);
      }
    }
    free_.resize(num_blocks);
    std::iota(free_.begin(), free_.end(), 0u);
    for (size_t i = free_.size(); i > 1; --i) std::swap(free_[i - 1], free_[rng.Uniform(i)]);
  }

  [[nodiscard]] const PagedKvLayout& layout() const { return layout_; }
  [[nodiscard]] void* k() { return Data(k32_, k16_); }
  [[nodiscard]] void* v() { return Data(v32_, v16_); }

  // `count` fresh physical blocks.
  std::vector<uint32_t> Take(uint32_t count) {
    if (count > free_.size()) {
      ADD_FAILURE() << "test pool too small";
      return {};
    }
    std::vector<uint32_t> blocks(free_.end() - count, free_.end());
    free_.resize(free_.size() - count);
    return blocks;
  }

 private:
  void* Data(std::vector<float>& f32, std::vector<uint16_t>& bf16) {
    return layout_.dtype == KvDtype::kFp32 ? static_cast<void*>(f32.data())
                                           : static_cast<void*>(bf16.data());
  }
  PagedKvLayout layout_;
  std::vector<float> k32_, v32_;
  std::vector<uint16_t> k16_, v16_;
  std::vector<uint32_t> free_;
};

uint32_t BlocksFor(uint32_t tokens, uint32_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

// Requests of a batch: block tables and ranges, and the CSR table (hw/paged_kv.h) of their
// first ceil(end / block_tokens) pages that the kernels read.
struct Batch {
  std::vector<std::vector<uint32_t>> tables;
  std::vector<uint32_t> kv_begin;
  std::vector<uint32_t> kv_end;
  std::vector<uint32_t> indptr, indices, last_page_len;

  void Add(std::vector<uint32_t> table, uint32_t begin, uint32_t end) {
    tables.push_back(std::move(table));
    kv_begin.push_back(begin);
    kv_end.push_back(end);
  }
  void Finish(uint32_t block_tokens) {
    indptr = {0};
    indices.clear();
    last_page_len.clear();
    for (size_t r = 0; r < tables.size(); ++r) {
      const uint32_t pages = (kv_end[r] + block_tokens - 1) / block_tokens;
      EXPECT_LE(pages, tables[r].size()) << "test table too short";
      indices.insert(indices.end(), tables[r].begin(), tables[r].begin() + pages);
      indptr.push_back(static_cast<uint32_t>(indices.size()));
      last_page_len.push_back(LastPageLen(kv_end[r], block_tokens));
    }
  }
  [[nodiscard]] PagedKvView View(Pools& pools) const;
  [[nodiscard]] uint32_t size() const { return static_cast<uint32_t>(tables.size()); }
};

PagedKvView Batch::View(Pools& pools) const {
  return PagedKvView{.k_data = pools.k(),
                     .v_data = pools.v(),
                     .layout = pools.layout(),
                     .batch_size = size(),
                     .indptr = indptr.data(),
                     .indices = indices.data(),
                     .last_page_len = last_page_len.data()};
}

// The absolute bound on out beyond kAbsTolerance: 2^-9 per kernel result where the active tile
// step computes the pool's dtype in bf16 math (see the bounds above).
float OutBound(KvDtype dtype, int kernel_results = 1) {
  return attention_internal::UsesBf16Math(attention_internal::ActiveTileKernels(), dtype)
             ? static_cast<float>(kernel_results) * 0x1p-9f
             : 0.0f;
}

// q as the active tile step sees it for a pool of `dtype` at `scale`: itself, or in bf16 math
// the value whose q·scale·log2 e is the bf16 the kernels round it to (InitLane), so that the
// reference scores with it what the kernels score.
std::vector<float> KernelQ(std::vector<float> q, float scale, KvDtype dtype) {
  attention_internal::RoundQueriesAsKernelsSee(attention_internal::ActiveTileKernels(), dtype,
                                               q.data(), q.size(), scale);
  return q;
}

float TestScale(uint32_t head_dim) { return 1.5f / std::sqrt(static_cast<float>(head_dim)); }

// max |got − want| − tolerance must stay ≤ 0; −inf must match −inf exactly. extra_abs: added to
// the absolute bound (OutBound).
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what, float extra_abs = 0.0f) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t worst_index = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      ASSERT_EQ(got[i], want[i]) << what << " at " << i;
      continue;
    }
    ASSERT_FALSE(std::isnan(got[i])) << what << " at " << i;
    const double excess = std::abs(double{got[i]} - want[i]) - kAbsTolerance - extra_abs -
                          kRelTolerance * std::abs(double{want[i]});
    if (excess > worst) {
      worst = excess;
      worst_index = i;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": index " << worst_index << " got " << got[worst_index]
                        << " want " << want[worst_index];
}

DecodeAttentionParams DecodeParams(Pools& pools, const Batch& batch, uint32_t num_heads,
                                   const std::vector<float>& q, int threads) {
  DecodeAttentionParams p;
  p.q = q.data();
  p.kv = batch.View(pools);
  p.kv_begin = batch.kv_begin.data();
  p.num_heads = num_heads;
  p.scale = TestScale(pools.layout().head_dim);
  p.num_threads = threads;
  return p;
}

// Runs the kernel and the reference on the same parameters; compares out and lse.
void ExpectDecodeMatchesReference(DecodeAttentionParams p, DecodeWorkspace& workspace,
                                  const std::string& what) {
  const size_t heads_total = size_t{p.kv.batch_size} * p.num_heads;
  std::vector<float> out(heads_total * p.kv.layout.head_dim, 7.0f), lse(heads_total, 7.0f);
  std::vector<float> want_out(out.size()), want_lse(lse.size());
  p.out = out.data();
  p.lse = lse.data();
  PagedDecodeAttention(p, workspace);
  p.out = want_out.data();
  p.lse = want_lse.data();
  ReferenceDecodeAttention(p);
  ExpectClose(out, want_out, what + " out", OutBound(p.kv.layout.dtype));
  ExpectClose(lse, want_lse, what + " lse");
}

// --- AppendKv -------------------------------------------------------------------------------

TEST(AppendKvTest, WritesTokensThroughTheBlockTableInThePoolDtype) {
  for (const KvDtype dtype : {KvDtype::kFp32, KvDtype::kBf16}) {
    Rng rng(11);
    Pools pools(rng, 8, 2, 16, 4, dtype);
    const std::vector<uint32_t> table = {5, 2, 7};
    const uint32_t start = 3, count = 6;  // positions 3..8 cross two block boundaries
    const auto k_new = RandomFloats(rng, size_t{count} * 2 * 16, 1.0f);
    const auto v_new = RandomFloats(rng, size_t{count} * 2 * 16, 1.0f);
    Batch batch;
    batch.Add(table, 0, start + count);
    batch.Finish(4);
    AppendKv(batch.View(pools), 0, start, count, k_new.data(), v_new.data());
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t pos = start + i;
      for (uint32_t h = 0; h < 2; ++h) {
        for (uint32_t d = 0; d < 16; ++d) {
          const size_t at = pools.layout().Offset(table[pos / 4], h, pos % 4) + d;
          const size_t from = (size_t{i} * 2 + h) * 16 + d;
          if (dtype == KvDtype::kFp32) {
            EXPECT_EQ(static_cast<const float*>(pools.k())[at], k_new[from]);
            EXPECT_EQ(static_cast<const float*>(pools.v())[at], v_new[from]);
          } else {
            EXPECT_EQ(static_cast<const uint16_t*>(pools.k())[at], FloatToBf16(k_new[from]));
            EXPECT_EQ(static_cast<const uint16_t*>(pools.v())[at], FloatToBf16(v_new[from]));
          }
        }
      }
    }
  }
}

// --- Dispatch -------------------------------------------------------------------------------

// The ISAs of kIsas this CPU supports; the others are printed as skipped, naming what is missing.
std::vector<AttentionIsa> SupportedIsas() {
  std::vector<AttentionIsa> isas;
  for (const AttentionIsa isa : kIsas) {
    if (attention_internal::CpuSupports(isa)) {
      isas.push_back(isa);
    } else {
      std::printf("[ SKIPPED  ] tile step %s: this CPU lacks %s\n",
                  attention_internal::AttentionIsaName(isa),
                  attention_internal::MissingFeature(isa));
    }
  }
  return isas;
}

// On a CPU with AVX-512 BF16, auto takes the dot step or the pairs step by the probe's times.
TEST(AttentionIsaTest, AutoPicksTheWidestAndOnBf16CpusTheFasterStep) {
  for (const AttentionIsa isa : SupportedIsas()) {
    ScopedIsa forced(isa);
    EXPECT_EQ(attention_internal::ActiveAttentionIsa(), isa);
  }
  AttentionIsa widest = AttentionIsa::kScalar;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    widest = AttentionIsa::kAvx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
      widest = AttentionIsa::kAvx512;
      if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16")) {
        const attention_internal::Bf16PathTimes& probe = attention_internal::Bf16PathProbe();
        EXPECT_GT(probe.dot_seconds, 0);
        EXPECT_GT(probe.pairs_seconds, 0);
        EXPECT_LT(probe.dot_seconds, 0.05);  // 512 tokens in cache: well under a millisecond
        if (probe.dot_preferred) widest = AttentionIsa::kAvx512Bf16;
      }
    }
  }
#endif
  if (std::getenv("FEATHER_ATTENTION_ISA") == nullptr) {
    EXPECT_EQ(attention_internal::ActiveAttentionIsa(), widest);
  }
}

TEST(AttentionIsaTest, TheBf16RuleKeepsTheDotStepWithinTheMargin) {
  using attention_internal::Bf16DotPreferred;
  using attention_internal::kBf16PathMargin;
  EXPECT_TRUE(Bf16DotPreferred(1.0, 1.0));
  EXPECT_TRUE(Bf16DotPreferred(1.0, 2.0));
  EXPECT_TRUE(Bf16DotPreferred(1.0 + kBf16PathMargin / 2, 1.0));  // within the margin: dot
  EXPECT_FALSE(Bf16DotPreferred(1.0 + 2 * kBf16PathMargin, 1.0));
  if (!attention_internal::CpuSupports(AttentionIsa::kAvx512Bf16)) {
    const attention_internal::Bf16PathTimes& probe = attention_internal::Bf16PathProbe();
    EXPECT_EQ(probe.dot_seconds, 0);  // not run where the dot step cannot run
    EXPECT_FALSE(probe.dot_preferred);
  }
}

TEST(AttentionIsaTest, UnsupportedPathsAreRefusedAndNamed) {
  EXPECT_TRUE(attention_internal::CpuSupports(AttentionIsa::kScalar));
  EXPECT_STREQ(attention_internal::MissingFeature(AttentionIsa::kScalar), "");
  for (const AttentionIsa isa : kIsas) {
    if (attention_internal::CpuSupports(isa)) continue;
    const AttentionIsa before = attention_internal::ActiveAttentionIsa();
    EXPECT_FALSE(attention_internal::SetAttentionIsaForTesting(isa));
    EXPECT_EQ(attention_internal::ActiveAttentionIsa(), before);
    EXPECT_STRNE(attention_internal::MissingFeature(isa), "");
  }
  EXPECT_STREQ(attention_internal::AttentionIsaName(AttentionIsa::kAvx512), "avx512");
}

// FEATHER_ATTENTION_ISA is read once per process, so each case runs in a fresh child process.
TEST(AttentionIsaDeathTest, EnvironmentVariableForcesAPathAndRejectsBadValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("FEATHER_ATTENTION_ISA", "scalar", 1);
        std::exit(attention_internal::ActiveAttentionIsa() == AttentionIsa::kScalar ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("FEATHER_ATTENTION_ISA", "avx9", 1);
        (void)attention_internal::ActiveAttentionIsa();
      },
      ::testing::ExitedWithCode(2), "FEATHER_ATTENTION_ISA=avx9: unknown");
  for (const AttentionIsa isa : kIsas) {
    if (attention_internal::CpuSupports(isa)) continue;
    const std::string name = attention_internal::AttentionIsaName(isa);
    EXPECT_EXIT(
        {
          setenv("FEATHER_ATTENTION_ISA", name.c_str(), 1);
          (void)attention_internal::ActiveAttentionIsa();
        },
        ::testing::ExitedWithCode(2), "FEATHER_ATTENTION_ISA=" + name + ": this CPU lacks");
  }
}

// --- Decode, shared prefix, cascade, prefill: differential over shapes ------------------------

// dtype, head_dim, query heads per kv head, threads, tile step.
using KernelShape = std::tuple<KvDtype, uint32_t, uint32_t, int, TilePath>;

class AttentionKernelsTest : public ::testing::TestWithParam<KernelShape> {
 protected:
  KvDtype dtype() const { return std::get<0>(GetParam()); }
  uint32_t head_dim() const { return std::get<1>(GetParam()); }
  uint32_t group() const { return std::get<2>(GetParam()); }
  int threads() const { return std::get<3>(GetParam()); }
  TilePath path() const { return std::get<4>(GetParam()); }
  AttentionIsa isa() const { return path().isa; }

  // A seed-dependent layout (kv heads 1..2, blocks of 8, 16 or 32 tokens) with room for
  // `tables` block tables of `lengths` tokens in all; small, since filling it dominates the test.
  Pools MakePools(Rng& rng, const std::vector<uint32_t>& lengths) const {
    const uint32_t kv_heads = static_cast<uint32_t>(rng.UniformInt(1, 2));
    const uint32_t block_tokens = std::vector<uint32_t>{8, 16, 32}[rng.Uniform(3)];
    uint32_t blocks = 4;
    for (const uint32_t length : lengths) blocks += BlocksFor(length, block_tokens);
    return Pools(rng, blocks, kv_heads, head_dim(), block_tokens, dtype());
  }
  uint32_t NumHeads(const Pools& pools) const { return pools.layout().kv_heads * group(); }

  void SetUp() override {
    if (!attention_internal::CpuSupports(isa())) {
      GTEST_SKIP() << "tile step " << PathName(path()) << ": this CPU lacks "
                   << attention_internal::MissingFeature(isa());
    }
  }
};

std::string ShapeName(const ::testing::TestParamInfo<KernelShape>& info) {
  const auto& [dtype, dim, group, threads, path] = info.param;
  return std::string(dtype == KvDtype::kFp32 ? "fp32" : "bf16") + "_d" + std::to_string(dim) +
         "_g" + std::to_string(group) + "_t" + std::to_string(threads) + "_" + PathName(path);
}

// A request length: often not a multiple of 16, sometimes empty or one token, sometimes long
// enough that two threads split it into chunks.
uint32_t RandomLength(Rng& rng) {
  switch (rng.Uniform(8)) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return static_cast<uint32_t>(rng.UniformInt(500, 700));
    default:
      return static_cast<uint32_t>(rng.UniformInt(2, 300));
  }
}

TEST_P(AttentionKernelsTest, DecodeMatchesReference) {
  ScopedIsa forced(path());
  DecodeWorkspace workspace;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Rng rng(seed * 1000 + head_dim() + group());
    const auto requests = static_cast<uint32_t>(rng.UniformInt(1, 5));
    std::vector<uint32_t> lengths(requests);
    for (uint32_t& length : lengths) length = RandomLength(rng);
    Pools pools = MakePools(rng, lengths);
    Batch batch;
    for (const uint32_t end : lengths) {
      const uint32_t begin = rng.Uniform(2) == 0 ? 0 : static_cast<uint32_t>(rng.Uniform(end + 1));
      batch.Add(pools.Take(BlocksFor(end, pools.layout().block_tokens)), begin, end);
    }
    batch.Finish(pools.layout().block_tokens);
    const uint32_t heads = NumHeads(pools);
    const auto q = KernelQ(RandomFloats(rng, size_t{requests} * heads * head_dim(), 1.0f),
                           TestScale(head_dim()), dtype());
    ExpectDecodeMatchesReference(DecodeParams(pools, batch, heads, q, threads()), workspace,
                                 "seed " + std::to_string(seed));
  }
}

TEST_P(AttentionKernelsTest, SharedPrefixMatchesReference) {
  ScopedIsa forced(path());
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Rng rng(seed * 77 + head_dim() + group());
    const uint32_t prefix_tokens = seed == 1 ? 0 : static_cast<uint32_t>(rng.UniformInt(1, 600));
    Pools pools = MakePools(rng, {prefix_tokens});
    const auto table = pools.Take(BlocksFor(prefix_tokens, pools.layout().block_tokens));
    const uint32_t rows = 9;  // of which the group holds a scattered subset
    const std::vector<uint32_t> q_rows = {7, 1, 4, 8, 2};
    const uint32_t heads = NumHeads(pools);
    const auto q = KernelQ(RandomFloats(rng, size_t{rows} * heads * head_dim(), 1.0f),
                           TestScale(head_dim()), dtype());
    std::vector<float> out(size_t{rows} * heads * head_dim(), 0.0f), lse(rows * heads, 0.0f);
    std::vector<float> want_out = out, want_lse = lse;
    Batch prefix;
    prefix.Add(table, 0, prefix_tokens);
    prefix.Finish(pools.layout().block_tokens);
    SharedPrefixParams p;
    p.q = q.data();
    p.kv = prefix.View(pools);
    p.q_rows = q_rows.data();
    p.num_queries = static_cast<uint32_t>(q_rows.size());
    p.num_heads = heads;
    p.scale = TestScale(head_dim());
    p.num_threads = threads();
    p.out = out.data();
    p.lse = lse.data();
    SharedPrefixAttention(p);
    p.out = want_out.data();
    p.lse = want_lse.data();
    ReferenceSharedPrefixAttention(p);
    const std::string what = "seed " + std::to_string(seed);
    // Rows outside the group stay 0 in both.
    ExpectClose(out, want_out, what + " out", OutBound(dtype()));
    ExpectClose(lse, want_lse, what + " lse");
  }
}

// Builds groups of requests whose tables start with the same physical blocks, plus requests in
// no group; checks cascade == plain decode (kernel) and == the reference, with and without lse.
TEST_P(AttentionKernelsTest, CascadeEqualsPlainDecodeOverFullRange) {
  ScopedIsa forced(path());
  CascadeWorkspace cascade_workspace;
  DecodeWorkspace decode_workspace;
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    Rng rng(seed * 31 + head_dim() + group());
    const uint32_t kv_heads = static_cast<uint32_t>(rng.UniformInt(1, 2));
    const uint32_t block_tokens = std::vector<uint32_t>{8, 16, 32}[rng.Uniform(3)];
    // Plan first (prefix blocks and member suffixes per group, loners), then size the pool.
    std::vector<uint32_t> prefix_blocks, prefix_lengths;
    std::vector<std::vector<uint32_t>> suffixes(3);
    uint32_t blocks_needed = 0;
    for (uint32_t g = 0; g < 3; ++g) {
      prefix_blocks.push_back(static_cast<uint32_t>(rng.UniformInt(1, 10)));
      // Group 0's prefix ends mid-block: the tokens after it in the shared block are suffix.
      prefix_lengths.push_back(prefix_blocks[g] * block_tokens - (g == 0 ? 3 : 0));
      blocks_needed += prefix_blocks[g];
      const auto members = static_cast<uint32_t>(rng.UniformInt(1, 3));
      for (uint32_t m = 0; m < members; ++m) {
        suffixes[g].push_back(static_cast<uint32_t>(rng.UniformInt(g == 0 ? 3 : 0, 90)));
        blocks_needed += BlocksFor(prefix_lengths[g] + suffixes[g].back(), block_tokens);
      }
    }
    const std::vector<uint32_t> loners = {RandomLength(rng), RandomLength(rng)};
    for (const uint32_t end : loners) blocks_needed += BlocksFor(end, block_tokens);
    Pools pools(rng, blocks_needed, kv_heads, head_dim(), block_tokens, dtype());

    Batch batch;
    std::vector<std::vector<uint32_t>> group_rows(3);
    std::vector<std::vector<uint32_t>> prefix_tables;
    for (uint32_t g = 0; g < 3; ++g) {
      prefix_tables.push_back(pools.Take(prefix_blocks[g]));
      for (const uint32_t suffix : suffixes[g]) {
        const uint32_t end = prefix_lengths[g] + suffix;
        std::vector<uint32_t> table = prefix_tables.back();
        const auto own = pools.Take(BlocksFor(end, block_tokens) - prefix_blocks[g]);
        table.insert(table.end(), own.begin(), own.end());
        group_rows[g].push_back(batch.size());
        batch.Add(std::move(table), 0, end);
      }
    }
    for (const uint32_t end : loners) batch.Add(pools.Take(BlocksFor(end, block_tokens)), 0, end);
    batch.Finish(block_tokens);
    const uint32_t heads = NumHeads(pools);
    const auto q = KernelQ(RandomFloats(rng, size_t{batch.size()} * heads * head_dim(), 1.0f),
                           TestScale(head_dim()), dtype());
    Batch prefixes;  // one entry per group: its shared pages
    std::vector<uint32_t> group_indptr = {0}, rows;
    for (size_t g = 0; g < group_rows.size(); ++g) {
      prefixes.Add(prefix_tables[g], 0, prefix_lengths[g]);
      rows.insert(rows.end(), group_rows[g].begin(), group_rows[g].end());
      group_indptr.push_back(static_cast<uint32_t>(rows.size()));
    }
    prefixes.Finish(block_tokens);
    DecodeAttentionParams plain = DecodeParams(pools, batch, heads, q, threads());
    plain.kv_begin = nullptr;
    const size_t heads_total = size_t{batch.size()} * heads;
    std::vector<float> plain_out(heads_total * head_dim()), plain_lse(heads_total);
    plain.out = plain_out.data();
    plain.lse = plain_lse.data();
    PagedDecodeAttention(plain, decode_workspace);
    std::vector<float> want_out(plain_out.size()), want_lse(plain_lse.size());
    plain.out = want_out.data();
    plain.lse = want_lse.data();
    ReferenceDecodeAttention(plain);

    for (const bool with_lse : {true, false}) {
      std::vector<float> out(plain_out.size(), 5.0f), lse(plain_lse.size(), 5.0f);
      CascadeDecodeParams cascade{plain, prefixes.View(pools), group_indptr.data(), rows.data()};
      cascade.decode.out = out.data();
      cascade.decode.lse = with_lse ? lse.data() : nullptr;
      CascadeDecodeAttention(cascade, cascade_workspace);
      const std::string what = "seed " + std::to_string(seed) + (with_lse ? " lse" : " no-lse");
      ExpectClose(out, plain_out, what + " cascade vs decode", OutBound(dtype(), 2));
      ExpectClose(out, want_out, what + " cascade vs reference", OutBound(dtype()));
      if (with_lse) {
        ExpectClose(lse, plain_lse, what + " lse cascade vs decode");
        ExpectClose(lse, want_lse, what + " lse cascade vs reference");
      }
    }
  }
}

TEST_P(AttentionKernelsTest, PrefillMatchesReference) {
  ScopedIsa forced(path());
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    Rng rng(seed * 53 + head_dim() + group());
    const auto requests = static_cast<uint32_t>(rng.UniformInt(1, 2));
    std::vector<uint32_t> context, chunk_len, qo_indptr = {0}, totals;
    uint32_t rows = 0;
    for (uint32_t r = 0; r < requests; ++r) {
      context.push_back(rng.Uniform(3) == 0 ? 0 : static_cast<uint32_t>(rng.UniformInt(1, 120)));
      chunk_len.push_back(static_cast<uint32_t>(rng.UniformInt(1, 75)));
      rows += chunk_len.back();
      qo_indptr.push_back(rows);
      totals.push_back(context.back() + chunk_len.back());
    }
    Pools pools = MakePools(rng, totals);
    const uint32_t block_tokens = pools.layout().block_tokens;
    const uint32_t kv_heads = pools.layout().kv_heads;
    const uint32_t heads = NumHeads(pools);
    Batch batch;
    for (uint32_t r = 0; r < requests; ++r) {
      batch.Add(pools.Take(BlocksFor(totals[r], block_tokens)), 0, totals[r]);
    }
    batch.Finish(block_tokens);
    const PagedKvView kv = batch.View(pools);
    for (uint32_t r = 0; r < requests; ++r) {
      // The chunk's own K and V go in through AppendKv, as an engine would do it.
      const auto k_new = RandomFloats(rng, size_t{chunk_len[r]} * kv_heads * head_dim(), 1.0f);
      const auto v_new = RandomFloats(rng, k_new.size(), 1.0f);
      AppendKv(kv, r, context[r], chunk_len[r], k_new.data(), v_new.data());
    }
    const auto q = KernelQ(RandomFloats(rng, size_t{rows} * heads * head_dim(), 1.0f),
                           TestScale(head_dim()), dtype());
    std::vector<float> out(q.size(), 9.0f), want(q.size());
    PrefillAttentionParams p;
    p.q = q.data();
    p.kv = kv;
    p.qo_indptr = qo_indptr.data();
    p.num_heads = heads;
    p.scale = TestScale(head_dim());
    p.num_threads = threads();
    p.out = out.data();
    PrefillAttention(p);
    p.out = want.data();
    ReferencePrefillAttention(p);
    ExpectClose(out, want, "seed " + std::to_string(seed), OutBound(dtype()));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernelsTest,
                         ::testing::Combine(::testing::Values(KvDtype::kFp32, KvDtype::kBf16),
                                            ::testing::Values(64u, 128u),
                                            ::testing::Values(1u, 4u, 7u), ::testing::Values(1, 2),
                                            ::testing::ValuesIn(kPaths)),
                         ShapeName);

// Other head dims (any multiple of 8), wider groups (more than one lane batch per kv head), more
// kv heads per block (a decode task walks all of a block's kv heads), other block sizes.
TEST(AttentionKernelsOddShapesTest, DecodeHandlesOtherHeadDimsGroupsAndKvHeads) {
  struct Shape {
    uint32_t dim, group, kv_heads, block_tokens;
  };
  const std::vector<Shape> shapes = {{8, 3, 1, 16},  {24, 9, 2, 16}, {40, 16, 1, 8},
                                     {96, 2, 3, 16}, {256, 5, 1, 4}, {64, 1, 8, 32}};
  for (const TilePath path : kPaths) {
    if (!attention_internal::CpuSupports(path.isa)) continue;  // named by SupportedIsas()
    ScopedIsa forced(path);
    DecodeWorkspace workspace;
    for (const Shape& shape : shapes) {
      for (const KvDtype dtype : {KvDtype::kFp32, KvDtype::kBf16}) {
        Rng rng(shape.dim * 7 + shape.group);
        const std::vector<uint32_t> lengths = {1, 33, 290, 700};
        uint32_t blocks = 0;
        for (const uint32_t end : lengths) blocks += BlocksFor(end, shape.block_tokens);
        Pools pools(rng, blocks, shape.kv_heads, shape.dim, shape.block_tokens, dtype);
        Batch batch;
        for (const uint32_t end : lengths) {
          batch.Add(pools.Take(BlocksFor(end, shape.block_tokens)), 0, end);
        }
        batch.Finish(shape.block_tokens);
        const uint32_t heads = shape.group * shape.kv_heads;
        const auto q = KernelQ(RandomFloats(rng, size_t{batch.size()} * heads * shape.dim, 1.0f),
                               TestScale(shape.dim), dtype);
        for (const int threads : {1, 2}) {
          ExpectDecodeMatchesReference(
              DecodeParams(pools, batch, heads, q, threads), workspace,
              PathName(path) + (dtype == KvDtype::kFp32 ? " fp32" : " bf16") + " dim " +
                  std::to_string(shape.dim) + " group " + std::to_string(shape.group) +
                  " kv heads " + std::to_string(shape.kv_heads));
        }
      }
    }
  }
}

// --- Merge ----------------------------------------------------------------------------------

TEST(MergeAttentionStatesTest, EmptySidesTakeTheOtherAndFiniteSidesMixByLse) {
  constexpr uint32_t kDim = 8;
  // Rows: a empty, b empty, both empty, both finite.
  std::vector<float> out_a(4 * kDim), out_b(4 * kDim);
  for (size_t i = 0; i < out_a.size(); ++i) {
    out_a[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    out_b[i] = 0.5f - 0.125f * static_cast<float>(i % 5);
  }
  std::vector<float> lse_a = {kMinusInf, 1.5f, kMinusInf, 0.75f};
  const std::vector<float> lse_b = {2.0f, kMinusInf, kMinusInf, -1.25f};
  const std::vector<float> a0 = out_a;
  MergeAttentionStates(out_a.data(), lse_a.data(), out_b.data(), lse_b.data(), 4, 1, kDim, 2);
  for (uint32_t d = 0; d < kDim; ++d) {
    EXPECT_EQ(out_a[d], out_b[d]);
    EXPECT_EQ(out_a[kDim + d], a0[kDim + d]);
    EXPECT_EQ(out_a[2 * kDim + d], a0[2 * kDim + d]);
    const double wa = std::exp(0.75), wb = std::exp(-1.25);
    const double want = (wa * a0[3 * kDim + d] + wb * out_b[3 * kDim + d]) / (wa + wb);
    EXPECT_NEAR(out_a[3 * kDim + d], want, 1e-6);
  }
  EXPECT_EQ(lse_a[0], 2.0f);
  EXPECT_EQ(lse_a[1], 1.5f);
  EXPECT_EQ(lse_a[2], kMinusInf);
  EXPECT_NEAR(lse_a[3], std::log(std::exp(0.75) + std::exp(-1.25)), 1e-6);
}

// --- Properties -----------------------------------------------------------------------------

// Over random seeds: splitting a request's range anywhere into [0, k) and [k, n), attending to
// each and merging by LSE gives the full-range answer (what cascade and split-KV rely on); and
// the scalar and AVX2 tile steps agree.
TEST(AttentionPropertyTest, SplitAndMergeEqualsWholeRangeAndIsasAgree) {
  DecodeWorkspace workspace;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    const uint32_t dim = rng.Uniform(2) == 0 ? 64 : 128;
    const KvDtype dtype = rng.Uniform(2) == 0 ? KvDtype::kFp32 : KvDtype::kBf16;
    Pools pools(rng, 80, 2, dim, 16, dtype);
    const uint32_t heads = 2 * static_cast<uint32_t>(rng.UniformInt(1, 5));
    const auto n = static_cast<uint32_t>(rng.UniformInt(1, 600));
    const auto k = static_cast<uint32_t>(rng.Uniform(n + 1));
    Batch whole, left, right;
    const auto table = pools.Take(BlocksFor(n, 16));
    whole.Add(table, 0, n);
    left.Add(table, 0, k);
    right.Add(table, k, n);
    for (Batch* b : {&whole, &left, &right}) b->Finish(16);
    // The automatic step may be one of bf16 math: the scalar step then runs on the q it sees.
    const auto q = KernelQ(RandomFloats(rng, size_t{heads} * dim, 2.0f), TestScale(dim), dtype);
    const int threads = static_cast<int>(rng.UniformInt(1, 2));
    auto run = [&](const Batch& batch, AttentionIsa isa, std::vector<float>& out,
                   std::vector<float>& lse) {
      ScopedIsa forced(isa);
      out.assign(size_t{heads} * dim, 0.0f);
      lse.assign(heads, 0.0f);
      DecodeAttentionParams p = DecodeParams(pools, batch, heads, q, threads);
      p.out = out.data();
      p.lse = lse.data();
      PagedDecodeAttention(p, workspace);
    };
    std::vector<float> whole_out, whole_lse, left_out, left_lse, right_out, right_lse;
    run(whole, AttentionIsa::kAuto, whole_out, whole_lse);
    run(left, AttentionIsa::kAuto, left_out, left_lse);
    run(right, AttentionIsa::kAuto, right_out, right_lse);
    MergeAttentionStates(left_out.data(), left_lse.data(), right_out.data(), right_lse.data(), 1,
                         heads, dim, threads);
    const std::string what = "seed " + std::to_string(seed);
    ExpectClose(left_out, whole_out, what + " merged out", OutBound(dtype, 2));
    ExpectClose(left_lse, whole_lse, what + " merged lse");
    std::vector<float> scalar_out, scalar_lse;
    run(whole, AttentionIsa::kScalar, scalar_out, scalar_lse);
    ExpectClose(scalar_out, whole_out, what + " scalar vs auto out", OutBound(dtype));
    ExpectClose(scalar_lse, whole_lse, what + " scalar vs auto lse");
  }
}

// The prefetch lookahead (SetDecodePrefetchBytes) moves only timing: on every path, over random
// batches of several requests, one tile ahead, the default and 1 MiB ahead give the same bits.
TEST(AttentionPropertyTest, PrefetchLookaheadDoesNotChangeResults) {
  DecodeWorkspace workspace;
  const size_t before = DecodePrefetchBytes();
  for (const TilePath path : kPaths) {
    if (!attention_internal::CpuSupports(path.isa)) continue;  // named by SupportedIsas()
    ScopedIsa forced(path);
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      Rng rng(seed);
      const uint32_t dim = rng.Uniform(2) == 0 ? 64 : 128;
      const KvDtype dtype = rng.Uniform(2) == 0 ? KvDtype::kFp32 : KvDtype::kBf16;
      Pools pools(rng, 120, 2, dim, 16, dtype);
      const uint32_t heads = 2 * static_cast<uint32_t>(rng.UniformInt(1, 4));
      const auto requests = static_cast<uint32_t>(rng.UniformInt(1, 5));
      Batch batch;
      for (uint32_t r = 0; r < requests; ++r) {
        const auto n = static_cast<uint32_t>(rng.UniformInt(1, 360));
        batch.Add(pools.Take(BlocksFor(n, 16)), 0, n);
      }
      batch.Finish(16);
      const auto q = RandomFloats(rng, size_t{requests} * heads * dim, 2.0f);
      const int threads = static_cast<int>(rng.UniformInt(1, 2));
      std::vector<std::vector<float>> outs, lses;
      for (const size_t lookahead : {size_t{1}, size_t{0}, size_t{1} << 20}) {
        SetDecodePrefetchBytes(lookahead);
        outs.emplace_back(size_t{requests} * heads * dim);
        lses.emplace_back(size_t{requests} * heads);
        DecodeAttentionParams p = DecodeParams(pools, batch, heads, q, threads);
        p.out = outs.back().data();
        p.lse = lses.back().data();
        PagedDecodeAttention(p, workspace);
      }
      for (size_t i = 1; i < outs.size(); ++i) {
        EXPECT_EQ(outs[i], outs[0]) << PathName(path) << " seed " << seed << " lookahead " << i;
        EXPECT_EQ(lses[i], lses[0]) << PathName(path) << " seed " << seed << " lookahead " << i;
      }
    }
  }
  SetDecodePrefetchBytes(before);
  EXPECT_EQ(DecodePrefetchBytes(), before);
}

TEST(AttentionPropertyTest, PrefetchLookaheadZeroRestoresTheDefault) {
  const size_t before = DecodePrefetchBytes();
  SetDecodePrefetchBytes(4096);
  EXPECT_EQ(DecodePrefetchBytes(), 4096u);
  SetDecodePrefetchBytes(0);
  EXPECT_EQ(DecodePrefetchBytes(), kDefaultDecodePrefetchBytes);
  SetDecodePrefetchBytes(before);
}

// Flush-to-zero / denormals-are-zero is the caller's choice; the kernels must not depend on it:
// with scores spread over hundreds (most exponentials far below the normal range) the results
// with FTZ|DAZ set equal those without.
TEST(AttentionPropertyTest, FlushToZeroDoesNotChangeResults) {
#if defined(__x86_64__) || defined(__i386__)
  for (const AttentionIsa isa : SupportedIsas()) {
    ScopedIsa forced(isa);
    Rng rng(5);
    Pools pools(rng, 40, 1, 64, 16, KvDtype::kFp32);
    Batch batch;
    batch.Add(pools.Take(30), 0, 470);
    batch.Finish(16);
    const auto q = RandomFloats(rng, 4 * 64, 60.0f);
    DecodeWorkspace workspace;
    std::vector<float> out(4 * 64), lse(4), ftz_out(4 * 64), ftz_lse(4);
    DecodeAttentionParams p = DecodeParams(pools, batch, 4, q, 1);
    p.out = out.data();
    p.lse = lse.data();
    PagedDecodeAttention(p, workspace);
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040);  // FTZ | DAZ
    p.out = ftz_out.data();
    p.lse = ftz_lse.data();
    PagedDecodeAttention(p, workspace);
    _mm_setcsr(saved);
    ExpectClose(ftz_out, out, "ftz out");
    ExpectClose(ftz_lse, lse, "ftz lse");
  }
#else
  GTEST_SKIP() << "MXCSR is x86 only";
#endif
}

// --- Errors ---------------------------------------------------------------------------------

TEST(AttentionKernelsDeathTest, BrokenInvariantsAbortWithContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenMP threads may be alive
  Rng rng(3);
  Pools pools(rng, 4, 2, 64, 16, KvDtype::kFp32);
  Batch batch;
  batch.Add(pools.Take(1), 0, 10);
  batch.Finish(16);
  const auto q = RandomFloats(rng, 3 * 64, 1.0f);
  std::vector<float> out(3 * 64), lse(3);
  DecodeAttentionParams p = DecodeParams(pools, batch, 3, q, 1);  // 3 heads over 2 kv heads
  p.out = out.data();
  DecodeWorkspace workspace;
  EXPECT_DEATH(PagedDecodeAttention(p, workspace), "multiple of kv_heads");
  p.num_heads = 2;
  p.kv.layout.head_dim = 60;
  EXPECT_DEATH(PagedDecodeAttention(p, workspace), "multiple of 8");
  p.kv.layout.head_dim = 64;
  CascadeDecodeParams cascade{p, {}};  // kv_begin still set
  CascadeWorkspace cascade_workspace;
  EXPECT_DEATH(CascadeDecodeAttention(cascade, cascade_workspace), "sets kv_begin itself");
}

}  // namespace
}  // namespace feather::hw
